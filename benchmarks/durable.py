"""Durable state (`dsql.durable`): the cost of the write-ahead log and of recovery.

Three measurements, in-process (kernel=local), each on a fresh data directory:

- writes: `--writes` single-row INSERT statements, each acknowledged alone, into a
  table under one materialized view: in memory, with the log (one fsync a statement),
  and DuckDB's own durable inserts (a file database, autocommit) as the baseline;
  plus the same rows through one `executemany` (one record, one fsync).
- recovery against log length: connect time on a log of N single-row records (N in
  `--log-lengths`), then on the same state after a checkpoint.
- a view over a table of `--view-rows` rows: recovery from the log (the rows in one
  record, as `create_table` logs them), from a checkpoint, and hydrating the same view
  from scratch in memory.

Example:
    python benchmarks/durable.py --writes 2000 --log-lengths 500,2000,5000 \
        --view-rows 1000000
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recursion import section_head, update_results  # noqa: E402

import dsql  # noqa: E402

VIEW = (
    "CREATE MATERIALIZED VIEW v AS "
    "SELECT k % 100 AS g, count(*) AS c, sum(x) AS s FROM t GROUP BY k % 100"
)


def _seconds(start: float) -> float:
    return time.perf_counter() - start


def writes(n: int, root: Path) -> dict[str, float]:
    """Statements per second: in memory, with the log, DuckDB durable; executemany rows/s."""
    out: dict[str, float] = {}
    for label, data_dir in (("memory", None), ("log", root / "writes")):
        con = dsql.connect(kernel="local", data_dir=None if data_dir is None else str(data_dir))
        con.execute("CREATE TABLE t (k int, x int)")
        con.execute(VIEW)
        start = time.perf_counter()
        for i in range(n):
            con.execute("INSERT INTO t VALUES (?, ?)", (i, i))
        out[label] = n / _seconds(start)
        con.close()
    db = duckdb.connect(str(root / "duck.db"))
    db.execute("CREATE TABLE t (k int, x int)")
    start = time.perf_counter()
    for i in range(n):
        db.execute("INSERT INTO t VALUES (?, ?)", (i, i))
    out["duckdb"] = n / _seconds(start)
    db.close()
    con = dsql.connect(kernel="local", data_dir=str(root / "many"))
    con.execute("CREATE TABLE t (k int, x int)")
    con.execute(VIEW)
    start = time.perf_counter()
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, i) for i in range(n)])
    out["executemany"] = n / _seconds(start)
    con.close()
    return out


def _reconnect(data_dir: Path, checkpoint_bytes: int | None = None) -> tuple[float, Any]:
    start = time.perf_counter()
    con = dsql.connect(kernel="local", data_dir=str(data_dir), checkpoint_bytes=checkpoint_bytes)
    return _seconds(start), con


def _checkpointed(data_dir: Path) -> float:
    """Take a checkpoint (a write past a 1-byte threshold), then time the reconnect."""
    _, con = _reconnect(data_dir, checkpoint_bytes=1)
    con.execute("INSERT INTO t VALUES (-1, 0)")
    con.close()
    seconds, con = _reconnect(data_dir)
    con.close()
    return seconds


def recovery(lengths: list[int], root: Path) -> list[tuple[int, int, float, float]]:
    """(records, log bytes, recovery from the log s, from a checkpoint s) per length."""
    rows = []
    for n in lengths:
        data_dir = root / f"log{n}"
        con = dsql.connect(kernel="local", data_dir=str(data_dir))
        con.execute("CREATE TABLE t (k int, x int)")
        con.execute(VIEW)
        for i in range(n):
            con.execute("INSERT INTO t VALUES (?, ?)", (i, i))
        con.close()
        size = sum(p.stat().st_size for p in data_dir.glob("wal-*.log"))
        seconds, con = _reconnect(data_dir)
        con.close()
        rows.append((n, size, seconds, _checkpointed(data_dir)))
    return rows


def view_recovery(n: int, root: Path) -> dict[str, float]:
    """Seconds to get an n-row table's view back: log replay, checkpoint, from scratch."""
    data_dir = root / "view"
    rows = pa.table(
        {
            "k": pa.array(range(n), pa.int32()),
            "x": pa.array([i % 7 for i in range(n)], pa.int32()),
        }
    )
    con = dsql.connect(kernel="local", data_dir=str(data_dir))
    con.create_table("t", rows)  # one log record of n rows
    con.execute(VIEW)
    expected = sorted(con.execute("SELECT * FROM v").fetchall())
    con.close()
    log_s, con = _reconnect(data_dir)
    assert sorted(con.execute("SELECT * FROM v").fetchall()) == expected
    con.close()
    checkpoint_s = _checkpointed(data_dir)
    start = time.perf_counter()
    con = dsql.connect(kernel="local")
    con.create_table("t", rows)
    con.execute(VIEW)
    scratch_s = _seconds(start)
    assert sorted(con.execute("SELECT * FROM v").fetchall()) == expected
    con.close()
    return {"log": log_s, "checkpoint": checkpoint_s, "scratch": scratch_s}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=2_000)
    ap.add_argument("--log-lengths", default="500,2000,5000")
    ap.add_argument("--view-rows", type=int, default=1_000_000)
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)
    command = "python benchmarks/durable.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    load = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="dsql-durable-"))
    try:
        w = writes(args.writes, root)
        r = recovery([int(x) for x in args.log_lengths.split(",")], root)
        v = view_recovery(args.view_rows, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"## durable: {args.writes:,} writes / {args.view_rows:,}-row view ({when})"
    lines = [
        f"| single-row INSERTs/s, in memory | {w['memory']:,.0f} | one view over the table |",
        f"| single-row INSERTs/s, with the log | {w['log']:,.0f} | one fsync a statement |",
        f"| single-row INSERTs/s, DuckDB file database | {w['duckdb']:,.0f} | autocommit |",
        f"| rows/s by one executemany, with the log | {w['executemany']:,.0f} | one record |",
    ]
    for n, size, log_s, ck_s in r:
        lines.append(
            f"| recovery: {n:,} records / from a checkpoint | {log_s:.2f} s / {ck_s:.2f} s "
            f"| {size / 2**20:.1f} MiB of log |"
        )
    lines.append(
        f"| {args.view_rows:,}-row table's view back: log replay / checkpoint / from scratch "
        f"| {v['log']:.2f} s / {v['checkpoint']:.2f} s / {v['scratch']:.2f} s "
        "| from scratch: create_table from Arrow, then CREATE |"
    )
    print(title)
    print("\n".join(lines))
    if not args.no_write:
        update_results("\n".join(section_head(title, command, load) + lines) + "\n", title)


if __name__ == "__main__":
    main()
