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
the catalog (`dsql.relation`). How a read's updates become rows is `dsql.results`.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from dsql import fast_path
from dsql.clock import TICKS_PER_MS, Clock, tick_of
from dsql.delta_source import DeltaSources
from dsql.errors import DsqlError, ExecutionError, SchemaError, TypeMismatchError
from dsql.exports import FETCH_ROWS
from dsql.file_source import FileSources
from dsql.heal import Healing, is_data_error
from dsql.history import History
from dsql.indexes import Indexes
from dsql.lost_state import LostState
from dsql.pg_source import PgSources
from dsql.planner.bind import bind
from dsql.planner.catalog import unknown_relation
from dsql.planner.decorrelate import decorrelate
from dsql.planner.optimize import optimize
from dsql.planner.plan import Column, Get, Plan, Query
from dsql.planner.stateful import walk_deep
from dsql.planner.volatile import refuse_volatile
from dsql.relation import Relation, _view_plan, typed_columns
from dsql.render import Renderer
from dsql.results import accumulate, present, reads_nothing
from dsql.runtime.collection import Collection, import_arrangement
from dsql.runtime.dataflow import Worker, batch_schema
from dsql.runtime.input import InputSession
from dsql.runtime.kernel.spark.frames import refuse_intervals
from dsql.runtime.lattice import DIFF, TIME
from dsql.runtime.memory import parse_size
from dsql.runtime.switch import SwitchNode
from dsql.sandbox import Sandbox
from dsql.sources import SourceKinds

#: The kinds of relation whose rows are written, not computed: tables and file sources.
INPUTS = ("table", "source")


class Session:
    """Owns the catalog, the clock and the runtime worker (see module docstring)."""

    def __init__(
        self,
        kernel: str | None = None,
        clock: str = "manual",
        spark: Any = None,
        placement_threshold: int | None = None,
        start_spark: Any = None,
        memory_limit: int | str | None = None,
        state_uri: str | None = None,
        start_tick: int | None = None,
    ) -> None:
        """`kernel`: "auto" (placement by size), "local" or "spark"; default
        `default_kernel()`. `placement_threshold`: rows kept in-process under "auto";
        `start_spark`: called before Spark's first step under "auto" (starts it);
        `memory_limit`: the budget of one query's state (`runtime.memory`; bytes or text
        such as '2GB', default half the machine's memory); `state_uri`: the storage root
        of the state Spark holds (`runtime/kernel/spark/state.py`); `start_tick`: where
        the clock starts, whatever its kind (a recovered session replays its log from
        there, `dsql.durable`)."""
        kernel = kernel or default_kernel()
        self.kernel_name = kernel
        self.clock = Clock(clock, start_tick=start_tick)
        self.worker = Worker(_make_kernel(kernel, spark, placement_threshold, start_spark))
        if state_uri is not None:
            self.worker.kernel.set_state_uri(state_uri)
        # A kept view that fails on new data fails alone: it is in error until the data
        # that fails it is gone (`dsql.heal`).
        self.worker.isolate_failures = True
        self.memory_limit = 0
        self.set_memory_limit(memory_limit)
        self.healing = Healing(self)
        #: Relations whose stored state is lost (`dsql.lost_state`).
        self.lost_state = LostState(self)
        self.relations: dict[str, Relation] = {}
        #: Whether reads of an arrangement, and INSERTs of literal rows, skip the
        #: dataflow (`dsql.fast_path`).
        self.fast_path = True
        self.indexes = Indexes(self)
        #: Whether a write reaches the views before its statement returns, so that it
        #: carries the notice of a view it puts in error or heals (`Healing.deliver`);
        #: False: at the next read, so a run of writes costs one round (bulk loads).
        self.deliver_writes = True
        #: While a statement runs, the writes it made (table, rows, diff): undone if it is
        #: interrupted (`Executor.execute`).
        self.writes: list[tuple[str, pa.Table, int, int]] | None = None
        #: The data directory the catalog and writes are logged to (`dsql.durable`);
        #: None: state is in memory only.
        self.durable: Any = None
        #: Every SUBSCRIBE started in the session, in order (`dsql.subscribe`: SHOW
        #: SUBSCRIPTIONS lists those still running).
        self.subscriptions: list[Any] = []
        #: The session's sinks by name (`dsql.sinks`), flushed at statement boundaries.
        self.sinks: dict[str, Any] = {}
        #: Stored copies of relations handed out as Spark DataFrames (`dsql.exports`),
        #: whose files live until the connection closes.
        self.exports: list[Any] = []
        #: The most rows of a result Spark holds that the driver reads at a time
        #: (`dsql.exports`; `SET fetch_rows`).
        self.fetch_rows = FETCH_ROWS
        self.history = History(self)
        #: The directories SQL may read and write files in (`dsql.sandbox`).
        self.sandbox = Sandbox()
        #: The file sources, by name (`dsql.file_source`), polled at statement boundaries.
        self.sources = FileSources(self)
        #: The PostgreSQL connections and sources (`dsql.pg_source`), polled with them.
        self.pg = PgSources(self)
        #: The Delta Lake sources (`dsql.delta_source`), polled with them.
        self.delta = DeltaSources(self)
        #: Every kind of source, in polling order (`dsql.sources`).
        self.source_kinds = SourceKinds((self.sources, self.pg, self.delta))
        self._unit = self._new_input(pa.schema([("_c0", pa.int32())]))
        self._unit.update_at((0,), self.clock.write_tick(), 1)
        self._unit_arrangement = self._unit.to_collection().arrange_by_self()
        self.close_time()

    def set_memory_limit(self, value: int | str | None) -> None:
        """Bound each query's state by `value` (`runtime.memory.parse_size`)."""
        self.memory_limit = parse_size(value)
        self.worker.kernel.set_memory_limit(self.memory_limit)

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
        """Tell every input the clock's tick, flush, and run the worker to quiescence;
        views whose dataflow failed go into error (`dsql.heal`)."""
        self._check_tables()
        good_until = max((t[0] for t in self.worker.frontier), default=0)
        for s in self._inputs():
            if s.time < self.clock.tick:
                s.advance_to(self.clock.tick)
            s.flush()
        try:
            self.worker.run()
        finally:
            self.healing.record(good_until)
        self.history.advance()

    def _check_tables(self) -> None:
        """Refuse to go on while a table's own nodes have failed (`Worker.vital`): its
        rows are not all there, so no read or write over it could be right until it is
        dropped."""
        if not self.worker.failed:
            return
        for rel in self.relations.values():
            if rel.kind not in INPUTS or rel.input is None or rel.arrangement is None:
                continue
            error = self.worker.vital_failure((rel.input.node, rel.arrangement.node))
            if error is not None:
                raise ExecutionError(
                    f"table '{rel.name}' lost rows it was given: {error.message}",
                    hint=f"DROP TABLE {rel.name} CASCADE and create it again"
                    + (f"; {error.hint}" if error.hint else ""),
                )

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
        if self.kernel_name == "spark" and any(pa.types.is_interval(f.type) for f in rel.schema):
            # Refused now, not at the first insert: Spark cannot hold an interval.
            raise refuse_intervals()
        rel.input = self._new_input(rel.schema)
        rel.arrangement = rel.input.to_collection().arrange_by_self()
        # A table's rows are its input's and arrangement's alone: their failure (rows
        # Spark was given and lost) is the statement's error, never a view's to heal.
        self.worker.vital.update((rel.input.node.id, rel.arrangement.node.id))
        self.relations[name] = rel
        self.history.register(name, rel.arrangement, retain_ms)

    def write(
        self, name: str, rows: pa.Table, diff: int, kinds: tuple[str, ...] = ("table",)
    ) -> int:
        """Add (diff=1) or remove (diff=-1) rows of a table at the clock's tick; returns the
        count. `kinds`: the relations the caller may write (a file source writes its own).
        The statement's `writes` record it with its tick (`dsql.durable` logs them)."""
        rel = self._table(name, kinds)
        self.lost_state.check(name)
        self._check_not_null(rel, rows)
        if rows.num_rows == 0:
            return 0
        tick = self.clock.write_tick()
        rel.version += 1
        if self.writes is not None:
            self.writes.append((name, rows, diff, tick))
        data = rows.rename_columns([f"_c{i}" for i in range(rows.num_columns)]).cast(rel.schema)
        data = data.append_column(DIFF, pa.array([diff] * rows.num_rows, pa.int64()))
        data = data.append_column(TIME, pa.array([tick] * rows.num_rows, pa.int64()))
        assert rel.input is not None
        rel.input.load_arrow(data)
        return rows.num_rows

    def load(self, name: str, frame: Any, rows: int, kinds: tuple[str, ...] = ("table",)) -> int:
        """Add the rows of Spark DataFrame `frame` (the table's columns in order, any
        names) to a table at the clock's tick without bringing them to the driver: the
        kernel stamps them with the tick and a diff of 1 (`SparkKernel.stamped`), and
        the table's arrangement has executors consolidate and store them. `rows`: the
        frame's row count, or a bound on it (the arrangement's estimate); returned. Only
        a table with no NOT NULL column: checking one would be a job of its own. `kinds`:
        as `write`'s; a Spark file source's load is logged by its staged batches
        (`dsql.spark_file_source`), a table's is refused under a data directory."""
        rel = self._table(name, kinds)
        if self.durable is not None and rel.kind == "table":
            self.durable.refuse_spark_load()
        if any(rel.not_null):
            raise SchemaError(f"table '{name}' has NOT NULL columns; load it with INSERT")
        if rows == 0:
            return 0
        tick = self.clock.write_tick()
        rel.version += 1
        assert rel.input is not None
        kernel: Any = self.worker.kernel  # the Spark or auto kernel: it stamps DataFrames
        rel.input.load_frame(kernel.stamped(frame, rel.schema, tick), rows)
        return rows

    def _table(self, name: str, kinds: tuple[str, ...] = ("table",)) -> Relation:
        rel = self.relations.get(name)
        if rel is None:
            raise unknown_relation(name, self.names())
        if rel.kind not in kinds:
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
        if materialized:
            self.refuse_volatile(plan, "a materialized view")
        cols = plan.columns
        if column_names:
            if len(column_names) != len(cols):
                raise SchemaError(
                    f"view '{name}' names {len(column_names)} columns; its query has {len(cols)}"
                )
            cols = tuple(Column(n, c.type) for n, c in zip(column_names, cols, strict=False))
        names = [c.name for c in cols]
        repeated = next((n for n in names if names.count(n) > 1), None)
        if repeated is not None:
            # A view's columns are read by name, as PostgreSQL's; a query's need not be.
            raise SchemaError(
                f"column '{repeated}' specified more than once",
                hint=f"name the view's columns apart: AS in its query, or {name} (a, b, ...)",
            )
        deps = tuple(sorted({n.name for n in walk_deep(plan) if isinstance(n, Get)}))
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
                rel.columns = typed_columns(cols, collection.schema)
                rel.computation = self.worker.nodes[start:]
                rel.switch = SwitchNode(collection.node)
                rel.arrangement = Collection(rel.switch).arrange_by_self()
                rel.switch.arranged = rel.arrangement.node
                rel.switch.watched = tuple(n.id for n in rel.computation if n is not None)
                rel.nodes = self.worker.nodes[start + len(rel.computation) :]
            except DsqlError:
                self.worker.drop(self.worker.nodes[start:])
                raise
            # Run the first evaluation now (the import's history completes when the tick
            # closes): a view that times out, or fails as dsql's own error, fails its
            # CREATE and leaves nothing behind; one that fails on the data is created in
            # error, as in Materialize, and heals when the rows go (`dsql.heal`).
            created_at = self.clock.tick
            try:
                self.close_time(force=True)
            except DsqlError as error:
                if not is_data_error(error) or not any(
                    i in self.worker.failed for i in rel.switch.watched
                ):
                    self.worker.drop(self.worker.nodes[start:])
                    raise
                self.healing.begin_in_error(rel, error, created_at)
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
        dependents += [k for k, sink in self.sinks.items() if sink.source == name]
        dropped = []
        if dependents and not cascade:
            raise SchemaError(
                f"cannot drop '{name}': {', '.join(sorted(dependents))} depend on it",
                hint="drop those first, or use DROP ... CASCADE",
            )
        for d in dependents:
            if d in self.sinks:
                self.sinks.pop(d).close()
                dropped.append(d)
            elif d in self.relations:
                dropped += self.drop(d, cascade=True, kind=None)
        self.indexes.drop_on(name)
        self.history.forget(name)
        self.healing.forget(name)
        self.lost_state.forget(name)
        if rel.nodes:
            self.worker.drop([*rel.computation, *rel.nodes])
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

    def refuse_volatile(self, plan: Plan, what: str) -> None:
        """An error if `plan`, to be maintained as `what`, calls a volatile function,
        itself or in a plain view it reads (rendered with it)."""
        refuse_volatile(plan, what)
        for node in walk_deep(plan):
            if isinstance(node, Get) and node.name in self.relations:
                rel = self.relations[node.name]
                if rel.plan is not None and rel.arrangement is None:
                    self.refuse_volatile(rel.plan, what)

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

    def _unindexed_source(self, name: str) -> Collection:
        """`_source` reading no index (a view's rebuild: an index may be younger than
        the view, and the rebuilt dataflow steps before the view's switch)."""
        rel = self.relations[name]
        self._check_failed(rel)
        if rel.arrangement is not None:
            return import_arrangement(rel.arrangement.trace_handle()).as_collection()
        assert rel.plan is not None
        return self._render(rel.plan, self._unindexed_source)

    def _check_failed(self, rel: Relation, tick: int | None = None) -> None:
        """Refuse to read a materialized view in error (or a view over one), now or, with
        `tick`, at that past tick (`dsql.heal`)."""
        self.healing.check(rel, tick)

    def _unit_collection(self) -> Collection:
        return import_arrangement(self._unit_arrangement.trace_handle()).as_collection()

    def read(self, bound: Query, as_of_ms: int | None = None) -> pa.Table:
        """The query's result at the current time (rows in order if it has ORDER BY)."""
        if as_of_ms is None and reads_nothing(bound.plan):
            return self._read_constant(bound)
        if as_of_ms is None and self.fast_path:
            peeked = fast_path.peek(self, bound)
            if peeked is not None:
                return peeked
        updates, _, tick = self.read_updates(bound, as_of_ms)
        table = accumulate(updates, tick, bound.plan.arity, self.memory_limit)
        return present(table, bound)

    def read_updates(
        self, bound: Query, as_of_ms: int | None = None, spill: bool = False
    ) -> tuple[pa.Table, list[Any], int]:
        """A read's updates by its own short-lived dataflow: those in the driver (Arrow),
        those stored off it (with `spill`: big Spark batches, owned by the caller, which
        releases them; `CaptureNode.spilled`), and the tick they accumulate to."""
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
        capture = None
        try:
            collection = self._render(bound.plan, source)
            capture = collection.capture(spill=spill)
            self.worker.wake()
            self.close_time(force=True)
            # A view it reads may have gone into error in this read's own round.
            self.healing.check_plan(bound.plan, None if as_of_ms is None else tick_of(as_of_ms))
            updates = capture.poll()
            spilled, capture.spilled = capture.spilled, []
        finally:
            self.worker.drop(self.worker.nodes[start:])
            for frame in [] if capture is None else capture.spilled:  # failed: not handed out
                self.worker.kernel.release(frame)
        return updates, spilled, tick

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
        return present(accumulate(updates, tick, bound.plan.arity, self.memory_limit), bound)


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
    "Session",
    "default_kernel",
    "sqlglot",
]
