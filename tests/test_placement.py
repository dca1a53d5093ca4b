"""Automatic placement: results never depend on where a relation lives.

Under `kernel="auto"` a relation lives in-process (DuckDB over Arrow) while it has at
most `placement_threshold` rows and on Spark once it outgrows that. With a tiny
threshold, traces move to Spark (and back) in the middle of a history, and steps mix
Arrow and Spark inputs; the views must still agree with DuckDB evaluating each query
from scratch, and the change streams must be the same as on the forced kernels.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsql
from dsql.cli import main as cli_main
from dsql.runtime.kernel import driver
from dsql.runtime.kernel.auto import AutoKernel

pytestmark = pytest.mark.skipif(
    os.environ.get("DSQL_TEST_KERNEL") == "spark", reason="placement needs the auto kernel"
)

TABLES = {"r": "a int, b int", "e": "src int, dst int"}

VIEWS = {
    "v_join": "SELECT r.a, r.b, e.dst FROM r JOIN e ON r.a = e.src",
    "v_agg": "SELECT a, count(*) AS n, sum(b) AS total, min(b) AS lo FROM r GROUP BY a",
    "v_agg_join": (
        "SELECT e.dst, count(*) AS n, sum(r.b) AS total FROM r JOIN e ON r.a = e.src GROUP BY e.dst"
    ),
    "v_distinct": "SELECT DISTINCT b FROM r WHERE b IS NOT NULL",
    "v_series": "SELECT r.a, g.i FROM r, generate_series(1, r.b) AS g(i) WHERE r.b < 3",
    "v_reach": (
        "WITH RECURSIVE reach(n) AS (SELECT 0 UNION SELECT e.dst FROM reach JOIN e "
        "ON reach.n = e.src) SELECT n FROM reach"
    ),
}

small = st.integers(0, 4)
op = st.one_of(
    st.tuples(st.just("insert"), st.just("r"), st.lists(st.tuples(small, small), max_size=4)),
    st.tuples(st.just("insert"), st.just("e"), st.lists(st.tuples(small, small), max_size=3)),
    st.tuples(st.just("delete"), st.sampled_from(["r", "e"]), small),
    st.tuples(st.just("update"), st.just("r"), small),
    st.tuples(st.just("advance"), st.just(""), st.integers(1, 3)),
)


def _statement(kind: str, table: str, arg: object) -> str | None:
    if kind == "insert":
        rows = ", ".join(f"({x}, {y})" for x, y in arg)  # type: ignore[attr-defined]
        return f"INSERT INTO {table} VALUES {rows}" if rows else None
    if kind == "delete":
        first = "a" if table == "r" else "src"
        return f"DELETE FROM {table} WHERE {first} = {arg}"
    if kind == "update":
        return f"UPDATE r SET b = b + 1 WHERE a = {arg}"
    return None


def _norm(rows: list[tuple]) -> Counter:
    return Counter(tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows)


def _setup(con, oracle, views=tuple(VIEWS)) -> None:  # noqa: ANN001 - dsql, duckdb connections
    for name, cols in TABLES.items():
        con.execute(f"CREATE TABLE {name} ({cols})")
        oracle.execute(f"CREATE TABLE {name} ({cols})")
    for c in (con, oracle):
        c.execute("INSERT INTO r VALUES (0, 1), (1, 2), (2, NULL)")
        c.execute("INSERT INTO e VALUES (0, 1), (1, 2)")
    for name in views:
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS[name]}")


def _agree(con, oracle, step: str) -> None:  # noqa: ANN001
    for name, query in VIEWS.items():
        got = _norm(con.execute(f"SELECT * FROM {name}").fetchall())
        want = _norm(oracle.execute(query).fetchall())
        assert got == want, f"{name} after {step}: dsql {got} != duckdb {want}"


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=4), st.sampled_from([2, 5]))
def test_views_agree_with_duckdb_while_traces_move(spark, history, threshold) -> None:  # noqa: ANN001
    con = dsql.connect(kernel="auto", placement_threshold=threshold)
    oracle = duckdb.connect()
    _setup(con, oracle)
    _agree(con, oracle, "creation")
    now = 0
    for kind, table, arg in history:
        sql = _statement(kind, table, arg)
        if sql is None:
            now += int(arg) if kind == "advance" else 0  # type: ignore[call-overload]
            con.execute(f"ADVANCE TO {now}")
            continue
        con.execute(sql)
        oracle.execute(sql)
        _agree(con, oracle, sql)


HISTORY = [
    "INSERT INTO r VALUES (0, 3), (1, 1), (3, 2), (4, 4)",
    "INSERT INTO e VALUES (2, 3), (3, 4), (4, 0)",
    "DELETE FROM e WHERE src = 1",
    "UPDATE r SET b = b + 1 WHERE a < 2",
]
#: The views whose change streams are compared (Spark-forced runs are slow: a few).
STREAMED = ("v_agg_join", "v_series", "v_reach")


def _changes(con, views: tuple[str, ...] = STREAMED) -> list[tuple]:  # noqa: ANN001
    """The history run under `con`, with every view's SUBSCRIBE changes, in order."""
    _setup(con, duckdb.connect(), views)
    cursors = {name: con.execute(f"SUBSCRIBE {name}") for name in views}
    out: list[tuple] = []
    for i, sql in enumerate(HISTORY, start=1):
        con.execute(sql)
        con.execute(f"ADVANCE TO {i}")
        for name, cur in cursors.items():
            out.extend((name, *row) for row in sorted(cur.fetchall(), key=repr))
    return out


def test_change_streams_are_the_same_on_every_kernel(spark) -> None:  # noqa: ANN001
    assert _changes(dsql.connect(kernel="local")) == _changes(
        dsql.connect(kernel="auto", placement_threshold=3)
    )
    flat = STREAMED[:2]  # recursion on Spark costs a job per round: left to the auto run
    local = _changes(dsql.connect(kernel="local"), flat)
    assert local == _changes(dsql.connect(kernel="spark"), flat)


def _where(con, name: str) -> str:  # noqa: ANN001
    rows = con.execute("SHOW ARRANGEMENTS").fetchall()
    return {r[0]: r[2] for r in rows}[name]


def test_a_trace_moves_to_spark_when_it_grows_and_back_when_it_shrinks(spark) -> None:  # noqa: ANN001
    con = dsql.connect(kernel="auto", placement_threshold=50)
    con.execute("CREATE TABLE t (k int, v int)")
    con.execute("CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n FROM t GROUP BY k")
    con.execute("INSERT INTO t VALUES (1, 1), (2, 2)")
    con.execute("ADVANCE TO 1")
    assert _where(con, "t") == "local" and _where(con, "per_k") == "local"
    con.execute("INSERT INTO t SELECT i % 5, i FROM generate_series(1, 200) AS g(i)")
    con.execute("ADVANCE TO 2")
    con.execute("INSERT INTO t VALUES (9, 9)")  # a small batch, merged into the big one
    con.execute("ADVANCE TO 3")
    assert _where(con, "t") == "spark"
    assert _where(con, "per_k") == "local"  # six groups: small, it stays in-process
    assert con.execute("SELECT n FROM per_k WHERE k = 0").fetchall() == [(40,)]
    kernel = con.session.worker.kernel
    assert isinstance(kernel, AutoKernel) and kernel.started
    plan = con.execute("EXPLAIN PHYSICAL PLAN FOR SELECT k FROM t WHERE v > 1").fetchall()[0][0]
    assert "Arrange(keys=_c0, _c1)  [spark]" in plan
    con.execute("DELETE FROM t WHERE v > 3")
    for time in range(4, 12):  # compaction folds the deletions in as readers advance
        con.execute(f"ADVANCE TO {time}")
        con.execute("SELECT count(*) FROM t").fetchall()
    assert sorted(con.execute("SELECT * FROM per_k").fetchall()) == [(1, 2), (2, 2), (3, 1)]
    assert _where(con, "t") == "local"


def test_a_step_mixing_placements_runs_on_spark(spark) -> None:  # noqa: ANN001
    kernel = AutoKernel(threshold=2)
    big = kernel.materialize(kernel.from_arrow(pa.table({"k": [1, 2, 3], "v": [1, 2, 3]})))
    little = kernel.materialize(kernel.from_arrow(pa.table({"k": [2], "w": [20]})))
    assert (kernel.placement(big.frame), kernel.placement(little.frame)) == ("spark", "local")
    from sqlglot import parse_one

    query = parse_one("SELECT b.k, b.v, l.w FROM b JOIN l ON b.k = l.k")
    joined = kernel.query(query, {"b": big.frame, "l": little.frame})
    assert kernel.placement(joined) == "spark"
    assert kernel.to_arrow(joined).to_pylist() == [{"k": 2, "v": 2, "w": 20}]
    stored = kernel.materialize(joined)
    assert kernel.placement(stored.frame) == "local" and stored.rows == 1


def _spark_jobs(spark) -> int:  # noqa: ANN001
    """The jobs the session has run so far (its DAG scheduler's counter)."""
    return spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs()  # noqa: SLF001


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(map(tuple, (r.values() for r in table.to_pylist())), key=repr)


@pytest.mark.parametrize("driver_reads", [True, False], ids=["pyarrow", "spark-job"])
def test_a_spark_batch_is_probed_by_a_key_filtered_read_into_the_driver(  # noqa: ANN001
    spark, driver_reads
) -> None:
    kernel = AutoKernel(threshold=2)
    kernel.remote.driver_reads = driver_reads
    table = pa.table(
        {
            "k": pa.array([3, 1, None, 2, 1, 5, None], pa.int64()),
            "s": ["a", "b", "c", "d", "b", "f", None],
            "v": [1, 2, 3, 4, 5, 6, 7],
        }
    )
    stored = kernel.materialize(kernel.from_arrow(table), ["k"])
    assert kernel.placement(stored.frame) == "spark"
    jobs = _spark_jobs(spark)
    for probe in ([1], [None], [1, None, 7, 1], [], [4]):
        keys = pa.table({"key": pa.array(probe, pa.int64())})
        got = kernel.rows_with_keys(stored.frame, ["k"], keys, ["key"])
        assert kernel.placement(got) == "local", probe
        assert _rows(got) == _rows(driver.rows_with_keys(table, ["k"], keys, ["key"])), probe
    assert (_spark_jobs(spark) == jobs) is driver_reads  # pyarrow read the files, or Spark
    text = kernel.materialize(kernel.from_arrow(table), ["s"])
    probe = pa.table({"s": ["b", None, "zz"]})
    got = kernel.rows_with_keys(text.frame, ["s"], probe)
    assert _rows(got) == _rows(driver.rows_with_keys(table, ["s"], probe))
    # Several keys: the read filters on the first, the driver on all of them.
    both = kernel.materialize(kernel.from_arrow(table), ["k", "s"])
    probe = pa.table({"k": pa.array([1, 3], pa.int64()), "s": ["b", "zz"]})
    got = kernel.rows_with_keys(both.frame, ["k", "s"], probe)
    assert _rows(got) == [(1, "b", 2), (1, "b", 5)]
    # More keys than literals: a semi-join with the shipped keys (and the NULL keys).
    spread = pa.table({"key": pa.array([*range(kernel.remote.literal_keys), 5, None], pa.int64())})
    got = kernel.rows_with_keys(stored.frame, ["k"], spread, ["key"])
    assert _rows(got) == _rows(driver.rows_with_keys(table, ["k"], spread, ["key"]))
    # More than `fetch_keys` keys: declined, so the caller joins on Spark.
    many = pa.table({"key": pa.array(range(kernel.fetch_keys + 1), pa.int64())})
    assert kernel.rows_with_keys(stored.frame, ["k"], many, ["key"]) is None


def test_a_big_batch_in_the_driver_is_stored_for_spark_with_every_value_intact(spark) -> None:  # noqa: ANN001
    import datetime
    import decimal

    kernel = AutoKernel(threshold=2)
    table = pa.table(
        {
            "k": pa.array([3, 1, None, 2], pa.int32()),
            "s": ["c", None, "a", "b"],
            "x": [1.5, None, -0.0, 2.25],
            "m": pa.array([decimal.Decimal("1.10"), None, decimal.Decimal("-3.00"), None]),
            "d": [datetime.date(2020, 1, 1), None, datetime.date(1999, 12, 31), None],
            "b": [True, None, False, True],
        }
    )
    stamped = table.append_column(
        "ts", pa.array([datetime.datetime(2020, 1, 1, 12, 30)] * 4, pa.timestamp("us"))
    )
    for rows in (table, stamped):  # written by the driver; by Spark (timestamps)
        stored = kernel.materialize(rows, ["k"])
        assert kernel.placement(stored.frame) == "spark" and stored.rows == 4
        back = kernel.to_arrow(stored.frame)
        assert back.schema.names == rows.schema.names and back.schema.types == rows.schema.types
        assert _rows(back) == _rows(rows)


def test_a_small_change_against_arrangements_on_spark_runs_no_spark_job(spark) -> None:  # noqa: ANN001
    con = dsql.connect(kernel="auto", placement_threshold=50)
    con.execute("CREATE TABLE t (k int, v int)")
    con.execute("CREATE TABLE u (k int, w int)")
    con.execute("CREATE MATERIALIZED VIEW j AS SELECT t.k, t.v, u.w FROM t JOIN u ON t.k = u.k")
    con.execute("INSERT INTO t SELECT i, i FROM generate_series(1, 400) AS g(i)")
    con.execute("INSERT INTO u SELECT i, 2 * i FROM generate_series(1, 400) AS g(i)")
    con.execute("ADVANCE TO 1")
    assert _where(con, "t") == "spark" and _where(con, "u") == "spark"
    jobs = _spark_jobs(spark)
    con.execute("INSERT INTO u VALUES (7, 70)")
    con.execute("INSERT INTO t VALUES (9, 90)")
    con.execute("ADVANCE TO 2")
    assert _spark_jobs(spark) == jobs  # the probes read the stored batches' files
    got = con.execute("SELECT * FROM j WHERE k IN (7, 9)").fetchall()
    assert sorted(got) == [(7, 7, 14), (7, 7, 70), (9, 9, 18), (9, 90, 18)]


def test_cli_auto_kernel_prints_what_local_prints(tmp_path, capsys, spark) -> None:  # noqa: ANN001
    script = tmp_path / "s.sql"
    script.write_text(
        "CREATE TABLE t (a int);\n"
        "CREATE MATERIALIZED VIEW c AS SELECT a % 3 AS m, count(*) AS n FROM t GROUP BY a % 3;\n"
        "INSERT INTO t SELECT * FROM generate_series(1, 30);\n"
        "SELECT * FROM c ORDER BY m;\n"
    )
    outputs = []
    for options in (["--kernel", "local"], ["--kernel", "auto", "--placement-threshold", "4"]):
        assert cli_main(["run", str(script), *options]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and "10" in outputs[0]


def test_spark_does_not_start_for_small_work_under_auto() -> None:
    # In a fresh interpreter: this test process may already run the shared session.
    program = textwrap.dedent(
        """
        import sys
        import dsql
        con = dsql.connect()
        con.execute("CREATE TABLE t (a int, b int)")
        con.execute("CREATE MATERIALIZED VIEW s AS SELECT a, sum(b) AS b FROM t GROUP BY a")
        con.execute("INSERT INTO t VALUES (1, 2), (1, 3), (2, 5)")
        print(con.execute("SELECT * FROM s ORDER BY a").fetchall())
        print(con.session.kernel_name, con.session.worker.kernel.started)
        print("pyspark" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(pytest.importorskip("pathlib").Path.home())},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[(1, 5), (2, 5)]", "auto False", "False"]
    assert "starting Spark" not in done.stderr


def test_a_negative_threshold_is_refused() -> None:
    with pytest.raises(dsql.errors.DsqlError, match="threshold"):
        dsql.connect(kernel="auto", placement_threshold=-1)


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.integers(-(2**40), 2**40)), max_size=30),
    wide=st.booleans(),
)
def test_a_stored_batch_is_sorted_as_arrow_sorts_it(keys: list[int | None], wide: bool) -> None:
    # Batches the driver writes for Spark are sorted by their key: one integer key
    # without NULLs by `driver.sort_order`, stably, as Arrow's sort_by would.
    from dsql.runtime.kernel.spark import _sorted_by

    values = keys if wide else [None if k is None else k % 5 for k in keys]
    table = pa.table({"k": pa.array(values, pa.int64()), "i": list(range(len(values)))})
    for by in (["k"], ["k", "i"]):
        assert _sorted_by(table, by).equals(table.sort_by([(c, "ascending") for c in by]))
    no_nulls = table.filter(pc.is_valid(table["k"]))
    assert _sorted_by(no_nulls, ["k"]).equals(no_nulls.sort_by([("k", "ascending")]))


def test_a_stored_batch_renamed_is_written_in_the_order_it_has(spark, tmp_path) -> None:  # noqa: ANN001
    # A view re-arranging a big table by its first column: the stored batch is sorted by
    # (a, b), the renamed rows by `y` (its `a`) already, so the write needs no range
    # bounds, shuffle or sort: the job of writing the rows as they are, and no other (the
    # read back is given the schema the rows were written with).
    from sqlglot import parse_one

    from dsql.runtime.kernel.spark import SparkKernel

    kernel = SparkKernel(spark, small_rows=2)
    table = pa.table({"a": pa.array([3, 1, 2, 1, None, 2], pa.int64()), "b": [1, 2, 3, 4, 5, 6]})
    stored = kernel.materialize(kernel.from_arrow(table), ["a", "b"])
    query = parse_one("SELECT b AS x, a AS y, 7 AS z FROM (SELECT a, b FROM t) s WHERE b > 1")
    renamed = kernel.query(query, {"t": stored.frame})
    expected = _rows(kernel.to_arrow(renamed))
    jobs = _spark_jobs(spark)
    renamed.write.parquet(str(tmp_path / "plain"))
    plain = _spark_jobs(spark) - jobs
    jobs = _spark_jobs(spark)
    again = kernel.materialize(renamed, ["y"], 5)
    assert _spark_jobs(spark) - jobs == plain
    assert again.rows == 5 and _rows(kernel.to_arrow(again.frame)) == expected
    for part in pq.ParquetDataset(kernel._paths[id(again.frame)]).fragments:  # noqa: SLF001
        keys = [k for k in part.to_table()["y"].to_pylist() if k is not None]
        assert keys == sorted(keys)
    # Of unknown size: cached to read its head, and no longer once written.
    unknown = kernel.query(query, {"t": stored.frame})
    assert kernel.materialize(unknown, ["y"]).rows == 5 and not unknown.is_cached
    # Keyed by a column the stored order does not lead with: partitioned and sorted.
    for keys in (["x"], ["z"], ["y", "z"]):
        jobs = _spark_jobs(spark)
        fresh = kernel.query(query, {"t": stored.frame})
        other = kernel.materialize(fresh, keys, 5)
        assert _spark_jobs(spark) - jobs > plain, keys
        assert not fresh.is_cached
    # A frame its caller cached stays cached: the kernel uncaches only what it cached.
    for estimate in (None, 5):
        theirs = kernel.query(query, {"t": stored.frame}).persist()
        assert kernel.materialize(theirs, ["y"], estimate).rows == 5 and theirs.is_cached
        theirs.unpersist()
        assert _rows(kernel.to_arrow(other.frame)) == expected


def test_a_batch_the_driver_stores_is_sorted_by_its_first_key(spark) -> None:  # noqa: ANN001
    # Probes prune row groups on the first key alone, so that is the order written.
    kernel = AutoKernel(threshold=2)
    table = pa.table({"k": pa.array([3, 1, 2, 1, 2], pa.int64()), "v": [9, 8, 7, 6, 5]})
    stored = kernel.materialize(table, ["k", "v"])
    assert kernel.placement(stored.frame) == "spark"
    path = kernel.remote._paths[id(stored.frame)]  # noqa: SLF001
    written = pq.read_table(path)
    assert _rows(written) == _rows(table)
    for part in pq.ParquetDataset(path).fragments:  # a file per bucket, each in key order
        keys = part.to_table()["k"].to_pylist()
        assert keys == sorted(keys)
    assert kernel.remote._order[stored.frame] == ("k",)  # noqa: SLF001


@pytest.mark.parametrize(
    ("sql", "passed"),
    [
        ("SELECT b AS x, a, 2 AS t FROM s", (("x", "b"), ("a", "a"))),
        ("SELECT y AS z FROM (SELECT a AS y FROM s WHERE b > 1) q WHERE y < 3", (("z", "a"),)),
        ("SELECT a, explode(c) AS e FROM s", (("a", "a"),)),
        ("SELECT a, SUM(b) FROM s GROUP BY a", None),
        ("SELECT SUM(b) FROM s", None),
        ("SELECT DISTINCT a FROM s", None),
        ("SELECT a FROM s ORDER BY b", None),
        ("SELECT a FROM s LIMIT 3", None),
        ("SELECT * FROM s", None),
        ("SELECT s.a FROM s JOIN u ON s.a = u.a", None),
        ("SELECT a, ROW_NUMBER() OVER (ORDER BY b) FROM s", None),
        ("SELECT a FROM s UNION ALL SELECT a FROM u", None),
        ("SELECT a FROM s WHERE a IN (SELECT a FROM u)", None),
        ("SELECT a FROM (SELECT a FROM s GROUP BY a) q", None),
    ],
)
def test_which_queries_keep_their_input_rows_order(sql: str, passed: object) -> None:
    # Only what keeps each partition's row order may carry a stored batch's key order.
    from sqlglot import parse_one

    from dsql.runtime.kernel.spark import _order_map

    assert _order_map(parse_one(sql, read="spark")) == passed
