"""Automatic placement: one kernel that runs each step in DuckDB or on Spark by size.

`AutoKernel` implements the `Kernel` interface over two kernels, the in-process
`LocalKernel` (frames are Arrow tables) and the `SparkKernel` (frames are Spark
DataFrames). The in-process kernel says which frames are its own (`owns`): those live
in the driver, every other lives on Spark, so no operator knows about placement:

- a step whose inputs are all Arrow runs in DuckDB;
- a step with any Spark input runs on Spark, its Arrow inputs shipped there
  (`createDataFrame` from Arrow, marked for broadcast: they are the small side);
- `materialize` (an arrangement's batch, a trace merge, a reduce's output) decides:
  at most `threshold` rows stay (or come back) in the driver as Arrow, more move to
  Spark, where they are stored as key-sorted Parquet (written by the driver when the
  rows are in the driver and it shares Spark's disk). A trace that grows past the
  threshold therefore moves to Spark at its next merge, like Spark's own
  `autoBroadcastJoinThreshold`, but counted in rows;
- a few keys' rows of a Spark batch, for a small delta's join or reduce, are read into
  the driver (`rows_with_keys`), and the step runs there.

Spark starts only when a step first needs it, and says so once (`notice`).

Both kernels evaluate the same sqlglot query: it is built for DuckDB (`dialect`) and,
for Spark, the two constructs whose spelling differs are rewritten (the fan-out of
`fanout`, and `explode(range(0, n))`, which Spark spells `explode(sequence(1, n))`).

An optional step (a `Capability`) is handed to the kernel whose frames it reads only
where that kernel declares it (`Kernel.can`); elsewhere it declines, and the general
query runs, so a kernel lacking one changes no result.

Invariant: placement never changes a result; every frame this kernel returns is
either an Arrow table (local) or a Spark DataFrame (spark).

>>> import pyarrow as pa
>>> kernel = AutoKernel(threshold=10)
>>> kernel.placement(kernel.from_arrow(pa.table({"x": [1, 2]}))) is Placement.LOCAL
True
>>> kernel.started
False
"""

from __future__ import annotations

import logging
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from dsql.runtime.kernel import driver
from dsql.runtime.kernel.base import (
    Capability,
    Frame,
    Kernel,
    Pipeline,
    Placement,
    Prepared,
    Stage,
    Stored,
)
from dsql.runtime.kernel.driver import JoinShape, Selection
from dsql.runtime.kernel.driver_reduce import ReduceRows
from dsql.runtime.kernel.key_index import KeyDirectory, KeyIndex
from dsql.runtime.kernel.local import LocalKernel
from dsql.runtime.kernel.spark import SparkKernel
from dsql.runtime.kernel.spark.frames import has_intervals
from dsql.runtime.lattice import Antichain

if TYPE_CHECKING:
    import numpy as np
    from pyspark.sql import DataFrame, SparkSession

    from dsql.runtime.spark_session import SparkStart

#: The default placement threshold, in rows (at most this many stay in-process). At
#: 100,000 the 640k-row traces of a 2,000-edge transitive closure moved to Spark mid-loop,
#: and its hydration took 98 s instead of 2 s (`benchmarks/recursion.py --kernel auto`).
DEFAULT_THRESHOLD = 1_000_000

_log = logging.getLogger("dsql")


@dataclass(frozen=True, slots=True)
class _Dual(Prepared):
    """A query prepared for DuckDB (the inherited fields), and on demand for Spark.

    `source` is the query itself; `spark` caches its Spark rendering (one entry).
    """

    source: Any = None
    spark: list[Any] = field(default_factory=list, compare=False, hash=False, repr=False)


def _holds_intervals(schema: pa.Schema) -> bool:
    """Whether a frame of `schema` holds interval values."""
    return any(pa.types.is_interval(f.type) for f in schema)


def _over_intervals(queries: Sequence[exp.Expr], frames: Mapping[str, Frame]) -> bool:
    """Whether a step of `queries` over `frames` makes or reads intervals: it must run in
    process."""
    held = (f for f in frames.values() if isinstance(f, pa.Table))
    return any(map(has_intervals, queries)) or any(_holds_intervals(f.schema) for f in held)


@dataclass(frozen=True, slots=True)
class _DualPipeline:
    """A pipeline prepared for DuckDB, and on demand for Spark (like `_Dual`)."""

    local: Any
    source: Pipeline
    spark: list[Any] = field(default_factory=list, compare=False, hash=False, repr=False)


def _print_notice(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class AutoKernel(Kernel):
    """Runs each step in-process or on Spark by the size of its data (module docstring)."""

    dialect = LocalKernel.dialect
    name = "auto"
    #: The steps it may hand on: each the in-process kernel's, or the Spark kernel's
    #: (`store_consolidated`: by `store_arrow`; `rows_with_keys` of a Spark batch: by
    #: `rows_with_key`), taken where the kernel holding the frames declares it.
    capabilities = (
        LocalKernel.capabilities
        | SparkKernel.capabilities
        | {Capability.STORE_CONSOLIDATED, Capability.NULL_FREE}
    ) - {Capability.ROWS_WITH_KEY, Capability.STORE_ARROW}

    #: A Spark batch probed by at most this many distinct keys is read into the driver
    #: by a key filter (`rows_with_keys`); more are joined on Spark.
    fetch_keys = 10_000

    #: Arrow tables shipped to Spark recently, by identity (a trace batch is joined
    #: against many Spark batches; it is shipped once).
    shipped_entries = 64

    def __init__(
        self,
        threshold: int = DEFAULT_THRESHOLD,
        spark: SparkSession | None = None,
        start: SparkStart | None = None,
        notice: Callable[[str], None] | None = _print_notice,
    ) -> None:
        """`threshold`: rows kept in-process; `spark`: a session to use (none is started
        before it is needed); `start`: the session to start or reach before Spark's first
        step, when `spark` is not given (default: `get_spark()`'s); `notice`: told, in
        one line, when Spark starts."""
        if threshold < 0:
            raise ValueError("the placement threshold is a number of rows (>= 0)")
        self.threshold = threshold
        self.local = LocalKernel()
        self.remote = SparkKernel(spark, small_rows=threshold)
        self._given = spark
        self._start = start
        self._notice = notice
        #: Whether a step has run on Spark.
        self.started = False
        self._shipped: OrderedDict[int, tuple[pa.Table, DataFrame]] = OrderedDict()

    # --- where a frame lives ---------------------------------------------------------
    def owns(self, frame: Frame) -> bool:
        return self.local.owns(frame) or self.remote.owns(frame)

    def placement(self, frame: Frame | None = None) -> Placement:
        if frame is None or self.local.owns(frame):
            return Placement.LOCAL
        return Placement.SPARK

    def _here(self, frame: Frame) -> bool:
        """Whether `frame` lives in the driver (the in-process kernel's)."""
        return self.local.owns(frame)

    def _remote(self, frames: Sequence[Frame]) -> bool:
        """Whether any of `frames` lives on Spark."""
        return not all(self.local.owns(f) for f in frames)

    def _kernel_of(self, frame: Frame) -> Kernel:
        """The kernel whose frame `frame` is."""
        return self.local if self._here(frame) else self.remote

    def takes(self, capability: Capability, frames: Sequence[Frame]) -> bool:
        return self._local_takes(capability, frames) or self._remote_takes(capability, frames)

    def _local_takes(self, capability: Capability, frames: Sequence[Frame]) -> bool:
        """Whether the in-process kernel takes optional step `capability` over `frames`:
        it declares it, and every frame is its own."""
        return self.local.can(capability) and not self._remote(frames)

    def _remote_takes(self, capability: Capability, frames: Sequence[Frame]) -> bool:
        """Whether the Spark kernel takes optional step `capability` over `frames`: it
        declares it, and every frame lives on Spark."""
        return self.remote.can(capability) and not any(self._here(f) for f in frames)

    @property
    def probe_by_keys(self) -> bool:  # only a Spark batch gains from a key filter
        return self.started

    @property
    def spark(self) -> SparkSession:
        """The Spark session steps would use, started as `_spark` starts it (with the
        connection's master and settings) if no step has needed it yet."""
        return self._spark().spark

    def _spark(self) -> SparkKernel:
        """The Spark kernel, its session started (with one notice) the first time."""
        if not self.started:
            self.started = True
            if self._given is None:
                from dsql.runtime.spark_session import SparkStart

                start = self._start or SparkStart()
                action = start.notice()
                if action is not None:
                    message = f"dsql: {action} for relations over {self.threshold} rows..."
                    _log.info(message)
                    if self._notice is not None:
                        self._notice(message)
                self.remote.adopt(start())
        return self.remote

    def _ship(self, frame: Frame) -> Frame:
        """`frame` on Spark: a Spark frame as is, an Arrow table shipped (once)."""
        if not self._here(frame):
            return frame
        hit = self._shipped.get(id(frame))
        if hit is not None:
            self._shipped.move_to_end(id(frame))
            return hit[1]
        shipped = self._spark().from_arrow(frame)
        if frame.num_rows <= self.threshold:
            shipped = shipped.hint("broadcast")  # pyspark's broadcast(), in either mode
        self._shipped[id(frame)] = (frame, shipped)  # holding the table keeps its id unique
        if len(self._shipped) > self.shipped_entries:
            self._shipped.popitem(last=False)
        return shipped

    # --- data in and out ---------------------------------------------------------------
    def from_arrow(self, table: pa.Table) -> pa.Table:
        return table

    def to_arrow(self, frame: Frame) -> pa.Table:
        return frame if self._here(frame) else self.remote.to_arrow(frame)

    def stamped(self, frame: DataFrame, schema: pa.Schema, time: int) -> DataFrame:
        """`SparkKernel.stamped`: a load that stays on Spark (it outgrows the threshold)."""
        return self._spark().stamped(frame, schema, time)

    # --- files executors write (`SparkKernel.store`) ---------------------------------------
    def store(self, frame: DataFrame, file_rows: int | None = None) -> Stored:
        """`SparkKernel.store`: a Spark frame's rows written by the executors, verified."""
        return self._spark().store(frame, file_rows)

    def read(self, frame: DataFrame, batch_rows: int) -> Iterator[pa.Table]:
        """`SparkKernel.read`: a stored frame's rows in the driver, a file at a time."""
        return self._spark().read(frame, batch_rows)

    def driver_can_read(self) -> bool:
        """`SparkKernel.driver_can_read`: whether the driver reads executors' files."""
        return self._spark().driver_can_read()

    # --- queries -----------------------------------------------------------------------
    def prepare(self, select: exp.Query) -> Prepared:
        local = self.local.prepare(select)
        return _Dual(local.text, local.tables, select)

    def _for_spark(self, prepared: _Dual) -> Prepared:
        if not prepared.spark:
            query = _spark_query(prepared.source, self.remote.fanout)
            prepared.spark.append(self.remote.prepare(query))
        return prepared.spark[0]

    def set_deadline(self, deadline: float | None) -> None:
        self.local.set_deadline(deadline)

    def set_memory_limit(self, limit: int) -> None:
        self.local.set_memory_limit(limit)
        self.remote.set_memory_limit(limit)

    def set_state_uri(self, uri: str) -> None:
        self.remote.set_state_uri(uri)

    def set_owner(self, owner: int | None) -> None:
        self.remote.set_owner(owner)

    def owner_of(self, path: str | None) -> int | None:
        return self.remote.owner_of(path)

    def run(self, prepared: Prepared, inputs: Mapping[str, Frame]) -> Frame:
        assert isinstance(prepared, _Dual), "prepare queries with this kernel"
        used = {name: inputs[name] for name, _ in prepared.tables if name in inputs}
        if self._remote(list(used.values())) and _over_intervals([prepared.source], used):
            used = self._brought_in(used)
        if not self._remote(list(used.values())):
            return self.local.run(prepared, used)
        shipped = {name: self._ship(frame) for name, frame in used.items()}
        return self._spark().run(self._for_spark(prepared), shipped)

    def prepare_pipeline(self, pipeline: Pipeline) -> Any:
        return _DualPipeline(self.local.prepare_pipeline(pipeline), pipeline)

    def run_pipeline(
        self, prepared: Any, inputs: Mapping[str, Frame], keys: Sequence[str] = ()
    ) -> tuple[Frame, list[Frame]]:
        assert isinstance(prepared, _DualPipeline)
        queries = [*(stage.query for stage in prepared.source.stages), prepared.source.final]
        if self._remote(list(inputs.values())) and _over_intervals(queries, inputs):
            inputs = self._brought_in(inputs)
        if not self._remote(list(inputs.values())):
            return self.local.run_pipeline(prepared.local, inputs, keys)
        if not prepared.spark:
            source = prepared.source
            fan = self.remote.fanout
            stages = tuple(
                Stage(s.name, _spark_query(s.query, fan), s.store) for s in source.stages
            )
            pipeline = Pipeline(stages, _spark_query(source.final, fan))
            prepared.spark.append(self.remote.prepare_pipeline(pipeline))
        shipped = {name: self._ship(frame) for name, frame in inputs.items()}
        return self._spark().run_pipeline(prepared.spark[0], shipped, keys)

    def _brought_in(self, frames: Mapping[str, Frame]) -> dict[str, Frame]:
        """`frames`, those on Spark read into the driver: a step over intervals, which
        Spark cannot hold (`SparkKernel.from_arrow`), runs in process."""
        return {
            name: self.remote.to_arrow(f) if not self._here(f) else f for name, f in frames.items()
        }

    # --- storage: where placement is decided ---------------------------------------------
    def _stays(self, frame: pa.Table) -> bool:
        """Whether the driver's `frame` stays in process whatever its size: it has no
        columns (the rows are a count, which Spark could not store) or holds intervals
        (which Spark cannot hold)."""
        return not frame.num_columns or _holds_intervals(frame.schema)

    def materialize(
        self, frame: Frame, keys: Sequence[str] = (), estimate: int | None = None
    ) -> Stored:
        if self._here(frame):
            if frame.num_rows <= self.threshold or self._stays(frame):
                return self.local.materialize(frame, keys, estimate)
            _log.debug("placement: %d rows move to Spark", frame.num_rows)
            if self.remote.can(Capability.STORE_ARROW):
                written = self._spark().store_arrow(frame, keys)
                if written is not None:
                    return written
            shipped = self.remote.from_arrow(frame)  # not broadcast: it is the big side
            stored = self.remote.materialize(shipped, keys)
        else:
            stored = self.remote.materialize(frame, keys, estimate)
        return self._brought_back(stored, keys)

    def store_consolidated(
        self, frame: Frame, columns: Sequence[str], depth: int, keys: Sequence[str]
    ) -> Stored | None:
        if (
            not self._here(frame)
            or frame.num_rows <= self.threshold
            or self._stays(frame)
            or not self.remote.can(Capability.STORE_ARROW)
        ):
            return None
        stored = self._spark().store_arrow(frame, keys, (columns, depth))
        if stored is None or stored.rows > self.threshold:
            return stored
        table = self.remote.to_arrow(stored.frame)  # its updates cancelled: back here
        self.remote.release(stored.frame)
        return self.local.materialize(table, keys)

    def merge(
        self,
        frames: Sequence[Frame],
        columns: Sequence[str],
        keys: Sequence[str],
        depth: int,
        frontier: Antichain | None,
        estimate: int | None = None,
        uniform: bool = False,
    ) -> Stored | None:
        if not self._remote(frames) or not self.remote.can(Capability.MERGE):
            return None
        shipped = [self._ship(frame) for frame in frames]
        stored = self._spark().merge(shipped, columns, keys, depth, frontier, estimate, uniform)
        return None if stored is None else self._brought_back(stored, keys)

    def concatenate(
        self, frames: Sequence[Frame], keys: Sequence[str], estimate: int | None = None
    ) -> Stored | None:
        if not self._local_takes(Capability.CONCATENATE, frames):
            return None
        if sum(f.num_rows for f in frames) > self.threshold and not any(map(self._stays, frames)):
            return None
        return self.local.concatenate(frames, keys, estimate)

    def _brought_back(self, stored: Stored, keys: Sequence[str]) -> Stored:
        """What Spark stored, kept there when big; when small (Spark collected its rows),
        back in the driver and Spark's copy released."""
        if stored.table is None:
            return stored
        self.remote.release(stored.frame)
        return self.local.materialize(stored.table, keys)

    def release(self, frame: Frame) -> None:
        if not self._here(frame):
            self.remote.release(frame)

    # --- facts about frames --------------------------------------------------------------
    def rows(self, frame: Frame) -> int | None:
        return self.local.rows(frame) if self._here(frame) else None

    def consolidate_small(
        self,
        frames: Sequence[Frame],
        columns: Sequence[str],
        depth: int,
        frontier: Antichain | None = None,
        signs: Sequence[int] | None = None,
    ) -> Frame | None:
        if not self._local_takes(Capability.CONSOLIDATE_SMALL, frames):
            return None
        return self.local.consolidate_small(frames, columns, depth, frontier, signs)

    def prepare_many(self, branches: Sequence[Any], depth: int) -> Any:
        if not self.local.can(Capability.RUN_MANY):
            return None
        return self.local.prepare_many(branches, depth)

    def run_many(self, prepared: Any, frame: Frame) -> list[Frame] | None:
        if not self._local_takes(Capability.RUN_MANY, [frame]):
            return None
        return self.local.run_many(prepared, frame)

    def join_small(self, left: Frame, right: Frame, shape: JoinShape) -> Frame | None:
        if not self._local_takes(Capability.JOIN_SMALL, (left, right)):
            return None
        return self.local.join_small(left, right, shape)

    def rows_with_keys(
        self, frame: Frame, keys: Sequence[str], probe: Frame, by: Sequence[str] | None = None
    ) -> Frame | None:
        if not self._remote((frame, probe)):
            if not self.local.can(Capability.ROWS_WITH_KEYS):
                return None
            return self.local.rows_with_keys(frame, keys, probe, by)
        if not self._here(probe) or not keys or not self.remote.can(Capability.ROWS_WITH_KEY):
            return None
        return self._fetch(frame, list(keys), probe, list(by or keys))

    def _fetch(self, frame: Frame, keys: list[str], probe: pa.Table, by: list[str]) -> Frame | None:
        """The rows of Spark batch `frame` with the keys of the driver's `probe`, read into
        the driver (`SparkKernel.rows_with_key`: a stored batch is key-sorted Parquet in
        small row groups, and the read takes only the groups that can match), so a small
        change to a big arrangement is joined or reduced in the driver, not on Spark.
        None when the probe holds more than `fetch_keys` keys or a key type without
        literals."""
        distinct = pc.unique(probe[by[0]])
        if len(distinct) > self.fetch_keys:
            return None
        fetched = self.remote.rows_with_key(frame, keys[0], distinct)
        if fetched is None or len(keys) == 1:
            return fetched
        if not self.local.can(Capability.ROWS_WITH_KEYS):
            return None  # fetched by the first key only: not exact on the others
        return self.local.rows_with_keys(fetched, keys, probe, by)  # exact on every key

    def key_union(self, frames: Sequence[Frame], keys: Sequence[str]) -> Frame | None:
        if not self._local_takes(Capability.KEY_UNION, frames):
            return None
        return self.local.key_union(frames, keys)

    def shift_time(self, frame: Frame, name: str, by: int, at_most: int | None) -> Frame | None:
        if not self._local_takes(Capability.SHIFT_TIME, [frame]):
            return None
        return self.local.shift_time(frame, name, by, at_most)

    def reduce_small(
        self, rows: ReduceRows, logic: Callable[[Frame], Frame]
    ) -> tuple[Frame, Frame] | None:
        if not self._local_takes(Capability.REDUCE_SMALL, rows.frames()):
            return None
        return self.local.reduce_small(rows, logic)

    def key_index(
        self, frame: Frame, keys: Sequence[str], parts: Sequence[KeyIndex] = ()
    ) -> KeyIndex | None:
        if not self._local_takes(Capability.KEY_INDEX, [frame]):
            return None
        return self.local.key_index(frame, keys, parts)

    def key_directory(self, frames: Sequence[Frame], keys: Sequence[str]) -> KeyDirectory | None:
        if not self._local_takes(Capability.KEY_DIRECTORY, frames):
            return None
        return self.local.key_directory(frames, keys)

    def key_sums(
        self,
        frame: Frame,
        keys: Sequence[str],
        index: KeyIndex | None,
        probe: Frame,
        by: Sequence[str],
    ) -> np.ndarray | None:
        if not self._local_takes(Capability.KEY_SUMS, (frame, probe)):
            return None
        return self.local.key_sums(frame, keys, index, probe, by)

    def key_matches(
        self,
        frame: Frame,
        keys: Sequence[str],
        index: KeyIndex | None,
        probe: Frame,
        by: Sequence[str],
        names: Sequence[str],
    ) -> tuple[np.ndarray, list[np.ndarray]] | None:
        if not self._local_takes(Capability.KEY_MATCHES, (frame, probe)):
            return None
        return self.local.key_matches(frame, keys, index, probe, by, names)

    def project_small(self, frame: Frame, selection: Selection) -> Frame | None:
        if not self._local_takes(Capability.PROJECT_SMALL, [frame]):
            return None
        return self.local.project_small(frame, selection)

    def bounds(self, frame: Frame, column: str) -> tuple[Any, Any] | None:
        """A Spark batch's bounds from its Parquet footers (`SparkKernel.bounds`, no job):
        with them a reduce over a stored arrangement can take the settled step, where
        it took the general one (a 2M-row GROUP BY hydrated in 18 s against 52 s)."""
        if self._local_takes(Capability.BOUNDS, [frame]):
            return self.local.bounds(frame, column)
        if self._remote_takes(Capability.BOUNDS, [frame]):
            return self.remote.bounds(frame, column)
        return None

    def join_apart(self, history: Sequence[Frame], delta: Frame) -> bool:
        if not self._remote_takes(Capability.JOIN_APART, [delta, *history]):
            return False
        return self.remote.join_apart(history, delta)

    def null_free(self, frame: Frame, columns: Sequence[str]) -> bool:
        if self._here(frame):  # the in-process kernel has no use for it, but Spark has
            return driver.null_free(frame, columns)
        if self._remote_takes(Capability.NULL_FREE, [frame]):
            return self.remote.null_free(frame, columns)
        return False

    def nbytes(self, frame: Frame) -> int:
        return self._kernel_of(frame).nbytes(frame)

    def schema(self, frame: Frame) -> pa.Schema:
        return self._kernel_of(frame).schema(frame)

    # --- steps with an engine-specific form ------------------------------------------------
    def map_arrow(
        self, frame: Frame, function: Callable[[pa.Table], pa.Table], schema: pa.Schema
    ) -> Frame:
        return self._kernel_of(frame).map_arrow(frame, function, schema)

    def union(self, frames: Sequence[Frame]) -> Frame:
        if not self._remote(frames):
            return self.local.union(frames)
        return self._spark().union([self._ship(f) for f in frames])

    def append_time(self, frame: Frame, name: str, value: int) -> Frame:
        return self._kernel_of(frame).append_time(frame, name, value)

    def set_time(self, frame: Frame, name: str, value: int) -> Frame:
        return self._kernel_of(frame).set_time(frame, name, value)

    def fanout(self, branches: Sequence[Sequence[tuple[str, exp.Expr]]]) -> exp.Expression:
        return self.local.fanout(branches)


def _spark_query(query: exp.Query, fanout: Callable[..., exp.Expression]) -> exp.Query:
    """A query built for DuckDB, with the constructs Spark spells differently rewritten
    (`fanout`: the Spark kernel's)."""

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.upper() == "UNNEST":
            array = node.expressions[0] if node.expressions else None
            if isinstance(array, exp.Array) and any(
                isinstance(a, exp.Kwarg) for a in node.expressions[1:]
            ):
                branches = [
                    [(p.this.name, p.expression) for p in struct.expressions]
                    for struct in array.expressions
                ]
                return fanout(branches)
        if isinstance(node, exp.Explode) and isinstance(node.this, exp.Anonymous):
            inner = node.this
            args = inner.expressions
            if inner.name.upper() == "RANGE" and len(args) == 2 and args[0].sql() == "0":
                sequence = exp.Anonymous(
                    this="SEQUENCE", expressions=[exp.Literal.number(1), args[1]]
                )
                return exp.Explode(this=sequence)
        return node

    result = query.transform(rewrite)
    assert isinstance(result, exp.Query)
    return result
