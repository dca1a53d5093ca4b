"""File sources Spark reads (`dsql.spark_file_source`): files arriving in batches become
inserts a view over the source follows, equal to its query recomputed after each poll;
a malformed record is reported with its file, or quarantined; a restart under a data
directory loads each staged run once; a `file://` URI outside the sandbox is refused."""

from __future__ import annotations

import json
import os
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

import dsql
from dsql.errors import DsqlError

VIEW = "SELECT k, sum(x) AS total, count(*) AS n FROM s GROUP BY k"


def _connect(spark: Any, inbox: Path, data: Path | None = None) -> Any:
    return dsql.connect(spark=spark, allowed_paths=[inbox], data_dir=data)


def _arrive(directory: Path, name: str, text: str) -> None:
    """A file put in place whole: written under a hidden name, then renamed."""
    (directory / f".{name}.part").write_text(text)
    os.replace(directory / f".{name}.part", directory / name)


def _rows(con: Any, sql: str) -> list[tuple[Any, ...]]:
    return sorted(con.execute(sql).fetchall())


def _check(con: Any) -> list[tuple[Any, ...]]:
    """The view's rows, asserted equal to its query over the source now."""
    got = _rows(con, "SELECT * FROM v")
    assert got == _rows(con, VIEW)
    return got


def test_files_arriving_in_batches_feed_a_view(spark: Any, tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    con = _connect(spark, inbox)
    con.execute(
        f"CREATE SOURCE s (k text, x int) FROM FILES 'file://{inbox}' WITH (FORMAT = 'csv')"
    )
    con.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW}")
    _arrive(inbox, "f1.csv", "k,x\na,1\nb,2\n")
    assert _check(con) == [("a", 1, 1), ("b", 2, 1)]
    _arrive(inbox, "f2.csv", "k,x\na,10\n")
    _arrive(inbox, "f3.csv", "k,x\nc,5\nc,\n")
    assert _check(con) == [("a", 11, 2), ("b", 2, 1), ("c", 5, 2)]
    assert _check(con) == [("a", 11, 2), ("b", 2, 1), ("c", 5, 2)]  # nothing new: no run
    (name, directory, fmt, runs, rows, error), *_ = con.execute("SHOW SOURCES").fetchall()
    assert (name, directory, fmt, runs, rows, error) == ("s", f"file://{inbox}", "csv", 2, 5, None)
    con.close()


def test_json_and_parquet_sources(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    inbox_j, inbox_p = tmp_path / "j", tmp_path / "p"
    inbox_j.mkdir()
    inbox_p.mkdir()
    con = dsql.connect(spark=spark, allowed_paths=[tmp_path])
    con.execute(
        f"CREATE SOURCE j (k text, x bigint) FROM FILES 'file://{inbox_j}' WITH (FORMAT = 'json')"
    )
    con.execute(
        f"CREATE SOURCE p (k text, x bigint) FROM FILES 'file://{inbox_p}' "
        "WITH (FORMAT = 'parquet')"
    )
    con.execute(
        "CREATE MATERIALIZED VIEW both_ AS SELECT k, sum(x) AS t "
        "FROM (SELECT * FROM j UNION ALL SELECT * FROM p) u GROUP BY k"
    )
    lines = [json.dumps({"k": "a", "x": 1}), json.dumps({"k": "b", "x": 2})]
    _arrive(inbox_j, "1.json", "\n".join(lines) + "\n")
    pq.write_table(pa.table({"k": ["a", "c"], "x": [100, 7]}), inbox_p / ".1.parquet")
    os.replace(inbox_p / ".1.parquet", inbox_p / "1.parquet")
    assert _rows(con, "SELECT * FROM both_") == [("a", 101), ("b", 2), ("c", 7)]
    con.close()


@pytest.mark.parametrize("on_error", ["report", "quarantine"])
def test_a_malformed_record(spark: Any, tmp_path: Path, on_error: str) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    con = _connect(spark, inbox)
    con.execute(
        f"CREATE SOURCE s (k text, x int) FROM FILES 'file://{inbox}' "
        f"WITH (FORMAT = 'csv', ON ERROR = '{on_error}')"
    )
    con.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW}")
    _arrive(inbox, "good.csv", "k,x\na,1\n")
    _arrive(inbox, "bad.csv", "k,x\na,10\nb,oops\n")
    with pytest.warns(Warning) if on_error == "report" else nullcontext():
        got = _check(con)
    errors = [r[-1] for r in con.execute("SHOW SOURCES").fetchall()]
    if on_error == "report":  # the bad file contributes no row; its error names it
        assert got == [("a", 1, 1)]
        assert errors[0] is not None and f"{inbox}/bad.csv" in errors[0] and "b,oops" in errors[0]
    else:  # its good record is read; the bad one is quarantined with its file
        assert got == [("a", 11, 2)]
        assert _rows(con, "SELECT file, line, record FROM s_quarantine") == [
            (f"file://{inbox}/bad.csv", None, "b,oops")
        ]
    _arrive(inbox, "later.csv", "k,x\nb,3\n")  # the source goes on
    assert dict((k, t) for k, t, _ in _check(con))["b"] == 3
    con.close()


def test_a_restart_under_a_data_dir_loads_each_run_once(spark: Any, tmp_path: Path) -> None:
    data, inbox = tmp_path / "data", tmp_path / "in"
    inbox.mkdir()
    con = _connect(spark, inbox, data)
    con.execute(
        f"CREATE SOURCE s (k text, x int) FROM FILES 'file://{inbox}' WITH (FORMAT = 'csv')"
    )
    con.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW}")
    _arrive(inbox, "f1.csv", "k,x\na,1\nb,2\n")
    _check(con)
    _arrive(inbox, "f2.csv", "k,x\na,10\n")
    want = _check(con)
    assert want == [("a", 11, 2), ("b", 2, 1)]
    # A run Spark staged and committed that no poll took (the process died between):
    source = con.session.sources.spark.by_name["s"]
    from dsql.spark_file_source import stage

    _arrive(inbox, "f3.csv", "k,x\nc,5\n")
    assert stage(con.session.sources.spark.spark, source, source.taken + 1) == 1
    con.close()

    con = _connect(spark, inbox, data)
    # Recovered from the logged runs; the first statement's poll takes the untaken one.
    assert _check(con) == [*want, ("c", 5, 1)]
    _arrive(inbox, "f4.csv", "k,x\nc,1\n")
    assert _check(con) == [("a", 11, 2), ("b", 2, 1), ("c", 6, 2)]  # f3 once, f4 once
    con.close()

    con = _connect(spark, inbox, data)
    assert _check(con) == [("a", 11, 2), ("b", 2, 1), ("c", 6, 2)]
    con.close()


def test_a_file_uri_outside_the_sandbox_is_refused(spark: Any, tmp_path: Path) -> None:
    inbox, elsewhere = tmp_path / "in", tmp_path / "elsewhere"
    inbox.mkdir()
    elsewhere.mkdir()
    con = _connect(spark, inbox)
    for location in (f"file://{elsewhere}", f"file://{inbox}/../elsewhere", "hdfs://nn/x"):
        with pytest.raises(DsqlError, match="outside the paths SQL may reach"):
            con.execute(f"CREATE SOURCE s (k text) FROM FILES '{location}' WITH (FORMAT = 'csv')")
    assert "s" not in con.session.relations
    con.close()


def test_a_local_session_refuses_a_hadoop_uri(tmp_path: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    with pytest.raises(DsqlError, match="read by Spark"):
        con.execute(
            f"CREATE SOURCE s (k text) FROM FILES 'file://{tmp_path}' WITH (FORMAT = 'csv')"
        )
    con.close()


def test_a_plain_path_under_state_uri_recovers_from_a_checkpoint(
    spark: Any, tmp_path: Path
) -> None:
    """On the Spark kernel with a state_uri a plain directory is read by Spark too; a
    checkpoint names the source's last run, and recovery loads the runs it names."""
    data, inbox, state = tmp_path / "data", tmp_path / "in", tmp_path / "state"
    inbox.mkdir()
    state.mkdir()

    def connect() -> Any:
        return dsql.connect(
            spark=spark,
            allowed_paths=[inbox],
            data_dir=data,
            checkpoint_bytes=1,
            state_uri=str(state),
        )

    con = connect()
    con.execute(
        f"CREATE SOURCE s (k text, x int) FROM FILES '{inbox}' "
        "WITH (FORMAT = 'csv', ON ERROR = 'quarantine')"
    )
    con.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW}")
    assert "s" in con.session.sources.spark
    _arrive(inbox, "a.csv", "k,x\na,1\nb,oops\n")
    _check(con)
    _arrive(inbox, "b.csv", "k,x\na,5\n")
    want = _check(con)
    quarantined = _rows(con, "SELECT file, record FROM s_quarantine")
    assert want == [("a", 6, 2)] and quarantined == [(f"file://{inbox}/a.csv", "b,oops")]
    con.close()

    con = connect()
    assert _check(con) == want
    assert _rows(con, "SELECT file, record FROM s_quarantine") == quarantined
    _arrive(inbox, "c.csv", "k,x\nc,5\n")
    assert _check(con) == [("a", 6, 2), ("c", 5, 1)]
    con.close()
