"""The Spark kernel's stored results: `materialize`, trace merges, and big Arrow
tables written by the driver.

`materialize` cuts lineage, so plans do not grow with the number of rounds:

- a small result (at most `small_rows`) is collected as Arrow and re-entered as a
  local relation: one job, and later joins broadcast it; a frame made from an Arrow
  table the driver holds is that table already, with no job;
- a large one is stored (`storage`). Rows known to be in key order already (a stored
  batch read through a query that keeps its rows' order, its key columns renamed: a
  view re-keying a big table by the column the table is sorted by) are written as they
  are, with no range bounds, shuffle or sort (a 2M-row table: hydration 11.5-15.6 s
  against 16.6-19.1 s).

A trace merge (`merge`) range-partitions the union of the batches by key before it
consolidates: the consolidation's groups are finer than the keys, so Spark needs no
exchange of its own for them, and the result is written in that partitioning. One
shuffle per merge, not two, and nothing cached. Batches bucketed by the keys are not
shuffled at all. The driver writes a big Arrow batch into its buckets itself
(`store_arrow`, `buckets`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsql.errors import DsqlError
from dsql.runtime import relational as rel
from dsql.runtime.kernel import driver
from dsql.runtime.kernel.base import Frame, Stored
from dsql.runtime.kernel.spark.buckets import bucket_ids
from dsql.runtime.kernel.spark.frames import _engine_error
from dsql.runtime.kernel.spark.probes import SparkProbes
from dsql.runtime.kernel.spark.storage import (
    _fixed_width,
    _read_alike,
    _spark_columns,
    _table_name,
)
from dsql.runtime.lattice import Antichain

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class SparkMerge(SparkProbes):
    """Results of the Spark kernel made stored batches: `materialize`, `merge`,
    `store_arrow` (see module docstring)."""

    def materialize(
        self, frame: DataFrame, keys: Sequence[str] = (), estimate: int | None = None
    ) -> Stored:
        return self._materialize(frame, keys, estimate)

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
        """One shuffle: the union partitioned by `keys` first, so the consolidation
        (whose groups are finer than the keys) needs no exchange of its own, and the
        result is written in that partitioning (`_write`) without a second one.

        By range, so that a probe's key falls in one file, except where the driver reads
        the files itself (a local master): there each file is sorted and its row groups'
        statistics prune as well, and hashing spares the range bounds' sampling job, a
        read of the whole union (the 10M book's two merges: 24.4 s against 27.9 s).

        Where batches are bucketed (`buckets`), the union of bucketed batches is
        partitioned already: no shuffle at all, but of a batch that is not stored."""
        if not keys or (estimate is not None and estimate <= self.small_rows):
            return None
        buckets = self._bucketing(keys, lambda: frames[0].columns)
        if buckets:  # only what is not bucketed by the keys is shuffled
            frames = [
                f if self._bucketed.get(f) == tuple(keys) else f.repartition(buckets, *keys)
                for f in frames
            ]
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)
        if frontier:
            query = rel.advance("u", columns, depth, frontier, uniform)
        else:
            query = rel.consolidate("u", columns, depth)
        prepared = self.cached(("merge", rel.fingerprint(query)), lambda: self.prepare(query))
        if not buckets:
            if self._driver_sees_files():
                union = union.repartition(*keys)
            else:
                union = union.repartitionByRange(*keys)
        merged = self.run(prepared, {"u": union})
        return self._materialize(merged, keys, estimate, partitioned=True)

    def _materialize(
        self,
        frame: DataFrame,
        keys: Sequence[str],
        estimate: int | None,
        partitioned: bool = False,
    ) -> Stored:
        """`materialize`; `partitioned`: `frame` is range-partitioned by `keys` already.

        A frame of no columns is held as Arrow whatever its size: its rows are a count,
        and Parquet cannot hold them."""
        held = self._arrow.get(frame)
        if held is not None and held.num_rows <= self.small_rows:  # in the driver already
            return Stored(frame, held.num_rows, held)
        if held is not None and frame.columns:  # big, in the driver: written there, no job
            written = self.store_arrow(held, keys)
            if written is not None:
                return written
        try:
            if not frame.columns:
                table = self.to_arrow(frame)
                return Stored(self.from_arrow(table), table.num_rows, table)
            if estimate is not None and estimate <= self.small_rows:
                table = frame.toArrow()
                return Stored(self.from_arrow(table), table.num_rows, table)
            owned = False  # cached by this call, so uncached by it (a caller's cache stays)
            if estimate is None:  # no idea of the size: look at the head first
                # Cached first, as it is read again if big; but a frame computed from the
                # driver's rows alone is most likely small, and caching costs as much as
                # its job (0.1 s): if it is big after all, it is computed again.
                if not partitioned and frame not in self._from_driver and not frame.is_cached:
                    frame, owned = frame.persist(), True
                head = frame.limit(self.small_rows + 1).toArrow()
                if head.num_rows <= self.small_rows:
                    if owned:
                        frame.unpersist(blocking=False)
                    return Stored(self.from_arrow(head), head.num_rows, head)
            # Rows already in key order within each partition (a stored batch's columns
            # renamed) are written as they are: no range bounds, shuffle or sort.
            ordered = bool(keys) and self._order.get(frame, ())[: len(keys)] == tuple(keys)
            bucketed = self._bucketing(keys, lambda: frame.columns)
            partitioned = partitioned or (bucketed > 0 and self._bucketed.get(frame) == tuple(keys))
            # Written in buckets, a frame is read once: no range bounds, rows from footers.
            if not partitioned and not ordered and not bucketed and not frame.is_cached:
                frame, owned = frame.persist(), True  # read again: range bounds, rows
            stored = self._write(frame, keys, bucketed, partitioned, ordered)
            if owned:
                frame.unpersist(blocking=False)
            if stored.rows > self.small_rows:
                return stored
            # Smaller than its estimate (updates cancelled): back to a local relation.
            table = self._read_in_driver(stored.frame)
            table = self.to_arrow(stored.frame) if table is None else table
            self.release(stored.frame)
            return Stored(self.from_arrow(table), table.num_rows, table)
        except DsqlError:
            raise
        except Exception as error:  # noqa: BLE001
            raise _engine_error(error) from error

    def store_consolidated(
        self, frame: Frame, columns: Sequence[str], depth: int, keys: Sequence[str]
    ) -> Stored | None:
        """A big batch the driver holds, consolidated bucket by bucket as the driver
        writes it (`store_arrow`): no job, where Spark would ship the rows to consolidate
        and write them (3 jobs). None where the driver holds it not, it is small, or the
        driver cannot write it."""
        held = self._arrow.get(frame)
        if held is None or held.num_rows <= self.small_rows or not held.num_columns:
            return None
        stored = self.store_arrow(held, keys, (columns, depth))
        if stored is None or stored.rows > self.small_rows:
            return stored
        table = self.to_arrow(stored.frame)  # its updates cancelled: back to the driver
        self.release(stored.frame)
        return Stored(self.from_arrow(table), table.num_rows, table)

    def store_arrow(
        self,
        table: pa.Table,
        keys: Sequence[str] = (),
        consolidate: tuple[Sequence[str], int] | None = None,
    ) -> Stored | None:
        """`materialize` of a big Arrow table in the driver, when the driver writes files
        Spark reads (a local master): sorted by the first key and written by pyarrow in
        row groups of about `row_group_bytes`, without shipping the rows to Spark to
        write them. A probe filters row groups on the first key alone, so sorting by
        the others would buy nothing (a 10M-row table of two integer keys: 1.4 s by the
        first, 4.8 s by both). Where batches are bucketed (`buckets`) and the keys are
        integers, the rows go to their buckets' files (`buckets.bucket_ids`), each
        sorted by the first key. None where that does not hold, or for a type whose
        Parquet form Spark may read differently.

        With `consolidate` (the data columns, the first key first, and the time depth),
        `table` is not consolidated yet: its rows go to their buckets as they are, and
        each bucket's rows are consolidated apart (equal rows have equal keys, so share a
        bucket) by `driver.consolidate`, on threads. The whole consolidated table is never
        held, and both cores sort: the 10M book's two arrangement steps took 3.4-3.8 s for
        its 20M changes, against 7.1-10.4 s consolidating and then storing them, and
        2.1-2.6 against 3.1-4.6 s for its 10M loaded rows (Python's peak 1.9 against 2.4
        GiB). None where numpy would not consolidate them (`driver.numeric_schema`) or
        the rows cannot go to buckets."""
        if not self._driver_sees_files() or not all(_read_alike(f.type) for f in table.schema):
            return None
        names, depth = consolidate or ((), 0)
        schema: pa.Schema | None = table.schema
        if consolidate is not None:  # by bucket, each in key order: the key comes first
            schema = driver.numeric_schema(table, names, depth) if names[:1] == keys[:1] else None
        if schema is None:
            return None
        import pyarrow.parquet as pq

        buckets = self._bucketing(keys, lambda: table.column_names)
        columns = _spark_columns(schema) if buckets else None
        ids = bucket_ids(table, keys, buckets) if columns else None
        counts = None if ids is None else np.bincount(ids, minlength=buckets)
        if consolidate is not None and (counts is None or counts.max() > driver.NUMERIC_ROWS):
            return None
        path = self._new_path()
        filesystem, local = self.state.local(path)
        filesystem.create_dir(local)
        per_row = max(table.nbytes // max(table.num_rows, 1), 1)
        group = max(self.row_group_bytes // per_row, 1024)
        dictionary = not all(_fixed_width(f.type) for f in schema)
        if ids is None or counts is None or columns is None:
            ordered = _sorted_by(table, keys[:1])
            name = f"{local}/part-00000.parquet"
            pq.write_table(
                ordered,
                name,
                row_group_size=group,
                use_dictionary=dictionary,
                filesystem=filesystem,
            )
            return self._read_back(path, keys[:1], ordered.num_rows)
        if consolidate is None:
            order = _bucket_order(table, keys[0], ids, buckets)
            cuts = [0, *np.cumsum(counts).tolist()]
        # Else each bucket's rows are picked as they are (its consolidation sorts them):
        # no order of all rows, whose array of positions would be fresh memory.

        def write(bucket: int) -> int:  # Spark reads a file's bucket from its name
            if consolidate is None:
                part = table.take(order[cuts[bucket] : cuts[bucket + 1]])
            else:
                part = table.take(np.flatnonzero(ids == bucket))
                part = driver.consolidate([part], names, depth, None)
                assert part is not None, "numeric_schema vouched for every bucket"
                if not part.num_rows:
                    return 0
                if not driver.in_order(part[keys[0]].to_numpy()):  # a few rows, by Python
                    part = _sorted_by(part, keys[:1])
            name = f"{local}/part-00000_{bucket:05d}.c000.parquet"
            pq.write_table(
                part, name, row_group_size=group, use_dictionary=dictionary, filesystem=filesystem
            )
            return part.num_rows

        filled = [b for b in range(buckets) if counts[b]]
        with ThreadPoolExecutor(max(1, min(len(filled), os.cpu_count() or 1))) as pool:
            rows = sum(pool.map(write, filled))  # Arrow's and numpy's work frees the GIL
        table_name = _table_name()
        self._create_table(table_name, path, columns, keys, keys[:1], buckets)
        return self._read_table(table_name, path, keys, keys[:1], rows)


def _bucket_order(table: pa.Table, key: str, ids: np.ndarray, buckets: int) -> np.ndarray:
    """The positions of `table`'s rows ordered by bucket (`ids`), then by `key`: for
    integer keys without NULLs one sort of the bucket and key packed in one number, or
    none but the buckets' (a radix sort) when the rows are in key order already."""
    column = table[key]
    if pa.types.is_integer(column.type) and column.type != pa.uint64() and not column.null_count:
        values = column.to_numpy()
        if driver.in_order(values):
            return np.argsort(ids, kind="stable")  # in key order already (consolidated)
        low, high = (int(values.min()), int(values.max())) if len(values) else (0, 0)
        span = high - low + 1
        if span * buckets < 2**62:
            packed = ids.astype(np.int64)
            packed *= span
            packed += values
            packed -= low
            return driver.sort_order(packed)[1]
        by_key = driver.sort_order(values)[1]
    else:
        by_key = np.asarray(pc.array_sort_indices(column, null_placement="at_start"))
    return by_key[np.argsort(ids[by_key], kind="stable")]  # int16: a radix sort


def _sorted_by(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """`table` sorted by `keys`, stably: by `driver.sort_order` for one integer key
    without NULLs (10M rows: 0.45 s, where Arrow's `sort_by` takes 1.7 s)."""
    if not keys:
        return table
    if len(keys) == 1:
        column = table[keys[0]]
        if (
            pa.types.is_integer(column.type)
            and column.type != pa.uint64()
            and not column.null_count
        ):
            return table.take(driver.sort_order(column.to_numpy())[1])
    return table.sort_by([(k, "ascending") for k in keys])
