"""The Spark kernel's probes: what is learnt of a frame without a job, and a stored
batch's rows by key.

A frame's time bounds (`bounds`), which let a reduce step that is settled at one time
run its one pipeline rather than the general step's seven stored stages, come without
a job: from the Arrow table a small frame was made from, or from a stored batch's
Parquet footers where the driver sees its files; so do its NULL-free columns
(`null_free`).

A probe of a stored batch by a few keys from the driver (`rows_with_key`, the auto
kernel's join and reduce over a big arrangement) is one filtered read, collected as
Arrow. Under a local master the driver sees the files Spark wrote, and pyarrow reads
the matching row groups itself, in milliseconds rather than a job's tens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from dsql.runtime.kernel import driver
from dsql.runtime.kernel.spark.storage import SparkStorage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class SparkProbes(SparkStorage):
    """Facts about a Spark frame learnt without a job, and a stored batch's rows by key
    (see module docstring)."""

    #: `rows_with_key` lists at most this many keys as literals of its filter.
    literal_keys = 64

    def bounds(self, frame: DataFrame, column: str) -> tuple[Any, Any] | None:
        """From the Arrow table a frame was made from, or from a stored batch's Parquet
        footers where the driver reads its files (statistics every writer here records);
        None for other frames: a time bound must not cost a job."""
        table = self._arrow.get(frame)
        if table is not None:
            return driver.bounds(table, column)
        return self._from_footers(frame, _footer_bounds, column, None)

    def null_free(self, frame: DataFrame, columns: Sequence[str]) -> bool:
        """From the Arrow table a frame was made from, or a stored batch's Parquet footers
        (the null counts every writer here records) where the driver reads its files."""
        table = self._arrow.get(frame)
        if table is not None:
            return driver.null_free(table, columns)
        return all(self._from_footers(frame, _footer_null_free, c, False) for c in columns)

    def _from_footers(
        self, frame: DataFrame, read: Callable[[str, str], Any], column: str, unknown: Any
    ) -> Any:
        """`read(path, column)` of a stored batch's files, once per batch and column;
        `unknown` for other frames, or where the driver does not see the files."""
        path = self._paths.get(id(frame))
        if path is None or not self._driver_sees_files():
            return unknown
        known = self._footers.setdefault(path, {})
        if (read, column) not in known:
            known[(read, column)] = read(self._stored_files(path), column)
        return known[(read, column)]

    def join_apart(self, history: Sequence[DataFrame], delta: DataFrame) -> bool:
        """When every frame is bucketed by its side's keys: Spark joins two such batches
        without an exchange, but shuffles a union of them (the `IS NOT NULL` filters it
        infers for the join's keys, pushed below the union, hide the partitioning)."""
        keys = self._bucketed.get(history[0])
        return (
            keys is not None
            and delta in self._bucketed
            and all(self._bucketed.get(f) == keys for f in history)
        )

    def rows_with_key(self, frame: DataFrame, column: str, keys: pa.Array) -> pa.Table | None:
        """The rows of `frame` whose `column` equals one of the distinct `keys` (NULL equals
        NULL), as Arrow in the driver; None for a key type without plain literals. A stored batch
        is read by the driver itself where it can (`_read_in_driver`); otherwise one job
        runs a filter of the DataFrame API, not a query: on a stored batch Spark pushes it
        into the Parquet scan, which skips every file and row group whose key range misses."""
        if not (pa.types.is_integer(keys.type) or pa.types.is_string(keys.type)):
            return None
        read = self._read_in_driver(frame, column, keys)
        if read is not None:
            return read
        present = keys.drop_null()
        key, nulls = frame[column], len(present) < len(keys)
        if len(present) <= self.literal_keys:
            listed = present.to_pylist()
            condition = key.isin(listed) if len(listed) != 1 else key == listed[0]
            picked = frame.filter(condition | key.isNull() if nulls else condition)
        else:  # a literal per key costs py4j calls: semi-join a shipped key list instead
            low, high = pc.min_max(present).values()
            shipped = self.from_arrow(pa.table({column: present}))
            picked = frame.filter(key.between(low.as_py(), high.as_py()))
            picked = picked.join(shipped.hint("broadcast"), on=column, how="left_semi")
            if nulls:  # a join never matches NULL keys
                picked = picked.unionByName(frame.filter(key.isNull()))
        return self.to_arrow(picked)


def _footer_statistics(files: Any, column: str) -> tuple[list[Any], bool] | None:
    """The footers' statistics of `column` for each non-empty row group of the Parquet
    `files` (a pyarrow dataset; None for a group without), and whether the column holds
    integers; None when a file lacks the column."""
    groups: list[Any] = []
    integers = True
    for fragment in sorted(files.get_fragments(), key=lambda f: f.path):
        metadata = fragment.metadata
        schema = metadata.schema.to_arrow_schema()
        if column not in schema.names:
            return None
        integers = integers and pa.types.is_integer(schema.field(column).type)
        leaves = [metadata.schema.column(j).path for j in range(metadata.num_columns)]
        at = leaves.index(column)  # a leaf's place, which nested columns before it shift
        for group in range(metadata.num_row_groups):
            chunk = metadata.row_group(group)
            if chunk.num_rows:
                groups.append(chunk.column(at).statistics)
    return groups, integers


def _footer_bounds(files: Any, column: str) -> tuple[int, int] | None:
    """The least and greatest value of integer `column` over the row groups of the
    Parquet `files`, from their footers' statistics; None when a non-empty group has
    none, the column is not of integers, or no group has rows."""
    found = _footer_statistics(files, column)
    if found is None or not found[1] or not found[0]:
        return None
    groups = found[0]
    if any(stats is None or not stats.has_min_max for stats in groups):
        return None
    return int(min(s.min for s in groups)), int(max(s.max for s in groups))


def _footer_null_free(files: Any, column: str) -> bool:
    """Whether no row group of the Parquet `files` holds a NULL in `column`, by their
    footers' statistics (False when a group has none)."""
    found = _footer_statistics(files, column)
    return found is not None and all(
        s is not None and s.has_null_count and s.null_count == 0 for s in found[0]
    )
