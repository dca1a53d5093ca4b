"""`SparkKernel`: the runtime's steps as Spark SQL over DataFrames.

The class is the last of a line of layers, each a module of this package: `frames`
(DataFrames and queries), `storage` (stored batches), `probes` (what is learnt without a
job) and `merge` (`materialize` and trace merges); it adds the steps that need none of
them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from dsql.errors import SchemaError
from dsql.runtime.kernel.spark.frames import _quote
from dsql.runtime.kernel.spark.merge import SparkMerge
from dsql.runtime.lattice import DIFF, TIME

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class SparkKernel(SparkMerge):
    """Evaluates runtime steps as Spark DataFrames (see the package docstring)."""

    dialect = "spark"

    name = "spark"

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
