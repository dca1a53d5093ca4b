"""Statement execution: each grammar statement becomes session operations and a `Result`.

>>> from dsql.session import Session
>>> ex = Executor(Session(kernel="local"))
>>> _ = ex.run("CREATE TABLE t (a int); INSERT INTO t VALUES (1), (2)")
>>> ex.run("SELECT sum(a) AS s FROM t")[-1].table.to_pylist()
[{'s': 3}]
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from dsql import exports, fast_path, grammar, pg_sink, sinks
from dsql.assignment import assign, typed_literals
from dsql.copy import copy_from, copy_to
from dsql.delta_sink import DeltaTarget
from dsql.errors import (
    DsqlError,
    ResourceLimitError,
    SchemaError,
    SourceError,
    StateLostError,
    TypeMismatchError,
    UnsupportedError,
)
from dsql.explain import explain
from dsql.grammar.sql import nesting_room
from dsql.history import replace_mz_now, retention_ms
from dsql.planner import types
from dsql.planner.plan import Column, Query
from dsql.planner.temporal import is_mz_now
from dsql.relation import create_table_sql
from dsql.results import Result
from dsql.session import Session
from dsql.show_arrangements import arrangement_rows
from dsql.subscribe import Subscription, subscription_rows
from dsql.time_expr import time_ms
from dsql.timeout import (
    interrupt_cancels,
    interrupts_deferred,
    parse_duration,
    statement_deadline,
)

#: How often a wait for SUBSCRIBE updates polls under the wall clock (seconds).
POLL_SECONDS = 0.05

#: The statements whose writes reach the views before they return (`Executor.deliver`).
_WRITES = (
    grammar.Insert,
    grammar.Update,
    grammar.Delete,
    grammar.Commit,
    grammar.Copy,
    grammar.CreatePgSource,
)

#: PostgreSQL client settings that drivers set on connecting and that cannot change
#: what dsql computes: accepted and ignored. Every other name but dsql's is refused.
_CLIENT_SETTINGS = frozenset({"application_name", "extra_float_digits"})


class Executor:
    """Runs statements against one session; keeps cursors and subscriptions.

    One statement runs at a time: `lock` serializes every call into the session (threads
    sharing a connection take turns), and `updated` wakes the waits for SUBSCRIBE updates
    after each statement.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.cursors: dict[str, Subscription] = {}
        #: Seconds a statement may run (`SET statement_timeout`); None: unbounded.
        self.statement_timeout: float | None = None
        self.lock = threading.RLock()
        self.updated = threading.Condition(self.lock)

    def run(self, text: str) -> list[Result]:
        """Parse and execute every statement of `text`; results in order."""
        return [self.execute(s) for s in grammar.parse(text)]

    def execute(self, stmt: Any, deliver: bool = True) -> Result:
        """Run one statement: at most one at a time, canceled at a safe point by its
        timeout or Ctrl-C; one that fails leaves no dataflow behind. Views in error whose
        tables changed are retried first; a write (or COMMIT) is delivered to the views
        before it returns, unless `deliver` is false (`executemany` delivers once after
        its last); the result carries the notices of the rounds the statement ran: the
        views it put in error or healed (`dsql.heal`)."""
        s = self.session
        with self.lock:
            try:
                durable = s.durable
                with self.guarded(None):  # a rebuilt view's nodes stay if the statement fails
                    s.healing.retry()
                    s.writes = []
                    polled = self._poll()  # files arrived since: a write of their own
                s.writes = []
                tick = s.clock.tick
                before = durable.names() if durable is not None else set()
                # Past this, the statement's record is in the log (or waits in it for
                # COMMIT or the end of an executemany): an interrupt or error after it
                # leaves its writes, which a restart would bring back.
                recorded = False
                try:
                    with self.guarded(_shown_text(stmt)):
                        with statement_deadline(s.worker, self.statement_timeout):
                            result = self._execute(stmt)
                    if deliver and isinstance(stmt, _WRITES):
                        result.notices = polled + self.deliver()
                    else:
                        result.notices = polled + s.healing.take_notices()
                    if durable is not None:  # on disk before the statement returns
                        with interrupts_deferred():
                            durable.statement(stmt, s.writes, before, tick)
                            recorded = True
                    self.flush_sinks()
                except BaseException:
                    if not recorded:
                        self._undo_writes()
                    if durable is not None and not recorded:  # a refused ROLLBACK ends
                        durable.settle()  # the transaction
                    raise
                return result
            finally:
                s.writes = None
                self.updated.notify_all()

    def _undo_writes(self) -> None:
        """Take back the writes of a statement that did not complete (Ctrl-C after its
        first write, or between an UPDATE's two halves): the tables are as before it,
        and the views follow at their next round."""
        s = self.session
        writes, s.writes = s.writes or [], None
        for name, rows, diff, _ in reversed(writes):
            if name in s.relations and name not in s.lost_state.lost:
                s.write(name, rows, -diff, kinds=("table", "source"))

    def flush_sinks(self) -> None:
        """Write the sinks' closed milliseconds (under the wall clock, every millisecond
        before the present), unless a write they could see is not yet in the log (a
        transaction, an `executemany`, a recovery): then at its end."""
        s, durable = self.session, self.session.durable
        if not s.sinks or s.clock.in_transaction:
            return
        if durable is None or not (durable.pending or durable.held or durable.replaying):
            clock = s.clock
            if clock.kind == "wall" and not clock.replaying:
                # The wall clock moves at writes; the milliseconds that passed since the
                # last are closed all the same, so their changes go out now, not at the
                # next write.
                wall_ms = int(time.time() * 1000)
                if wall_ms > clock.now_ms():
                    s.advance_to(wall_ms)
            sinks.flush(s)

    def deliver(self) -> list[str]:
        """Deliver the writes made so far to the views (`Healing.deliver`); returns the
        notices of every round since the last statement's."""
        with self.lock, self.guarded(None):
            self.session.healing.deliver()
        return self.session.healing.take_notices()

    @contextmanager
    def guarded(self, text: str | None) -> Iterator[None]:
        """Session work inside the block: Ctrl-C deferred to a safe point, room on the
        stack for deep expressions, and a failure that is no `DsqlError` (the stack
        exhausted, an interrupt) dropping the dataflow the block built."""
        worker = self.session.worker
        start = len(worker.nodes)
        try:
            with nesting_room(), interrupt_cancels(worker):
                yield
        except DsqlError as error:
            if isinstance(error, StateLostError):  # named, and its relation fenced
                self.session.lost_state.record(error)
            if error.statement is None:
                error.statement = text
            raise
        except RecursionError:
            worker.drop(worker.nodes[start:])
            raise too_deep(text) from None
        except BaseException:
            worker.drop(worker.nodes[start:])
            raise

    def wait(self, fetch: Callable[[], pa.Table], timeout: float | None) -> pa.Table:
        """`fetch()`'s first result with rows, trying again for up to `timeout` seconds.

        Returns at once when rows are ready or `timeout` is None or 0. Under the wall
        clock updates come as time passes, so the wait polls; under the manual clock only
        a statement (of another thread) can bring them, and each statement wakes the wait.
        Waiting releases the lock.
        """
        deadline = time.monotonic() + (timeout or 0.0)
        with self.lock:
            while True:
                with self.guarded(None):
                    # the poll's writes are logged apart from the waiting statement's
                    held, self.session.writes = self.session.writes, []
                    try:
                        self._poll()
                    finally:
                        self.session.writes = held
                    # the milliseconds closed while waiting reach the sinks without a
                    # statement (a FETCH loop alone drives a source-to-sink pipeline)
                    self.flush_sinks()
                    table = fetch()
                remaining = deadline - time.monotonic()
                if table.num_rows or remaining <= 0:
                    return table
                wall = self.session.clock.kind == "wall"
                self.updated.wait(min(remaining, POLL_SECONDS) if wall else remaining)

    def _poll(self) -> list[str]:
        """Read what arrived at the sources (files, `dsql.file_source`; upstream
        transactions, `dsql.pg_source`; Delta versions, `dsql.delta_source`), logged with
        the sources' progress before the statement runs; the notices of bad files and
        stopped or unreachable sources.
        A recovering session does not poll: its sources' rows come from the log."""
        s = self.session
        if s.durable is not None and s.durable.replaying:
            return []
        notices = s.source_kinds.poll()
        loads = s.sources.spark.drained()
        if s.durable is not None and (s.writes or loads):
            s.durable.polled(s.writes, s.source_kinds.progress(), loads)
        if s.durable is not None and s.durable.pending:  # an executemany's: not on disk yet
            return notices  # upstream hears at a later poll, once it is
        return notices + s.source_kinds.confirm()

    def _execute(self, stmt: Any) -> Result:
        s = self.session
        match stmt:
            case grammar.CreateTable():
                cols = tuple(Column(c.name, types.build(c.type)) for c in stmt.columns)
                for c in cols:
                    types.to_arrow(c.type)
                for default in (d.default for d in stmt.columns if d.default is not None):
                    s.plan(exp.select(default.copy()))  # binds now, as at each INSERT
                s.create_table(
                    stmt.name,
                    cols,
                    tuple(c.not_null for c in stmt.columns),
                    tuple(c.default for c in stmt.columns),
                    stmt.if_not_exists,
                    _retention(stmt.retain_history),
                )
                return Result(status="CREATE TABLE")
            case grammar.CreateTableAs():
                return self._create_table_as(stmt)
            case grammar.Insert():
                return self._insert(stmt)
            case grammar.Copy():
                return copy_from(self, stmt) if stmt.direction == "from" else copy_to(self, stmt)
            case _ if s.source_kinds.creates(stmt):
                s.source_kinds.create(stmt)
                return Result(status="CREATE SOURCE")
            case (
                grammar.CreateConnection()
                | grammar.DropConnection()
                | grammar.CreateSecret()
                | grammar.DropSecret()
            ):
                method, status = _PG_CATALOG[type(stmt)]
                getattr(s.pg, method)(stmt)
                return Result(status=status)
            case grammar.Delete():
                old = self._matching(stmt.table, stmt.where)
                n = s.write(stmt.table, old, -1)
                return Result(status=f"DELETE {n}", rowcount=n)
            case grammar.Update():
                return self._update(stmt)
            case grammar.CreateView():
                s.create_view(
                    stmt.name,
                    stmt.query,
                    stmt.text,
                    stmt.materialized,
                    stmt.columns,
                    stmt.or_replace,
                    stmt.if_not_exists,
                    _retention(stmt.retain_history),
                )
                return Result(
                    status="CREATE MATERIALIZED VIEW" if stmt.materialized else "CREATE VIEW"
                )
            case grammar.CreateIndex():
                return self._create_index(stmt)
            case grammar.Drop():
                dropped = []
                for name in stmt.names:
                    if stmt.kind == "index":
                        dropped += s.indexes.drop(name, stmt.if_exists)
                        continue
                    owner = s.source_kinds.owner(name) if stmt.kind == "source" else None
                    if owner is not None:
                        dropped += owner.drop(name, stmt.cascade)
                        continue
                    dropped += s.drop(name, stmt.cascade, stmt.kind, stmt.if_exists)
                return Result(status=f"DROP {stmt.kind.upper()}")
            case grammar.Select():
                return self._select(stmt)
            case grammar.Subscribe():
                sub = self._subscribe(stmt)
                table = sub.next_batch()  # a snapshot Spark stored: its pieces follow
                self.cursors[f"__subscribe{id(sub)}"] = sub
                more = sub.backlog() if sub.streaming else None
                return Result(table=table, status="SUBSCRIBE", subscription=sub, batches=more)
            case grammar.DeclareCursor():
                if stmt.name in self.cursors:
                    raise SchemaError(f"cursor '{stmt.name}' already exists", hint="CLOSE it first")
                self.cursors[stmt.name] = self._subscribe(stmt.subscribe)
                self.cursors[stmt.name].cursor = stmt.name
                return Result(status="DECLARE CURSOR")
            case grammar.Fetch():
                cursor = self._cursor(stmt.cursor)
                timeout = parse_duration(stmt.timeout, "timeout")
                table = self.wait(lambda: cursor.fetch(stmt.count), timeout)
                return Result(table=table, status=f"FETCH {table.num_rows}")
            case grammar.Close():
                self._cursor(stmt.cursor).close()
                del self.cursors[stmt.cursor]
                return Result(status="CLOSE CURSOR")
            case grammar.CreateSink() if stmt.connection is not None:
                # everything dsql can refuse is refused before the table is made
                if not sinks.check_name(s, stmt.name, stmt.if_not_exists):
                    return Result(status="CREATE SINK")
                columns = s.plan(exp.select("*").from_(exp.to_table(stmt.source))).columns
                sinks.check_key([c.name for c in columns], stmt.key, stmt.source)
                table = pg_sink.PgTarget(
                    s.pg.connection(stmt.connection), stmt.uri, stmt.name, columns, stmt.key
                )
                try:
                    sinks.create(s, stmt.name, stmt.source, table, stmt.key, stmt.text)
                except BaseException:
                    table.close()
                    raise
                return Result(status="CREATE SINK")
            case grammar.CreateSink():
                s.columns(stmt.source)  # an unknown relation is refused before any mkdir
                place = s.sandbox.check(stmt.uri, "write")
                if not isinstance(place, Path):
                    raise SourceError(
                        f"{stmt.uri}: a sink writes local directories only",
                        hint="a Hadoop URI sink is not built yet",
                    )
                target: sinks.Target
                if stmt.target == "delta":
                    target = DeltaTarget(place, stmt.name, stmt.key)
                else:
                    target = sinks.FileTarget(str(place), stmt.format)
                made = sinks.create(
                    s, stmt.name, stmt.source, target, stmt.key, stmt.text, stmt.if_not_exists
                )
                if made and isinstance(target, DeltaTarget):
                    try:
                        target.prepare(s.sinks[stmt.name].subscription._schema())
                    except DsqlError:
                        sinks.drop(s, (stmt.name,), if_exists=True)
                        raise
                return Result(status="CREATE SINK")
            case grammar.DropSink():
                sinks.drop(s, stmt.names, stmt.if_exists)
                return Result(status="DROP SINK")
            case grammar.Explain():
                text = explain(s, stmt.target, stmt.stage)
                return Result(table=pa.table({"plan": [text]}), status="EXPLAIN")
            case grammar.Show():
                return self._show(stmt)
            case grammar.Advance():
                if stmt.to is not None:
                    s.advance_to(time_ms(s, stmt.to))
                else:
                    assert stmt.by is not None  # exactly one of `to` and `by` is set
                    s.advance_to(s.clock.now_ms() + time_ms(s, stmt.by, interval=True))
                return Result(status=f"ADVANCE {s.clock.now_ms()}")
            case grammar.Begin():
                s.clock.in_transaction = True
                return Result(status="BEGIN")
            case grammar.Commit() | grammar.Rollback():
                s.clock.in_transaction = False
                if isinstance(stmt, grammar.Rollback):
                    raise UnsupportedError(
                        "ROLLBACK is not supported: writes apply as they run",
                        hint="use BEGIN/COMMIT to share one timestamp",
                    )
                return Result(status="COMMIT")
            case grammar.SetVariable():
                name = stmt.name.lower()
                if name == "statement_timeout":
                    self.statement_timeout = parse_duration(stmt.value)
                elif name == "memory_limit":
                    s.set_memory_limit(stmt.value)
                elif name == "fetch_rows":
                    s.fetch_rows = _positive_rows(stmt.value)
                elif name not in _CLIENT_SETTINGS:
                    raise UnsupportedError(
                        f'unrecognized configuration parameter "{stmt.name}"',
                        hint="dsql's settings are statement_timeout, memory_limit and fetch_rows",
                    )
                return Result(status="SET")
        raise UnsupportedError(f"{type(stmt).__name__} statements are not supported yet")

    # --- writes ----------------------------------------------------------------------------
    def _create_table_as(self, stmt: Any) -> Result:
        """A table with the query's columns, filled with its rows at the current time."""
        s = self.session
        if stmt.if_not_exists and stmt.name in s.relations:
            return Result(status="CREATE TABLE")
        bound = s.plan(stmt.query)
        cols = bound.plan.columns[: bound.visible]
        if stmt.columns is not None:
            if len(stmt.columns) != len(cols):
                raise SchemaError(
                    f"table '{stmt.name}' names {len(stmt.columns)} columns; "
                    f"its query has {len(cols)}"
                )
            cols = tuple(Column(n, c.type) for n, c in zip(stmt.columns, cols, strict=True))
        for c in cols:
            types.to_arrow(c.type)
        rows = s.read(bound)
        s.create_table(stmt.name, tuple(cols))
        count = s.write(stmt.name, rows, 1)
        return Result(status=f"SELECT {count}")

    def _insert(self, stmt: Any) -> Result:
        s = self.session
        rel = s._table(stmt.table)
        given = stmt.columns or tuple(c.name for c in rel.columns)
        typed = {c.name: c.type for c in rel.columns}
        query = _array_literals(stmt.query, [typed.get(g) for g in given])
        bound = s.plan(
            typed_literals(query, [typed.get(g, exp.DataType.build("text")) for g in given])
        )
        unknown = [g for g in given if g not in [c.name for c in rel.columns]]
        if unknown:
            raise SchemaError(f"column '{unknown[0]}' of relation '{rel.name}' does not exist")
        if bound.visible != len(given):
            raise SchemaError(
                f"INSERT has {bound.visible} values for {len(given)} columns of '{rel.name}'",
                hint="list the target columns: INSERT INTO t (a, b) VALUES ...",
            )
        source = fast_path.literal_rows(bound) if s.fast_path else None
        if source is None:
            source = s.read(bound)
        arrays = []
        for i, c in enumerate(rel.columns):
            if c.name in given:
                arrays.append(assign(source.column(given.index(c.name)), c.type, c.name))
            else:
                arrays.append(self._default(rel.defaults[i], c.type, source.num_rows, c.name))
        rows = pa.table(arrays, names=[f"_c{i}" for i in range(len(arrays))])
        n = s.write(rel.name, rows, 1)
        return Result(status=f"INSERT 0 {n}", rowcount=n)

    def _default(
        self, default: exp.Expression | None, column_type: exp.DataType, n: int, name: str
    ) -> pa.Array:
        if default is None:
            return pa.nulls(n, types.to_arrow(column_type))
        bound = self.session.plan(exp.select(default.copy()))
        value = self.session.read(bound).column(0)
        return assign(
            pa.chunked_array([value.chunk(0).take(pa.array([0] * n))] if n else [], value.type),
            column_type,
            name,
        )

    def _matching(
        self, table: str, where: exp.Expression | None, extra: Sequence[exp.Expr] = ()
    ) -> pa.Table:
        rel = self.session._table(table)
        query = exp.select(*[exp.column(c.name, quoted=True) for c in rel.columns], *extra).from_(
            exp.to_table(table)
        )
        if where is not None:
            query = query.where(where.copy())
        return self.session.read(self.session.plan(query))

    def _update(self, stmt: Any) -> Result:
        s = self.session
        rel = s._table(stmt.table)
        names = [c.name for c in rel.columns]
        for name, _ in stmt.assignments:
            if name not in names:
                raise SchemaError(f"column '{name}' of relation '{rel.name}' does not exist")
        column_types = [
            next(c.type for c in rel.columns if c.name == n) for n, _ in stmt.assignments
        ]
        values = [
            exp.alias_(_array_literal(e.copy(), t), f"__new{i}")
            for i, ((_, e), t) in enumerate(zip(stmt.assignments, column_types, strict=True))
        ]
        rows = self._matching(stmt.table, stmt.where, values)
        n = len(names)
        old = rows.select(list(range(n)))
        new_cols = []
        for i, c in enumerate(rel.columns):
            hit = [j for j, (name, _) in enumerate(stmt.assignments) if name == c.name]
            col = rows.column(n + hit[-1]) if hit else rows.column(i)
            new_cols.append(assign(col, c.type, c.name))
        new = pa.table(new_cols, names=[f"_c{i}" for i in range(n)])
        s._check_not_null(rel, new)
        s.write(rel.name, old, -1)
        s.write(rel.name, new, 1)
        return Result(status=f"UPDATE {old.num_rows}", rowcount=old.num_rows)

    # --- reads ----------------------------------------------------------------------------
    def _select(self, stmt: Any) -> Result:
        s = self.session
        as_of = time_ms(s, stmt.as_of) if stmt.as_of is not None else None
        query = _replace_mz_now(stmt.query, as_of if as_of is not None else s.clock.now_ms())
        if as_of is not None and as_of < s.clock.now_ms():  # the query runs at that time
            query = replace_mz_now(query, as_of)
        bound = s.plan(query)
        rows = exports.select(s, bound, as_of)
        if not isinstance(rows, pa.Table):  # a result on Spark, fetched a file at a time
            return Result(table=next(rows), status="SELECT", batches=rows)
        return Result(table=rows, status=f"SELECT {rows.num_rows}", rowcount=rows.num_rows)

    def _subscribe(self, stmt: Any) -> Subscription:
        s = self.session
        if isinstance(stmt.target, str):
            s.columns(stmt.target)
            bound = s.plan(exp.select("*").from_(exp.to_table(stmt.target)))
        else:
            bound = s.plan(stmt.target)
        return Subscription(
            s,
            bound,
            snapshot=stmt.snapshot if stmt.snapshot is not None else True,
            progress=bool(stmt.progress),
            as_of=time_ms(s, stmt.as_of) if stmt.as_of is not None else None,
            up_to=time_ms(s, stmt.up_to) if stmt.up_to is not None else None,
            sql=stmt.text,
        )

    def _cursor(self, name: str) -> Subscription:
        if name not in self.cursors:
            raise SchemaError(
                f"cursor '{name}' does not exist", hint="DECLARE c CURSOR FOR SUBSCRIBE ... first"
            )
        return self.cursors[name]

    def _create_index(self, stmt: Any) -> Result:
        self.session.indexes.create(
            stmt.name,
            stmt.on,
            stmt.keys,
            stmt.text,
            stmt.if_not_exists,
            _retention(stmt.retain_history),
        )
        return Result(status="CREATE INDEX")

    def _show(self, stmt: Any) -> Result:
        s = self.session
        what = stmt.what
        rels = sorted(s.relations.values(), key=lambda r: r.name)
        if what == "tables":
            return _rows({"name": [r.name for r in rels if r.kind == "table"]})
        if what in ("views", "materialized views"):
            kinds = ("view", "materialized view") if what == "views" else ("materialized view",)
            return _rows(
                {
                    "name": [r.name for r in rels if r.kind in kinds],
                    "type": [r.kind for r in rels if r.kind in kinds],
                }
            )
        if what == "columns":
            if stmt.of is None:
                raise SchemaError("SHOW COLUMNS needs a relation: SHOW COLUMNS FROM t")
            cols = s.columns(stmt.of)
            rel = s.relations[stmt.of]
            return _rows(
                {
                    "name": [c.name for c in cols],
                    "nullable": [
                        not (rel.not_null[i] if i < len(rel.not_null) else False)
                        for i in range(len(cols))
                    ],
                    "type": [c.type.sql("postgres").lower() for c in cols],
                }
            )
        if what == "indexes":
            return _rows(s.indexes.rows(stmt.of))
        if what == "arrangements":
            return _rows(arrangement_rows(s))
        if what == "create index":
            index = s.indexes.by_name.get(stmt.of or "")
            if index is None:
                raise SchemaError(f"unknown index '{stmt.of}'", hint="SHOW INDEXES lists them")
            return _rows({"name": [index.name], "create_sql": [index.sql]})
        if what == "sources":
            parts = [s.sources.rows(), s.pg.source_rows(), s.delta.rows()]
            counts = {"files", "rows"}  # typed even when every value is NULL
            return _rows(
                {
                    k: pa.array(
                        [v for part in parts for v in part[k]],
                        pa.int64() if k in counts else None,
                    )
                    for k in parts[0]
                }
            )
        if what == "sinks":
            return _rows(sinks.rows(s))
        if what == "connections":
            return _rows(s.pg.connection_rows())
        if what == "secrets":
            return _rows(s.pg.secret_rows())
        if what == "subscriptions":
            return _rows(subscription_rows(s.subscriptions))
        if what.startswith("create "):
            kind = what.removeprefix("create ")
            found = s.relations.get(stmt.of or "")
            # SHOW CREATE VIEW names any view; the other kinds only their own.
            if found is None or not (
                found.kind == kind or (kind == "view" and found.kind != "table")
            ):
                raise SchemaError(f"'{stmt.of}' is not a {kind}")
            sql = found.sql or create_table_sql(found)
            return _rows({"name": [found.name], "create_sql": [sql]})
        raise UnsupportedError(f"SHOW {what.upper()} is not supported")


def too_deep(statement: str | None) -> ResourceLimitError:
    """The error of a statement whose planning ran out of stack."""
    return ResourceLimitError(
        "statement too deeply nested to plan",
        statement=statement,
        hint="simplify it: fewer levels of nested subqueries, functions or parentheses "
        "(a chain of WITH queries nests less)",
    )


#: The PostgreSQL connections' and secrets' statements: the `PgSources` method that
#: runs each, and its status.
_PG_CATALOG: dict[type, tuple[str, str]] = {
    grammar.CreateConnection: ("create_connection", "CREATE CONNECTION"),
    grammar.DropConnection: ("drop_connection", "DROP CONNECTION"),
    grammar.CreateSecret: ("create_secret", "CREATE SECRET"),
    grammar.DropSecret: ("drop_secret", "DROP SECRET"),
}


def _shown_text(stmt: Any) -> str | None:
    """The statement text an error shows: a CREATE SECRET's without its value."""
    if isinstance(stmt, grammar.CreateSecret):
        return f"CREATE SECRET {stmt.name} AS '...'"
    return getattr(stmt, "text", None)


def _rows(columns: dict[str, list[Any]]) -> Result:
    table = pa.table(columns)
    return Result(table=table, status=f"SHOW {table.num_rows}", rowcount=table.num_rows)


def _retention(interval: str | None) -> int | None:
    return None if interval is None else retention_ms(interval)


def _replace_mz_now(query: Any, ms: int) -> Any:
    """One-off reads: mz_now() outside a temporal filter is the read's time."""
    if not isinstance(query, exp.Expression):
        return query
    return query.transform(
        lambda n: exp.Literal.number(ms) if is_mz_now(n) and _in_select_list(n) else n
    )


def _in_select_list(node: exp.Expression) -> bool:
    parent = node.parent
    while parent is not None:
        if isinstance(parent, exp.Where | exp.Having):
            return False
        if isinstance(parent, exp.Select):
            return True
        parent = parent.parent
    return True


__all__ = ["Executor", "Query", "sqlglot"]


def _array_literal(value: exp.Expression, column_type: exp.DataType | None) -> exp.Expression:
    """A string literal written into an array column, cast to the column's type (as
    PostgreSQL types a quoted literal by its target): `'{1,2}'` into an int[] column is
    the array {1,2}; any other value as it is."""
    is_array = column_type is not None and column_type.is_type(exp.DataType.Type.ARRAY)
    if is_array and isinstance(value, exp.Literal) and value.is_string:
        assert column_type is not None
        return exp.Cast(this=value, to=column_type.copy())
    return value


def _array_literals(
    query: exp.Expression, column_types: Sequence[exp.DataType | None]
) -> exp.Expression:
    """An INSERT's `VALUES` rows with each string literal bound for an array column cast
    to its type (`_array_literal`); any other query as it is."""
    values = query if isinstance(query, exp.Values) else None
    if values is None or not any(
        t is not None and t.is_type(exp.DataType.Type.ARRAY) for t in column_types
    ):
        return query
    values = values.copy()
    for row in values.expressions:
        if isinstance(row, exp.Tuple) and len(row.expressions) == len(column_types):
            row.set(
                "expressions",
                [_array_literal(v, t) for v, t in zip(row.expressions, column_types, strict=True)],
            )
    return values


def _positive_rows(value: str) -> int:
    """A number of rows given as `SET fetch_rows` text (`DEFAULT`: `exports.FETCH_ROWS`)."""
    text = value.strip()
    if text.lower() == "default":
        return exports.FETCH_ROWS
    if not text.isdigit() or int(text) < 1:
        raise TypeMismatchError(
            f'invalid value for parameter "fetch_rows": "{value}"',
            hint="give a number of rows of at least 1",
        )
    return int(text)
