"""The session: catalog, clock and runtime behind every way into dsql.

A `Session` executes parsed statements. Tables are runtime inputs arranged by
all their columns; each materialized view is a dataflow whose result is
arranged likewise, so later views and reads import the arrangement (its
history replays into the new dataflow, then it follows). A one-off SELECT is a
short-lived dataflow of the same kind, read once and dropped. Writes are
stamped by the clock (`dsql.clock`); a read first closes the current time, so
it sees every write so far. Indexes (`dsql.indexes`) are further named
arrangements that later dataflows share; `dsql.history` tracks how far back each
arrangement can be read and serves reads AS OF a past time.

Inside the runtime every relation's columns are `_c0 .. _c{n-1}`; names live in
the catalog.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from dsql import fast_path
from dsql.clock import TICKS_PER_MS, Clock
from dsql.errors import DsqlError, ExecutionError, SchemaError, TypeMismatchError
from dsql.history import History
from dsql.indexes import Indexes
from dsql.planner import types
from dsql.planner.bind import bind
from dsql.planner.catalog import unknown_relation
from dsql.planner.decorrelate import decorrelate
from dsql.planner.optimize import optimize
from dsql.planner.plan import (
    Column,
    Distinct,
    Get,
    LetRec,
    Outer,
    Plan,
    Query,
    Reduce,
    SubqueryExpr,
    Threshold,
    TopK,
    expressions_of,
    walk,
)
from dsql.planner.temporal import mentions_mz_now
from dsql.render import Renderer
from dsql.runtime.collection import Arrangement, Collection, import_arrangement
from dsql.runtime.dataflow import Worker, batch_schema
from dsql.runtime.input import InputSession
from dsql.runtime.lattice import DIFF, TIME


@dataclass
class Relation:
    """A catalog entry: a table, a materialized view, or a (non-materialized) view."""

    name: str
    kind: str  # "table" | "materialized view" | "view"
    columns: tuple[Column, ...]
    sql: str = ""
    plan: Plan | None = None
    arrangement: Arrangement | None = None
    input: InputSession | None = None
    not_null: tuple[bool, ...] = ()
    defaults: tuple[exp.Expression | None, ...] = ()
    nodes: list[Any] = field(default_factory=list)
    depends_on: tuple[str, ...] = ()

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([(f"_c{i}", types.to_arrow(c.type)) for i, c in enumerate(self.columns)])


@dataclass
class Result:
    """A statement's outcome: rows (Arrow, user column names) and/or a status message."""

    table: pa.Table | None = None
    status: str = ""
    rowcount: int = -1
    #: For SUBSCRIBE: the running `Subscription`, whose later updates callers poll.
    subscription: Any = None


class Session:
    """Owns the catalog, the clock and the runtime worker (see module docstring)."""

    def __init__(
        self,
        kernel: str | None = None,
        clock: str = "manual",
        spark: Any = None,
        placement_threshold: int | None = None,
        start_spark: Any = None,
    ) -> None:
        """`kernel`: "auto" (placement by size), "local" or "spark"; default
        `default_kernel()`. `placement_threshold`: rows kept in-process under "auto";
        `start_spark`: called before Spark's first step under "auto" (starts it)."""
        kernel = kernel or default_kernel()
        self.kernel_name = kernel
        self.clock = Clock(clock)
        self.worker = Worker(_make_kernel(kernel, spark, placement_threshold, start_spark))
        # A kept view that fails on new data fails alone (reads of it report the error).
        self.worker.isolate_failures = True
        self.relations: dict[str, Relation] = {}
        #: Whether reads of an arrangement, and INSERTs of literal rows, skip the
        #: dataflow (`dsql.fast_path`).
        self.fast_path = True
        self.indexes = Indexes(self)
        self.history = History(self)
        self._unit = self._new_input(pa.schema([("_c0", pa.int32())]))
        self._unit.update_at((0,), self.clock.write_tick(), 1)
        self._unit_arrangement = self._unit.to_collection().arrange_by_self()
        self.close_time()

    # --- catalog protocol (for the planner) -----------------------------------------------
    def columns(self, name: str) -> tuple[Column, ...]:
        if name not in self.relations:
            raise unknown_relation(name, self.names())
        return self.relations[name].columns

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.relations))

    # --- time ------------------------------------------------------------------------------
    def _new_input(self, schema: pa.Schema) -> InputSession:
        session = self.worker.new_input(schema)
        session.advance_to(self.clock.tick)
        return session

    def _inputs(self) -> list[InputSession]:
        return [s for s in self.worker.inputs if not s.closed]

    def _sync(self) -> None:
        """Tell every input the clock's tick, flush, and run the worker to quiescence."""
        for s in self._inputs():
            if s.time < self.clock.tick:
                s.advance_to(self.clock.tick)
            s.flush()
        self.worker.run()
        self.history.advance()

    def close_time(self, force: bool = False) -> int:
        """Make every write so far final; returns the open tick, which reads happen at.

        Traces compact up to the open tick, so what a new dataflow imports is at
        that tick; `force` closes it too, making such outputs final.
        """
        if self.clock.dirty or force:
            self.clock.close()
        self._sync()
        # No write is at the open tick yet, and traces are compacted up to it.
        return self.clock.tick

    def advance_to(self, ms: int) -> None:
        self.clock.advance_to(ms)
        self._sync()

    # --- tables ---------------------------------------------------------------------------------
    def create_table(
        self,
        name: str,
        columns: tuple[Column, ...],
        not_null: tuple[bool, ...] = (),
        defaults: tuple[exp.Expression | None, ...] = (),
        if_not_exists: bool = False,
        retain_ms: int | None = None,
    ) -> None:
        """A new table; `retain_ms` keeps that much history readable AS OF (`history`)."""
        if name in self.relations:
            if if_not_exists:
                return
            raise SchemaError(
                f"relation '{name}' already exists", hint="DROP it first, or pick another name"
            )
        self.indexes.check_free(name)
        if len({c.name for c in columns}) != len(columns):
            raise SchemaError(f"table '{name}' has two columns with the same name")
        rel = Relation(
            name,
            "table",
            columns,
            not_null=not_null or (False,) * len(columns),
            defaults=defaults or (None,) * len(columns),
        )
        rel.input = self._new_input(rel.schema)
        rel.arrangement = rel.input.to_collection().arrange_by_self()
        self.relations[name] = rel
        self.history.register(name, rel.arrangement, retain_ms)

    def write(self, name: str, rows: pa.Table, diff: int) -> int:
        """Add (diff=1) or remove (diff=-1) rows of a table at the clock's tick; returns the
        count."""
        rel = self._table(name)
        self._check_not_null(rel, rows)
        if rows.num_rows == 0:
            return 0
        tick = self.clock.write_tick()
        data = rows.rename_columns([f"_c{i}" for i in range(rows.num_columns)]).cast(rel.schema)
        data = data.append_column(DIFF, pa.array([diff] * rows.num_rows, pa.int64()))
        data = data.append_column(TIME, pa.array([tick] * rows.num_rows, pa.int64()))
        assert rel.input is not None
        rel.input.load_arrow(data)
        return rows.num_rows

    def _table(self, name: str) -> Relation:
        rel = self.relations.get(name)
        if rel is None:
            raise unknown_relation(name, self.names())
        if rel.kind != "table":
            raise SchemaError(
                f"'{name}' is a {rel.kind}, not a table", hint="only tables can be changed"
            )
        return rel

    def _check_not_null(self, rel: Relation, rows: pa.Table) -> None:
        for i, required in enumerate(rel.not_null):
            if required and rows.num_rows and rows.column(i).null_count:
                raise SchemaError(
                    f"null value in column '{rel.columns[i].name}' of '{rel.name}' "
                    "violates NOT NULL",
                    hint="give a value for it",
                )

    # --- views -----------------------------------------------------------------------------
    def create_view(
        self,
        name: str,
        query: Any,
        sql: str,
        materialized: bool,
        column_names: tuple[str, ...] | None = None,
        or_replace: bool = False,
        if_not_exists: bool = False,
        retain_ms: int | None = None,
    ) -> None:
        if name in self.relations:
            if if_not_exists:
                return
            if not or_replace:
                raise SchemaError(
                    f"relation '{name}' already exists", hint="use CREATE OR REPLACE, or DROP it"
                )
            self.drop(name, cascade=False, kind=None)
        self.indexes.check_free(name)
        bound = self.plan(query)
        plan = _view_plan(bound)
        cols = plan.columns
        if column_names:
            if len(column_names) != len(cols):
                raise SchemaError(
                    f"view '{name}' names {len(column_names)} columns; its query has {len(cols)}"
                )
            cols = tuple(Column(n, c.type) for n, c in zip(column_names, cols, strict=False))
        deps = tuple(sorted({n.name for n in walk(plan) if isinstance(n, Get)}))
        rel = Relation(
            name,
            "materialized view" if materialized else "view",
            cols,
            sql=sql,
            plan=plan,
            depends_on=deps,
        )
        if materialized:
            self.close_time()
            start = len(self.worker.nodes)
            try:
                collection = self._render(plan)
                rel.columns = _typed_columns(cols, collection.schema)
                rel.arrangement = collection.arrange_by_self()
                rel.nodes = self.worker.nodes[start:]
                # Run the first evaluation now (the import's history completes when the
                # tick closes): a view that fails, or times out, fails its CREATE and
                # leaves nothing behind, instead of failing a later statement.
                self.close_time(force=True)
            except DsqlError:
                self.worker.drop(self.worker.nodes[start:])
                raise
            self.history.register(name, rel.arrangement, retain_ms)
        self.relations[name] = rel

    def drop(
        self, name: str, cascade: bool, kind: str | None, if_exists: bool = False
    ) -> list[str]:
        rel = self.relations.get(name)
        if rel is None:
            if if_exists:
                return []
            if name in self.indexes.by_name:
                raise SchemaError(
                    f"'{name}' is an index, not a {kind or 'relation'}", hint="use DROP INDEX"
                )
            raise unknown_relation(name, self.names())
        if kind is not None and not rel.kind.endswith(kind):
            raise SchemaError(
                f"'{name}' is a {rel.kind}, not a {kind}", hint=f"use DROP {rel.kind.upper()}"
            )
        dependents = [r.name for r in self.relations.values() if name in r.depends_on]
        dropped = []
        if dependents and not cascade:
            raise SchemaError(
                f"cannot drop '{name}': {', '.join(sorted(dependents))} depend on it",
                hint="drop those first, or use DROP ... CASCADE",
            )
        for d in dependents:
            if d in self.relations:
                dropped += self.drop(d, cascade=True, kind=None)
        self.indexes.drop_on(name)
        self.history.forget(name)
        if rel.nodes:
            self.worker.drop(rel.nodes)
        if rel.input is not None:
            rel.input.close()
            if rel.arrangement is not None:
                self.worker.drop([rel.input.node, rel.arrangement.node])
        del self.relations[name]
        self.indexes.sweep()  # a dropped index the view imported may go now
        return [*dropped, name]

    # --- planning and reading -------------------------------------------------------------
    def plan(self, query: Any) -> Query:
        """Bind a query against the catalog (views inlined later, at rendering)."""
        return bind(query, self)

    def _render(self, plan: Plan, source: Any = None) -> Collection:
        """`plan` as a dataflow; `source` (a read AS OF a past time) renders relations
        instead of `_source`, and then no index is shared."""
        indexed = self.indexes.arranged if source is None else None
        renderer = Renderer(source or self._source, self._unit_collection, TICKS_PER_MS, indexed)
        return renderer.render(optimize(decorrelate(plan)))

    def _source(self, name: str) -> Collection:
        rel = self.relations[name]
        self._check_failed(rel)
        if rel.arrangement is not None:
            return import_arrangement(rel.arrangement.trace_handle()).as_collection()
        indexes = self.indexes.on(name)
        if indexes:  # an indexed view is maintained: read its index
            return self.indexes.imported(indexes[0]).as_collection()
        assert rel.plan is not None
        return self._render(rel.plan)

    def _check_failed(self, rel: Relation) -> None:
        """Refuse to read a materialized view whose dataflow failed on data written after
        it was created (or a view over one): it stopped following its inputs."""
        failed = self.worker.failed
        error = next((failed[n.id] for n in rel.nodes if n.id in failed), None)
        if error is not None:
            raise type(error)(
                f"materialized view '{rel.name}' failed: {error.message}",
                hint="fix or remove the rows that make it fail, then DROP the view and "
                "create it again" + (f" ({error.hint})" if error.hint else ""),
            )
        for name in rel.depends_on:
            if name in self.relations:
                self._check_failed(self.relations[name])

    def _unit_collection(self) -> Collection:
        return import_arrangement(self._unit_arrangement.trace_handle()).as_collection()

    def read(self, bound: Query, as_of_ms: int | None = None) -> pa.Table:
        """The query's result at the current time (rows in order if it has ORDER BY)."""
        if as_of_ms is None and _reads_nothing(bound.plan):
            return self._read_constant(bound)
        if as_of_ms is None and self.fast_path:
            peeked = fast_path.peek(self, bound)
            if peeked is not None:
                return peeked
        tick = self.close_time()
        source = None
        if as_of_ms is not None:
            if as_of_ms > self.clock.now_ms():
                raise SchemaError(
                    f"AS OF {as_of_ms} is in the future (now {self.clock.now_ms()})",
                    hint="ADVANCE the clock first",
                )
            if as_of_ms < self.clock.now_ms():  # inputs as they were then (`history`)
                source = self.history.source(as_of_ms)
        start = len(self.worker.nodes)
        try:
            collection = self._render(bound.plan, source)
            capture = collection.capture()
            self.worker.wake()
            self.close_time(force=True)
            updates = capture.poll()
        finally:
            self.worker.drop(self.worker.nodes[start:])
        table = accumulate(updates, tick, bound.plan.arity)
        return present(table, bound)

    def _read_constant(self, bound: Query) -> pa.Table:
        """A read of no relation (`VALUES`, `SELECT 1 + 1`): no write can change it, so it
        neither closes the clock's tick nor delivers pending writes to the views; only
        its own short-lived dataflow runs (an `INSERT ... VALUES` costs one small round,
        and writes between two reads share their tick)."""
        tick = self.clock.tick
        start = len(self.worker.nodes)
        parts: list[pa.Table] = []
        try:
            collection = self._render(bound.plan)
            collection.inspect(parts.append)  # every update: none can change after this round
            self.worker.wake()
            self.worker.step()
        finally:
            self.worker.drop(self.worker.nodes[start:])
        empty = batch_schema(collection.schema, collection.depth).empty_table()
        updates = pa.concat_tables(parts) if parts else empty
        return present(accumulate(updates, tick, bound.plan.arity), bound)


def _reads_nothing(plan: Plan) -> bool:
    """Whether a plan reads no relation (not even in a subquery), never mentions `mz_now()`
    and reduces nothing."""
    for node in walk(plan):
        # A reduction (and a loop) emits only at complete times, which this round's
        # open tick is not: such plans take the ordinary read path.
        if isinstance(node, Get | Reduce | Distinct | Threshold | TopK | LetRec):
            return False
        for e in expressions_of(node):
            # A LATERAL's outer reference becomes a Distinct when decorrelated.
            if e.find(SubqueryExpr, Outer) is not None or mentions_mz_now(e):
                return False
    return True


def accumulate(updates: pa.Table, tick: int, arity: int) -> pa.Table:
    """The rows a stream of updates holds at `tick`, each repeated by its count (in DuckDB)."""
    cols = ", ".join(f'"_c{i}"' for i in range(arity)) if arity else '0 AS "_c0"'
    con = _duckdb()
    try:
        con.register("u", updates)
        counts = con.sql(
            f'SELECT {cols}, CAST(SUM("{DIFF}") AS BIGINT) AS n FROM u WHERE "{TIME}" <= {tick} '
            f'GROUP BY ALL HAVING SUM("{DIFF}") <> 0'
        ).to_arrow_table()
    finally:
        con.close()
    return repeat_rows(counts, "n")


def repeat_rows(counts: pa.Table, count: str) -> pa.Table:
    """Each row of `counts` repeated by its column `count` (dropped); an error for a
    negative count, which no correct result has."""
    n = counts[count]
    least, most = pc.min_max(n).values()
    if counts.num_rows and least.as_py() < 0:
        raise ExecutionError(
            "a result has a row with a negative count",
            hint="this is a dsql bug; please report it",
        )
    rows = counts.drop_columns([count])
    if not counts.num_rows or most.as_py() == 1:  # each row once: nothing to repeat
        return rows
    return rows.take(np.repeat(np.arange(counts.num_rows), n.to_numpy()))


def _duckdb() -> Any:
    """A fresh cursor on one in-process DuckDB shared by reads (a new database per read
    costs tens of milliseconds; a cursor, with its own temporary tables, almost none)."""
    global _DUCKDB
    if _DUCKDB is None:
        import duckdb

        _DUCKDB = duckdb.connect()
        # Reads' statements are small: DuckDB's worker threads cost more CPU than they save
        # (as in the in-process kernel).
        _DUCKDB.execute("SET threads TO 1")
    return _DUCKDB.cursor()


_DUCKDB: Any = None


def present(table: pa.Table, bound: Query) -> pa.Table:
    """Order, limit and name a read's rows as the query asks."""
    visible = bound.visible
    if bound.order or bound.limit is not None or bound.offset:
        order = ", ".join(
            f'"_c{o.column}" {"DESC" if o.desc else "ASC"} '
            f"NULLS {'FIRST' if o.nulls_first else 'LAST'}"
            for o in bound.order
        )
        sql = "SELECT * FROM t" + (f" ORDER BY {order}" if order else "")
        if bound.limit is not None:
            sql += f" LIMIT {bound.limit}"
        if bound.offset:
            sql += f" OFFSET {bound.offset}"
        con = _duckdb()
        con.register("t", table)
        table = con.sql(sql).to_arrow_table()
        con.close()
    if table.num_columns > visible:
        table = table.select(list(range(visible)))
    names = list(bound.column_names)
    if visible == 0:
        return pa.table({})
    return table.rename_columns(names)


def _view_plan(bound: Query) -> Plan:
    from dsql.planner.bind import _visible

    if bound.limit is None and not bound.offset:
        bound = Query(bound.plan, bound.visible)
    return _visible(bound)


def _typed_columns(cols: tuple[Column, ...], schema: pa.Schema) -> tuple[Column, ...]:
    """The view's columns with the types the engine produced (authoritative)."""
    return tuple(Column(c.name, types.from_arrow(schema.field(i).type)) for i, c in enumerate(cols))


def default_kernel() -> str:
    """The kernel of a session that names none: `$DSQL_KERNEL`, else "auto" (in-process
    until a relation outgrows the placement threshold, `$DSQL_PLACEMENT_THRESHOLD` or
    100,000 rows, so small work never starts Spark)."""
    return os.environ.get("DSQL_KERNEL") or "auto"


def _make_kernel(kind: str, spark: Any, threshold: int | None, start: Any) -> Any:
    if kind == "auto":
        from dsql.runtime.kernel.auto import DEFAULT_THRESHOLD, AutoKernel

        if threshold is not None and threshold < 0:
            raise TypeMismatchError(
                f"placement threshold {threshold} is negative", hint="give a number of rows"
            )
        if threshold is None:
            threshold = int(os.environ.get("DSQL_PLACEMENT_THRESHOLD") or DEFAULT_THRESHOLD)
        return AutoKernel(threshold, spark=spark, start=start)
    if kind == "local":
        from dsql.runtime.kernel.local import LocalKernel

        return LocalKernel()
    if kind == "spark":
        from dsql.runtime.kernel.spark import SparkKernel

        return SparkKernel(spark)
    raise TypeMismatchError(
        f"unknown kernel {kind!r}", hint="use kernel='auto', kernel='local' or kernel='spark'"
    )


__all__ = [
    "Relation",
    "Result",
    "Session",
    "accumulate",
    "repeat_rows",
    "default_kernel",
    "present",
    "sqlglot",
]
