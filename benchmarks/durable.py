"""Durable state (`dsql.durable`): the cost of the write-ahead log and of recovery.

Four measurements, in-process (kernel=local), each on a fresh data directory:

- writes: `--writes` single-row INSERT statements, each acknowledged alone, into a
  table under one materialized view: in memory, with the log (one fsync a statement),
  and DuckDB's own durable inserts (a file database, autocommit) as the baseline;
  plus the same rows through one `executemany` (one record, one fsync), against
  DuckDB's executemany in one transaction.
- recovery against log length: connect time on a log of N single-row records (N in
  `--log-lengths`), then on the same state after a checkpoint.
- a view over a table of `--view-rows` rows: recovery from the log (the rows in one
  record, as `create_table` logs them), from a checkpoint, and hydrating the same view
  from scratch in memory, each in a fresh process (`--child`) that reports its seconds
  and its peak RSS (the driver's memory: the kernel is in-process).
- source to sink: `--latency-files` CSV files land one at a time (renamed into a file
  source's directory, at most `--latency-gap` seconds apart, each once the previous
  one's change is out); a view over the source and a FILES sink on it, driven by a
  SUBSCRIBE's fetch loop under the wall clock; the time from the rename to the first
  listing of the sink's directory that shows the file's key.

Example:
    python benchmarks/durable.py --writes 2000 --log-lengths 500,2000,5000 \
        --view-rows 1000000 --latency-files 200
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recursion import section_head, update_results  # noqa: E402

import dsql  # noqa: E402
from dsql.execute import POLL_SECONDS  # noqa: E402

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
    db = duckdb.connect(str(root / "duck-many.db"))
    db.execute("CREATE TABLE t (k int, x int)")
    start = time.perf_counter()
    db.execute("BEGIN")
    db.executemany("INSERT INTO t VALUES (?, ?)", [(i, i) for i in range(n)])
    db.execute("COMMIT")
    out["duckdb_many"] = n / _seconds(start)
    db.close()
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


def _rows(n: int) -> pa.Table:
    """The view's table: k = 0..n-1, x = k % 7 (int32)."""
    k = np.arange(n, dtype=np.int32)
    return pa.table({"k": k, "x": k % 7})


def _child(argv: list[str]) -> None:
    """One timed phase in a fresh process, printed as JSON with the process's peak RSS:
    `recover DIR` (connect to a data directory) or `scratch N` (the same view hydrated
    in memory from an n-row Arrow table, built before the clock starts; `scratch 0` is
    the floor: dsql imported, a connection, an empty table and view)."""
    what, arg = argv
    rows = _rows(int(arg)) if what == "scratch" else None
    start = time.perf_counter()
    if rows is None:
        con = dsql.connect(kernel="local", data_dir=arg)
    else:
        con = dsql.connect(kernel="local")
        con.create_table("t", rows)
        con.execute(VIEW)
    seconds = _seconds(start)
    view = sorted(con.execute("SELECT * FROM v").fetchall())
    con.close()
    # VmHWM is this process's own peak: ru_maxrss would carry the parent's over exec.
    status = Path("/proc/self/status").read_text().split("\n")
    (hwm,) = [line.split()[1] for line in status if line.startswith("VmHWM:")]
    peak = int(hwm) * 1024
    print(json.dumps({"seconds": seconds, "peak": peak, "view": view}))


def _in_child(*argv: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *argv], capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout.splitlines()[-1]))


def view_recovery(n: int, root: Path) -> dict[str, dict[str, Any]]:
    """An n-row table's view back in a fresh process, by log replay, from a checkpoint,
    and hydrated from scratch in memory: seconds and peak RSS of each; each view checked
    against the view the writer held."""
    data_dir = root / "view"
    con = dsql.connect(kernel="local", data_dir=str(data_dir))
    con.create_table("t", _rows(n))  # one log record of n rows
    con.execute(VIEW)
    expected = [list(r) for r in sorted(con.execute("SELECT * FROM v").fetchall())]
    con.close()
    out = {"log": _in_child("recover", str(data_dir))}
    _, con = _reconnect(data_dir, checkpoint_bytes=1)
    con.execute("INSERT INTO t VALUES (-1, 0)")  # past 1 byte: a checkpoint, n + 1 rows
    con.execute("DELETE FROM t WHERE k = -1")  # and the log after it, one small record
    con.close()
    out["checkpoint"] = _in_child("recover", str(data_dir))
    out["scratch"] = _in_child("scratch", str(n))
    out["floor"] = _in_child("scratch", "0")
    out["floor"]["view"] = expected  # nothing to check
    for label, got in out.items():
        if got.pop("view") != expected:
            print(f"MISMATCH: the view recovered by {label} differs")
    return out


def latency(files: int, gap: float, root: Path) -> dict[str, Any]:
    """Seconds from a file landing in a source's directory (renamed into place) to its
    change being in the sink's directory, for `files` files one at a time, `gap` seconds
    apart at most; the pipeline is driven by a SUBSCRIBE's fetch loop (which polls every
    `POLL_SECONDS`), durable, under the wall clock."""
    incoming, out = root / "incoming", root / "out"
    incoming.mkdir()
    con = dsql.connect(
        kernel="local", clock="wall", data_dir=str(root / "pipe"), allowed_paths=[str(root)]
    )
    con.execute(f"CREATE SOURCE s (k int, x int) FROM FILES '{incoming}' WITH (FORMAT = 'csv')")
    con.execute(
        "CREATE MATERIALIZED VIEW pv AS SELECT k, count(*) AS c, sum(x) AS s FROM s GROUP BY k"
    )
    con.execute(f"CREATE SINK pk FROM pv INTO FILES '{out}'")
    seen: dict[int, float] = {}
    landed: dict[int, float] = {}
    failure: list[BaseException] = []
    stop = threading.Event()

    def feed() -> None:
        rng = random.Random(39)
        read: set[str] = set()
        try:
            for i in range(files):
                (incoming / f".{i}.csv").write_text(f"k,x\n{i},{i % 10}\n{i},1\n")
                landed[i] = time.perf_counter()
                os.rename(incoming / f".{i}.csv", incoming / f"{i}.csv")
                while i not in seen:  # the sink's new files, read as they appear
                    for name in sorted(set(os.listdir(out)) - read) if out.exists() else []:
                        if name.endswith(".parquet"):
                            read.add(name)
                            at = time.perf_counter()
                            for k in pq.read_table(out / name).column("k").to_pylist():
                                seen.setdefault(k, at)
                    time.sleep(0.001)
                time.sleep(rng.uniform(0, gap))
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failure.append(error)
        finally:
            stop.set()

    feeder = threading.Thread(target=feed)
    cur = con.cursor()
    cur.execute("SUBSCRIBE pv")
    feeder.start()
    while not stop.is_set():
        cur.fetchall(timeout=0.2)
    feeder.join()
    if failure:
        raise failure[0]
    view = sorted(con.execute("SELECT * FROM pv").fetchall())
    con.close()
    if view != [(i, 2, i % 10 + 1) for i in range(files)]:
        print("MISMATCH: the pipeline's view differs from its files")
    ms = sorted((seen[i] - landed[i]) * 1000 for i in range(files))
    return {
        "p50": ms[len(ms) // 2],
        "p99": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
        "max": ms[-1],
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=2_000)
    ap.add_argument("--log-lengths", default="500,2000,5000")
    ap.add_argument("--view-rows", type=int, default=1_000_000)
    ap.add_argument("--latency-files", type=int, default=200)
    ap.add_argument(
        "--latency-gap", type=float, default=0.05, help="seconds between files, at most"
    )
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)
    command = "python benchmarks/durable.py " + " ".join(shlex.quote(a) for a in argv)
    load = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="dsql-durable-"))
    try:
        w = writes(args.writes, root)
        r = recovery([int(x) for x in args.log_lengths.split(",")], root)
        v = view_recovery(args.view_rows, root)
        (root / "latency").mkdir()
        lat = latency(args.latency_files, args.latency_gap, root / "latency")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    title = (
        f"## durable: {args.writes:,} writes / {args.view_rows:,}-row view / "
        f"{args.latency_files} files to a sink"
    )
    lines = [
        f"| single-row INSERTs/s, in memory | {w['memory']:,.0f} | one view over the table |",
        f"| single-row INSERTs/s, with the log | {w['log']:,.0f} | one fsync a statement |",
        f"| single-row INSERTs/s, DuckDB file database | {w['duckdb']:,.0f} | autocommit |",
        f"| rows/s by one executemany, with the log | {w['executemany']:,.0f} | one record |",
        f"| rows/s by one executemany, DuckDB file database | {w['duckdb_many']:,.0f} "
        "| BEGIN, executemany, COMMIT |",
    ]
    for n, size, log_s, ck_s in r:
        lines.append(
            f"| recovery: {n:,} records / from a checkpoint | {log_s:.2f} s / {ck_s:.2f} s "
            f"| {size / 2**20:.1f} MiB of log |"
        )
    for key, label, what in (
        ("log", "log replay", "connect: one record of the rows"),
        ("checkpoint", "checkpoint", "connect: Parquet, then one small record"),
        ("scratch", "from scratch", "in memory: create_table from Arrow, then CREATE"),
        ("floor", "floor (0 rows)", "the same process with an empty table: imports and all"),
    ):
        lines.append(
            f"| {args.view_rows:,}-row table's view back, {label}: seconds / peak RSS "
            f"| {v[key]['seconds']:.2f} s / {v[key]['peak'] / 2**20:,.0f} MiB "
            f"| a fresh process; {what} |"
        )
    lines.append(
        f"| file landed to its change in a FILES sink: p50 / p99 / max "
        f"| {lat['p50']:.0f} ms / {lat['p99']:.0f} ms / {lat['max']:.0f} ms "
        f"| {args.latency_files} files one at a time; SUBSCRIBE fetch loop polling every "
        f"{POLL_SECONDS * 1000:.0f} ms; durable, wall clock |"
    )
    print(title)
    print("\n".join(lines))
    if not args.no_write:
        update_results("\n".join(section_head(title, command, load) + lines) + "\n", title)


if __name__ == "__main__":
    main()
