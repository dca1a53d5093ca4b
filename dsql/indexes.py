"""Indexes: named arrangements of a relation by key columns, shared by later dataflows.

An index (Materialize's `CREATE INDEX`) is a catalog object holding an arrangement of
its relation's rows by key columns. A table's or materialized view's rows are imported
from the relation's own arrangement and arranged again by the keys; an index on a plain
view renders the view, which makes it maintained; a default index (all columns, in
order) on a table or materialized view *is* the relation's arrangement, so it costs
nothing. Later dataflows whose join, reduce or distinct needs the relation arranged by
exactly an index's keys import the index's trace (`render_indexed`); EXPLAIN PHYSICAL
shows such an import as `Import(index=<name>, ...)`.

Invariants: index names share the namespace of relations; a dropped index leaves the
catalog at once, but its dataflow keeps running while a view still imports it (the
view holds its own handle) and is released when the last reader is gone (`sweep`).

>>> from dsql.session import Session
>>> from dsql.execute import Executor
>>> ex = Executor(Session(kernel="local"))
>>> _ = ex.run("CREATE TABLE t (k int, v int); CREATE INDEX ON t (k)")
>>> ex.run("SHOW INDEXES")[-1].table.to_pylist()
[{'name': 't_k_idx', 'on': 't', 'key': 'k'}]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dsql.errors import DsqlError, SchemaError, UnsupportedError
from dsql.heal import is_data_error
from dsql.planner.catalog import unknown_relation
from dsql.runtime.arrangement import ImportNode, TraceHandle
from dsql.runtime.collection import Arrangement, Collection
from dsql.runtime.dataflow import Node
from dsql.runtime.switch import SwitchNode

if TYPE_CHECKING:
    from dsql.relation import Relation
    from dsql.session import Session


@dataclass(frozen=True)
class Index:
    """A named arrangement of relation `on` by the columns at positions `keys`.

    `nodes` is the dataflow the index owns; it is empty when the index is the
    relation's own arrangement (a default index on a table or materialized view). An
    index on a plain view maintains the view: the view's query (`computation`, replaced
    when the view heals, `dsql.heal`) passes a `switch` into the index's arrangement, and
    `nodes` are the switch's and the arrangement's.
    """

    name: str
    on: str
    keys: tuple[int, ...]
    key_names: tuple[str, ...]
    arrangement: Arrangement
    nodes: tuple[Node | None, ...]
    sql: str = ""
    switch: SwitchNode | None = None
    computation: list[Node | None] = field(default_factory=list)


class IndexImport(ImportNode):
    """An import of an index's arrangement: EXPLAIN names the index it reads."""

    def __init__(self, handle: TraceHandle, index: str) -> None:
        self.index = index
        super().__init__(handle)

    def describe(self) -> str:
        return f"Import(index={self.index}, keys={', '.join(self.keys) or '()'})"


class Indexes:
    """The session's indexes, by name (see module docstring)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.by_name: dict[str, Index] = {}
        #: Dropped indexes whose arrangement a view still imports.
        self._orphans: list[Index] = []

    # --- catalog ---------------------------------------------------------------------
    def on(self, relation: str) -> list[Index]:
        """The indexes on `relation`, oldest first."""
        return [i for i in self.by_name.values() if i.on == relation]

    def check_free(self, name: str) -> None:
        """Refuse a new relation or index named like an existing index."""
        if name in self.by_name:
            raise SchemaError(
                f"index '{name}' already exists",
                hint="indexes and relations share names: DROP INDEX it, or pick another name",
            )

    def create(
        self,
        name: str | None,
        on: str,
        keys: tuple[exp.Expression, ...],
        sql: str = "",
        if_not_exists: bool = False,
        retain_ms: int | None = None,
    ) -> Index | None:
        """A new index on `on` by the key columns (all columns when `keys` is empty),
        keeping `retain_ms` of history for AS OF reads (`dsql.history`).

        Returns None when `if_not_exists` and the name is taken.
        """
        s = self.session
        rel = s.relations.get(on)
        if rel is None:
            raise unknown_relation(on, s.names())
        positions = key_positions(rel, keys)
        key_names = tuple(rel.columns[p].name for p in positions)
        if name is None:
            name = self._default_name(on, key_names if keys else ())
        elif name in self.by_name or name in s.relations:
            if if_not_exists:
                return None
            what = "index" if name in self.by_name else "relation"
            raise SchemaError(
                f"{what} '{name}' already exists",
                hint="indexes and relations share names: pick another name",
            )
        if rel.plan is not None and rel.arrangement is None:
            return self._create_maintained(name, rel, positions, key_names, sql, retain_ms)
        arrangement, nodes = self._build(rel, tuple(f"_c{p}" for p in positions))
        index = Index(name, on, positions, key_names, arrangement, nodes, sql)
        self.by_name[name] = index
        s.history.register(name, arrangement, retain_ms)
        return index

    def _default_name(self, on: str, key_names: tuple[str, ...]) -> str:
        """Materialize's names: `<rel>_<col>_..._idx`, `<rel>_primary_idx` for a default
        index, with a number appended while the name is taken."""
        base = "_".join([on.split(".")[-1], *(key_names or ("primary",)), "idx"])
        name, n = base, 0
        while name in self.by_name or name in self.session.relations:
            n += 1
            name = f"{base}{n}"
        return name

    def _build(
        self, rel: Relation, keys: tuple[str, ...]
    ) -> tuple[Arrangement, tuple[Node | None, ...]]:
        """The arrangement of a table's or materialized view's rows by `keys`."""
        s = self.session
        if rel.arrangement is not None and rel.arrangement.keys == keys:
            return rel.arrangement, ()
        s.close_time()
        start = len(s.worker.nodes)
        try:
            arrangement = s._source(rel.name).arrange_by_key(*keys)
            s.close_time(force=True)  # build it now: a failure fails the CREATE INDEX
        except DsqlError:
            s.worker.drop(s.worker.nodes[start:])
            raise
        return arrangement, tuple(s.worker.nodes[start:])

    def _create_maintained(
        self,
        name: str,
        view: Relation,
        positions: tuple[int, ...],
        key_names: tuple[str, ...],
        sql: str,
        retain_ms: int | None,
    ) -> Index:
        """An index on plain view `view`, which it maintains: the view's query behind a
        switch, so that the index is in error while the query fails and heals as a
        materialized view does (`dsql.heal`); created in error over rows that fail it."""
        s = self.session
        assert view.plan is not None
        s.refuse_volatile(view.plan, "an indexed view")
        s.close_time()
        start = len(s.worker.nodes)
        try:
            query = s._source(view.name)
            computation = s.worker.nodes[start:]
            switch = SwitchNode(query.node)
            arrangement = Collection(switch).arrange_by_key(*(f"_c{p}" for p in positions))
            switch.arranged = arrangement.node
            switch.watched = tuple(n.id for n in computation if n is not None)
        except DsqlError:
            s.worker.drop(s.worker.nodes[start:])
            raise
        nodes = tuple(s.worker.nodes[start + len(computation) :])
        index = Index(
            name, view.name, positions, key_names, arrangement, nodes, sql, switch, computation
        )
        created_at = s.clock.tick
        try:
            s.close_time(force=True)  # build it now, as CREATE MATERIALIZED VIEW does
        except DsqlError as error:
            if not is_data_error(error) or not any(i in s.worker.failed for i in switch.watched):
                s.worker.drop(s.worker.nodes[start:])
                raise
            s.healing.begin_in_error(index, error, created_at)
        self.by_name[name] = index
        s.history.register(name, arrangement, retain_ms)
        return index

    def drop(self, name: str, if_exists: bool = False) -> list[str]:
        """Remove index `name` from the catalog (its dataflow goes when no view reads it)."""
        index = self.by_name.pop(name, None)
        if index is None:
            if if_exists:
                return []
            if name in self.session.relations:
                kind = self.session.relations[name].kind
                raise SchemaError(
                    f"'{name}' is a {kind}, not an index", hint=f"use DROP {kind.upper()}"
                )
            raise SchemaError(
                f"unknown index '{name}'",
                hint=f"indexes: {', '.join(sorted(self.by_name)) or 'none'} (SHOW INDEXES)",
            )
        self.session.history.forget(name)
        self.session.healing.forget(name)
        self._orphans.append(index)
        self.sweep()
        return [name]

    def drop_on(self, relation: str) -> list[str]:
        """Drop every index on `relation` (Materialize drops them with it)."""
        return [n for i in self.on(relation) for n in self.drop(i.name)]

    def dropped(self) -> list[Index]:
        """Dropped indexes still running because a view imports them."""
        return list(self._orphans)

    def sweep(self) -> None:
        """Release the dataflows of dropped indexes that no live import reads any more."""
        kept = []
        for index in self._orphans:
            if index.nodes and self._readers(index):
                kept.append(index)
            elif index.nodes:
                self.session.worker.drop([*index.computation, *index.nodes])
        self._orphans = kept

    def _readers(self, index: Index) -> int:
        """Live imports of the index's arrangement outside its own dataflow."""
        node, own = index.arrangement.node, {id(n) for n in index.nodes}
        return sum(
            1
            for n in self.session.worker.nodes
            if isinstance(n, ImportNode)
            and not n.dropped
            and n.handle.source is node
            and id(n) not in own
        )

    # --- use -------------------------------------------------------------------------
    def find(self, relation: str, keys: tuple[int, ...]) -> Index | None:
        """The oldest index on `relation` whose keys are exactly the columns `keys`."""
        want = set(keys)
        for index in self.on(relation):
            if len(index.keys) == len(keys) and set(index.keys) == want:
                return index
        return None

    def check(self, index: Index) -> None:
        """Refuse to read an index whose view's query fails now (`dsql.heal`)."""
        self.session.healing.check(self.session.relations[index.on])

    def imported(self, index: Index) -> Arrangement:
        """The index's arrangement imported into a dataflow built now."""
        self.check(index)
        return Arrangement(IndexImport(index.arrangement.trace_handle(), index.name))

    def arranged(self, relation: str, keys: tuple[int, ...]) -> Any:
        """For the renderer: (an import of an index on `relation` by exactly the columns
        `keys`, the index's key order) or None."""
        index = self.find(relation, keys)
        return None if index is None else (self.imported(index), index.keys)

    def rows(self, relation: str | None = None) -> dict[str, list[Any]]:
        """SHOW INDEXES [ON relation]: name, relation and key columns, by name."""
        if relation is not None and relation not in self.session.relations:
            raise unknown_relation(relation, self.session.names())
        chosen = sorted(
            (i for i in self.by_name.values() if relation in (None, i.on)), key=lambda i: i.name
        )
        return {
            "name": [i.name for i in chosen],
            "on": [i.on for i in chosen],
            "key": [", ".join(i.key_names) for i in chosen],
        }


def key_positions(rel: Relation, keys: tuple[exp.Expression, ...]) -> tuple[int, ...]:
    """The positions of an index's key columns in `rel` (all columns when none are given).

    Keys are column names; `ASC`/`DESC` (SQLite's index syntax) is accepted and ignored,
    since an arrangement has no order.
    """
    names = [c.name for c in rel.columns]
    if not keys:
        return tuple(range(len(names)))
    out: list[int] = []
    for key in keys:
        column = _key_column(key)
        if column is None:
            raise UnsupportedError(
                f"index key {key.sql('postgres')} is an expression; dsql indexes columns",
                hint=f"index a view that computes it: CREATE VIEW w AS SELECT *, "
                f"{key.sql('postgres')} AS key FROM {rel.name}; CREATE INDEX ON w (key)",
            )
        if column not in names:
            raise SchemaError(
                f"column '{column}' does not exist in '{rel.name}'",
                hint=f"'{rel.name}' has columns {', '.join(names)}",
            )
        if names.index(column) in out:
            raise SchemaError(
                f"column '{column}' appears twice in the index key", hint="list each column once"
            )
        out.append(names.index(column))
    return tuple(out)


def _key_column(key: exp.Expression) -> str | None:
    """The column a key names (`a`, `t.a`, `"A"`, `a DESC`), or None for an expression."""
    if isinstance(key, exp.Ordered):
        key = key.this
    if isinstance(key, exp.Alias) and key.alias.lower() in ("asc", "desc"):
        key = key.this  # `a DESC` reaches here as an alias named desc
    if not isinstance(key, exp.Column):
        return None
    identifier = key.this
    quoted = isinstance(identifier, exp.Identifier) and identifier.quoted
    return key.name if quoted else key.name.lower()


__all__ = ["Index", "IndexImport", "Indexes", "key_positions"]
