"""Pathway peer: the skip-level join workload of `skip_level.py`, run in Pathway.

Pathway (a Rust differential dataflow engine with a Python API) runs the same
workload as `skip_level.py`: `manages(m2, m1)` holding `(p // 2, p)` for `p` in
`0..N-1`, and the join of `manages` keyed by `m1` (the boss side) with `manages`
keyed by `m2` (the people side):

    bosses = manages.select(k=m1, boss=m2)
    people = manages.select(k=m2, person=m1)
    skip = bosses.join(people, bosses.k == people.k)

Changes enter through Pathway's documented streaming input, a
`pw.io.python.ConnectorSubject` (`next` inserts a row, `delete` retracts it,
`commit` closes a minibatch, which gets its own engine time), and the output is
observed with `pw.io.subscribe` (`on_change` per changed row, `on_time_end` when a
time is closed at the sink). The subject's thread drives every phase and waits for
the output; the engine runs in `pw.run()` on the main thread.

The sink (`--sink`), as in `skip_level.py`:

- `count` (default, like dsql's `count` sink): the engine reduces the join to one row
  `(n = count(*), s = sum(k))` and the subscription sees only that row's changes; `n`
  is the join's size. (`s` makes every change of the workload change the row, so the
  sink has output at each change's time: a change of p's boss from p//2 to p//3 moves
  the output row with person p from k = p//2 to k = p//3; they differ unless p is
  0, 1 or 3, whose change is no change at all.)
- `rows` (like dsql's `capture`): every output row of the join passes through a Python
  `on_change`, which counts rows and the sum of their diffs.

When is a change "in the output"? Each committed batch also carries a marker row
`(m2=-2, m1=-(i+3))`, which joins with nothing (no real `m2` or `m1` is negative, no
marker's `m1` is -2); a second subscription on `manages.filter(m1 < 0)` reports the
engine time the marker got. A phase is complete when the sink has closed a time at
or after that time. The last change of every phase (p > 3) changes the sink's
output at its own time (the new boss `p // 3` is always present), so the sink does
close that time (Pathway calls `on_time_end` only for times with output).
The latency of a single-change round is therefore: wall time from the
first `delete` call to the waiting thread waking after the sink's `on_time_end` —
input queue, minibatching, the dataflow, the sink callback and one thread wake-up.

Phases, like `skip_level.py` 1-3:

1. load: N rows with `next` (timed alone as `push`), one commit; until the sink has
   closed the load's time;
2. single-change rounds: `delete((p//2, p))`, `next((p//3, p))`, commit, wait;
   p50 / p95 over `--rounds` after `--warmup` uncounted rounds;
3. change loops: for each K, K changes each in its own commit (so each at its own
   engine time; the count of distinct times the sink closed is reported: p = 1 and 3
   change nothing, and two commits read in the same millisecond could share one),
   pushed without waiting, then one wait; changes/s = K / (first push to output).
   With `--one-commit` (which `skip_level.py --pathway` passes), each loop is
   followed by K more changes in ONE commit, at one time: not the book's workload
   (its changes are at distinct times), but it separates Pathway's per-time cost.

The check: the sum of the output's diffs (= the join's size) against DuckDB's
count of the join over the final input, as in `skip_level.py`.

Run it in a venv where `pathway` is installed (it is not a dsql dependency):

    /tmp/pw_venv/bin/python benchmarks/pathway_peer.py --n 1000000 --rounds 30
    /tmp/pw_venv/bin/python benchmarks/pathway_peer.py --n 100000 --json   # one JSON line

`skip_level.py --pathway --pathway-python /tmp/pw_venv/bin/python` runs this as a
subprocess and adds `rows(...)` to its table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

MARKER_BOSS = -2
WAIT_S = 1800.0


def nearest_rank(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of xs by the nearest-rank method (as in skip_level.py)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, int(round(q * len(s) + 0.5)) - 1))]


class Output:
    """What the sinks have reported: join rows, their net diff, closed times, markers.

    Invariants: `net` is the join's current size once the sink has closed the time of
    the last commit; `rows` counts the rows the sink's `on_change` saw; `marker_times`
    maps a marker's id to the engine time it got.
    Callbacks run on the engine's thread; `wait_for` runs on the subject's thread.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.rows = 0
        self.net = 0
        self.ends = 0
        self.last_end = -1
        self.marker_times: dict[int, int] = {}

    def on_change(self, key: Any, row: dict, time: int, is_addition: bool) -> None:
        self.rows += 1
        self.net += 1 if is_addition else -1

    def on_count(self, key: Any, row: dict, time: int, is_addition: bool) -> None:
        self.rows += 1
        if is_addition:
            self.net = row["n"]

    def on_time_end(self, time: int) -> None:
        with self.cond:
            self.ends += 1
            self.last_end = time
            self.cond.notify_all()

    def on_marker(self, key: Any, row: dict, time: int, is_addition: bool) -> None:
        if is_addition:
            with self.cond:
                self.marker_times[-row["m1"] - 3] = time
                self.cond.notify_all()

    def wait_for(self, marker: int) -> None:
        """Block until the sink has closed the time of `marker`'s batch."""

        def done() -> bool:
            t = self.marker_times.get(marker)
            return t is not None and self.last_end >= t

        with self.cond:
            if not self.cond.wait_for(done, timeout=WAIT_S):
                raise TimeoutError(f"marker {marker} not seen in the output after {WAIT_S} s")


def make_feeder(pw: Any, args: argparse.Namespace, out: Output, res: dict[str, Any]) -> Any:
    """The ConnectorSubject that runs every phase from its own thread (see module doc)."""

    class Feeder(pw.io.python.ConnectorSubject):
        def __init__(self) -> None:
            super().__init__()
            self.markers = 0

        def commit_marked(self) -> int:
            """Add a marker row and commit; returns the marker's id."""
            self.markers += 1
            self.next(m2=MARKER_BOSS, m1=-(self.markers + 3))
            self.commit()
            return self.markers

        def change(self, p: int) -> None:
            self.delete(m2=p // 2, m1=p)
            self.next(m2=p // 3, m1=p)

        def run(self) -> None:
            try:
                self.phases()
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                res["error"] = repr(e)
                raise

        def phases(self) -> None:
            n = args.n
            print(f"[pathway load] N={n:,}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            for p in range(n):
                self.next(m2=p // 2, m1=p)
            push = time.perf_counter() - t0
            out.wait_for(self.commit_marked())
            res["load"] = {
                "push_s": push,
                "total_s": time.perf_counter() - t0,
                "rows_out": out.rows,
            }
            print(f"[pathway load] {res['load']['total_s']:.2f} s", file=sys.stderr, flush=True)

            used_hi = n  # single changes use p from the top down; change loops from 1 up
            lat: list[float] = []
            warm: list[float] = []
            for i in range(args.warmup + args.rounds):
                used_hi -= 1
                t0 = time.perf_counter()
                self.change(used_hi)
                out.wait_for(self.commit_marked())
                (lat if i >= args.warmup else warm).append(time.perf_counter() - t0)
            res["rounds"] = {
                "n": len(lat),
                "p50": statistics.median(lat) if lat else None,
                "p95": nearest_rank(lat, 0.95),
                "min": min(lat, default=0),
                "max": max(lat, default=0),
                "all": lat,
                "warmup": warm,
            }

            next_p = 1
            res["changes"] = []
            loops = [(k, own) for k in args.changes for own in (True, False)[: 1 + args.one_commit]]
            for k, own_times in loops:
                if next_p + k >= used_hi:
                    res["notes"].append(f"change loop K={k:,} skipped: not enough rows")
                    continue
                ends0, rows0 = out.ends, out.rows
                t0 = time.perf_counter()
                for p in range(next_p, next_p + k - 1):
                    self.change(p)
                    if own_times:
                        self.commit()
                self.change(next_p + k - 1)
                push = time.perf_counter() - t0
                out.wait_for(self.commit_marked())
                total = time.perf_counter() - t0
                res["changes"].append(
                    {
                        "k": k,
                        "own_times": own_times,
                        "push_s": push,
                        "total_s": total,
                        "per_s": k / total,
                        "times": out.ends - ends0,
                        "rows_out": out.rows - rows0,
                    }
                )
                print(f"[pathway changes] K={k:,}: {total:.2f} s", file=sys.stderr, flush=True)
                next_p += k
            res["changed"] = [[1, next_p], [used_hi, n]]
            res["net"] = out.net
            res["rows_out"] = out.rows

    return Feeder()


def expected_join_size(n: int, changed: list[list[int]]) -> int:
    """DuckDB's count of the join over the final input (each changed p reports to p//3)."""
    import duckdb
    import numpy as np
    import pyarrow as pa

    p = np.arange(n, dtype="int64")
    m2 = p // 2
    for lo, hi in changed:
        m2[lo:hi] = p[lo:hi] // 3
    con = duckdb.connect()
    con.register("final_manages", pa.table({"m2": m2, "m1": p}))
    sql = "SELECT count(*) FROM final_manages a JOIN final_manages b ON a.m1 = b.m2"
    return int(con.execute(sql).fetchall()[0][0])


def peak_rss() -> int:
    """This process's peak resident set size (VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build the dataflow, run every phase, check the join's size; the figures as a dict."""
    import pathway as pw

    res: dict[str, Any] = {
        "notes": [],
        "version": pw.__version__,
        "threads": os.environ.get("PATHWAY_THREADS", "1"),
        "sink": args.sink,
        "loadavg_start": os.getloadavg(),
    }

    class Manages(pw.Schema):
        m1: int = pw.column_definition(primary_key=True)
        m2: int

    out = Output()
    t0 = time.perf_counter()
    manages = pw.io.python.read(
        make_feeder(pw, args, out, res), schema=Manages, autocommit_duration_ms=None
    )
    bosses = manages.select(k=manages.m1, boss=manages.m2)
    people = manages.select(k=manages.m2, person=manages.m1)
    skip = bosses.join(people, bosses.k == people.k).select(
        k=bosses.k, boss=bosses.boss, person=people.person
    )
    if args.sink == "rows":
        pw.io.subscribe(skip, on_change=out.on_change, on_time_end=out.on_time_end)
    else:
        total = skip.reduce(n=pw.reducers.count(), s=pw.reducers.sum(skip.k))
        pw.io.subscribe(total, on_change=out.on_count, on_time_end=out.on_time_end)
    pw.io.subscribe(manages.filter(manages.m1 < 0), on_change=out.on_marker)
    pw.run(monitoring_level=pw.MonitoringLevel.NONE, default_logging=False)
    res["run_s"] = time.perf_counter() - t0
    if "error" in res:
        raise RuntimeError(f"the Pathway feeder failed: {res['error']}")
    res["expected"] = expected_join_size(args.n, res["changed"])
    res["peak_rss"] = peak_rss()
    res["loadavg_end"] = os.getloadavg()
    return res


def run_subprocess(
    python: str, n: int, rounds: int, warmup: int, changes: list[int], sink: str
) -> tuple[dict[str, Any] | None, str]:
    """Run this script with `python` (a venv holding pathway); (figures, "") or (None, why)."""
    probe = subprocess.run([python, "-c", "import pathway"], capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"Pathway is not importable with {python}: the Pathway peer was skipped"
    cmd = [python, __file__, "--n", str(n), "--rounds", str(rounds), "--warmup", str(warmup)]
    cmd += ["--changes", ",".join(str(k) for k in changes), "--sink", sink, "--json"]
    cmd += ["--one-commit"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return None, f"the Pathway peer failed (exit code {proc.returncode}); see its stderr"
    return json.loads(lines[-1]), ""


def rows(res: dict[str, Any], n: int, fmt: Callable[[float], str]) -> list[tuple[str, str, str]]:
    """(figure, value, note) rows for a results table; `fmt` formats seconds."""
    pre = f"Pathway {res['version']} ({res['threads']} worker, sink={res['sink']})"
    what = "join rows" if res["sink"] == "rows" else "count-row updates"
    load = res["load"]
    out = [
        (
            f"{pre}: load N={n:,}",
            fmt(load["total_s"]),
            f"Python `next` x N {fmt(load['push_s'])}, then until the sink closed the time; "
            f"{load['rows_out']:,} {what} through `on_change`",
        )
    ]
    r = res["rounds"]
    out.append(
        (
            f"{pre}: single-change round p50 / p95 ({r['n']} rounds)",
            f"{fmt(r['p50'])} / {fmt(r['p95'])}",
            f"min {fmt(r['min'])}, max {fmt(r['max'])}; delete + next + commit until the "
            "sink closed that time",
        )
    )
    for c in res["changes"]:
        how = "one commit each" if c.get("own_times", True) else "ALL IN ONE COMMIT (one time)"
        out.append(
            (
                f"{pre}: {c['k']:,} changes, {how}, pushed at once",
                f"{c['per_s']:,.0f} changes/s",
                f"{fmt(c['total_s'])} (push {fmt(c['push_s'])}); {c['times']:,} engine "
                f"times closed at the sink; {c['rows_out']:,} {what}",
            )
        )
    ok = "OK" if res["net"] == res["expected"] else "MISMATCH"
    out.append(
        (
            f"{pre}: check: join size vs DuckDB",
            f"{res['net']:,} vs {res['expected']:,}",
            f"{ok}; peak RSS {res['peak_rss'] / 2**20:.0f} MiB; load average "
            f"{res['loadavg_start'][0]:.1f} at start, {res['loadavg_end'][0]:.1f} at end",
        )
    )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="rows of manages (default 1M)")
    ap.add_argument("--rounds", type=int, default=30, help="single-change rounds (default 30)")
    ap.add_argument("--warmup", type=int, default=3, help="uncounted rounds first (default 3)")
    ap.add_argument(
        "--changes",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=[10_000],
        help="comma-separated K for the change loop",
    )
    ap.add_argument(
        "--sink",
        choices=("count", "rows"),
        default="count",
        help="count: reduce to count(*) in the engine (default); rows: every join row to Python",
    )
    ap.add_argument(
        "--one-commit",
        action="store_true",
        help="after each change loop, K more changes in ONE commit (one time), for scale",
    )
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("pathway") is None:
        ap.exit(2, "pathway is not installed here: pip install pathway (Linux, Python >= 3.10)\n")
    res = run(args)
    if args.json:
        print(json.dumps(res))
        return
    for figure, value, note in rows(res, args.n, lambda s: f"{s * 1000:.2f} ms"):
        print(f"{figure}: {value}  ({note})")


if __name__ == "__main__":
    main()
