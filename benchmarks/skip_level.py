"""Skip-level join benchmark: the differential dataflow book's workload, with baselines.

The workload (the book's "skip-level managers" example): an input
`manages(m2 bigint, m1 bigint)` holding `(p // 2, p)` for `p` in `0..N-1`, and the
dataflow

    manages.map("m1 AS k", "m2 AS boss").arrange_by_key("k")
        .join_core(manages.map("m2 AS k", "m1 AS person").arrange_by_key("k"))

(the same as `.join(..., on=["k"])`, built from its parts to keep the two
`Arrangement`s for `stats()`).

Phases, in one process and one Spark session:

1. load: the N rows as ONE Arrow table (`InputSession.load_arrow`), one flush, one
   round (hydration). Staging (`flush`, i.e. Arrow -> kernel frame) and the round
   (`Worker.step`) are timed separately.
2. single-change rounds: `--rounds` rounds of one remove + one insert (the book's
   change for one `p`), `advance_to`, `flush`, `Worker.step()`; p50 / p95 / max.
3. change loops: for each K in `--changes`, the book's loop
   `update_at((p//2, p), t_p, -1); update_at((p//3, p), t_p, +1)` for K values of p,
   each at its own time, all in ONE flush and one round; changes/s.
4. profiled rounds: a few more single-change rounds with every node's `step`/`finish`
   and every kernel call timed, and Spark jobs counted, to show where a round goes.
5. book (optional, `--book`): a fresh dataflow, load N, then N changes each at its own
   time in one flush (staged with `load_arrow` carrying `__time__`/`__diff__`; the
   Python loop of `update_at` for 2N rows is timed separately as `staging`).
6. baselines over the same N rows: Spark SQL self-join over a cached DataFrame (count,
   and rows to Arrow), DuckDB self-join over the Arrow table (count, and to Arrow), a
   trivial Spark action (`spark.range(1).count()`).
7. Pathway (optional, `--pathway`): phases 1-3 in Pathway, by `pathway_peer.py` run with
   `--pathway-python`; its rows join the table.

The sink. `probe()` consumes nothing, and a round's work is lazy until a node keeps
state, so with only a probe the join's output is never computed (the figure measures
arrangement maintenance only). `capture()` / `inspect()` collect every output row to
the driver (`toArrow`) each round. The default sink here is `CountSink`, a small node
defined in this file that evaluates each output batch with one aggregate action
(`count(*)`, `sum(__diff__)`) in the kernel, without bringing the rows to the driver;
`--sink capture|probe` measure the other two. The running sum of diffs is checked
against DuckDB's count of the join over the final input.

Timings on a shared 2-core machine are noisy: repeated figures are medians.

    python benchmarks/skip_level.py --n 1000000 --rounds 30 --changes 10000,100000
    python benchmarks/skip_level.py --n 1000000 --kernel local
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pathway_peer  # this directory's module; it imports pathway only when it runs
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot

from dsql.runtime.dataflow import Batch, Node, Round, Worker

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"


# --------------------------------------------------------------------------- helpers
def now() -> float:
    return time.perf_counter()


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) by the nearest-rank method."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(q * len(s) + 0.5)) - 1))
    return s[k]


def ms(x: float) -> str:
    if x != x:  # nan
        return "-"
    if x >= 10:
        return f"{x:.1f} s"
    if x >= 1:
        return f"{x:.2f} s"
    return f"{x * 1000:.1f} ms"


def gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in bytes (empty if it is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def java_children(pid: int) -> list[int]:
    """The java processes below `pid` (the Spark driver JVM that pyspark launched)."""
    found = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            kids = []
        for kid in kids:
            try:
                with open(f"/proc/{kid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if comm == "java":
                found.append(kid)
            todo.append(kid)
    return found


def memory() -> dict[str, int]:
    mem = {}
    me = proc_status(os.getpid())
    mem["python_rss"] = me.get("VmRSS", 0)
    mem["python_peak"] = me.get("VmHWM", 0)
    for pid in java_children(os.getpid()):
        st = proc_status(pid)
        mem["jvm_rss"] = mem.get("jvm_rss", 0) + st.get("VmRSS", 0)
        mem["jvm_peak"] = mem.get("jvm_peak", 0) + st.get("VmHWM", 0)
    return mem


def dir_bytes(path: str | None) -> int:
    total = 0
    if path and os.path.isdir(path):
        for root, _, files in os.walk(path):
            for name in files:
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
    return total


def machine() -> str:
    cores = os.cpu_count()
    try:
        with open("/proc/meminfo") as f:
            total = int(f.readline().split()[1]) * 1024
    except OSError:
        total = 0
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cpu = model or platform.machine()
    return f"{cores} cores ({cpu}), {total / 2**30:.0f} GiB RAM, {platform.system()}"


def git_rev() -> str:
    """HEAD, the last commit that changed runtime/, and whether runtime/ has local edits."""

    def git(*cmd: str) -> str:
        return subprocess.run(
            ["git", *cmd], cwd=HERE.parent, capture_output=True, text=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        runtime = git("log", "-1", "--format=%h", "--", "runtime")
        dirty = git("status", "--porcelain", "--", "runtime")
    except OSError:
        return "?"
    text = f"HEAD {head}, runtime/ last changed in {runtime}"
    return text + (" plus uncommitted edits in runtime/" if dirty else "")


# --------------------------------------------------------------------------- Spark jobs
class Jobs:
    """Counts Spark jobs: `last()` is the number of jobs submitted so far.

    Reads the DAG scheduler's job counter through py4j (~0.2 ms); where that is not
    reachable, falls back to the status tracker's job ids (~10 ms with many jobs retained).
    """

    def __init__(self, spark: Any | None) -> None:
        self.tracker = spark.sparkContext.statusTracker() if spark is not None else None
        self.scheduler = None
        if spark is not None:
            try:
                scheduler = spark.sparkContext._jsc.sc().dagScheduler()  # noqa: SLF001
                scheduler.numTotalJobs()
                self.scheduler = scheduler
            except Exception:  # noqa: BLE001 - diagnostics only
                self.scheduler = None

    def last(self) -> int:
        if self.scheduler is not None:
            return int(self.scheduler.numTotalJobs())
        if self.tracker is None:
            return 0
        ids = self.tracker.getJobIdsForGroup(None)
        return max(ids) + 1 if ids else 0


# --------------------------------------------------------------------------- the sink
_COUNT = sqlglot.parse_one(
    "SELECT COUNT(*) AS n, COALESCE(SUM(__diff__), 0) AS d FROM t", read="duckdb"
)


class CountSink(Node):
    """Evaluates each output batch with one aggregate action; keeps only two numbers.

    `rows`: update rows received; `net`: the sum of their diffs (the change in the
    output's size), so after a round `net` is the size of the join.
    """

    def __init__(self, source: Node) -> None:
        super().__init__(source.worker, (source,), source.schema, source.depth)
        self.rows = 0
        self.net = 0

    def step(self, rnd: Round) -> Batch | None:
        delta = rnd.delta(self.inputs[0])
        if delta is not None:
            if delta.table is not None:
                n, d = delta.table.num_rows, pc.sum(delta.table["__diff__"]).as_py() or 0
            else:
                t = self.kernel.to_arrow(self.kernel.query(_COUNT, {"t": delta.frame}))
                n, d = t["n"][0].as_py(), t["d"][0].as_py()
            self.rows += n
            self.net += d
        return None

    def describe(self) -> str:
        return "CountSink"


# --------------------------------------------------------------------------- profiling
class Profile:
    """Times every node's step/finish and every kernel call; counts Spark jobs per node.

    Installed on a dataflow's nodes and kernel (instance attributes, so nothing in the
    runtime changes); inactive between `begin(phase)` and `end()` calls it costs one
    attribute check per call. Kernel calls are recorded at their outermost level only.
    """

    KERNEL_CALLS = ("materialize", "to_arrow", "from_arrow", "count", "query", "release", "union")

    def __init__(self, worker: Worker, jobs: Jobs) -> None:
        self.worker = worker
        self.jobs = jobs
        self.active = False
        #: phase -> list of per-round {label: [seconds, jobs, calls]}
        self.phases: dict[str, list[dict[str, list[float]]]] = defaultdict(list)
        self._round: dict[str, list[float]] = {}
        self._phase = ""
        self._depth = 0
        for node in worker.nodes:
            if node is None:
                continue
            label = f"{node.id}:{node.describe()}"
            node.step = self._wrap(node.step, f"step {label}", count_jobs=True)
            node.finish = self._wrap(node.finish, f"finish {label}", count_jobs=True)
        kernel = worker.kernel
        for name in self.KERNEL_CALLS:
            attr = getattr(type(kernel), name, None)
            if hasattr(kernel, name) and not isinstance(attr, property):
                setattr(
                    kernel, name, self._wrap(getattr(kernel, name), f"kernel.{name}", nested=True)
                )

    def _wrap(self, fn: Callable, label: str, count_jobs: bool = False, nested: bool = False):
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not self.active or (nested and self._depth > 1):
                return fn(*args, **kwargs)
            self._depth += 1
            j0 = self.jobs.last() if count_jobs else 0
            t0 = now()
            try:
                return fn(*args, **kwargs)
            finally:
                t = now() - t0
                j = (self.jobs.last() - j0) if count_jobs else 0
                self._depth -= 1
                acc = self._round.setdefault(label, [0.0, 0, 0])
                acc[0] += t
                acc[1] += j
                acc[2] += 1

        return wrapped

    def add(self, label: str, seconds: float, jobs: int = 0) -> None:
        """Record a step timed outside the worker (e.g. the input's flush)."""
        acc = self._round.setdefault(label, [0.0, 0, 0])
        acc[0] += seconds
        acc[1] += jobs
        acc[2] += 1

    def begin(self, phase: str) -> None:
        self._phase = phase
        self._round = {}
        self.active = True

    def end(self) -> None:
        self.active = False
        self.phases[self._phase].append(self._round)
        self._round = {}

    def summary(self, phase: str) -> dict[str, tuple[float, float]]:
        """Per label: median seconds per round, mean jobs per round."""
        rounds = self.phases.get(phase, [])
        labels = {label for r in rounds for label in r}
        out = {}
        for label in labels:
            times = [r[label][0] if label in r else 0.0 for r in rounds]
            jobs = [r[label][1] if label in r else 0 for r in rounds]
            out[label] = (median(times), sum(jobs) / max(1, len(rounds)))
        return out


# --------------------------------------------------------------------------- the dataflow
def manages_table(n: int) -> pa.Table:
    import numpy as np

    p = np.arange(n, dtype="int64")
    return pa.table({"m2": p // 2, "m1": p})


class Dataflow:
    def __init__(self, kernel: Any, sink: str) -> None:
        self.worker = Worker(kernel)
        self.input = self.worker.new_input({"m2": "bigint", "m1": "bigint"})
        c = self.input.to_collection()
        self.bosses = c.map("m1 AS k", "m2 AS boss").arrange_by_key("k")
        self.people = c.map("m2 AS k", "m1 AS person").arrange_by_key("k")
        self.out = self.bosses.join_core(self.people)
        self.sink_kind = sink
        self.sink: Any = None
        self.capture_rows = 0
        self.capture_net = 0
        self.poll_s = 0.0
        if sink == "count":
            self.sink = CountSink(self.out.node)
        elif sink == "capture":
            self.sink = self.out.capture()
        else:
            self.sink = self.out.probe()

    def step(self) -> float:
        """One `Worker.step()`; with a capture sink, also poll (timed apart)."""
        t0 = now()
        ran = self.worker.step()
        t = now() - t0
        assert ran, "no round ran"
        if self.sink_kind == "capture":
            t1 = now()
            got = self.sink.poll()
            self.poll_s += now() - t1
            self.capture_rows += got.num_rows
            if got.num_rows:
                self.capture_net += pc.sum(got["__diff__"]).as_py()
        return t

    @property
    def rows_out(self) -> int | None:
        if self.sink_kind == "count":
            return self.sink.rows
        if self.sink_kind == "capture":
            return self.capture_rows
        return None

    @property
    def net(self) -> int | None:
        if self.sink_kind == "count":
            return self.sink.net
        if self.sink_kind == "capture":
            return self.capture_net
        return None

    def stats(self) -> dict[str, dict[str, int]]:
        return {"bosses (k = m1)": self.bosses.stats(), "people (k = m2)": self.people.stats()}


# --------------------------------------------------------------------------- phases
def run(args: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {"notes": [], "load": {}, "changes": [], "profile": {}}
    n = args.n
    res["loadavg_start"] = os.getloadavg()
    res["code"] = git_rev()

    t0 = now()
    spark = None
    if args.kernel in ("spark", "auto"):
        from dsql.runtime.kernel.spark import SparkKernel

        if args.kernel == "spark":
            kernel = SparkKernel()
            spark = kernel.spark
        else:
            from dsql.runtime.kernel.auto import AutoKernel

            kernel = AutoKernel(notice=None)
            spark = kernel.spark  # started up front, so no round pays for it
        res["session_start_s"] = now() - t0
        t1 = now()
        spark.range(1).count()
        res["first_action_s"] = now() - t1
    else:
        from dsql.runtime.kernel.local import LocalKernel

        kernel = LocalKernel()
    jobs = Jobs(spark)
    res["mem_start"] = memory()

    table = manages_table(n)
    import duckdb
    import numpy as np

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    p_all = table["m1"]

    if not args.book_only:
        # ---------------------------------------------------------------- 1. load
        flow = Dataflow(kernel, args.sink)
        prof = Profile(flow.worker, jobs)
        print(f"[load] N={n:,} kernel={args.kernel} sink={args.sink}", flush=True)
        j0 = jobs.last()
        t0 = now()
        flow.input.load_arrow(table)
        flow.input.advance_to(1)
        flow.input.flush()
        t_stage = now() - t0
        prof.begin("load")
        prof.add("input flush (Arrow -> frame)", t_stage, jobs.last() - j0)
        t_round = flow.step()
        prof.end()
        res["load"] = {
            "stage_s": t_stage,
            "round_s": t_round,
            "total_s": t_stage + t_round,
            "jobs": jobs.last() - j0,
            "rows_out": flow.rows_out,
            "net": flow.net,
            "poll_s": flow.poll_s,
        }
        res["stats_after_load"] = flow.stats()
        res["mem_after_load"] = memory()
        print(f"[load] {ms(t_stage + t_round)} ({res['load']['jobs']} jobs)", flush=True)

        # ---------------------------------------------------------------- 2. single-change rounds
        t = 1
        used_hi = n  # single changes use p from the top down; change loops from 1 up
        lat = []
        warm = []
        j0 = jobs.last()
        for i in range(args.warmup + args.rounds):
            if i == args.warmup:
                j0 = jobs.last()
            p = used_hi - 1
            used_hi -= 1
            t0 = now()
            flow.input.remove((p // 2, p))
            flow.input.insert((p // 3, p))
            t += 1
            flow.input.advance_to(t)
            flow.input.flush()
            flow.step()
            (lat if i >= args.warmup else warm).append(now() - t0)
        res["rounds"] = {
            "n": len(lat),
            "p50": median(lat),
            "p95": pct(lat, 0.95),
            "max": max(lat, default=0),
            "min": min(lat, default=0),
            "jobs_per_round": (jobs.last() - j0) / max(1, len(lat)),
            "all": lat,
            "warmup": warm,
        }
        print(f"[rounds] p50 {ms(res['rounds']['p50'])} p95 {ms(res['rounds']['p95'])}", flush=True)

        # ---------------------------------------------------------------- 3. change loops
        next_p = 1
        for k in args.changes:
            if next_p + k >= used_hi:
                res["notes"].append(f"change loop K={k:,} skipped: not enough rows (N={n:,})")
                continue
            print(f"[changes] K={k:,}", flush=True)
            j0 = jobs.last()
            t0 = now()
            base = t
            for p in range(next_p, next_p + k):
                at = base + (p - next_p)
                flow.input.update_at((p // 2, p), at, -1)
                flow.input.update_at((p // 3, p), at, +1)
            t = base + k
            flow.input.advance_to(t)
            t_loop = now() - t0
            flow.input.flush()
            t_stage = now() - t0
            before = flow.rows_out
            label = f"K={k:,}"
            prof.begin(label)
            prof.add("input flush (Arrow -> frame)", t_stage - t_loop, jobs.last() - j0)
            t_round = flow.step()
            prof.end()
            next_p += k
            res["changes"].append(
                {
                    "k": k,
                    "python_loop_s": t_loop,
                    "stage_s": t_stage,
                    "round_s": t_round,
                    "total_s": t_stage + t_round,
                    "jobs": jobs.last() - j0,
                    "rows_out": (flow.rows_out - before) if before is not None else None,
                    "per_s_round": k / t_round,
                    "per_s_total": k / (t_stage + t_round),
                }
            )
            print(f"[changes] K={k:,}: {ms(t_round)} round, {ms(t_stage)} staging", flush=True)

        # ---------------------------------------------------------------- 4. profiled rounds
        if args.profile_rounds:
            totals = []
            jround = []
            for _ in range(args.profile_rounds):
                p = used_hi - 1
                used_hi -= 1
                j0 = jobs.last()
                t0 = now()
                flow.input.remove((p // 2, p))
                flow.input.insert((p // 3, p))
                t += 1
                flow.input.advance_to(t)
                t1 = now()
                flow.input.flush()
                t_flush = now() - t1
                prof.begin("single")
                prof.add("input flush (Arrow -> frame)", t_flush)
                flow.step()
                prof.end()
                totals.append(now() - t0)
                jround.append(jobs.last() - j0)
            res["single_profiled"] = {
                "rounds": args.profile_rounds,
                "p50": median(totals),
                "jobs": median(jround),
            }
        res["profile"] = {phase: prof.summary(phase) for phase in prof.phases}

        res["stats_final"] = flow.stats()
        res["trace_dir_bytes"] = dir_bytes(getattr(kernel, "_root", None))
        res["mem_after_rounds"] = memory()
        final_rows_out, final_net = flow.rows_out, flow.net

        # check: the join over the final input, recomputed by DuckDB

        m2 = table["m2"].to_numpy().copy()

        changed = np.zeros(n, dtype=bool)
        changed[1:next_p] = True
        changed[used_hi:] = True
        m2[changed] = np.arange(n)[changed] // 3
        final = pa.table({"m2": pa.array(m2), "m1": p_all})
        con.register("final_manages", final)
        expected = con.execute(
            "SELECT count(*) FROM final_manages a JOIN final_manages b ON a.m1 = b.m2"
        ).fetchall()[0][0]
        res["check"] = {"expected": expected, "net": final_net, "rows_out": final_rows_out}

        # release the first dataflow's traces before the next phases
        flow.worker.drop(list(flow.worker.nodes))
        del flow

    # ---------------------------------------------------------------- 5. the book
    if args.book or args.book_only:
        kb = n if args.book_changes is None else args.book_changes
        print(f"[book] load N={n:,} + {kb:,} changes in one flush", flush=True)
        book = Dataflow(kernel, args.sink)
        bprof = Profile(book.worker, jobs)
        j0 = jobs.last()
        t0 = now()
        book.input.load_arrow(table)
        book.input.advance_to(1)
        book.input.flush()
        t_load_stage = now() - t0
        bprof.begin("book load")
        bprof.add("input flush (Arrow -> frame)", t_load_stage)
        t_load = book.step()
        bprof.end()
        # the book's loop, staged as one Arrow table (each change at its own time p)
        t1 = now()

        ps = np.arange(1, kb + 1, dtype="int64")
        ps = ps[ps < n]
        times = np.repeat(ps + 1, 2)  # time p+1 >= the input's time 1
        m1 = np.repeat(ps, 2)
        m2 = np.empty_like(m1)
        m2[0::2] = ps // 2
        m2[1::2] = ps // 3
        diffs = np.tile(np.array([-1, 1], dtype="int64"), len(ps))
        changes = pa.table({"m2": m2, "m1": m1, "__time__": times, "__diff__": diffs})
        t_build = now() - t1
        t2 = now()
        book.input.load_arrow(changes)
        book.input.advance_to(int(times[-1]) + 1 if len(times) else 2)
        book.input.flush()
        t_stage = now() - t2
        bprof.begin("book changes")
        bprof.add("input flush (Arrow -> frame)", t_stage)
        t_changes = book.step()
        bprof.end()
        for phase in bprof.phases:
            res["profile"][phase] = bprof.summary(phase)
        res["book"] = {
            "n": n,
            "k": int(len(ps)),
            "load_stage_s": t_load_stage,
            "load_round_s": t_load,
            "build_s": t_build,
            "stage_s": t_stage,
            "round_s": t_changes,
            "total_s": t_load_stage + t_load + t_stage + t_changes,
            "jobs": jobs.last() - j0,
            "net": book.net,
            "rows_out": book.rows_out,
            "stats": book.stats(),
        }
        res["mem_after_book"] = memory()
        # expected join size after all changes: every p in 1..k now reports to p//3
        m2f = table["m2"].to_numpy().copy()
        m2f[ps] = ps // 3
        con.register("book_final", pa.table({"m2": pa.array(m2f), "m1": p_all}))
        res["book"]["expected"] = con.execute(
            "SELECT count(*) FROM book_final a JOIN book_final b ON a.m1 = b.m2"
        ).fetchall()[0][0]
        print(f"[book] {ms(res['book']['total_s'])}", flush=True)
        book.worker.drop(list(book.worker.nodes))
        del book

    # ---------------------------------------------------------------- 6. baselines
    print("[baselines]", flush=True)
    base: dict[str, Any] = {}
    q_count = "SELECT count(*) AS n FROM {m} a JOIN {m} b ON a.m1 = b.m2"
    q_rows = "SELECT a.m1 AS k, a.m2 AS boss, b.m1 AS person FROM {m} a JOIN {m} b ON a.m1 = b.m2"
    con.register("manages", table)
    con.execute(q_count.format(m="manages")).fetchall()  # warm
    xs = []
    for _ in range(args.reps):
        t0 = now()
        base_count = con.execute(q_count.format(m="manages")).fetchall()[0][0]
        xs.append(now() - t0)
    base["duckdb_count"] = xs
    xs = []
    for _ in range(args.reps):
        t0 = now()
        out = con.sql(q_rows.format(m="manages")).to_arrow_table()
        xs.append(now() - t0)
        del out
    base["duckdb_arrow"] = xs
    base["join_rows"] = base_count

    if spark is not None:
        sc_jobs = Jobs(spark)
        xs = []
        for _ in range(args.trivial_reps):
            t0 = now()
            spark.range(1).count()
            xs.append(now() - t0)
        base["spark_trivial"] = xs
        t0 = now()
        sdf = spark.createDataFrame(table).cache()
        sdf.count()
        base["spark_cache_s"] = now() - t0
        sdf.createOrReplaceTempView("bench_manages")
        spark.sql(q_count.format(m="bench_manages")).collect()  # warm
        xs = []
        j0 = sc_jobs.last()
        for _ in range(args.reps):
            t0 = now()
            got = spark.sql(q_count.format(m="bench_manages")).collect()[0][0]
            xs.append(now() - t0)
        base["spark_count_jobs"] = (sc_jobs.last() - j0) / args.reps
        assert got == base_count, (got, base_count)
        base["spark_count"] = xs
        xs = []
        for _ in range(args.arrow_reps):
            t0 = now()
            out = spark.sql(q_rows.format(m="bench_manages")).toArrow()
            xs.append(now() - t0)
            del out
        base["spark_arrow"] = xs
        sdf.unpersist(blocking=True)
        spark.catalog.dropTempView("bench_manages")
    res["baselines"] = base
    res["mem_end"] = memory()
    res["loadavg_end"] = os.getloadavg()
    return res


# --------------------------------------------------------------------------- reporting
def figures(args: argparse.Namespace, res: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, value, note) rows for the console table and RESULTS.md."""
    rows: list[tuple[str, str, str]] = []
    b = res["baselines"]
    if "session_start_s" in res:
        rows.append(
            (
                "Spark session start / first action",
                f"{ms(res['session_start_s'])} / {ms(res['first_action_s'])}",
                "once",
            )
        )
    load = res.get("load")
    if load:
        rows.append(
            (
                f"load N={args.n:,}: total",
                ms(load["total_s"]),
                f"flush {ms(load['stage_s'])} + round {ms(load['round_s'])}; "
                f"{load['jobs']} Spark jobs; {_n(load['rows_out'])} output rows"
                + (f"; capture poll {ms(load['poll_s'])}" if args.sink == "capture" else ""),
            )
        )
    r = res.get("rounds")
    if r:
        warm = r.get("warmup") or []
        rows.append(
            (
                f"single-change round p50 / p95 ({r['n']} rounds)",
                f"{ms(r['p50'])} / {ms(r['p95'])}",
                f"min {ms(r['min'])}, max {ms(r['max'])}; "
                f"{r['jobs_per_round']:.1f} Spark jobs/round"
                + (
                    f"; after {len(warm)} warm-up rounds "
                    f"({', '.join(ms(x) for x in warm)}), not counted"
                    if warm
                    else ""
                ),
            )
        )
    sp = res.get("single_profiled")
    if sp:
        rows.append(
            (
                f"single-change round p50, profiled ({sp['rounds']} rounds)",
                ms(sp["p50"]),
                f"{sp['jobs']:.0f} Spark jobs/round; breakdown below",
            )
        )
    for c in res["changes"]:
        rows.append(
            (
                f"{c['k']:,} changes at {c['k']:,} times, one flush",
                f"{c['per_s_total']:,.0f} changes/s",
                f"round {ms(c['round_s'])} ({c['per_s_round']:,.0f}/s), staging "
                f"{ms(c['stage_s'])} (update_at loop {ms(c['python_loop_s'])}); "
                f"{c['jobs']} jobs; {_n(c['rows_out'])} output rows",
            )
        )
    if res.get("pathway"):
        rows += pathway_peer.rows(res["pathway"], args.n, ms)
    if "book" in res:
        bk = res["book"]
        ok = (
            "" if bk["net"] is None else (" (OK)" if bk["net"] == bk["expected"] else " (MISMATCH)")
        )
        rate = bk["k"] / max(bk["round_s"] + bk["stage_s"], 1e-9)
        rows.append(
            (
                f"book: load {bk['n']:,} + {bk['k']:,} changes at their own times",
                ms(bk["total_s"]),
                f"target for 10M + 10M: <= 40 s. Load "
                f"{ms(bk['load_stage_s'] + bk['load_round_s'])}; changes in one flush: flush "
                f"{ms(bk['stage_s'])} + round {ms(bk['round_s'])} ({rate:,.0f} changes/s); "
                f"{bk['jobs']} jobs; join size {_n(bk['net'])} vs "
                f"DuckDB {_n(bk['expected'])}{ok}",
            )
        )
        for name, st in bk["stats"].items():
            rows.append(
                (
                    f"book arrangement {name}",
                    f"{st['rows']:,} rows, {gib(st['bytes'])}, {st['batches']} batch(es)",
                    "after the changes",
                )
            )
    rows.append(
        (
            "DuckDB recompute: count(*) of the join",
            ms(median(b["duckdb_count"])),
            f"median of {len(b['duckdb_count'])}; {b['join_rows']:,} rows",
        )
    )
    rows.append(
        (
            "DuckDB recompute: join to Arrow",
            ms(median(b["duckdb_arrow"])),
            f"median of {len(b['duckdb_arrow'])}",
        )
    )
    if "spark_count" in b:
        rows.append(
            (
                "Spark SQL recompute (cached DF): count(*)",
                ms(median(b["spark_count"])),
                f"median of {len(b['spark_count'])}; {b['spark_count_jobs']:.0f} jobs each; "
                f"caching took {ms(b['spark_cache_s'])}",
            )
        )
        rows.append(
            (
                "Spark SQL recompute (cached DF): toArrow",
                ms(median(b["spark_arrow"])),
                f"median of {len(b['spark_arrow'])}",
            )
        )
        rows.append(
            (
                "Spark trivial action spark.range(1).count()",
                f"{ms(median(b['spark_trivial']))} p50",
                f"p95 {ms(pct(b['spark_trivial'], 0.95))} over {len(b['spark_trivial'])}",
            )
        )
    if r:
        p50 = r["p50"]
        if "spark_count" in b:
            rows.append(
                (
                    "ratio: round p50 / Spark recompute (count)",
                    _ratio(p50, median(b["spark_count"])),
                    "target at N=10M: <= 1/100",
                )
            )
            rows.append(
                (
                    "ratio: round p50 / trivial Spark action",
                    f"{p50 / median(b['spark_trivial']):.1f}x",
                    "target: <= 5x",
                )
            )
        rows.append(
            (
                "ratio: round p50 / DuckDB recompute (count)",
                _ratio(p50, median(b["duckdb_count"])),
                "",
            )
        )
        rows.append(
            (
                "ratio: round p50 / DuckDB recompute (to Arrow)",
                _ratio(p50, median(b["duckdb_arrow"])),
                "",
            )
        )
    for name, st in res.get("stats_after_load", {}).items():
        fin = res["stats_final"][name]
        rows.append(
            (
                f"arrangement {name}",
                f"{st['rows']:,} rows, {gib(st['bytes'])}, {st['batches']} batch(es)",
                f"after rounds and change loops: {fin['rows']:,} rows, {gib(fin['bytes'])}, "
                f"{fin['batches']} batches",
            )
        )
    if res.get("trace_dir_bytes"):
        rows.append(
            ("Parquet trace files on disk (end of phases 1-4)", gib(res["trace_dir_bytes"]), "")
        )
    for label, key in (
        ("after start", "mem_start"),
        ("after load", "mem_after_load"),
        ("after rounds+changes", "mem_after_rounds"),
        ("after book", "mem_after_book"),
        ("at end", "mem_end"),
    ):
        m = res.get(key)
        if not m:
            continue
        jvm = f"JVM RSS {gib(m['jvm_rss'])} (peak {gib(m['jvm_peak'])}), " if "jvm_rss" in m else ""
        rows.append(
            (
                f"memory {label}",
                jvm + f"driver Python RSS {gib(m['python_rss'])}",
                f"Python peak {gib(m['python_peak'])}",
            )
        )
    ck = res.get("check")
    if ck and ck["net"] is not None:
        ok = "OK" if ck["net"] == ck["expected"] else "MISMATCH"
        rows.append(
            (
                "check: join size (sum of output diffs) vs DuckDB",
                f"{ck['net']:,} vs {ck['expected']:,}",
                ok,
            )
        )
    elif ck:
        rows.append(("check", "-", "probe sink: the output is never evaluated"))
    return rows


def _n(x: int | None) -> str:
    return "-" if x is None else f"{x:,}"


def _ratio(a: float, b: float) -> str:
    return f"1/{b / a:.1f}" if a < b else f"{a / b:.1f}x"


def profile_rows(res: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """A table: one row per step, one column per profiled phase: "time (jobs)"."""
    prof = res.get("profile") or {}
    phases = list(prof)
    if not phases:
        return [], []
    labels = {label for summary in prof.values() for label in summary}

    def order(label: str) -> tuple:
        if label.startswith("input"):
            return (0, 0, 0)
        if label.startswith(("step", "finish")):
            kind, rest = label.split(" ", 1)
            return (1, int(rest.split(":", 1)[0]), kind == "finish")
        return (2, 0, label)

    rows = []
    for label in sorted(labels, key=order):
        if all(
            prof[phase].get(label, (0.0, 0))[0] < 5e-5 and not prof[phase].get(label, (0, 0))[1]
            for phase in phases
        ):
            continue  # a step that takes no time anywhere (e.g. finish of a stateless node)
        cells = [label]
        for phase in phases:
            t, j = prof[phase].get(label, (0.0, 0.0))
            cells.append(f"{ms(t)}" + (f" ({j:.1f} j)" if j else ""))
        rows.append(cells)
    return phases, rows


def profile_caption(res: dict[str, Any]) -> str:
    sp = res.get("single_profiled")
    extra = (
        (
            f"'single' is the median of {sp['rounds']} profiled single-change rounds (round p50 "
            f"{ms(sp['p50'])}, {sp['jobs']:.0f} Spark jobs). "
        )
        if sp
        else ""
    )
    return (
        "Where the time goes, per profiled round: median time (and Spark jobs, 'j') of each "
        "node's step and finish, and of the kernel calls (outermost level only; they overlap "
        "the node rows). " + extra
    )


def print_console(args: argparse.Namespace, res: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    table = Table(title=f"skip-level join, kernel={args.kernel}, N={args.n:,}, sink={args.sink}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("note")
    for row in figures(args, res):
        table.add_row(*row)
    console.print(table)
    phases, prof = profile_rows(res)
    if prof:
        console.print(profile_caption(res))
        pt = Table()
        pt.add_column("step")
        for phase in phases:
            pt.add_column(phase, justify="right")
        for row in prof:
            pt.add_row(*row)
        console.print(pt)
    for note in res["notes"]:
        console.print(f"note: {note}")


def section_title(args: argparse.Namespace) -> str:
    extra = ", book only" if args.book_only else ""
    return f"## skip_level: kernel={args.kernel}, N={args.n:,}, sink={args.sink}{extra}"


def markdown(args: argparse.Namespace, res: dict[str, Any], command: str) -> str:
    lines = [section_title(args), ""]
    la0, la1 = res["loadavg_start"], res["loadavg_end"]
    lines += [
        f"- date: {dt.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- machine: {machine()}; shared with other jobs (load average "
        f"{la0[0]:.1f} at start, {la1[0]:.1f} at end), so timings are noisy: repeated "
        "figures are medians",
        f"- code: {res.get('code') or git_rev()} (at the start of the run); "
        f"Python {platform.python_version()}",
        f"- command: `{command}`",
        "",
        "| figure | value | note |",
        "|---|---:|---|",
    ]
    for f, v, n in figures(args, res):
        lines.append(f"| {f} | {v} | {n} |")
    phases, prof = profile_rows(res)
    if prof:
        lines += [
            "",
            profile_caption(res),
            "",
            "| step | " + " | ".join(phases) + " |",
            "|---|" + "---:|" * len(phases),
        ]
        for row in prof:
            lines.append("| " + " | ".join(row) + " |")
    if "rounds" in res:
        lat = res["rounds"]["all"]
        lines += [
            "",
            "Single-change round latencies (ms, in order): "
            + ", ".join(f"{x * 1000:.0f}" for x in lat),
        ]
    for note in res["notes"]:
        lines.append(f"\nNote: {note}")
    return "\n".join(lines) + "\n"


def update_results(args: argparse.Namespace, res: dict[str, Any], command: str) -> None:
    text = (
        RESULTS.read_text()
        if RESULTS.exists()
        else (
            "# Benchmark results\n\nWritten by the scripts in this directory (see README.md); "
            "each section is replaced when its configuration is run again.\n\n"
        )
    )
    section = markdown(args, res, command)
    title = section_title(args)
    pattern = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text.rstrip("\n") + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="rows of manages (default 1M)")
    ap.add_argument("--rounds", type=int, default=30, help="single-change rounds (default 30)")
    ap.add_argument(
        "--changes",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=[10_000],
        help="comma-separated K for the change loop (default 10000)",
    )
    ap.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="single-change rounds run before the timed ones, not counted (default 3)",
    )
    ap.add_argument("--kernel", choices=("spark", "auto", "local"), default="spark")
    ap.add_argument(
        "--sink",
        choices=("count", "capture", "probe"),
        default="count",
        help="count: aggregate action per round (default); capture: collect to "
        "the driver; probe: nothing evaluates the join output",
    )
    ap.add_argument(
        "--profile-rounds",
        type=int,
        default=5,
        help="extra single-change rounds timed per node and kernel call (default 5)",
    )
    ap.add_argument(
        "--book",
        action="store_true",
        help="also run load + N changes in one flush on a fresh dataflow",
    )
    ap.add_argument(
        "--book-only", action="store_true", help="run only the book phase (and the baselines)"
    )
    ap.add_argument("--book-changes", type=int, default=None, help="changes for --book (default N)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each recompute baseline")
    ap.add_argument("--arrow-reps", type=int, default=3, help="repetitions of Spark's toArrow")
    ap.add_argument("--trivial-reps", type=int, default=30)
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    ap.add_argument(
        "--pathway",
        action="store_true",
        help="also run the workload in Pathway (pathway_peer.py), if importable",
    )
    ap.add_argument(
        "--pathway-python",
        default=sys.executable,
        help="the interpreter with pathway installed (default: this one)",
    )
    args = ap.parse_args(argv)
    command = "python benchmarks/skip_level.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    t0 = now()
    res = run(args)
    if args.pathway:
        print("[pathway]", flush=True)
        res["pathway"], why = pathway_peer.run_subprocess(
            args.pathway_python,
            args.n,
            args.rounds,
            args.warmup,
            args.changes,
            "rows" if args.sink == "capture" else "count",
        )
        if why:
            print(why, flush=True)
            res["notes"].append(why)
    res["notes"].append(f"whole run took {ms(now() - t0)}")
    print_console(args, res)
    if not args.no_write:
        update_results(args, res, command)
        print(f"updated {RESULTS}")


if __name__ == "__main__":
    main()
