"""Incremental mode: every query is a materialized view created as early as possible.

`ViewPlan.of(sql)` reads a query once with sqlglot: the relations it reads (CTE names
excluded) and how to read its view back in the query's order. `IncrementalViews` keeps
the file's timeline of relations: after each successful statement that creates a
relation, every pending query whose relations all exist becomes
`CREATE MATERIALIZED VIEW slt_q<line> AS <query>`, so the later INSERT/UPDATE/DELETE
of the file reach it incrementally. At the query's own place the view is read and
then dropped (nothing later needs it, so the engine stops maintaining it).

Before a statement drops a relation, the views reading it are dropped and become
pending again; they are re-created when the relation exists again. A query sqlglot
cannot parse is created at its own place (its relations exist by then).

Order (documented in README.md): a `nosort` result with more than one row has an order
that matters. If every top-level ORDER BY key is an output position, an output alias
or an output expression, the view is read with `ORDER BY <positions>` (same
directions and NULL order), and compared as usual. Otherwise (keys outside the output,
`SELECT *`, or no ORDER BY at all) the runner runs the query directly too: the direct
result is compared with the expected values in order, and the view's rows must equal
the direct rows as a multiset.

>>> plan = ViewPlan.of("SELECT b, a FROM t1 JOIN t2 ON x = y ORDER BY a DESC", "duckdb")
>>> sorted(plan.relations), plan.order_by
(['t1', 't2'], '2 DESC')
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from .engines import Engine, EngineError, Rows
from .records import Query

__all__ = ["ViewPlan", "IncrementalViews", "strip_terminator", "ddl_effect"]

_TERMINATOR = re.compile(r";\s*(--[^\n]*)?\s*$")
_DDL = re.compile(r"^\s*(create|drop)\b", re.IGNORECASE)
_CREATE_HEAD = re.compile(
    r"^\s*create\s+(?:or\s+replace\s+)?(?:materialized\s+)?(?:table|view)\s+"
    r"(?:if\s+not\s+exists\s+)?(\w+)",
    re.IGNORECASE,
)
_DIRECT = re.compile(r"^\s*(fetch|subscribe|show|explain)\b|\bas\s+of\b", re.IGNORECASE)


@contextmanager
def _quiet_sqlglot() -> Iterator[None]:
    """Silence sqlglot's warning when it falls back to a `Command` (EXPLAIN, PRAGMA)."""
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _parse(sql: str, dialect: str) -> exp.Expression:
    with _quiet_sqlglot():
        return sqlglot.parse_one(sql, read=dialect)


def strip_terminator(sql: str) -> str:
    """The statement without a trailing `;` (and comment after it), to embed it.

    >>> strip_terminator("SELECT 1; -- one")
    'SELECT 1'
    """
    return _TERMINATOR.sub("", sql.rstrip()).rstrip()


@dataclass(frozen=True, slots=True)
class ViewPlan:
    """How a query becomes a view: what it reads and how to read it back in order.

    `relations` is None when sqlglot cannot parse the query (create the view at the
    query's place). `order_by` is the positional ORDER BY text for reading the view,
    None if the query has no top-level ORDER BY or a key is not an output column
    (`ordered` tells the two apart).
    """

    relations: frozenset[str] | None
    order_by: str | None
    ordered: bool

    @staticmethod
    def of(sql: str, dialect: str) -> ViewPlan | None:
        """The plan of `sql`, or None if it is no query (SHOW, PRAGMA, EXPLAIN...), or
        reads a cursor, a subscription or a past time (FETCH, SUBSCRIBE, AS OF): those
        run directly, at their place."""
        if _DIRECT.search(sql):
            return None
        try:
            tree = _parse(sql, dialect)
        except SqlglotError:
            return ViewPlan(None, None, False)
        if not isinstance(tree, exp.Query):
            return None
        ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        tables = {
            t.name.lower() for t in tree.find_all(exp.Table) if isinstance(t.this, exp.Identifier)
        }
        order = tree.args.get("order")
        keys = order.expressions if order else []
        return ViewPlan(
            frozenset(tables - ctes), _positional_order(tree, keys, dialect), bool(keys)
        )


def _positional_order(tree: exp.Query, keys: list[exp.Expression], dialect: str) -> str | None:
    """`keys` rewritten as output positions (`2 DESC, 1`), or None if one is not an output."""
    if not keys:
        return None
    selects = tree.selects
    has_star = any(s.is_star for s in selects)
    out = []
    for key in keys:
        position = _position(key.this, selects, has_star)
        if position is None:
            return None
        ordered = key.copy()
        ordered.set("this", exp.Literal.number(position))
        out.append(ordered.sql(dialect=dialect))
    return ", ".join(out)


def _position(key: exp.Expression, selects: list[exp.Expression], has_star: bool) -> int | None:
    if isinstance(key, exp.Literal) and key.is_int:
        return int(key.this)
    if has_star:
        return None
    if isinstance(key, exp.Column) and not key.table:
        aliases = [
            i for i, s in enumerate(selects) if isinstance(s, exp.Alias) and s.alias == key.name
        ]
        if len(aliases) == 1:
            return aliases[0] + 1
    matches = [i for i, s in enumerate(selects) if s.unalias() == key]
    if matches:
        return matches[0] + 1
    if isinstance(key, exp.Column) and not key.table:
        names = [i for i, s in enumerate(selects) if s.alias_or_name == key.name]
        if len(names) == 1:
            return names[0] + 1
    return None


def ddl_effect(sql: str, dialect: str) -> tuple[set[str], set[str]]:
    """The relations a statement creates and drops (by name, lower case).

    A CREATE sqlglot cannot parse (dsql's `WITH (RETAIN HISTORY ...)`) is read by its
    head, `CREATE [OR REPLACE] [MATERIALIZED] TABLE|VIEW [IF NOT EXISTS] name`.

    >>> ddl_effect("DROP VIEW v1", "duckdb")
    (set(), {'v1'})
    >>> ddl_effect("CREATE VIEW v WITH (RETAIN HISTORY FOR '1h') AS SELECT 1", "postgres")
    ({'v'}, set())
    """
    if not _DDL.match(sql):
        return set(), set()
    try:
        tree = _parse(sql, dialect)
    except SqlglotError:
        head = _CREATE_HEAD.match(sql)
        return ({head.group(1).lower()} if head else set()), set()
    kind = str(tree.args.get("kind") or "").upper()
    if kind not in ("TABLE", "VIEW"):
        return set(), set()
    if isinstance(tree, exp.Drop):
        return set(), {t.name.lower() for t in tree.find_all(exp.Table)}
    if isinstance(tree, exp.Create) and isinstance(tree.this, exp.Expression):
        table = tree.this.find(exp.Table)
        return ({table.name.lower()} if table is not None else set()), set()
    return set(), set()


@dataclass
class _View:
    query: Query
    plan: ViewPlan
    name: str
    created: bool = False
    error: str | None = None


class IncrementalViews:
    """The runner's materialized views over one file's queries, created early."""

    def __init__(self, engine: Engine, queries: dict[int, Query]) -> None:
        """Plan a view for each of `queries` (keyed by record index); create the ready ones."""
        self.engine = engine
        self.stats: Counter[str] = Counter()  # how views were made and read, for the report
        self.relations: set[str] = set()
        self.views: dict[int, _View] = {}
        for index, query in queries.items():
            plan = ViewPlan.of(query.sql, engine.sql_dialect)
            if plan is not None:
                name = f"slt_q{query.location.line}_{index}"
                self.views[index] = _View(query, plan, name)
        self._create_ready()

    def plan(self, index: int) -> ViewPlan | None:
        """The view plan of record `index`, None if it runs directly (not a query)."""
        view = self.views.get(index)
        return view.plan if view is not None else None

    def before_statement(self, sql: str) -> None:
        """Drop the views that read a relation this statement is about to drop."""
        _, dropped = ddl_effect(sql, self.engine.sql_dialect)
        for view in self.views.values():
            reads = view.plan.relations or frozenset()
            if view.created and reads & dropped:
                self.engine.drop_materialized_view(view.name)
                view.created = False
                self.stats["views dropped with their relation (pending again)"] += 1

    def after_statement(self, sql: str, succeeded: bool) -> None:
        """Track relations created and dropped; create the views that became ready."""
        if not succeeded:
            return
        created, dropped = ddl_effect(sql, self.engine.sql_dialect)
        self.relations -= dropped
        self.relations |= created
        if created:
            self._create_ready()

    def _create_ready(self) -> None:
        for view in self.views.values():
            reads = view.plan.relations
            if view.created or view.error or reads is None or not reads <= self.relations:
                continue
            self._create(view)

    def _create(self, view: _View) -> None:
        try:
            query = view.query
            columns = query.column_names or tuple(f"c{i + 1}" for i in range(len(query.types)))
            self.engine.create_materialized_view(view.name, strip_terminator(query.sql), columns)
            view.created = True
        except EngineError as e:
            view.error = f"CREATE MATERIALIZED VIEW {view.name} failed: {e}"

    def read(self, index: int) -> Rows:
        """The query's rows read from its view (in the query's order where mappable).

        Raises EngineError if the view could not be created or read; the view is
        dropped after reading.
        """
        view = self.views.pop(index)
        early = view.created
        if not view.created and view.error is None:
            self._create(view)
        self.stats["views created early" if early else "views created at the query"] += 1
        if view.error is not None:
            raise EngineError(view.error)
        try:
            order = f" ORDER BY {view.plan.order_by}" if view.plan.order_by else ""
            rows = self.engine.execute(f"SELECT * FROM {view.name}{order}")
        finally:
            self.engine.drop_materialized_view(view.name)
        return rows or []
