"""Stored state on a real cluster: no read of it is ever shorter than what was stored.

The `cluster` fixture (tests/cluster.py) runs a master and two one-core workers, each
with a private /tmp, and a driver process of its own; the functions prefixed
`_on_cluster_` run in that driver process and raise AssertionError when an answer is
wrong. Two storage roots: the fixture's, which every process sees, and one under the
driver's /tmp, which no worker sees. On the first, every answer equals DuckDB's; on the
second, dsql either answers as DuckDB does or refuses with a DsqlError, never with
fewer rows. Tables are shipped to Spark both ways a table gets there: inserted through
SQL, and loaded from Arrow by `create_table`, under the auto kernel with a low
placement threshold.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from cluster import agree_with_duckdb, cluster_session

import dsql
from dsql import errors

#: Rows above which the auto kernel places a relation on Spark.
THRESHOLD = 5_000

#: Views over the loaded table `big` (k, g, v) and the inserted table `ins` (k, w).
VIEWS = {
    "per_group": "SELECT g, count(*) AS n, sum(v) AS s FROM big GROUP BY g",
    "joined": "SELECT big.g, count(*) AS n, sum(ins.w) AS w FROM big JOIN ins ON big.k = ins.k "
    "GROUP BY big.g",
    "odd": "SELECT k, w FROM ins WHERE w % 2 = 1",
}

#: Changes, one logical time each: inserts, deletes and updates of many rows of both.
HISTORY = (
    "INSERT INTO ins SELECT k, k * 3 FROM generate_series(20000, 29999) AS s(k)",
    "DELETE FROM big WHERE k % 5 = 0",
    "UPDATE ins SET w = w + 1 WHERE k < 15000",
    "INSERT INTO big SELECT k, k % 7, 1 FROM generate_series(100000, 109999) AS s(k)",
    "DELETE FROM ins WHERE k >= 25000",
    "UPDATE big SET v = v * 2 WHERE g = 3",
)


def _big(rows: int) -> pa.Table:
    k = pa.array(range(rows), pa.int64())
    return pa.table({"k": k, "g": pa.array([i % 7 for i in range(rows)], pa.int64()), "v": k})


def _history(con: dsql.Connection, rows: int) -> None:
    """The scenario: tables shipped both ways, views and a SUBSCRIBE, each answer
    against DuckDB after each change."""
    import duckdb

    mirror = duckdb.connect()
    big = _big(rows)
    con.create_table("big", big)
    mirror.execute("CREATE TABLE big AS SELECT * FROM big")
    for db in (con, mirror):
        db.execute("CREATE TABLE ins (k bigint, w bigint)")
        db.execute("INSERT INTO ins SELECT k, k * 3 FROM generate_series(0, 19999) AS s(k)")
    for name, query in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    con.execute("ADVANCE TO 1")
    agree_with_duckdb(con, mirror, VIEWS, HISTORY, "joined")
    for table in ("big", "ins"):
        got = con.execute(f"SELECT count(*), sum(k) FROM {table}").fetchall()
        assert got == mirror.execute(f"SELECT count(*), sum(k) FROM {table}").fetchall()


def _on_cluster_history(master: str, state_uri: str, rows: int, shared: bool) -> str:
    """The scenario under the shared root, or under one only the driver sees; what
    happened: "agreed", or the DsqlError's message."""
    root = state_uri if shared else Path(tempfile.mkdtemp(prefix="dsql-driver-only-")).as_uri()
    con = dsql.connect(
        spark=cluster_session(master),
        kernel="auto",
        placement_threshold=THRESHOLD,
        state_uri=root,
    )
    try:
        _history(con, rows)
    except errors.DsqlError as error:
        return error.message
    finally:
        con.close()
    return "agreed"


@pytest.mark.parametrize("rows", [10_000, 100_000])
def test_tables_shipped_to_spark_agree_with_duckdb_on_a_shared_root(cluster, rows) -> None:  # noqa: ANN001
    assert cluster.run(_on_cluster_history, rows, True) == "agreed"


def test_a_root_only_the_driver_sees_is_refused_never_read_short(cluster) -> None:  # noqa: ANN001
    outcome = cluster.run(_on_cluster_history, 20_000, False)
    assert outcome == "agreed" or "rows" in outcome, outcome


# --- files deleted behind dsql's back ----------------------------------------------------------


def _on_cluster_lost_files(master: str, state_uri: str) -> list[str]:
    """A table stored on Spark whose files are deleted behind dsql's back: each read of
    it is a DsqlError naming the lost rows, never an empty or shorter table."""
    from dsql.runtime.kernel.spark import SparkKernel

    messages = []
    for kernel in ("auto",):  # past the threshold: stored as files on the cluster
        con = dsql.connect(
            spark=cluster_session(master),
            kernel=kernel,
            placement_threshold=THRESHOLD,
            state_uri=state_uri,
        )
        con.create_table("t", _big(30_000))
        con.execute("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM t")
        assert con.execute("SELECT count(*) FROM t").fetchall() == [(30_000,)]
        spark = con.session.worker.kernel
        spark = getattr(spark, "remote", spark)
        assert isinstance(spark, SparkKernel)
        assert spark._paths, "the table is not stored as files"  # noqa: SLF001
        directory = spark.state.directory(spark.spark).removeprefix("file://")
        shutil.rmtree(directory)
        # Reads of the rows (a count is the batch's remembered one, and stays right).
        for read in ("SELECT sum(v) FROM t", "SELECT * FROM t WHERE k = 7"):
            try:
                got = con.execute(read).fetchall()
            except errors.DsqlError as error:
                messages.append(error.message)
            else:
                raise AssertionError(f"{read} over lost files answered {got[:3]}")
        con.close()
    return messages


def test_a_stored_batch_whose_files_were_deleted_raises(cluster) -> None:  # noqa: ANN001
    messages = cluster.run(_on_cluster_lost_files)
    assert messages
    for message in messages:  # Spark's read, or the driver's from the footers
        assert "stored state is gone" in message or "reads as" in message, message


# --- a text file with a value its column's type cannot hold -----------------------------------


def _text_files(folder: Path, bad: str) -> dict[str, Path]:
    """A CSV and a JSON-lines file of 200k rows (k, v) whose integer column `v` holds
    `bad` in a row past pyarrow's first block, which typed the column."""
    rows = 200_000
    files = {"csv": folder / "bad.csv", "json": folder / "bad.json"}
    with open(files["csv"], "w") as out:
        out.write("k,v\n")
        out.writelines(f"{i},{bad if i == 150_000 else i}\n" for i in range(rows))
    with open(files["json"], "w") as out:
        out.writelines(f'{{"k": {i}, "v": {bad if i == 150_000 else i}}}\n' for i in range(rows))
    return files


@pytest.mark.parametrize("kernel", ["local", "spark"])
def test_a_value_that_does_not_fit_its_column_refuses_the_load(kernel, tmp_path, request) -> None:  # noqa: ANN001
    spark = request.getfixturevalue("spark") if kernel == "spark" else None
    for path in _text_files(tmp_path, '"x"').values():
        con = dsql.connect(spark=spark, kernel=kernel)
        with pytest.raises(errors.SourceError) as raised:
            con.create_table("t", path)
        assert str(path) in raised.value.message, raised.value.message
        assert "t" not in con.session.relations  # not created: COPY refuses it whole
        con.execute("CREATE TABLE t (k bigint)")  # and the name is free
        con.close()
