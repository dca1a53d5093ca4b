"""Data in and out of a session: tables from Spark, files and Arrow; views to Spark.

`read_source(source)` turns what a user has into an Arrow table in the driver: a Spark
DataFrame (collected with `toArrow`), a `pyarrow.Table`, a pandas DataFrame, or a path
to a Parquet file or directory, or a CSV or JSON-lines file (by extension, or
`format=`). `create_table(session, name, source)` makes a dsql table of it, with
columns typed from the Arrow schema; where the table will live on Spark, the source is
read by Spark's executors instead (`dsql.loads`). `to_spark(table, session)` hands
Arrow rows to Spark (a relation on Spark goes out without them: `dsql.exports`). Spark
starts only when a step needs it (a DataFrame going out, or `kernel="spark"`), and
says so.

>>> import pyarrow as pa
>>> read_source(pa.table({"a": [1, 2]})).num_rows
2
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from dsql import loads
from dsql.errors import SourceError, TypeMismatchError, UnsupportedError
from dsql.planner import types
from dsql.planner.plan import Column
from dsql.runtime.kernel.base import Capability


def read_source(source: Any, format: str | None = None) -> pa.Table:  # noqa: A002
    """The rows of `source` as an Arrow table in the driver (see module docstring for
    what it may be)."""
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    if is_spark_frame(source):
        return spark_rows(source)
    if type(source).__module__.startswith("pandas"):
        return pa.Table.from_pandas(source, preserve_index=False)
    if isinstance(source, str | Path):
        return loads.read_in_driver(loads.file_source(source, format))
    raise TypeMismatchError(
        f"cannot load a table from a {type(source).__name__}",
        hint="pass a Spark DataFrame, a pyarrow.Table, a pandas DataFrame, or a path "
        "to a Parquet, CSV or JSON file",
    )


def is_spark_frame(source: Any) -> bool:
    """Whether `source` is a Spark DataFrame (classic or Spark Connect)."""
    return type(source).__name__ == "DataFrame" and hasattr(source, "toArrow")


def spark_rows(frame: Any) -> pa.Table:
    """A Spark DataFrame's rows collected into the driver (a source kept there)."""
    try:
        return frame.toArrow()
    except Exception as error:  # noqa: BLE001 - Spark's errors reach the user as SourceErrors
        raise SourceError(f"cannot read the source: {str(error).strip().splitlines()[0]}") from None


def columns_of(schema: pa.Schema) -> tuple[Column, ...]:
    """The SQL columns of an Arrow schema; a TypeMismatchError names any column without one."""
    out = []
    for field in schema:
        sql_type = types.from_arrow(field.type)
        if sql_type.this == types.build("unknown").this or pa.types.is_null(field.type):
            raise TypeMismatchError(
                f"column '{field.name}' has Arrow type {field.type}, which has no SQL type here",
                hint="cast it first (to a number, text, date, timestamp or a list of those)",
            )
        out.append(Column(field.name, sql_type))
    return tuple(out)


def create_table(
    session: Any, name: str, source: Any, format: str | None = None, replace: bool = False
) -> int:
    """Create table `name` holding the rows of `source`; returns the row count (-1 for a
    text file Spark read, whose rows are not counted: `loads.place`).

    The table is an ordinary dsql table: later INSERT/UPDATE/DELETE change it, and views
    over it are maintained. With `replace`, an existing table of that name is dropped first.
    """
    placed = loads.place(session, source, format)
    if isinstance(placed, pa.Table):
        columns = columns_of(placed.schema)
    else:
        columns = columns_of(spark_schema(placed.frame))
    if replace and name in session.relations:
        session.drop(name, cascade=False, kind="table")
    session.create_table(name, columns)
    try:
        if isinstance(placed, pa.Table):
            count = session.write(name, placed, 1)
        else:  # read, stamped and stored by Spark's executors
            count = session.load(name, placed.frame, placed.rows)
            count = count if placed.exact else -1
        session.close_time()
    except Exception as error:
        session.drop(name, cascade=False, kind="table")
        said = loads.refused(error, source) if isinstance(placed, loads.SparkLoad) else None
        if said is not None:  # the executors failed to read the source
            raise said from error
        raise
    return count


def spark_schema(frame: Any) -> pa.Schema:
    """The Arrow schema of a Spark DataFrame's rows, as `toArrow` would give them (no
    job); a TypeMismatchError for a Spark type without one."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(frame.schema, timezone="UTC")
    except (TypeError, ValueError, NotImplementedError) as error:
        raise TypeMismatchError(
            f"a column of the DataFrame has no SQL type here: {error}",
            hint="cast it first (to a number, text, date, timestamp or a list of those)",
        ) from None


def spark_of(session: Any) -> Any:
    """The SparkSession to hand rows to: the kernel's own (under "auto", started as its
    steps would start it, with the connection's master and settings), else the process's
    (started here if none runs yet, with a note on stderr)."""
    kernel = session.worker.kernel
    if kernel.can(Capability.SPARK_SESSION):
        return kernel.spark
    from dsql.runtime.spark_session import SparkStart

    start = SparkStart()
    action = start.notice()
    if action is not None:
        print(f"dsql: {action} for a DataFrame...", file=sys.stderr, flush=True)
    return start()


def to_spark(table: pa.Table, session: Any, spark: Any = None) -> Any:
    """Rows as a Spark DataFrame (Arrow-backed; a table with no columns is refused)."""
    if table.num_columns == 0:
        raise TypeMismatchError("a result with no columns cannot become a Spark DataFrame")
    if any(pa.types.is_interval(f.type) for f in table.schema):
        raise UnsupportedError(
            "a result with interval columns cannot become a Spark DataFrame",
            hint="cast the interval to text, or take its parts with extract(...)",
        )
    spark = spark if spark is not None else spark_of(session)
    if table.num_rows == 0:
        from pyspark.sql.pandas.types import from_arrow_schema

        return spark.createDataFrame([], from_arrow_schema(table.schema))
    return spark.createDataFrame(table)


__all__ = ["columns_of", "create_table", "read_source", "spark_of", "to_spark"]
