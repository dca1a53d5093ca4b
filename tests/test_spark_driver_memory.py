"""Results Spark holds reach the client in bounded pieces: the driver never holds them whole.

A SELECT of any shape whose result is on Spark (joins, aggregates, ORDER BY, LIMIT and
OFFSET, AS OF) is finished by Spark's executors and read back a file at a time
(`dsql.exports.select`), so the cursor holds at most `fetch_rows` rows beyond what the
caller fetched. Each shape must equal DuckDB's answer over the same rows, in order where
the query orders; and in a fresh process, fetching results many times the size of
`fetch_rows` must leave the peak of pyarrow's memory pool (where every Arrow table the
driver builds lives) far below the result's size. Run under `flock /tmp/dsql-heavy.lock`:
they start Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import dsql

ROWS = 3_000
#: The rows per piece these tests ask for: the data is many pieces long.
FETCH = 100

T = pa.table(
    {
        "k": pa.array(range(ROWS), pa.int64()),
        "g": pa.array([None if i % 41 == 0 else i % 7 for i in range(ROWS)], pa.int64()),
        "s": pa.array([None if i % 11 == 0 else f"s{i % 13}" for i in range(ROWS)]),
        "x": pa.array([None if i % 23 == 0 else i / 8 for i in range(ROWS)], pa.float64()),
    }
)
W = pa.table({"g": pa.array(range(7), pa.int64()), "label": [f"L{i}" for i in range(7)]})

#: The view the reads also use: a join on Spark.
VIEW = "SELECT t.k, t.s, w.label FROM t JOIN w ON t.g = w.g"

#: Reads of each shape, and whether their order is part of the answer. Each ORDER BY is a
#: total order (ties would let PostgreSQL, DuckDB and Spark pick different rows).
SHAPES = {
    "join": ("SELECT t.k, t.x, w.label FROM t JOIN w ON t.g = w.g", False),
    "join_ordered": (
        "SELECT t.k, w.label FROM t JOIN w ON t.g = w.g ORDER BY w.label DESC, t.k",
        True,
    ),
    "order_nulls": ("SELECT k, s FROM t ORDER BY s NULLS FIRST, k DESC", True),
    "order_limit_offset": (
        "SELECT k, x FROM t ORDER BY x DESC NULLS LAST, k LIMIT 250 OFFSET 7",
        True,
    ),
    "aggregate": ("SELECT g, count(*) AS n, sum(x) AS total FROM t GROUP BY g ORDER BY g", True),
    "view_ordered": ("SELECT k, label, k AS again FROM v ORDER BY k", True),
    "view_filter": ("SELECT k, s FROM v WHERE k % 3 = 0", False),
    "distinct": ("SELECT DISTINCT s, g FROM t", False),
}

#: Changes between creating the views and reading them, so reads see retractions too.
CHANGES = [
    "DELETE FROM t WHERE k % 5 = 0",
    "UPDATE t SET s = 'changed' WHERE k % 7 = 1",
    "INSERT INTO t VALUES (100001, 3, 'new', 1.5), (100002, NULL, NULL, NULL)",
]


def connect(spark: Any, kernel: str) -> dsql.Connection:
    """A session holding `t` and `w` on Spark (under "auto", at a threshold of 2 rows), a
    materialized view over their join, the changes applied, and `fetch_rows` = `FETCH`."""
    if kernel == "auto":
        con = dsql.connect(spark=spark, kernel="auto", placement_threshold=2)
    else:
        con = dsql.connect(spark=spark, kernel="spark")
        # Spark collects a result of at most `small_rows` into the driver by design (as
        # "auto" keeps one under its threshold): scaled down as the threshold is, so the
        # results here are streamed.
        con.session.worker.kernel.small_rows = 2
    con.create_table("t", T)
    con.create_table("w", W)
    con.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW}")
    con.execute("ADVANCE BY 1000")
    for change in CHANGES:
        con.execute(change)
    con.execute(f"SET fetch_rows = {FETCH}")
    return con


def duckdb_rows(query: str, changes: list[str] = CHANGES) -> list[tuple[Any, ...]]:
    """`query` by DuckDB over the same tables after `changes`."""
    db = duckdb.connect()
    db.register("t_in", T)
    db.register("w", W)
    db.execute("CREATE TABLE t AS SELECT * FROM t_in")
    for change in changes:
        db.execute(change)
    db.execute(f"CREATE VIEW v AS {VIEW}")
    return [tuple(r) for r in db.execute(query).fetchall()]


def fetched(cursor: Any) -> list[tuple[Any, ...]]:
    """Every row of a cursor's result, fetched in small pieces; the rows the cursor holds
    never exceed a piece plus one `fetch_rows` batch."""
    rows: list[tuple[Any, ...]] = []
    while part := cursor.fetchmany(60):
        held = 0 if cursor._table is None else cursor._table.num_rows  # noqa: SLF001
        assert held <= 60 + FETCH, held
        rows.extend(part)
    return rows


def same(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], ordered: bool) -> bool:
    if ordered:
        return got == want
    return sorted(got, key=repr) == sorted(want, key=repr)


@pytest.fixture(scope="module", params=["auto", "spark"])
def session(request: Any, spark: Any) -> Any:
    con = connect(spark, request.param)
    yield con
    con.close()


@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_streams_in_bounded_pieces_and_equals_duckdb(session: Any, shape: str) -> None:
    query, ordered = SHAPES[shape]
    cursor = session.execute(query)
    got = fetched(cursor)
    want = duckdb_rows(query)
    assert same(got, want, ordered), (shape, got[:5], want[:5])
    assert session.session.exports == []  # the executors' copy is deleted once read


def test_limit_without_order_reads_only_k_rows(session: Any) -> None:
    cursor = session.execute("SELECT t.k, w.label FROM t JOIN w ON t.g = w.g LIMIT 37")
    got = fetched(cursor)
    everything = set(duckdb_rows(VIEW.replace("t.s, ", "")))
    assert len(got) == 37 and set(got) <= everything


def test_as_of_a_past_time_streams_and_equals_duckdb(session: Any) -> None:
    """AS OF a time before a delete: the rows as they were, by the dataflow path."""
    session.execute("CREATE TABLE h (k bigint, g bigint) WITH (RETAIN HISTORY FOR '1h')")
    session.execute("INSERT INTO h SELECT k, g FROM t")
    then = session.session.clock.now_ms()
    session.execute("ADVANCE BY 1000")
    session.execute("DELETE FROM h WHERE k % 2 = 0")
    session.execute("ADVANCE BY 1000")
    query = "SELECT h.k, w.label FROM h JOIN w ON h.g = w.g ORDER BY h.k DESC"
    got = fetched(session.execute(f"{query} AS OF {then}"))
    assert got == duckdb_rows(query.replace("h.", "t.").replace(" h ", " t "))
    now = fetched(session.execute(query))
    assert now == [r for r in got if r[0] % 2]


def test_a_result_abandoned_unread_leaves_no_copy(session: Any) -> None:
    cursor = session.cursor()
    cursor.execute("SELECT * FROM v ORDER BY k")
    assert len(cursor.fetchmany(5)) == 5
    cursor.execute("SELECT 1")  # the first result's copy is deleted unread
    assert session.session.exports == []


def test_dsql_run_prints_every_row_of_a_streamed_result(session: Any) -> None:
    import io

    from dsql.cli import Script
    from dsql.printer import Printer

    out, err = io.StringIO(), io.StringIO()
    code = Script(session, Printer(out, err, rich=False)).run("SELECT k FROM v ORDER BY k;")
    want = duckdb_rows("SELECT k FROM v ORDER BY k")
    assert code == 0, err.getvalue()
    assert f"({len(want)} rows)" in out.getvalue()


def test_fetch_rows_is_a_setting_with_a_checked_value(session: Any) -> None:
    with pytest.raises(dsql.errors.TypeMismatchError, match="fetch_rows"):
        session.execute("SET fetch_rows = 0")
    session.execute("SET fetch_rows = DEFAULT")
    assert session.session.fetch_rows == 100_000
    session.execute(f"SET fetch_rows = {FETCH}")


#: A fresh process: a table of `rows` rows made by Spark's executors (`spark.range`),
#: loaded, a join view over it, then each shape fetched through the cursor (and the view
#: through `con.table(v).batches()`). Prints, per shape, its rows and the peak of
#: pyarrow's memory pool so far, the peak before the reads, and the data's bytes.
MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import pyarrow as pa
    import dsql
    from dsql.runtime.spark_session import get_spark

    rows, fetch = int(sys.argv[1]), int(sys.argv[2])
    spark = get_spark()
    big = spark.range(0, rows).selectExpr(
        "id AS k", "id % 1000 AS g", "concat('row-', sha1(cast(id AS string))) AS s"
    )
    con = dsql.connect(spark=spark, kernel="auto", placement_threshold=1000)
    con.create_table("t", big)
    con.create_table("w", spark.range(0, 1000).selectExpr("id AS g", "id * 2 AS w"))
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT t.k, t.s, w.w FROM t JOIN w ON t.g = w.g")
    con.execute("DELETE FROM t WHERE k % 1000 = 0")
    con.execute(f"SET fetch_rows = {fetch}")
    queries = {
        "join": "SELECT t.k, t.s, w.w FROM t JOIN w ON t.g = w.g",
        "order": "SELECT k, s FROM v ORDER BY s DESC",
        "limit": "SELECT k, s FROM v ORDER BY k LIMIT 100 OFFSET 5",
        "as_of": "SELECT k, s FROM t ORDER BY k AS OF 0",  # now: nothing advanced the clock
        "filter": "SELECT k, s FROM v WHERE k % 2 = 1",
    }
    baseline = pa.default_memory_pool().max_memory()  # the load's, the views' and the delete's
    out = {"data_bytes": rows * (8 + 8 + 44), "baseline": baseline, "shapes": {}}
    for shape, query in queries.items():
        cursor = con.execute(query)
        n, previous, in_order = 0, None, True
        while part := cursor.fetchmany(1000):
            n += len(part)
            key = [r[1] if shape == "order" else r[0] for r in part]
            if "ORDER BY" in query:
                in_order &= (previous is None or previous >= key[0] if shape == "order"
                             else previous is None or previous <= key[0])
                in_order &= key == sorted(key, reverse=shape == "order")
                previous = key[-1]
        out["shapes"][shape] = {
            "rows": n, "ordered": in_order, "pool_peak": pa.default_memory_pool().max_memory()
        }
    n = sum(b.num_rows for b in con.table("v").batches())
    out["shapes"]["batches"] = {
        "rows": n, "ordered": True, "pool_peak": pa.default_memory_pool().max_memory()
    }
    con.close()
    print(json.dumps(out))
    """
)


def test_fetching_results_many_times_fetch_rows_keeps_the_pool_small(tmp_path: Path) -> None:
    """300,000 rows (about 18MB as Arrow) fetched 2,000 rows at a time, shape by shape:
    the pool's peak grows by less than a quarter of the data over its peak before the
    reads (were any result collected whole, it would grow by at least its size)."""
    rows = 300_000
    script = tmp_path / "memory.py"
    script.write_text(MEMORY_SCRIPT)
    env = {**os.environ, "DSQL_STATE_URI": ""}
    env.pop("DSQL_STATE_URI")
    done = subprocess.run(
        [sys.executable, str(script), str(rows), "2000"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    kept = rows - rows // 1000
    expected_rows = {
        "join": kept,
        "order": kept,
        "limit": 100,
        "as_of": kept,
        "filter": rows // 2,  # the deleted keys (multiples of 1000) are even
        "batches": kept,
    }
    for shape, figures in measured["shapes"].items():
        assert figures["rows"] == expected_rows[shape], (shape, figures)
        assert figures["ordered"], shape
        growth = figures["pool_peak"] - measured["baseline"]
        assert growth < measured["data_bytes"] / 4, (shape, measured)


def test_a_2m_row_view_runs_with_a_512m_driver_and_a_small_arrow_pool() -> None:
    """`benchmarks/driver_memory.py` scaled down: 2,000,000 rows loaded by the executors,
    a join+aggregate view and a filter view (about 1,000,000 rows) over them, two rounds
    of inserts and deletes under SUBSCRIBE, the filter view fetched through batches, all
    with `spark.driver.memory=512m` and a placement threshold of 100,000 rows. Both views
    must equal Spark SQL's from scratch, and no Arrow table the driver builds may come
    near the data's size (48MB as Arrow): a batch is at most 100,000 rows."""
    bench = Path(__file__).resolve().parent.parent / "benchmarks" / "driver_memory.py"
    command = [
        sys.executable, str(bench), "--rows", "2000000", "--driver-memory", "512m",
        "--rounds", "2", "--threshold", "100000", "--fetch-rows", "50000", "--json",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["check"] == "OK", figures
    assert figures["fetched_rows"] == 1_000_000 and figures["largest_batch"] <= 50_000
    assert figures["arrow_pool_peak_mb"] < 12, figures
