"""Ctrl-C around the log (`dsql.durable`, `dsql.timeout.interrupts_deferred`): a SIGINT
that arrives while a statement's record is written, or between the record and the end of
the statement, never leaves the session holding other rows than the log does.

Each case raises SIGINT from inside one step of the logging path (through a monkeypatched
function, so the moment is exact), then checks that the connection's tables and views
equal those a restart recovers from the data directory, that the views equal their
queries, and that a statement whose record reached the log took effect (and one whose
record did not, did not).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from test_durable import _snapshot

import dsql
from dsql import durable, sinks, wal
from dsql.execute import Executor

VIEW = "SELECT k % 2 AS g, count(*) AS c, sum(v) AS s FROM t GROUP BY k % 2"


def _connect(path: Path, checkpoint_bytes: int | None = None) -> Any:
    return dsql.connect(kernel="local", data_dir=str(path), checkpoint_bytes=checkpoint_bytes)


def _interrupt_once(monkeypatch: Any, owner: Any, name: str, after: bool) -> list[int]:
    """Patch `owner.name` to raise SIGINT once, before or after the original runs;
    returns a list that holds 1 once the signal was raised."""
    original: Callable[..., Any] = getattr(owner, name)
    fired: list[int] = []

    def patched(*args: Any, **kwargs: Any) -> Any:
        if not after and not fired:
            fired.append(1)
            signal.raise_signal(signal.SIGINT)
        result = original(*args, **kwargs)
        if after and not fired:
            fired.append(1)
            signal.raise_signal(signal.SIGINT)
        return result

    monkeypatch.setattr(owner, name, patched)
    return fired


def _same_after_restart(path: Path, con: Any, monkeypatch: Any) -> dict[str, Any]:
    """The session's state; asserts a restart recovers exactly it and that the view
    equals its query."""
    monkeypatch.undo()
    held = _snapshot(con)
    assert held["rows v"] == sorted(con.execute(VIEW).fetchall(), key=repr)
    con.close()
    again = _connect(path)
    try:
        assert _snapshot(again) == held
    finally:
        again.close()
    return held


def _setup(path: Path, checkpoint_bytes: int | None = None) -> Any:
    con = _connect(path, checkpoint_bytes)
    con.execute("CREATE TABLE t (k int, v int)")
    con.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW}")
    con.execute("INSERT INTO t VALUES (1, 10), (2, 20)")
    return con


#: Where the signal comes, once the statement has run: (what is patched, its attribute,
#: after it ran?). From each, the statement's record reaches the log.
WINDOWS = {
    "after the record is synced": (wal.LogFile, "append", True),
    "between write and fsync": (wal.os, "fsync", False),
    "before the record is encoded": (wal, "encode", False),
    "after the sinks flushed": (sinks, "flush", True),
    "while the catalog is followed": (durable.Durable, "_follow_catalog", False),
}


@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize(
    "sql, row",
    [
        ("INSERT INTO t VALUES (3, 30)", (3, 30)),
        ("UPDATE t SET v = 21 WHERE k = 2", (2, 21)),
        ("DELETE FROM t WHERE k = 1", None),
    ],
)
def test_an_interrupted_write_is_in_the_session_exactly_when_it_is_in_the_log(
    tmp_path: Path, monkeypatch: Any, window: str, sql: str, row: tuple[int, int] | None
) -> None:
    owner, name, after = WINDOWS[window]
    con = _setup(tmp_path)
    fired = _interrupt_once(monkeypatch, owner, name, after)
    with pytest.raises(KeyboardInterrupt):
        con.execute(sql)
    assert fired
    held = _same_after_restart(tmp_path, con, monkeypatch)
    rows = held["rows t"]
    assert (1, 10) not in rows if row is None else row in rows, rows


def test_an_interrupted_checkpoint_leaves_the_write_and_the_directory_whole(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # A checkpoint after every statement: the signal comes while its files are synced.
    con = _setup(tmp_path, checkpoint_bytes=1)
    fired = _interrupt_once(monkeypatch, wal, "sync_dir", after=False)
    with pytest.raises(KeyboardInterrupt):
        con.execute("INSERT INTO t VALUES (3, 30)")
    assert fired
    monkeypatch.undo()
    con.execute("INSERT INTO t VALUES (4, 40)")  # the log is still open for writes
    held = _same_after_restart(tmp_path, con, monkeypatch)
    assert (3, 30) in held["rows t"] and (4, 40) in held["rows t"]


@pytest.mark.parametrize("window", ["before the record is encoded", "after the record is synced"])
def test_an_interrupted_executemany_keeps_the_rows_it_logged(
    tmp_path: Path, monkeypatch: Any, window: str
) -> None:
    owner, name, after = WINDOWS[window]
    con = _setup(tmp_path)
    fired = _interrupt_once(monkeypatch, owner, name, after)
    with pytest.raises(KeyboardInterrupt):
        con.executemany("INSERT INTO t VALUES (?, ?)", [(i, i) for i in range(3, 8)])
    assert fired
    held = _same_after_restart(tmp_path, con, monkeypatch)
    assert all((i, i) in held["rows t"] for i in range(3, 8))


def test_an_interrupted_commit_keeps_the_whole_transaction(
    tmp_path: Path, monkeypatch: Any
) -> None:
    con = _setup(tmp_path)
    con.execute("BEGIN")
    con.execute("INSERT INTO t VALUES (3, 30)")
    con.execute("DELETE FROM t WHERE k = 1")
    fired = _interrupt_once(monkeypatch, wal.LogFile, "append", after=True)
    with pytest.raises(KeyboardInterrupt):
        con.execute("COMMIT")
    assert fired
    held = _same_after_restart(tmp_path, con, monkeypatch)
    assert held["rows t"] == [(2, 20), (3, 30)]


def test_an_interrupted_create_view_exists_after_restart_too(
    tmp_path: Path, monkeypatch: Any
) -> None:
    con = _setup(tmp_path)
    fired = _interrupt_once(monkeypatch, durable.Durable, "_follow_catalog", after=False)
    with pytest.raises(KeyboardInterrupt):
        con.execute("CREATE MATERIALIZED VIEW w AS SELECT k FROM t WHERE v > 10")
    assert fired
    held = _same_after_restart(tmp_path, con, monkeypatch)
    assert held["rows w"] == [(2,)]


def test_an_interrupt_before_the_statement_logs_undoes_it(tmp_path: Path, monkeypatch: Any) -> None:
    # The signal comes as the statement's writes are delivered to the views, before
    # anything is logged: the writes are taken back, and neither the session nor the log
    # holds the row.
    con = _setup(tmp_path)
    fired = _interrupt_once(monkeypatch, Executor, "deliver", after=False)
    with pytest.raises(KeyboardInterrupt):
        con.execute("INSERT INTO t VALUES (3, 30)")
    assert fired
    held = _same_after_restart(tmp_path, con, monkeypatch)
    assert (3, 30) not in held["rows t"]


def test_a_fetch_loop_alone_carries_a_file_to_the_sink_under_the_wall_clock(
    tmp_path: Path,
) -> None:
    # No statement and no later write: the waiting FETCH polls the source, and its next
    # poll finds the file's millisecond past and flushes the sink.
    incoming, out = tmp_path / "in", tmp_path / "out"
    incoming.mkdir()
    con = dsql.connect(
        kernel="local", clock="wall", data_dir=str(tmp_path / "data"), allowed_paths=[tmp_path]
    )
    con.execute(f"CREATE SOURCE s (k int, x int) FROM FILES '{incoming}' WITH (FORMAT = 'csv')")
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT k, sum(x) AS s FROM s GROUP BY k")
    con.execute(f"CREATE SINK o FROM v INTO FILES '{out}'")
    cur = con.cursor()
    cur.execute("SUBSCRIBE v")
    (incoming / "1.csv").write_text("k,x\n1,5\n1,6\n")
    rows: list[dict[str, Any]] = []
    for _ in range(100):  # each fetch waits up to 0.1 s; the sink needs two polls
        cur.fetchall(timeout=0.1)
        rows = [r for f in sorted(out.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
        if rows:
            break
    assert [(r["mz_diff"], r["k"], r["s"]) for r in rows] == [(1, 1, 11)]
    con.close()
    again = dsql.connect(
        kernel="local", clock="wall", data_dir=str(tmp_path / "data"), allowed_paths=[tmp_path]
    )
    again.execute("SELECT 1")
    files = [r for f in sorted(out.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert files == rows  # written once, across the restart
    assert again.execute("SELECT * FROM v").fetchall() == [(1, 11)]
    again.close()
