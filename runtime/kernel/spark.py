"""The Spark kernel: frames are Spark DataFrames, steps are Spark SQL over them.

DataFrame API only (no RDDs, no SparkContext), so the same code runs on a local
session, a cluster and Spark Connect. Queries are rendered by sqlglot in the
Spark dialect and evaluated with `SparkSession.sql`, the input frames passed as
arguments (Spark binds them as temporary views for the analysis only).

`materialize` cuts lineage with an eager `localCheckpoint`: a frame built from a
checkpoint has a one-node plan, so plans do not grow with the number of rounds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from dsql.errors import ExecutionError, SchemaError
from dsql.runtime.kernel.base import Frame, Kernel

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_IDENT = re.compile(r"`?\b(__in_[A-Za-z0-9_]+)\b`?")


class SparkKernel(Kernel):
    """Evaluates runtime steps as Spark DataFrames (see module docstring)."""

    dialect = "spark"
    name = "spark"

    def __init__(self, spark: SparkSession | None = None) -> None:
        self._spark = spark

    @property
    def spark(self) -> SparkSession:
        """The Spark session, started on first use."""
        if self._spark is None:
            from dsql.runtime.spark_session import get_spark

            self._spark = get_spark()
        return self._spark

    def from_arrow(self, table: pa.Table) -> DataFrame:
        if table.num_rows == 0:
            from pyspark.sql.pandas.types import from_arrow_schema

            return self.spark.createDataFrame([], from_arrow_schema(table.schema))
        return self.spark.createDataFrame(table)

    def to_arrow(self, frame: DataFrame) -> pa.Table:
        try:
            return frame.toArrow()
        except Exception as error:  # noqa: BLE001 - engine errors become DsqlErrors
            raise _engine_error(error) from error

    def query(self, select: exp.Query, inputs: Mapping[str, Frame]) -> DataFrame:
        renamed = {name: f"__in_{name.strip('_')}" for name in inputs}
        def rename(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Table) and node.name in renamed:
                table = exp.to_table(renamed[node.name])
                alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(node.name))
                table.set("alias", alias)
                return table
            return node

        tree = select.transform(rename)
        text = self.sql(tree).replace("{", "{{").replace("}", "}}")
        text = _IDENT.sub(lambda m: "{" + m.group(1) + "}", text)
        frames = {renamed[name]: frame for name, frame in inputs.items()}
        try:
            return self.spark.sql(text, **frames)
        except Exception as error:  # noqa: BLE001
            raise _engine_error(error, text) from error

    def materialize(self, frame: DataFrame) -> DataFrame:
        try:
            return frame.localCheckpoint(eager=True)
        except Exception as error:  # noqa: BLE001
            raise _engine_error(error) from error

    def release(self, frame: DataFrame) -> None:
        frame.unpersist(blocking=False)

    def count(self, frame: DataFrame) -> int:
        try:
            return frame.count()
        except Exception as error:  # noqa: BLE001
            raise _engine_error(error) from error

    def nbytes(self, frame: DataFrame) -> int:
        try:
            stats = frame._jdf.queryExecution().optimizedPlan().stats()  # noqa: SLF001
            return int(str(stats.sizeInBytes()))
        except Exception:  # noqa: BLE001 - sizes are estimates; Spark Connect has no _jdf
            return 0

    def schema(self, frame: DataFrame) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(frame.schema)

    def union(self, frames: Sequence[Frame]) -> DataFrame:
        result = frames[0]
        for frame in frames[1:]:
            result = result.unionByName(frame)
        return result

    def fanout(self, branches: Sequence[Sequence[tuple[str, exp.Expression]]]) -> exp.Expression:
        structs = [
            exp.Struct(expressions=[exp.alias_(e, name, quoted=True) for name, e in branch])
            for branch in branches
        ]
        return exp.Anonymous(this="INLINE", expressions=[exp.Array(expressions=structs)])


def _engine_error(error: Exception, text: str | None = None) -> Exception:
    """Turn a Spark exception into a DsqlError with the first line of Spark's message."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
    kind = type(error).__name__
    if "UNRESOLVED_COLUMN" in message or "cannot be resolved" in message:
        return SchemaError(f"unknown column: {message}", hint="check the column names")
    return ExecutionError(f"Spark failed ({kind}): {message}", statement=text)
