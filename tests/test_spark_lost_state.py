"""Stored Spark state that vanishes under a session: the statement that meets it fails
with `StateLostError` naming the table or view, is undone, and the rest of the session
goes on (`dsql.lost_state`).

Each case stores a table `t` and a view `s` over it on Spark (kernel "spark" with a low
`small_rows`, or "auto" with a low placement threshold), a small table `u` and a view
`su` over it beside them, then deletes files of `t`'s or `s`'s stored batches.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import dsql
from dsql.errors import StateLostError

ROWS = 5_000


def _connect(spark, kernel: str) -> dsql.Connection:  # noqa: ANN001
    """A connection whose table `t` (ROWS rows) and view `s` over it are stored on Spark,
    and whose table `u` and view `su` are small."""
    if kernel == "auto":
        con = dsql.connect(spark=spark, kernel="auto", placement_threshold=500)
    else:
        con = dsql.connect(spark=spark, kernel="spark")
        con.session.worker.kernel.small_rows = 100
    k = pa.array(range(ROWS), pa.int64())
    con.create_table("t", pa.table({"k": k, "v": k}))
    con.execute("CREATE TABLE u (a int)")
    con.execute("INSERT INTO u VALUES (1), (2)")
    con.execute("CREATE MATERIALIZED VIEW s AS SELECT k % 10 AS g, sum(v) AS n FROM t GROUP BY 1")
    con.execute("CREATE MATERIALIZED VIEW su AS SELECT sum(a) AS n FROM u")
    return con


def _stored_paths(con: dsql.Connection, name: str) -> list[str]:
    """The local directories of the batches Spark stores for relation `name`."""
    kernel = con.session.worker.kernel
    kernel = getattr(kernel, "remote", kernel)
    owning = con.session.lost_state._owning  # noqa: SLF001
    owners = kernel._owners  # noqa: SLF001
    paths = [p for p, node in owners.items() if owning(node) == name]
    return [p.removeprefix("file://") for p in paths if kernel.owner_of(p) is not None]


def _raises_lost(con: dsql.Connection, statement: str, name: str) -> StateLostError:
    with pytest.raises(StateLostError) as caught:
        con.execute(statement).fetchall()
    error = caught.value
    assert error.relation == name, str(error)
    assert f"'{name}' is lost" in error.message, error.message
    assert "state_uri" in (error.hint or "") and "DROP" in (error.hint or ""), error.hint
    return error


def _others_work(con: dsql.Connection) -> None:
    """The small table and its view are untouched by the loss."""
    con.execute("INSERT INTO u VALUES (10)")
    assert con.execute("SELECT n FROM su").fetchall() == [(13,)]
    assert sorted(con.execute("SELECT a FROM u").fetchall()) == [(1,), (2,), (10,)]


@pytest.mark.parametrize("kernel", ["spark", "auto"])
def test_a_table_whose_stored_files_are_deleted_refuses_every_statement_over_it(
    spark,  # noqa: ANN001
    kernel: str,
) -> None:
    con = _connect(spark, kernel)
    paths = _stored_paths(con, "t")
    assert paths, "t is not stored on Spark"
    for path in paths:
        shutil.rmtree(path)
    _raises_lost(con, "SELECT sum(v) FROM t", "t")
    for statement in (
        "INSERT INTO t VALUES (1, 1)",
        "DELETE FROM t WHERE k = 3",
        "UPDATE t SET v = 0 WHERE k = 4",
        "SELECT * FROM t WHERE k = 7",
        "SELECT * FROM s",  # built on t
        "SUBSCRIBE t",
        "CREATE MATERIALIZED VIEW w AS SELECT count(*) FROM t",
    ):
        _raises_lost(con, statement, "t")
    assert con.session.healing.error("s") is None  # no view is in error for it
    _others_work(con)
    con.execute("DROP TABLE t CASCADE")
    con.execute("CREATE TABLE t (k bigint, v bigint)")
    con.execute("INSERT INTO t VALUES (1, 5)")
    assert con.execute("SELECT k, v FROM t").fetchall() == [(1, 5)]
    con.close()


@pytest.mark.parametrize("kernel", ["spark", "auto"])
def test_a_write_that_meets_a_views_lost_file_is_withdrawn(spark, kernel: str) -> None:  # noqa: ANN001
    con = _connect(spark, kernel)
    paths = _stored_paths(con, "s")
    assert paths, "s is not stored on Spark"
    files = [f for p in paths for f in Path(p).glob("*.parquet")]
    assert files
    for file in files:  # every data file; the folders stay
        file.unlink()
    error = _raises_lost(con, "INSERT INTO t VALUES (-1, 100)", "s")
    assert "materialized view 's'" in error.message
    # The write was withdrawn: t is as before it; the next write over t succeeds.
    assert con.execute("SELECT count(*), sum(v) FROM t").fetchall() == [
        (ROWS, ROWS * (ROWS - 1) // 2)
    ]
    con.execute("INSERT INTO t VALUES (-2, 7)")
    assert con.execute("SELECT count(*) FROM t WHERE k < 0").fetchall() == [(1,)]
    for statement in ("SELECT * FROM s", "SUBSCRIBE s"):
        _raises_lost(con, statement, "s")
    assert con.session.healing.error("s") is None
    _others_work(con)
    con.execute("DROP MATERIALIZED VIEW s")
    con.execute("CREATE MATERIALIZED VIEW s AS SELECT count(*) AS n FROM t")
    assert con.execute("SELECT n FROM s").fetchall() == [(ROWS + 1,)]
    con.close()
