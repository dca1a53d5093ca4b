"""Sinks: `Capture` collects a collection's updates for SUBSCRIBE; `Probe` tells completeness.

A capture keeps every update it receives (one kernel action per round that has
a batch) and hands out, on `poll`, the consolidated updates at complete times in
time order; updates at times the frontier has not passed wait. A capture made with
`spill=True` (a one-off read's) keeps a batch the kernel stores off the driver
(a big Spark batch) where it is, in `spilled`, for its reader to finish there;
`poll` then holds only the driver's batches.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsql.runtime.dataflow import Batch, Node, Round, batch_schema
from dsql.runtime.kernel import driver
from dsql.runtime.kernel.base import Capability, Frame
from dsql.runtime.lattice import DIFF, Antichain, time_columns


class Probe:
    """Reports which times of a collection may still change."""

    def __init__(self, node: Node) -> None:
        self.node = node

    @property
    def frontier(self) -> Antichain:
        """Times not beyond this frontier are final in the probed collection."""
        return self.node.worker.frontier

    def less_than(self, time: int) -> bool:
        """Whether some time strictly before `time` may still change."""
        return any(f[0] < time for f in self.frontier)

    def less_equal(self, time: int) -> bool:
        """Whether `time` or an earlier time may still change."""
        return self.frontier.less_equal((time,))


class CaptureNode(Node):
    """Collects updates (see module docstring)."""

    def __init__(
        self,
        source: Node,
        callback: Callable[[pa.Table], None] | None = None,
        spill: bool = False,
    ) -> None:
        super().__init__(source.worker, (source,), source.schema, source.depth)
        self._callback = callback
        #: Whether a batch the kernel stores off the driver stays there (`spilled`).
        self.spill = spill
        self._held: list[pa.Table] = []
        #: How many tables `_held` had before the latest step (`rewind` cuts back to it).
        self._mark = 0
        #: With `spill`: the batches stored off the driver (`Kernel.materialize`), at
        #: every time; the reader owns them (`release`s each).
        self.spilled: list[Frame] = []
        self._spill_mark = 0
        self._ready: list[pa.Table] = []
        self._frontier = Antichain([(0,) * source.depth])

    def step(self, rnd: Round) -> Batch | None:
        self._mark = len(self._held)
        self._spill_mark = len(self.spilled)
        delta = rnd.delta(self.inputs[0])
        if delta is not None:
            table = None
            if self.spill and self.kernel.takes(Capability.STORAGE, (delta.frame,)):
                stored = self.kernel.materialize(delta.frame, estimate=delta.rows)
                if stored.table is None:  # too big for the driver: it stays stored
                    self.spilled.append(stored.frame)
                    return None
                table = stored.table
            if table is None:
                table = self.kernel.to_arrow(delta.frame)
            table = table.select(list(self.all_columns()))
            # Engines differ in nullability from round to round: one schema for all.
            table = table.cast(batch_schema(self.schema, self.depth))
            if table.num_rows:
                if self._callback is not None:
                    self._callback(table)
                self._held.append(table)
        return None

    def rewind(self) -> None:
        del self._held[self._mark :]
        for frame in self.spilled[self._spill_mark :]:
            self.kernel.release(frame)
        del self.spilled[self._spill_mark :]

    def finish(self, rnd: Round) -> None:
        self._frontier = rnd.frontier
        if not self._held:
            return
        held = pa.concat_tables(self._held)
        times = time_columns(self.depth)
        complete = _complete_mask(held, times, rnd.frontier)
        if complete.all():  # the usual case: no copy of the rows
            self._ready.append(held)
            self._held = []
            return
        self._ready.append(held.filter(complete))
        rest = held.filter(~complete)
        self._held = [rest] if rest.num_rows else []

    @property
    def frontier(self) -> Antichain:
        return self._frontier

    def poll(self) -> pa.Table:
        """Consolidated updates at complete times not yet polled, ordered by time."""
        if not self._ready:
            return self._empty()
        ready = pa.concat_tables(self._ready)
        self._ready = []
        return consolidate_table(ready, self.columns, time_columns(self.depth))

    def _empty(self) -> pa.Table:
        from dsql.runtime.dataflow import batch_schema

        return batch_schema(self.schema, self.depth).empty_table()

    def describe(self) -> str:
        return "Capture"


def _complete_mask(table: pa.Table, times: tuple[str, ...], frontier: Antichain) -> np.ndarray:
    """Rows whose time no frontier element is `<=` (all rows when the frontier is empty);
    the time columns are int64 without NULLs."""
    beyond = np.zeros(table.num_rows, bool)
    stamps = [table[t].to_numpy() for t in times]
    for f in frontier:
        ge = np.ones(table.num_rows, bool)
        for i, stamp in enumerate(stamps):
            ge &= stamp >= f[i]
        beyond |= ge
    return ~beyond


def consolidate_table(
    table: pa.Table, columns: tuple[str, ...], times: tuple[str, ...]
) -> pa.Table:
    """Sum diffs of equal (row, time) pairs in an Arrow table, drop zeros, sort by time
    (then by the columns): by numpy for NULL-free integers (`driver.consolidate_sorted`),
    else by Arrow's grouping, or DuckDB's where a column is nested."""
    if table.num_rows == 0:
        return table
    keys = [*columns, *times]
    ordered = driver.consolidate_sorted(table, [*times, *columns])
    if ordered is not None:
        schema = table.select(keys).schema.append(pa.field(DIFF, pa.int64()))
        return ordered.select([*keys, DIFF]).cast(schema)
    if not all(_sortable(table.schema.field(k).type) for k in keys):
        return _consolidate_nested(table, keys, times)
    grouped = table.group_by(keys, use_threads=False).aggregate([(DIFF, "sum")])
    grouped = grouped.rename_columns(
        [DIFF if n == f"{DIFF}_sum" else n for n in grouped.column_names]
    )
    grouped = grouped.filter(pc.not_equal(grouped[DIFF], 0)).select([*keys, DIFF])
    order = [(t, "ascending") for t in times] + [
        (c, "ascending") for c in columns if _sortable(table.schema.field(c).type)
    ]
    return grouped.sort_by(order)


def _consolidate_nested(table: pa.Table, keys: list[str], times: tuple[str, ...]) -> pa.Table:
    """`consolidate_table` where a column is a list or struct (Arrow cannot group by
    those; DuckDB can)."""
    from dsql.runtime.kernel import duckdb_sandbox

    names = ", ".join(f'"{k}"' for k in keys)
    order = ", ".join(f'"{t}"' for t in times) or "ALL"
    con = duckdb_sandbox.connect()
    try:
        con.register("t", table)
        grouped = con.sql(
            f'SELECT {names}, CAST(SUM("{DIFF}") AS BIGINT) AS "{DIFF}" FROM t '
            f'GROUP BY ALL HAVING SUM("{DIFF}") <> 0 ORDER BY {order}'
        ).to_arrow_table()
    finally:
        con.close()
    return grouped.cast(table.select([*keys, DIFF]).schema)


def _sortable(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_interval(t))
