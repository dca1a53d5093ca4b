"""Durable state (`dsql.durable`, `dsql.wal`): what a session logs to its data directory
comes back on the next connect, equal to what the session held; torn tails are dropped,
any other damage is refused; one process owns a directory; `connect` takes only its own
keywords."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import dsql
from dsql.errors import DsqlWarning, InterfaceError, OperationalError, SourceError, TimeError

#: Take a checkpoint after every statement (1 byte) or never (the log alone).
CHECKPOINTS = {"log": None, "checkpoint": 1}


def _connect(path: Path, checkpoint_bytes: int | None = None, **options: Any) -> Any:
    return dsql.connect(
        kernel="local", data_dir=str(path), checkpoint_bytes=checkpoint_bytes, **options
    )


def _snapshot(con: Any) -> dict[str, Any]:
    """Everything a recovered session must hold: the catalog as SHOW prints it, and the
    rows of every relation."""
    tables = [r[0] for r in con.execute("SHOW TABLES").fetchall()]
    views = [r[0] for r in con.execute("SHOW VIEWS").fetchall()]
    shown: dict[str, Any] = {"tables": tables, "views": views}
    shown["indexes"] = con.execute("SHOW INDEXES").fetchall()
    for name in tables:
        shown[f"create {name}"] = con.execute(f"SHOW CREATE TABLE {name}").fetchall()
        shown[f"columns {name}"] = con.execute(f"SHOW COLUMNS FROM {name}").fetchall()
    for name in views:
        shown[f"create {name}"] = con.execute(f"SHOW CREATE VIEW {name}").fetchall()
    for name in tables + views:
        shown[f"rows {name}"] = sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
    return shown


DDL = [
    "CREATE TABLE t (k int PRIMARY KEY, v text NOT NULL DEFAULT 'none', n numeric(6,2))",
    "CREATE TABLE h (a int) WITH (RETAIN HISTORY FOR '1h')",
    "INSERT INTO t (k, n) VALUES (1, 1.5), (2, 2.25), (3, NULL)",
    "INSERT INTO t VALUES (4, 'four', 4), (5, 'five', 5)",
    "INSERT INTO h VALUES (1), (1), (2)",
    "CREATE VIEW plain AS SELECT k, v FROM t WHERE k > 1",
    "CREATE MATERIALIZED VIEW agg AS SELECT v, count(*) AS c, sum(n) AS s FROM t GROUP BY v",
    "CREATE MATERIALIZED VIEW joined AS SELECT t.k, h.a FROM t JOIN h ON t.k = h.a",
    "CREATE INDEX ON t (v)",
    "CREATE INDEX named_idx ON h (a)",
    "CREATE INDEX plain_idx ON plain (k)",
    "CREATE TABLE copied AS SELECT k * 10 AS k10, v FROM t WHERE k < 4",
    "CREATE OR REPLACE VIEW plain2 AS SELECT k FROM t",
    "CREATE OR REPLACE MATERIALIZED VIEW agg2 AS SELECT count(*) AS c FROM h",
    "UPDATE t SET v = 'upd' WHERE k = 2",
    "DELETE FROM h WHERE a = 2",
    "CREATE TABLE gone (x int)",
    "CREATE MATERIALIZED VIEW gone_v AS SELECT x FROM gone",
    "DROP TABLE gone CASCADE",
    "CREATE TABLE later (x int)",
    "CREATE MATERIALIZED VIEW later_v AS SELECT count(*) AS c FROM later",
    "DROP VIEW later_v",
    "DROP INDEX named_idx",
    "DROP TABLE IF EXISTS nothing_here",
    "CREATE TABLE IF NOT EXISTS t (z int)",
    "INSERT INTO later VALUES (7)",
]


@pytest.mark.parametrize("mode", CHECKPOINTS)
def test_every_statement_kind_is_replayed(tmp_path: Path, mode: str) -> None:
    con = _connect(tmp_path, CHECKPOINTS[mode])
    for sql in DDL:
        con.execute(sql)
    con.create_table("loaded", pa.table({"a": [1, 2], "b": ["x", None]}))
    con.create_table("loaded", pa.table({"a": [3]}), replace=True)
    before = _snapshot(con)
    con.close()
    again = _connect(tmp_path, CHECKPOINTS[mode])
    assert _snapshot(again) == before
    # The recovered session goes on: views follow new writes, defaults still apply.
    again.execute("INSERT INTO t (k) VALUES (9)")
    assert ("none", 3, Decimal("1.50")) in again.execute("SELECT * FROM agg").fetchall()
    again.close()
    third = _connect(tmp_path)
    assert ("none", 3, Decimal("1.50")) in third.execute("SELECT * FROM agg").fetchall()
    third.close()


def test_checkpoint_replaces_the_log_behind_it(tmp_path: Path) -> None:
    con = _connect(tmp_path, checkpoint_bytes=2_000)
    con.execute("CREATE TABLE t (a int, s text)")
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT count(*) AS c, sum(a) AS s FROM t")
    for i in range(60):
        con.execute(f"INSERT INTO t VALUES ({i}, 'row {i}')")
    con.execute("DELETE FROM t WHERE a % 2 = 0")
    expected = con.execute("SELECT * FROM v").fetchall()
    con.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len([n for n in names if n.startswith("checkpoint-")]) == 1, names
    assert len([n for n in names if n.startswith("wal-")]) == 1, names
    assert any(p.suffix == ".parquet" for p in tmp_path.glob("checkpoint-*/*"))
    again = _connect(tmp_path)
    assert again.execute("SELECT * FROM v").fetchall() == expected == [(30, 900)]
    again.close()


def test_interval_table_checkpoints_as_arrow(tmp_path: Path) -> None:
    con = _connect(tmp_path, checkpoint_bytes=1)
    con.execute("CREATE TABLE i (d interval)")
    con.execute("INSERT INTO i VALUES ('1 year 2 days'), ('3 hours')")
    expected = sorted(con.execute("SELECT d::text FROM i").fetchall())
    con.close()
    assert list(tmp_path.glob("checkpoint-*/*.arrow"))
    again = _connect(tmp_path)
    assert sorted(again.execute("SELECT d::text FROM i").fetchall()) == expected
    again.close()


def test_a_transaction_is_kept_whole_or_not_at_all(tmp_path: Path) -> None:
    con = _connect(tmp_path)
    con.execute("CREATE TABLE t (a int)")
    con.execute("BEGIN")
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("INSERT INTO t VALUES (2)")
    con.execute("COMMIT")
    con.execute("BEGIN")
    con.execute("INSERT INTO t VALUES (3)")
    con.execute("DELETE FROM t WHERE a = 1")
    log = next(tmp_path.glob("wal-*.log"))
    size = log.stat().st_size
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(2,)]  # seen in the session
    con.close()  # the connection ends without COMMIT: the transaction is not kept
    assert log.stat().st_size == size
    again = _connect(tmp_path)
    assert sorted(again.execute("SELECT a FROM t").fetchall()) == [(1,), (2,)]
    # ROLLBACK is refused and the writes stay, in the session and in the log alike.
    again.execute("BEGIN")
    again.execute("INSERT INTO t VALUES (4)")
    with pytest.raises(dsql.NotSupportedError):
        again.execute("ROLLBACK")
    again.close()
    third = _connect(tmp_path)
    assert sorted(third.execute("SELECT a FROM t").fetchall()) == [(1,), (2,), (4,)]
    third.close()


def test_a_failed_statement_logs_nothing(tmp_path: Path) -> None:
    con = _connect(tmp_path)
    con.execute("CREATE TABLE t (a int NOT NULL)")
    log = next(tmp_path.glob("wal-*.log"))
    size = log.stat().st_size
    for bad in ("INSERT INTO t VALUES (NULL)", "CREATE VIEW t AS SELECT 1", "DROP TABLE nope"):
        with pytest.raises(dsql.Error):
            con.execute(bad)
    assert log.stat().st_size == size
    con.close()


def test_the_clock_resumes_past_every_logged_time(tmp_path: Path) -> None:
    con = _connect(tmp_path)
    con.execute("CREATE TABLE t (a int)")
    con.execute("ADVANCE TO 100")
    con.execute("INSERT INTO t VALUES (1)")
    con.close()
    again = _connect(tmp_path)
    assert again.execute("SELECT mz_now()").fetchall() == [(100,)]
    again.execute("ADVANCE TO 100")  # not backwards
    with pytest.raises(TimeError):
        again.execute("ADVANCE TO 99")
    again.close()


@pytest.mark.parametrize("clock", ["manual", "wall"])
def test_subscribe_resumes_as_of_a_time_it_had_seen(tmp_path: Path, clock: str) -> None:
    con = _connect(tmp_path, clock=clock)
    con.execute("CREATE TABLE t (a int) WITH (RETAIN HISTORY FOR '1h')")
    con.execute(
        "CREATE MATERIALIZED VIEW v WITH (RETAIN HISTORY FOR '1h') AS "
        "SELECT a % 2 AS p, count(*) AS c FROM t GROUP BY a % 2"
    )
    times = []
    for batch in ([1, 2], [3], [4, 5, 6]):
        if clock == "manual":
            con.execute(f"ADVANCE TO {10 * len(times) + 10}")
        con.executemany("INSERT INTO t VALUES (?)", [(a,) for a in batch])
        times.append(con.execute("SELECT mz_now()").fetchall()[0][0])
    if clock == "manual":
        con.execute("ADVANCE TO 1000")
    seen = con.execute(f"SUBSCRIBE v AS OF {times[0]}").fetchall()
    con.close()
    again = _connect(tmp_path, clock=clock)
    resumed = again.execute(f"SUBSCRIBE v AS OF {times[0]}").fetchall()

    def upto(rows: list[Any]) -> list[Any]:
        return sorted(r for r in rows if r[0] <= times[-1])

    assert upto(resumed) == upto(seen) and len(upto(seen)) >= 4
    again.close()


def test_as_of_before_a_checkpoint_is_refused(tmp_path: Path) -> None:
    con = _connect(tmp_path, checkpoint_bytes=1)
    con.execute("CREATE TABLE t (a int) WITH (RETAIN HISTORY FOR '1h')")
    con.execute("ADVANCE TO 10")
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("ADVANCE TO 20")
    con.execute("INSERT INTO t VALUES (2)")
    con.close()
    again = _connect(tmp_path)
    with pytest.raises(TimeError, match="can be read AS OF 20"):
        again.execute("SELECT * FROM t AS OF 10")
    assert sorted(again.execute("SELECT * FROM t AS OF 20").fetchall()) == [(1,), (2,)]
    again.close()


def test_a_second_owner_is_refused(tmp_path: Path) -> None:
    con = _connect(tmp_path)
    with pytest.raises(OperationalError, match="in use by another connection"):
        _connect(tmp_path)
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import dsql, sys\n"
            "try:\n"
            f"    dsql.connect(kernel='local', data_dir={str(tmp_path)!r})\n"
            "except dsql.OperationalError as e:\n"
            "    print(e.message); sys.exit(3)\n",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert other.returncode == 3 and "in use" in other.stdout, other
    con.close()
    _connect(tmp_path).close()  # closing released it


def _log_with_rows(path: Path) -> Path:
    con = _connect(path)
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("INSERT INTO t VALUES (2)")
    con.close()
    return next(path.glob("wal-*.log"))


@pytest.mark.parametrize("tail", ["cut", "zeros", "header-zeros", "garbled"])
def test_a_torn_last_record_is_discarded(tmp_path: Path, tail: str) -> None:
    log = _log_with_rows(tmp_path)
    whole = log.stat().st_size
    con = _connect(tmp_path)
    con.execute("INSERT INTO t VALUES (3)")
    con.close()
    data = log.read_bytes()
    last = data[whole:]
    torn = {
        "cut": last[: len(last) // 2],
        "zeros": last[:20] + bytes(len(last) - 20),  # the header written, not the rest
        "header-zeros": last[:10] + bytes(len(last) - 10),  # half the header written
        "garbled": last[:-3] + b"\xff\xff\xff",
    }[tail]
    log.write_bytes(data[:whole] + torn)
    again = _connect(tmp_path)
    assert sorted(again.execute("SELECT a FROM t").fetchall()) == [(1,), (2,)]
    assert log.stat().st_size == whole  # cut off, so new records follow the good ones
    again.execute("INSERT INTO t VALUES (4)")
    again.close()
    third = _connect(tmp_path)
    assert sorted(third.execute("SELECT a FROM t").fetchall()) == [(1,), (2,), (4,)]
    third.close()


@pytest.mark.parametrize("where", ["payload", "header", "magic"])
def test_a_damaged_record_before_the_end_is_an_error(tmp_path: Path, where: str) -> None:
    log = _log_with_rows(tmp_path)
    data = bytearray(log.read_bytes())
    second = data.index(b"DWAL", 1)  # the INSERT's record: the CREATE's follows it
    at = {"payload": second + 30, "header": second + 5, "magic": second}[where]
    data[at] ^= 0x55
    log.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=f"write-ahead log {log} is corrupt at byte"):
        _connect(tmp_path)
    # The refusal released the lock and changed nothing.
    assert log.read_bytes() == bytes(data)


def test_a_damaged_checkpoint_is_an_error(tmp_path: Path) -> None:
    con = _connect(tmp_path, checkpoint_bytes=1)
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1)")
    con.close()
    (parquet,) = tmp_path.glob("checkpoint-*/*.parquet")
    parquet.write_bytes(parquet.read_bytes()[:-12])
    with pytest.raises(SourceError, match=f"checkpoint file {parquet} is unreadable"):
        _connect(tmp_path)
    (manifest,) = tmp_path.glob("checkpoint-*/manifest.json")
    manifest.write_text("{not json")
    with pytest.raises(SourceError, match="checkpoint .* is unreadable"):
        _connect(tmp_path)


def test_a_missing_log_is_an_error(tmp_path: Path) -> None:
    con = _connect(tmp_path, checkpoint_bytes=1)
    con.execute("CREATE TABLE t (a int)")
    con.close()
    (log,) = tmp_path.glob("wal-*.log")
    number = int(log.stem.removeprefix("wal-"))
    log.rename(tmp_path / f"wal-{number + 1:08d}.log")
    with pytest.raises(SourceError, match="has a gap"):
        _connect(tmp_path)


def test_an_unfinished_checkpoint_is_ignored(tmp_path: Path) -> None:
    con = _connect(tmp_path)
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1)")
    con.close()
    (tmp_path / "checkpoint-00000002.tmp").mkdir()  # a crash while writing one
    (tmp_path / "checkpoint-00000002.tmp" / "0.parquet").write_bytes(b"half")
    again = _connect(tmp_path)
    assert again.execute("SELECT a FROM t").fetchall() == [(1,)]
    again.close()
    assert not list(tmp_path.glob("*.tmp"))


def test_a_view_in_error_comes_back_in_error(tmp_path: Path) -> None:
    con = _connect(tmp_path)
    con.execute("CREATE TABLE t (a int)")
    con.execute("CREATE MATERIALIZED VIEW q AS SELECT 10 / a AS r FROM t")
    with pytest.warns(DsqlWarning):
        con.execute("INSERT INTO t VALUES (0), (5)")
    con.close()
    again = _connect(tmp_path)
    with pytest.raises(dsql.OperationalError, match="division by zero"):
        again.execute("SELECT * FROM q").fetchall()
    with pytest.warns(DsqlWarning):
        again.execute("DELETE FROM t WHERE a = 0")
    assert again.execute("SELECT * FROM q").fetchall() == [(2,)]
    again.close()


def test_connect_refuses_unknown_keywords() -> None:
    with pytest.raises(InterfaceError, match="unknown keyword argument 'data_directory'"):
        dsql.connect(kernel="local", data_directory="/tmp/x")
    with pytest.raises(InterfaceError, match="'shuffle_partitions'"):
        dsql.connect(kernel="local", shuffle_partitions=4)


def test_connect_takes_spark_settings_by_full_name_or_mapping() -> None:
    from dsql.runtime.spark_session import SparkStart

    con = dsql.connect(
        kernel="auto",
        spark_conf={"spark.sql.shuffle.partitions": 3},
        **{"spark.ui.enabled": "false"},
    )
    start = con.session.worker.kernel._start
    assert isinstance(start, SparkStart)  # Spark is not started: only configured
    assert start.conf == {"spark.sql.shuffle.partitions": "3", "spark.ui.enabled": "false"}
    con.close()


def test_cli_keeps_state_in_its_data_dir(tmp_path: Path) -> None:
    first = tmp_path / "first.sql"
    first.write_text(
        "CREATE TABLE t (a int);\nINSERT INTO t VALUES (1), (2);\n"
        "CREATE MATERIALIZED VIEW v AS SELECT sum(a) AS s FROM t;\n"
    )
    second = tmp_path / "second.sql"
    second.write_text("INSERT INTO t VALUES (10);\nSELECT s FROM v;\n")
    data = tmp_path / "data"

    def run(script: Path, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "dsql.cli", "--kernel", "local", *args, "run", str(script)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    run(first, "--data-dir", str(data))
    assert "13" in run(second, "--data-dir", str(data))
    import os

    env = {**os.environ, "DSQL_DATA_DIR": str(data)}
    assert "23" in run(second, env=env)


def test_executemany_is_one_record(tmp_path: Path) -> None:
    from dsql import wal

    con = _connect(tmp_path)
    con.execute("CREATE TABLE t (a int)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(50)])
    con.close()
    (log,) = tmp_path.glob("wal-*.log")
    records, _ = wal.read(log, last=True)
    assert len(records) == 2 and len(records[1][0]["entries"]) == 50
    again = _connect(tmp_path)
    assert again.execute("SELECT count(*), sum(a) FROM t").fetchall() == [(50, 1225)]
    again.close()


def test_recovery_shows_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    import io

    from dsql.cli import RecoveryBar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    con = _connect(tmp_path)
    con.execute("CREATE TABLE t (a int)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(20)])
    con.close()
    err = Terminal()
    seen: list[tuple[int, int]] = []
    bar = RecoveryBar(err, delay=0)  # shown at once (by default after half a second)

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        bar(done, total)

    _connect(tmp_path, on_recovery=progress).close()
    size = next(tmp_path.glob("wal-*.log")).stat().st_size
    assert seen[-1] == (size, size) and "recovering" in err.getvalue()


def test_a_failed_checkpoint_keeps_the_statement_and_the_log(tmp_path: Path) -> None:
    con = _connect(tmp_path, checkpoint_bytes=1)
    con.execute("CREATE TABLE t (a int)")
    # A file where the next checkpoint's folder goes: its mkdir fails.
    number = int(next(tmp_path.glob("wal-*.log")).stem.removeprefix("wal-")) + 1
    (tmp_path / f"checkpoint-{number:08d}.tmp").write_text("in the way")
    with pytest.warns(DsqlWarning, match="checkpoint of .* failed"):
        con.execute("INSERT INTO t VALUES (1)")
    assert con.execute("SELECT a FROM t").fetchall() == [(1,)]
    con.close()
    again = _connect(tmp_path)
    assert again.execute("SELECT a FROM t").fetchall() == [(1,)]
    again.close()
