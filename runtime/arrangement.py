"""Arrangements: a collection's updates, consolidated per round and kept in a shared trace.

An arrangement has key columns and value columns. Each round it consolidates and
materializes the batch its input produced (one kernel action), hands that batch
to its readers, and at the end of the round appends it to its `Trace`. Readers
(join, reduce, imports) see `history()` — the batches of earlier rounds — and
`current` — this round's batch — so the delta rules can tell old from new.

`trace_handle()` returns a handle that later dataflows `import_into` the same
worker: the import replays the (compacted) history as its first batch and then
follows the arrangement's batches, so many views share one arrangement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dsql.errors import SchemaError
from dsql.runtime import relational as rel
from dsql.runtime.dataflow import Batch, Node, Round
from dsql.runtime.kernel.base import Frame, Kernel, Prepared, Stored
from dsql.runtime.lattice import Antichain, time_columns
from dsql.runtime.trace import Trace

if TYPE_CHECKING:
    import numpy as np

    from dsql.runtime.collection import Collection


class Arranged(Node):
    """What every arranged node offers its readers: keys, values, history, current batch."""

    keys: tuple[str, ...]
    current: Batch | None = None

    @property
    def values(self) -> tuple[str, ...]:
        """The data columns that are not keys."""
        return tuple(c for c in self.columns if c not in self.keys)

    def history(self) -> list[Frame]:
        """The frames of every batch before this round's."""
        raise NotImplementedError

    def history_with_keys(self, probe: Frame, by: Sequence[str]) -> list[Frame] | None:
        """The rows of `history()` whose keys equal the `by` columns of some row of `probe`
        (frames left with no row may be left out); None when the kernel cannot pick them
        without a query (the caller then reads `history()`)."""
        picked = []
        for frame in self.history():
            rows = self.kernel.rows_with_keys(frame, self.keys, probe, by)
            if rows is None:
                return None
            picked.append(rows)
        return picked

    def history_sums(self, probe: Frame, by: Sequence[str]) -> np.ndarray | None:
        """Per row of `probe`, the sum of the diffs of `history()`'s rows whose keys equal
        its `by` columns, whatever their times; None when the kernel cannot say without
        a query."""
        return None

    def history_matches(
        self, probe: Frame, by: Sequence[str], names: Sequence[str]
    ) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """`history()`'s rows whose keys equal the `by` columns of some row of `probe`,
        as numbers (`Trace.key_matches`): per row, a probe row with its key, and its
        integer columns `names`; None when the kernel cannot say without a query."""
        return None

    def history_upper(self) -> tuple[int, ...] | None:
        """Per time coordinate, the greatest value in `history()` (None: not known
        without reading it; `()`: no history)."""
        return None

    @property
    def trace(self) -> Trace:
        raise NotImplementedError

    def as_collection(self) -> Collection:
        """The arranged updates as a plain collection."""
        from dsql.runtime.collection import Collection

        return Collection(self)

    def trace_handle(self) -> TraceHandle:
        """A handle through which another dataflow can import this arrangement."""
        return TraceHandle(self)


class TracedNode(Arranged):
    """An arranged node that owns its trace: each round's batch is appended at `finish`."""

    _trace: Trace

    @property
    def trace(self) -> Trace:
        return self._trace

    def history(self) -> list[Frame]:
        return self._trace.frames()

    def history_with_keys(self, probe: Frame, by: Sequence[str]) -> list[Frame] | None:
        return self._trace.rows_with_keys(probe, by)

    def history_sums(self, probe: Frame, by: Sequence[str]) -> np.ndarray | None:
        return self._trace.key_sums(probe, by)

    def history_matches(
        self, probe: Frame, by: Sequence[str], names: Sequence[str]
    ) -> tuple[np.ndarray, list[np.ndarray]] | None:
        return self._trace.key_matches(probe, by, names)

    def history_upper(self) -> tuple[int, ...] | None:
        return self._trace.upper()

    def finish(self, rnd: Round) -> None:
        self._trace.advance(rnd.compaction_frontier)
        if self.current is not None:
            self._trace.insert(self.current.frame, self.current.rows or 0)
        self.current = None

    def release(self) -> None:
        self._trace.release()


class ArrangeNode(TracedNode):
    """Arranges its input by `keys` (see module docstring)."""

    always_run = False
    composes_linear = True

    def __init__(self, source: Node, keys: tuple[str, ...]) -> None:
        unknown = [k for k in keys if k not in source.columns]
        if unknown:
            raise SchemaError(
                f"unknown key column(s) {', '.join(unknown)}",
                hint=f"the collection has columns {', '.join(source.columns)}",
            )
        self.keys = keys
        super().__init__(source.worker, (source,), source.schema, source.depth)
        self._trace = Trace(self.kernel, self.columns, keys, self.depth)

    def step(self, rnd: Round) -> Batch | None:
        self.current = None
        delta = rnd.delta(self.inputs[0])
        if delta is None:
            return None
        kernel = self.kernel
        stored = self._stored(delta)
        if stored.rows == 0:
            kernel.release(stored.frame)
            return None
        self.current = Batch(stored.frame, stored.rows, stored.table, consolidated=True)
        return self.current

    def _stored(self, delta: Batch) -> Stored:
        """`delta` (its deferred linear steps applied) consolidated and materialized by
        the keys: in one step where the kernel can (`store_consolidated`), else
        consolidated in the driver or by a query (fused with the linear steps), then
        materialized."""
        kernel, columns, depth, linear = self.kernel, self.columns, self.depth, delta.deferred

        def by_query() -> Frame:  # the linear steps and the consolidation: one call
            assert linear is not None
            consolidate = lambda q: rel.consolidate(q, columns, depth)  # noqa: E731
            query = (
                linear.query
                if delta.consolidated
                else linear.compose(consolidate, "arrange-linear")
            )
            return kernel.query(query, {"src": delta.frame})

        frame = delta.frame if linear is None else linear.renamed(delta.frame)
        if frame is None:
            return kernel.materialize(by_query(), self.keys, delta.rows)
        if delta.consolidated:  # consolidated rows, every column kept: still so
            return kernel.materialize(frame, self.keys, delta.rows)
        stored = kernel.store_consolidated(frame, columns, depth, self.keys)
        if stored is not None:
            return stored
        consolidated = kernel.consolidate_small([frame], columns, depth)
        if consolidated is None and linear is not None:
            consolidated = by_query()
        elif consolidated is None:
            # Prepared at first use: most batches are consolidated in the driver, and
            # rendering the query of a wide arrangement is a good part of a plan's build.
            consolidated = kernel.query(prepare_consolidate(kernel, columns, depth), {"d": frame})
        return kernel.materialize(consolidated, self.keys, delta.rows)

    def describe(self) -> str:
        return f"Arrange(keys={', '.join(self.keys) or '()'})"


def prepare_consolidate(kernel: Kernel, columns: tuple[str, ...], depth: int) -> Prepared:
    """`relational.consolidate` of a batch relation `d`, prepared once per shape."""
    build = lambda: kernel.prepare(rel.consolidate("d", columns, depth))  # noqa: E731
    return kernel.cached(("consolidate", columns, depth), build)


class TraceHandle:
    """Shared read access to an arrangement's trace, for import into other dataflows.

    Holding a handle holds back compaction at the frontier it was taken (or last
    advanced) at; `advance` lets the trace compact further; `release` forgets it.
    """

    def __init__(self, source: Arranged) -> None:
        self.source = source
        self.frontier = source.worker.frontier
        self._hold = source.trace.hold(self.frontier)

    def advance(self, frontier: Antichain) -> None:
        """Promise to read only at times beyond `frontier`."""
        self.frontier = frontier
        self.source.trace.set_hold(self._hold, frontier)

    def release(self) -> None:
        self.source.trace.release_hold(self._hold)

    def import_into(self) -> ImportNode:
        """An arrangement in the same worker that replays the history, then follows."""
        return ImportNode(self)


class ImportNode(Arranged):
    """An imported arrangement: history as its first batch, then the source's batches."""

    def __init__(self, handle: TraceHandle) -> None:
        source = handle.source
        self.handle = handle
        self.keys = source.keys
        super().__init__(source.worker, (source,), source.schema, source.depth)
        self._started = False
        self._replaying = False
        self.worker.wake()

    @property
    def trace(self) -> Trace:
        return self.handle.source.trace

    def history(self) -> list[Frame]:
        # In the round the import starts, its batch replays the whole history: nothing
        # is older than that batch yet.
        return self.handle.source.history() if self._started and not self._replaying else []

    def history_with_keys(self, probe: Frame, by: Sequence[str]) -> list[Frame] | None:
        return self.handle.source.history_with_keys(probe, by) if self.history() else []

    def following(self) -> bool:
        """Whether the import hands on its source's batches (it has replayed the history)."""
        return self._started and not self._replaying

    def step(self, rnd: Round) -> Batch | None:
        source = self.handle.source
        if self._started:
            self.current = source.current
            return self.current
        self._started = self._replaying = True  # `rewind` replays again
        frames = source.history() + ([source.current.frame] if source.current else [])
        if not frames:
            return None
        # The history is replayed at times advanced to the frontier the handle was
        # taken at: this dataflow starts there, and an update behind the frontier
        # would be at a time its operators (loops above all) treat as complete.
        # At most the rows of the batches replayed: with that bound, a reader storing a
        # big replay does not read its head into the driver first to learn it is big.
        current = source.current
        new_rows = 0 if current is None else current.rows
        bound = None if new_rows is None else source.trace.rows + new_rows
        settled = self._settled(frames) if current is None else None
        if settled is not None:
            rows = self.kernel.rows(settled)
            self.current = Batch(settled, bound if rows is None else rows, consolidated=True)
            return self.current
        replay = rel.advance("h", self.columns, self.depth, self.handle.frontier)
        frame = self.kernel.query(replay, {"h": self.kernel.union(frames)})
        self.current = Batch(frame, bound, consolidated=True)
        return self.current

    def _settled(self, frames: list[Frame]) -> Frame | None:
        """The replay without a query, when the history is one trace batch whose updates
        share one time: a trace batch is consolidated, so its rows stay distinct when that
        time moves to the frontier (None: the replay needs the query)."""
        frontier = list(self.handle.frontier)
        if len(frames) != 1 or self.depth != 1 or len(frontier) != 1:
            return None
        name = time_columns(1)[0]
        bounds = self.kernel.bounds(frames[0], name)
        if bounds is None or bounds[0] != bounds[1]:
            return None
        time = max(bounds[0], frontier[0][0])
        return frames[0] if time == bounds[0] else self.kernel.set_time(frames[0], name, time)

    def finish(self, rnd: Round) -> None:
        self.handle.advance(rnd.frontier)
        self.current = None
        self._replaying = False

    def rewind(self) -> None:
        self.current = None
        if self._replaying:  # the round of the replay was undone: it replays again
            self._started = self._replaying = False

    def release(self) -> None:
        self.handle.release()

    def describe(self) -> str:
        return f"Import(keys={', '.join(self.keys) or '()'})"
