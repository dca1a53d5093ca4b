"""`SparkKernel`: the runtime's steps as Spark SQL over DataFrames.

The class is the last of a line of layers, each a module of this package: `frames`
(DataFrames and queries), `storage` (stored batches), `probes` (what is learnt without a
job) and `merge` (`materialize` and trace merges); it adds the steps that need none of
them.

Rows the driver holds already (a frame made from an Arrow table: an input's batch, a
small result collected as Arrow) are consolidated, renamed, joined on keys and probed by
key in the driver (`kernel.driver`, exact as the queries are), where a Spark job would
ship them to the executors and back: the bookkeeping of a small round costs no job. So
are a stored batch's rows for such a probe's keys, where the driver reads the batch's
files. Every expression (a map, a filter, a reduce's logic) is still Spark's, in one job
with no shuffle when its inputs are small and the driver's (`frames._one_partition`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from dsql.errors import SchemaError
from dsql.runtime.kernel import chain_reduce, driver, float_text, numeric_transcendental
from dsql.runtime.kernel.base import Capability, Frame
from dsql.runtime.kernel.driver import Selection
from dsql.runtime.kernel.driver_reduce import ReduceRows
from dsql.runtime.kernel.spark.frames import _quote, has_intervals, refuse_intervals
from dsql.runtime.kernel.spark.merge import SparkMerge
from dsql.runtime.lattice import DIFF, TIME, Antichain

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class SparkKernel(SparkMerge):
    """Evaluates runtime steps as Spark DataFrames (see the package docstring)."""

    dialect = "spark"
    name = "spark"
    capabilities = frozenset(
        {
            # Rows the driver already holds (frames made from Arrow) stay in the driver.
            Capability.CONSOLIDATE_SMALL,
            Capability.PROJECT_SMALL,
            Capability.ROWS_WITH_KEYS,
            Capability.BOUNDS,
            Capability.NULL_FREE,
            Capability.JOIN_APART,
            Capability.MERGE,
            Capability.ROWS_WITH_KEY,
            Capability.STORE_ARROW,
            Capability.STORE_CONSOLIDATED,  # of a big batch made from Arrow (`store_arrow`)
            Capability.LOAD_FRAME,
            Capability.STORAGE,
            Capability.SPARK_SESSION,
        }
    )

    def sql(self, select: exp.Expr) -> str:
        if has_intervals(select):
            raise refuse_intervals()
        text = super().sql(select)
        for module in (numeric_transcendental, float_text):
            if (
                module.NAME.upper() in text.upper()
                and self._functions_on.get(module.NAME) is not self.spark
            ):
                module.register_spark(self.spark)
                self._functions_on = {**self._functions_on, module.NAME: self.spark}
        return text

    #: The session each of dsql's Spark functions (`numeric_transcendental.NAME`,
    #: `float_text.NAME`) is registered on, by the first statement that calls it.
    _functions_on: dict[str, object] = {}  # noqa: RUF012 - replaced, never mutated

    def stamped(self, frame: DataFrame, schema: pa.Schema, time: int) -> DataFrame:
        """A batch of `frame`'s rows inserted at `time`: its columns, in order, renamed to
        `schema`'s data columns and cast to their types, then `__time__` = `time` and
        `__diff__` = 1. Lazy: the executors that evaluate the batch read the source, so
        a load of files or a table reaches the trace without passing the driver."""
        from pyspark.sql.functions import col, lit
        from pyspark.sql.pandas.types import from_arrow_schema

        fields = from_arrow_schema(schema).fields
        if len(fields) != len(frame.columns):
            raise SchemaError(
                f"the frame has {len(frame.columns)} columns; the table has {len(fields)}"
            )
        data = [
            col(_quote(source)).cast(field.dataType).alias(field.name)
            for source, field in zip(frame.columns, fields, strict=True)
        ]
        return frame.select(
            *data, lit(int(time)).cast("bigint").alias(TIME), lit(1).cast("bigint").alias(DIFF)
        )

    def rows(self, frame: DataFrame) -> int | None:
        table = self._arrow.get(frame)
        return None if table is None else table.num_rows

    def held(self, frames: Sequence[Frame]) -> list[pa.Table] | None:
        """The Arrow tables the driver holds `frames` as (each made by `from_arrow`, or an
        Arrow table itself, as a probe may be), or None when any is Spark's alone."""
        tables = [f if isinstance(f, pa.Table) else self._arrow.get(f) for f in frames]
        return None if any(t is None for t in tables) else tables  # type: ignore[return-value]

    def _kept(self, table: pa.Table | None) -> DataFrame | None:
        return None if table is None else self.from_arrow(table)

    def project_small(self, frame: DataFrame, selection: Selection) -> DataFrame | None:
        tables = self.held([frame])
        return None if tables is None else self._kept(driver.project(tables[0], selection))

    def consolidate_small(
        self,
        frames: Sequence[Frame],
        columns: Sequence[str],
        depth: int,
        frontier: Antichain | None = None,
        signs: Sequence[int] | None = None,
    ) -> DataFrame | None:
        tables = self.held(frames)
        if tables is None:
            return None
        return self._kept(driver.consolidate(tables, columns, depth, frontier, signs))

    def reduce_small(
        self, rows: ReduceRows, logic: Callable[[Frame], Frame]
    ) -> tuple[DataFrame, DataFrame] | None:
        """A general reduce step whose rows the driver holds, as the local kernel takes
        it (`chain_reduce.small_step`: the grid, accumulations and Möbius inversion in
        numpy), the logic alone a Spark query over the accumulated groups (one job, one
        partition). Many times in one batch are then one statement, their times a
        column, where the stage-by-stage pipeline stores five stages (12 jobs) and its
        one-query form runs 23 (adaptive execution's shuffle stages). None when a frame
        is Spark's alone."""
        extra = [rows.delta, rows.pending]
        tables = self.held([*rows.inputs, *rows.outputs, *(f for f in extra if f is not None)])
        if tables is None:
            return None
        n_in, n_out = len(rows.inputs), len(rows.outputs)
        rest = iter(tables[n_in + n_out :])
        held = dataclasses.replace(
            rows,
            inputs=tables[:n_in],
            outputs=tables[n_in : n_in + n_out],
            delta=None if rows.delta is None else next(rest),
            pending=None if rows.pending is None else next(rest),
        )

        def desired(acc: pa.Table) -> pa.Table:
            return self.to_arrow(logic(self.from_arrow(acc)))

        result = chain_reduce.small_step(held, desired)
        if result is None:
            return None
        return self.from_arrow(result[0]), self.from_arrow(result[1])

    def rows_with_keys(
        self, frame: Frame, keys: Sequence[str], probe: Frame, by: Sequence[str] | None = None
    ) -> DataFrame | None:
        tables = self.held([frame, probe])
        if tables is None:
            return self._stored_rows_with_keys(frame, keys, probe, by)
        return self._kept(driver.rows_with_keys(tables[0], keys, tables[1], by))

    def _stored_rows_with_keys(
        self, frame: DataFrame, keys: Sequence[str], probe: Frame, by: Sequence[str] | None
    ) -> DataFrame | None:
        """`rows_with_keys` of a stored batch by a probe the driver holds, read by the
        driver itself (`_read_in_driver`: the row groups, of the buckets, whose first-key
        statistics admit a probed value) and cut to the probe's whole keys there: no job.
        None where the driver does not read the batch's files, or more than `small_rows`
        rows match (they stay Spark's)."""
        probed = self.held([probe])
        if probed is None or not keys or id(frame) not in self._paths:
            return None
        column = probed[0][(by or keys)[0]]
        read = self._read_in_driver(frame, keys[0], pc.unique(column.combine_chunks()))
        if read is None or read.num_rows > self.small_rows:
            return None
        return self._kept(driver.rows_with_keys(read, keys, probed[0], by))

    def nbytes(self, frame: DataFrame) -> int:
        """Spark's estimate of the frame's size, from its optimized plan's statistics
        (`EXPLAIN COST`: planning only, no job, and the same over Spark Connect); 0 when
        Spark gives none."""
        try:
            text = self.spark.sql("EXPLAIN COST SELECT * FROM {frame}", frame=frame).head()
        except Exception:  # noqa: BLE001 - sizes are estimates: a plan Spark cannot cost
            return 0
        return 0 if text is None else _size_in_bytes(str(text[0]))

    def map_arrow(
        self, frame: DataFrame, function: Callable[[pa.Table], pa.Table], schema: pa.Schema
    ) -> DataFrame:
        from pyspark.sql.pandas.types import from_arrow_schema

        def batches(iterator):  # runs in Spark's Python workers, a batch at a time
            for batch in iterator:
                result = function(pa.Table.from_batches([batch]))
                yield from result.select(schema.names).cast(schema).to_batches()

        return frame.mapInArrow(batches, from_arrow_schema(schema))

    def fanout(self, branches: Sequence[Sequence[tuple[str, exp.Expr]]]) -> exp.Expression:
        structs = [
            exp.Struct(expressions=[exp.alias_(e, name, quoted=True) for name, e in branch])
            for branch in branches
        ]
        return exp.Anonymous(this="INLINE", expressions=[exp.Array(expressions=structs)])


#: The optimized plan's root size in `EXPLAIN COST` text, as Spark writes it
#: (`Statistics(sizeInBytes=3.4 MiB, rowCount=...)`).
_SIZE_IN_BYTES = re.compile(r"Statistics\(sizeInBytes=([0-9.]+(?:E[+-]?\d+)?) ?([KMGTPE]i)?B")


def _size_in_bytes(explained: str) -> int:
    """The first `sizeInBytes` of an `EXPLAIN COST` text, in bytes; 0 if there is none.

    >>> _size_in_bytes("LocalRelation [x#6L], Statistics(sizeInBytes=3.4 MiB, rowCount=3)")
    3565158
    """
    match = _SIZE_IN_BYTES.search(explained)
    if match is None:
        return 0
    power = " KMGTPE".index(match.group(2)[0]) if match.group(2) else 0
    return int(float(match.group(1)) * 1024**power)
