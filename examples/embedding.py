"""dsql embedded in Python: PEP 249, SUBSCRIBE as an iterator, and Spark interop.

    python examples/embedding.py             # ends with the Spark part (starts Spark)
    python examples/embedding.py --no-spark  # in-process only

The session runs in-process (DuckDB over Arrow) under the manual clock: time moves
only by ADVANCE, so every run prints the same thing. Spark starts only for the part
that hands DataFrames in and out.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import dsql


def pep249(con: Any) -> None:
    """Cursors, qmark parameters, executemany, description, fetch*."""
    cur = con.cursor()
    cur.execute("CREATE TABLE readings (sensor text, value int)")
    cur.executemany("INSERT INTO readings VALUES (?, ?)", [("a", 3), ("b", 5), ("a", 4)])
    print("inserted", cur.rowcount)
    cur.execute(
        "SELECT sensor, sum(value) AS total FROM readings WHERE value > ?"
        " GROUP BY sensor ORDER BY sensor",
        (2,),
    )
    print([d[0] for d in cur.description], cur.fetchone(), cur.fetchall())
    try:
        cur.execute("SELECT nope FROM readings")
    except dsql.ProgrammingError as error:  # PEP 249's name for a refused statement
        print("refused:", error.message)


def subscriptions(con: Any) -> None:
    """A materialized view, its changes as Arrow batches, and a SUBSCRIBE cursor."""
    con.execute(
        "CREATE MATERIALIZED VIEW totals AS"
        " SELECT sensor, sum(value) AS total FROM readings GROUP BY sensor"
    )
    updates = con.subscribe("totals")  # an iterator of Arrow batches
    print("snapshot", next(updates).to_pylist())
    cur = con.execute("SUBSCRIBE (SELECT count(*) AS n FROM readings WHERE value > 2)")
    print("cursor snapshot", cur.fetchall(timeout=0.5))  # never blocks past the timeout
    con.execute("ADVANCE TO 1000")
    con.execute("INSERT INTO readings VALUES ('b', 1)")
    con.execute("DELETE FROM readings WHERE sensor = 'a' AND value = 3")
    con.execute("ADVANCE TO 2000")
    print("changes", next(updates).to_pylist())
    print("cursor changes", cur.fetchall(timeout=0.5))
    updates.close()
    cur.close()


def loading(con: Any) -> None:
    """Tables from Arrow and Parquet; a plan without running it."""
    con.create_table("sensors", pa.table({"sensor": ["a", "b"], "site": ["roof", "cellar"]}))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "limits.parquet"
        pq.write_table(pa.table({"site": ["roof", "cellar"], "max_total": [10, 4]}), path)
        con.create_table("limits", str(path))
    query = """SELECT s.site, t.total FROM totals t JOIN sensors s ON s.sensor = t.sensor
               JOIN limits l ON l.site = s.site WHERE t.total > l.max_total"""
    print(dsql.compile(query, con).explain())
    print("over the limit", con.execute(query).fetchall())
    print(con.table("totals").df().sort_values("sensor").to_string(index=False))


def spark_interop(con: Any, spark: Any) -> None:
    """A table from a Spark DataFrame, and a view back out as one."""
    frame = spark.createDataFrame([("c", 9), ("c", 2)], "sensor string, value int")
    con.create_table("more", frame)
    con.execute("INSERT INTO readings SELECT sensor, value FROM more")
    out = con.table("totals").to_spark(spark)
    print(sorted(tuple(r) for r in out.collect()))


def main(spark: Any = None, use_spark: bool = True) -> None:
    con = dsql.connect()  # in-process kernel, manual clock
    pep249(con)
    subscriptions(con)
    loading(con)
    if use_spark:
        if spark is None:
            from dsql.runtime.spark_session import get_spark

            spark = get_spark()
        spark_interop(con, spark)
    con.close()


if __name__ == "__main__":
    main(use_spark="--no-spark" not in sys.argv[1:])
