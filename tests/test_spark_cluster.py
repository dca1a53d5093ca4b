"""dsql on a real Spark standalone cluster whose workers do not see the driver's /tmp.

The `cluster` fixture (tests/cluster.py) runs a master and two one-core workers, each
worker with a private /tmp, and a driver process of its own; the functions prefixed
`_on_cluster_` run in that driver process (`Cluster.run`) and raise AssertionError
when an answer is wrong. State lives under a directory every process sees (the
fixture's `state_uri`). Checked: a loaded table of 100k rows, views over it and a
SUBSCRIBE under inserts, deletes and updates, all against DuckDB; the refusal of a
non-local master without a storage root; a write whose files the driver never sees
raising instead of reading as empty; and a few of the PostgreSQL differential
histories (tests/test_pg_differential.py) with every step on Spark.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from cluster import agree_with_duckdb, cluster_session

import dsql
from dsql import errors

#: The loaded table's rows: enough that every kernel stores it as files on the cluster.
ROWS = 100_000

#: Views over the loaded table `t` (k, g, v) and the small table `d` (g, name).
VIEWS = {
    "by_group": "SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g",
    "evens": "SELECT k, v FROM t WHERE v % 2 = 0",
    "named": "SELECT d.name, t.k FROM t JOIN d ON t.g = d.g WHERE t.k % 1000 = 7",
    "total": "SELECT count(*) AS n, sum(v) AS s FROM t",
}

#: Changes, one logical time each: small ones, and deletes and updates of many rows.
HISTORY = (
    "INSERT INTO t VALUES (100001, 1, 5), (100002, 2, 6), (7, 7, 7)",
    "DELETE FROM t WHERE k % 7 = 0",
    "UPDATE t SET v = v + 1 WHERE k < 3000",
    "DELETE FROM t WHERE k >= 50000",
    "INSERT INTO d VALUES (3, 'three again')",
)


def _loaded() -> pa.Table:
    k = pa.array(range(ROWS), pa.int64())
    return pa.table({"k": k, "g": pa.array([i % 10 for i in range(ROWS)], pa.int64()), "v": k})


def _bag(rows: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(int(x) if isinstance(x, int) else x for x in row) for row in rows)


def _on_cluster_views_and_subscribe(master: str, state_uri: str, kernel: str) -> dict[str, int]:
    """The data-loss scenario: views and a SUBSCRIBE over a loaded table, each answer
    against DuckDB after each change; returns the stored batches' count."""
    import duckdb

    session = cluster_session(master)
    con = dsql.connect(
        spark=session, kernel=kernel, placement_threshold=10_000, state_uri=state_uri
    )
    mirror = duckdb.connect()
    loaded = _loaded()
    con.create_table("t", loaded)
    mirror.execute("CREATE TABLE t AS SELECT * FROM loaded")
    for db in (con, mirror):
        db.execute("CREATE TABLE d (g bigint, name text)")
        db.execute("INSERT INTO d VALUES (1, 'one'), (3, 'three'), (7, 'seven')")
    for name, query in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    con.execute("ADVANCE TO 1")
    agree_with_duckdb(con, mirror, VIEWS, HISTORY, "by_group")
    kernel_ = con.session.worker.kernel
    remote = getattr(kernel_, "remote", kernel_)
    stored = len(remote._paths)  # noqa: SLF001
    sees = remote.driver_reads
    con.close()
    return {"stored": stored, "driver_reads": int(bool(sees))}


@pytest.mark.parametrize("kernel", ["spark", "auto"])
def test_a_loaded_table_its_views_and_subscribe_agree_with_duckdb(cluster, kernel) -> None:  # noqa: ANN001
    found = cluster.run(_on_cluster_views_and_subscribe, kernel)
    assert found["driver_reads"] == 1  # the shared root passed the marker check


def _on_cluster_refusals(master: str, state_uri: str) -> None:
    """An adopted cluster session without a root is refused; `$DSQL_STATE_URI` is one."""
    session = cluster_session(master)
    os.environ.pop("DSQL_STATE_URI", None)
    try:
        dsql.connect(spark=session)
    except errors.EnvironmentSetupError as error:
        assert "state_uri" in (error.hint or ""), error.hint
    else:
        raise AssertionError("a cluster session without state_uri was accepted")
    os.environ["DSQL_STATE_URI"] = state_uri
    try:
        con = dsql.connect(spark=session, kernel="spark")
        state = con.session.worker.kernel.state
        assert state.requested == state_uri, state.requested
        con.close()
    finally:
        os.environ.pop("DSQL_STATE_URI")


def _on_cluster_small_sum(master: str, state_uri: str) -> list[tuple[Any, ...]]:
    """The sum of a two-row table inserted under kernel="spark" on the cluster."""
    con = dsql.connect(spark=cluster_session(master), kernel="spark", state_uri=state_uri)
    con.execute("CREATE TABLE x (a int)")
    con.execute("INSERT INTO x VALUES (1), (2)")
    total = con.execute("SELECT sum(a) FROM x").fetchall()
    con.close()
    return total


def test_a_small_table_sums_on_the_cluster(cluster) -> None:  # noqa: ANN001
    assert cluster.run(_on_cluster_small_sum) == [(3,)]


def test_a_cluster_without_a_storage_root_is_refused(cluster, monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.delenv("DSQL_STATE_URI", raising=False)
    for kernel in ("spark", "auto"):
        with pytest.raises(errors.EnvironmentSetupError) as raised:
            dsql.connect(kernel=kernel, master=cluster.master_url)
        assert cluster.master_url in raised.value.message
        assert "state_uri=" in (raised.value.hint or "")
    from dsql.cli import main

    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write("SELECT 1;\n")
        script.flush()
        assert main(["run", "--master", cluster.master_url, script.name]) == 1
    assert "--state-uri" in capsys.readouterr().err
    cluster.run(_on_cluster_refusals)


def _on_cluster_lost_write(master: str, state_uri: str) -> None:
    """A root under the driver's /tmp, which no worker sees: the marker check says the
    driver does not see the executors' files, and a batch the executors store raises,
    not reads as 0 (a table shipped through SQL or create_table under such a root:
    tests/test_spark_store_more.py)."""
    from dsql.runtime.kernel.spark import SparkKernel

    session = cluster_session(master)
    driver_only = "file://" + tempfile.mkdtemp(prefix="dsql-driver-only-")
    kernel = SparkKernel(session, small_rows=10, state_uri=driver_only)
    assert kernel._driver_sees_files() is False  # noqa: SLF001
    frame = session.range(5000).selectExpr("id AS k", "id % 3 AS v")
    for estimate in (5000, None):
        try:
            kernel.materialize(frame, ["k"], estimate)
        except errors.ExecutionError as error:
            assert "5000 rows" in error.message and "0 are there" in error.message, error
        else:
            raise AssertionError("a write no node kept was taken as a batch")


def test_a_write_no_node_kept_raises_instead_of_reading_empty(cluster) -> None:  # noqa: ANN001
    cluster.run(_on_cluster_lost_write)


def _on_cluster_pg_histories(master: str, state_uri: str, pg: Any) -> None:
    """Some of test_pg_differential's views and history, every step on the cluster."""
    from test_pg_differential import PLACEMENT_HISTORY, _fresh, _run_history, _views_named

    session = cluster_session(master)
    pgdb = pg.database("cluster_differential")
    views = _views_named("left_using", "not_in_flag", "grouped", "top2")
    for kernel, options in (("spark", {}), ("auto", {"placement_threshold": 3})):
        con = _fresh(pgdb, kernel=kernel, spark=session, state_uri=state_uri, **options)
        _run_history(con, pgdb, views, PLACEMENT_HISTORY)
        con.close()
    pgdb.close()


def test_differential_views_agree_with_postgres_on_the_cluster(cluster, pg) -> None:  # noqa: ANN001
    cluster.run(_on_cluster_pg_histories, pg)
