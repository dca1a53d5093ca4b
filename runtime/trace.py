"""A trace: the accumulated updates of an arrangement, as a list of immutable batches.

Each batch is a materialized frame of consolidated updates (data columns, time
columns, diff), with no lineage behind it. Two kinds of maintenance keep a trace
small:

- *logical compaction*: times not beyond the compaction frontier (the meet of
  every reader's frontier) are advanced to it (`lattice.advance_by`) and equal
  (row, time) pairs consolidated. Readers beyond the frontier see the same
  accumulations as before.
- *geometric merging*: after a batch is added, while the newest batch is at least
  1/`MERGE_RATIO` the size of the one before it, or the one before is small and in the
  driver (`SMALL_BATCH_ROWS`), the two merge (compacting as they do). So batch sizes
  grow at least `MERGE_RATIO`-fold going back in time and there are O(log n) batches,
  none of them tiny but the newest.
  Batches that can share no time (a loop's iterations) and whose times the frontier
  leaves as they are, or that are small beside the trace (`POSTPONE_SHARE`: their
  compaction waits for a later, larger merge), have nothing to consolidate: their merge
  is their concatenation,
  sharing their rows where the kernel can (`Kernel.concatenate`; stored whole when
  rows are first taken from it by position), and their key indexes merge too rather
  than being built again.
- *deferred merging*: an inserted batch waits, unmerged, until readers have seen
  `PENDING_READS` of them (they probe them as they are) or it is read after many
  inserts; the waiting batches then merge in as one (`Trace._settle`). A loop's
  distinct reads its traces at every inner step: one merge per several steps rather
  than one per step. Outside loops the waiting batches hold under 1/`MERGE_RATIO` of
  the trace's rows (a bigger change merges at once).

A batch is also an index: readers that hold a few keys (a join's delta, a reduce's
affected keys) take just those keys' rows with `rows_with_keys`, through an index the
kernel builds once per batch, when first asked (`Kernel.key_index`). A reader that
needs only each key's sum of diffs (a settled distinct) reads it from the trace's key
directory where the kernel keeps one (`Kernel.key_directory`: dense integer keys); merges
and compaction leave the sums as they are, so the directory follows inserts alone.

Invariant: the multiset sum of the batches, accumulated at any time beyond the
compaction frontier, equals the accumulation of every update ever inserted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dsql.runtime import relational as rel
from dsql.runtime.kernel.base import Capability, Frame, Kernel, Stored
from dsql.runtime.lattice import DIFF, Antichain, time_columns

#: A batch merges with the one before it while that one holds at most this many times
#: its rows: there are about log_{MERGE_RATIO}(rows) batches for every reader to probe,
#: and a row is merged about as often in all as with a ratio of 2 (half as many merges,
#: each twice as big). The closure benchmark's loop traces hold 4-5 batches rather than
#: 5-6: its rounds 6-8% faster (alternated on one machine, session 18).
MERGE_RATIO = 4
#: Batches of at most this many rows in the driver merge with the next whatever its
#: size: every reader probes every batch, at a fixed cost of tens of microseconds, while
#: merging a small batch costs little more.
SMALL_BATCH_ROWS = 1024
#: A trace's key directory (`Trace.key_sums`) is first tried once it holds this many
#: rows: below, searching its few batches costs as little.
DIRECTORY_ROWS = 1024
#: A merge of batches in the driver that share no time as they stand, whose rows are
#: less than 1/POSTPONE_SHARE of the trace's, leaves their times unadvanced: a
#: concatenation rather than a consolidation (a loop's rounds merge their small batches
#: into the last round's at every inner step). Compaction waits for a merge into the
#: larger batches (every batch of a quarter of the trace or more is compacted, and sizes
#: grow `MERGE_RATIO`-fold going back), so the uncompacted batches hold under half of the trace.
POSTPONE_SHARE = 4
#: At most this many inserted batches wait for a reader before they are merged in.
PENDING_BATCHES = 64
#: Readers probe up to this many inserted batches less one as they are, unmerged: a
#: loop's distinct reads its two traces at every inner step, and merging each step's
#: batch in costs more than probing a few small ones.
PENDING_READS = 8


@dataclass(slots=True)
class TraceBatch:
    """One immutable, materialized batch of a trace, with its row count."""

    frame: Frame
    rows: int
    #: The frontier its times were last advanced to (empty: never compacted).
    compacted_to: Antichain = field(default_factory=Antichain)
    #: Its index by the trace's keys (`Kernel.key_index`), once built; `indexed`: asked;
    #: `rows_read`: rows were taken through it (not only sums).
    index: Any = None
    indexed: bool = False
    rows_read: bool = False
    #: Per time coordinate, the least and greatest value of its rows, once asked (None:
    #: the kernel does not say).
    ranges: tuple[tuple[int, int], ...] | None = None
    ranged: bool = False
    #: False: earlier batches' frames end to end (`Kernel.concatenate`), stored whole
    #: (`Trace._make_whole`) before rows are first taken from it by position.
    whole: bool = True


class Trace:
    """The batches of one arrangement, kept compact (see module docstring)."""

    def __init__(self, kernel: Kernel, columns: tuple[str, ...], keys: tuple[str, ...], depth: int):
        self.kernel = kernel
        self.columns = columns
        self.keys = keys
        self.depth = depth
        self._batches: list[TraceBatch] = []
        #: Batches inserted since a reader last asked: merged in when one does.
        self._pending: list[TraceBatch] = []
        #: Frontiers held by readers outside the dataflow (imports, AS OF reads).
        self._holds: dict[int, Antichain] = {}
        self._next_hold = 0
        self._compaction = Antichain()
        #: Each key's sum over every batch (`Kernel.key_directory`), once asked and built;
        #: `_directory_tried`: the trace's rows when last built or refused.
        self._directory: Any = None
        self._directory_tried = 0

    # --- readers -------------------------------------------------------------------
    @property
    def batches(self) -> list[TraceBatch]:
        """The batches, oldest first: the merged ones, then those inserted since, which
        are merged in (`_settle`) once `PENDING_READS` wait."""
        if len(self._pending) >= PENDING_READS:
            self._settle()
        return [*self._batches, *self._pending] if self._pending else self._batches

    def frames(self) -> list[Frame]:
        """The frames of all batches, oldest first."""
        return [b.frame for b in self.batches]

    @property
    def rows(self) -> int:
        """The number of update rows stored (after consolidation within batches)."""
        return sum(b.rows for b in (*self._batches, *self._pending))

    def nbytes(self) -> int:
        """The bytes the batches and their indexes hold, as the kernel estimates them."""
        batches = (*self._batches, *self._pending)
        indexes = sum(b.index.nbytes for b in batches if b.index is not None)
        if self._directory is not None:
            indexes += self._directory.nbytes
        return sum(self.kernel.nbytes(b.frame) for b in batches) + indexes

    def rows_with_keys(self, probe: Frame, by: Sequence[str]) -> list[Frame] | None:
        """Per batch, oldest first, the rows whose keys equal the `by` columns of some row
        of `probe` (batches with none left out); None when the kernel cannot pick them
        without a query (the caller then reads `frames()`)."""
        kernel, picked = self.kernel, []
        for batch in self.batches:
            self._read_rows(batch)
            rows = None
            if batch.index is not None and kernel.takes(Capability.KEY_INDEX, (probe,)):
                rows = batch.index.rows(probe, by)  # an index is probed by rows it can read
            if rows is None:
                rows = kernel.rows_with_keys(batch.frame, self.keys, probe, by)
            if rows is None:
                return None
            if kernel.rows(rows) != 0:
                picked.append(rows)
        return picked

    def key_sums(self, probe: Frame, by: Sequence[str]) -> np.ndarray | None:
        """Per row of `probe`, the sum over every batch of the diffs of the rows whose keys
        equal its `by` columns, whatever their times; None when the kernel cannot say
        without a query, or the sum could overflow.

        From the trace's key directory where its keys are dense (one gather), else from
        each batch's index (a binary search per batch)."""
        rows = self.kernel.rows(probe)
        if rows is None:
            return None
        directory = self._key_directory()
        if directory is not None:
            found = directory.lookup(probe, by)
            if found is not None:
                return found
        total = np.zeros(rows, np.int64)
        bound = np.zeros(rows)  # the same sums in floats, to see an overflow coming
        for batch in self.batches:
            sums = self.kernel.key_sums(batch.frame, self.keys, self._index(batch), probe, by)
            if sums is None:
                return None
            total += sums
            bound += sums
        if len(bound) and float(np.abs(bound).max()) >= 2.0**62:
            return None
        return total

    def key_matches(
        self, probe: Frame, by: Sequence[str], names: Sequence[str]
    ) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """The rows of every batch whose keys equal the `by` columns of some row of
        `probe`: per row, the position of a probe row with its key, and the row's integer
        columns `names` as arrays; None when the kernel cannot say without a query.

        No row is taken as a row: a reader that works in numbers (a loop's distinct,
        `reduce_chain`) gets just the columns it reads, gathered from each batch."""
        rows: list[np.ndarray] = []
        columns: list[list[np.ndarray]] = [[] for _ in names]
        for batch in self.batches:
            # Not made whole: the index joins up a concatenation's pieces only in the
            # columns read (`KeyIndex.ints`), not in every column.
            batch.rows_read = True
            found = self.kernel.key_matches(
                batch.frame, self.keys, self._index(batch), probe, by, names
            )
            if found is None:
                return None
            rows.append(found[0])
            for kept, values in zip(columns, found[1], strict=True):
                kept.append(values)
        if not rows:
            return np.empty(0, np.int64), [np.empty(0, np.int64) for _ in names]
        return np.concatenate(rows), [np.concatenate(c) for c in columns]

    def _key_directory(self) -> Any:
        """The trace's key directory, built when first asked once the trace holds
        `DIRECTORY_ROWS` rows; refused or dropped, it is tried again only once the trace
        has doubled, so building it costs O(1) per row inserted."""
        rows = self.rows
        if self._directory is None and rows >= max(DIRECTORY_ROWS, 2 * self._directory_tried):
            self._directory_tried = rows
            self._directory = self.kernel.key_directory(self.frames(), self.keys)
        return self._directory

    def upper(self) -> tuple[int, ...] | None:
        """Per time coordinate, the greatest value in any batch (`()`: no batch; None:
        the kernel does not say)."""
        ranges = [self._batch_ranges(b) for b in self.batches]
        if any(r is None for r in ranges):
            return None
        return tuple(
            max(highs) for highs in zip(*([h for _, h in r] for r in ranges if r), strict=True)
        )

    def _batch_ranges(self, batch: TraceBatch) -> tuple[tuple[int, int], ...] | None:
        """The batch's time ranges (`TraceBatch.ranges`), asked of the kernel once."""
        if not batch.ranged:
            ranges = []
            for name in time_columns(self.depth):
                bounds = self.kernel.bounds(batch.frame, name)
                if bounds is None or bounds[0] is None:
                    break
                ranges.append((int(bounds[0]), int(bounds[1])))
            else:
                batch.ranges = tuple(ranges)
            batch.ranged = True
        return batch.ranges

    def _read_rows(self, batch: TraceBatch) -> Any:
        """The batch made ready to have rows taken by position (stored whole), marked so
        (`rows_read`), and its index (None: none)."""
        if not batch.whole:
            self._make_whole(batch)
        batch.rows_read = True
        return self._index(batch)

    def _make_whole(self, batch: TraceBatch) -> None:
        """A concatenated batch's frame stored whole, its index following it: taking rows
        by position from pieces would join them up at every take."""
        stored = self.kernel.materialize(batch.frame, self.keys, batch.rows)
        if batch.index is not None:
            batch.index = self.kernel.key_index(stored.frame, self.keys, [batch.index])
        self.kernel.release(batch.frame)
        batch.frame, batch.whole = stored.frame, True

    def _index(self, batch: TraceBatch) -> Any:
        """The batch's index by the trace's keys, built when first asked (None: none)."""
        if not batch.indexed:
            batch.index, batch.indexed = self.kernel.key_index(batch.frame, self.keys), True
        return batch.index

    def hold(self, frontier: Antichain) -> int:
        """Register a reader that may read at times beyond `frontier`; returns its id."""
        self._next_hold += 1
        self._holds[self._next_hold] = frontier
        return self._next_hold

    def set_hold(self, hold: int, frontier: Antichain) -> None:
        """Let reader `hold` advance to `frontier` (it will read no earlier)."""
        self._holds[hold] = frontier

    def release_hold(self, hold: int) -> None:
        """Forget reader `hold`."""
        self._holds.pop(hold, None)

    # --- writers -------------------------------------------------------------------
    def insert(self, frame: Frame, rows: int) -> None:
        """Add a materialized, consolidated batch. It waits to be merged in (`_settle`)
        while the waiting batches are fewer than `PENDING_BATCHES` and, outside loops,
        hold less than 1/`MERGE_RATIO` of the merged batches' rows. A loop's traces are
        read at every inner step, so readers merge what waits soon enough; outside, reads
        may be rare, and a big change (a delete of much of the trace) merges at once, so
        that its compaction is not put off."""
        self._pending.append(TraceBatch(frame, rows))
        if self._directory is not None and not (
            self.kernel.takes(Capability.KEY_DIRECTORY, (frame,)) and self._directory.add(frame)
        ):
            self._directory = None  # a key outside its box: tried again once doubled
        waiting = sum(b.rows for b in self._pending)
        big = self.depth == 1 and MERGE_RATIO * waiting >= self.rows - waiting
        if big or len(self._pending) >= PENDING_BATCHES:
            self._settle()

    def _settle(self) -> None:
        """Merge the batches inserted since they were last merged in and restore the
        size invariant: the newest that the merge rule would draw together (`_draws`) as
        one group, their concatenation where they share no time, rather than a merge
        per insert; older, larger ones one by one, as they would have gone in."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        cut, rows = len(pending) - 1, pending[-1].rows
        while cut and self._draws(pending[cut - 1], rows):
            cut -= 1
            rows += pending[cut].rows
        for batch in pending[:cut]:
            self._batches.append(batch)
            self._merge()
        group = pending[cut:]
        batch = group[0] if len(group) == 1 else self._combine(group)
        if batch.rows or len(group) == 1:
            self._batches.append(batch)
        else:
            self.kernel.release(batch.frame)
        self._merge()

    def advance(self, frontier: Antichain) -> None:
        """Allow compaction up to `frontier`, as far as every external reader allows."""
        allowed = frontier
        for hold in self._holds.values():
            allowed = _meet_frontiers(allowed, hold)
        self._compaction = allowed

    @property
    def compaction(self) -> Antichain:
        """The frontier that batches are advanced to when they are merged."""
        return self._compaction

    def _merge(self) -> None:
        batches = self._batches
        while len(batches) >= 2 and self._draws(batches[-2], batches[-1].rows):
            newer = batches.pop()
            older = batches.pop()
            merged = self._combine([older, newer])
            if merged.rows:  # an empty batch would draw every later batch into a merge
                batches.append(merged)
            else:
                self.kernel.release(merged.frame)

    def _draws(self, older: TraceBatch, newer_rows: int) -> bool:
        """The merge rule: whether `older` merges with newer batches of `newer_rows` rows
        (it holds at most `MERGE_RATIO` times their rows, or it is small)."""
        return older.rows <= MERGE_RATIO * newer_rows or self._small(older)

    def _small(self, batch: TraceBatch) -> bool:
        """Whether `batch` merges with the next whatever its size: it is small and not a
        batch the kernel merges natively (`Capability.MERGE`: a Spark batch, however
        small, would make the merge a Spark job)."""
        return batch.rows <= SMALL_BATCH_ROWS and not self.kernel.takes(
            Capability.MERGE, (batch.frame,)
        )

    def compact_all(self) -> None:
        """Merge every batch into one, advanced to the compaction frontier."""
        self._settle()
        batches = self._batches
        if len(batches) > 1 or (batches and batches[0].compacted_to != self._compaction):
            self._batches = [self._combine(batches)]

    def _combine(self, batches: list[TraceBatch]) -> TraceBatch:
        """The batches merged into one, advanced to the compaction frontier (unless
        that waits: `POSTPONE_SHARE`)."""
        estimate = sum(b.rows for b in batches)
        apart = self._apart(batches, self._compaction)
        later = (
            not apart
            and estimate * POSTPONE_SHARE < self.rows + estimate
            and self.kernel.takes(Capability.CONCATENATE, [b.frame for b in batches])
            and self._apart(batches, Antichain())
        )
        apart = apart or later
        whole = True
        if apart:  # nothing to consolidate: the batches end to end, shared where it can
            frames = [b.frame for b in batches]
            stored = self.kernel.concatenate(frames, self.keys, estimate)
            whole = stored is None
            if stored is None:
                stored = self.kernel.materialize(self.kernel.union(frames), self.keys, estimate)
        else:
            stored = self._merged(batches, estimate)
        compacted_to = Antichain() if later else self._compaction
        merged = TraceBatch(stored.frame, stored.rows, compacted_to, whole=whole)
        merged.rows_read = any(b.rows_read for b in batches)
        ranges = [b.ranges for b in batches if b.ranges is not None]
        if apart and len(ranges) == len(batches):  # their times as they were
            merged.ranges = tuple(
                (min(low for low, _ in span), max(high for _, high in span))
                for span in zip(*ranges, strict=True)
            )
            merged.ranged = True
        # Probed, it will be again: for rows, or for sums where no directory answers them.
        sums_read = self._directory is None
        if apart and any(b.index is not None and (b.rows_read or sums_read) for b in batches):
            parts = [self._index(b) for b in batches]
            if all(p is not None for p in parts):
                merged.index = self.kernel.key_index(stored.frame, self.keys, parts)
                merged.indexed = True
        if whole:  # else the concatenation shares their rows
            for b in batches:
                self.kernel.release(b.frame)
        return merged

    def _merged(self, batches: list[TraceBatch], estimate: int) -> Stored:
        """The batches' union advanced to the compaction frontier and consolidated, stored:
        in the driver when small, by the kernel's own merge, or by the query."""
        kernel, frontier, frames = self.kernel, self._compaction, [b.frame for b in batches]
        frame = kernel.consolidate_small(frames, self.columns, self.depth, frontier or None)
        if frame is None:
            uniform = self._uniform(batches, frontier)
            stored = kernel.merge(
                frames, self.columns, self.keys, self.depth, frontier or None, estimate, uniform
            )
            if stored is not None:
                return stored
            names = {f"b{i}": f for i, f in enumerate(frames)}
            union = rel.union_all(list(names), (*self.columns, *time_columns(self.depth), DIFF))
            if frontier:
                query = rel.advance(union, self.columns, self.depth, frontier, uniform)
            else:
                query = rel.consolidate(union, self.columns, self.depth)
            frame = kernel.query(query, names)
        return kernel.materialize(frame, self.keys, estimate)

    def _uniform(self, batches: list[TraceBatch], frontier: Antichain) -> bool:
        """Whether every time of `batches` advances to the one element of `frontier`:
        none is beyond it, by their time ranges (where known without reading them)."""
        if len(frontier) != 1:
            return False
        (element,) = frontier
        for b in batches:
            ranges = self._batch_ranges(b)
            if ranges is None or any(
                high > e for (_, high), e in zip(ranges, element, strict=True)
            ):
                return False
        return True

    def _apart(self, batches: list[TraceBatch], frontier: Antichain) -> bool:
        """Whether merging the batches would consolidate nothing: each is consolidated (the
        trace's invariant), no two can share a time (in some coordinate their ranges do
        not meet; a loop's batches of different iterations), and `frontier` advances none
        of their times (each is beyond it: `advance_by` leaves it)."""
        ranges = []
        for b in batches:
            batch_ranges = self._batch_ranges(b)
            if batch_ranges is None:
                return False
            lows = [low for low, _ in batch_ranges]
            if frontier and not any(
                all(low >= f for low, f in zip(lows, e, strict=True)) for e in frontier
            ):
                return False
            ranges.append(batch_ranges)
        return all(
            any(x[1] < y[0] or y[1] < x[0] for x, y in zip(a, b, strict=True))
            for i, a in enumerate(ranges)
            for b in ranges[i + 1 :]
        )

    def release(self) -> None:
        """Free every batch (the arrangement is dropped)."""
        for b in (*self._batches, *self._pending):
            self.kernel.release(b.frame)
        self._batches, self._pending = [], []
        self._directory = None


def _meet_frontiers(a: Antichain, b: Antichain) -> Antichain:
    """The frontier allowing only what both allow (the minimal elements of the union)."""
    if not a:
        return b
    if not b:
        return a
    return a.meet(b)
