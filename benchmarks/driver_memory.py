"""Driver memory under a big view on Spark: bounded by the change, not by the data.

Through the SQL surface, with the driver held to `--driver-memory` (default 1g): a table
`t(k, g, v)` of `--rows` rows (default 20,000,000) written as Parquet by Spark's
executors (`spark.range`) and loaded from that path (`create_table`: read, stamped and
stored by the executors), a dimension `w(g, region)` built by `spark.range`, and two
materialized views over them:

    agg:  SELECT w.region, count(*) AS n, sum(t.v) AS s FROM t JOIN w ON t.g = w.g
          GROUP BY w.region
    flt:  SELECT k, v FROM t WHERE v < 500            (about half the rows)

`agg` is watched by SUBSCRIBE. Each of `--rounds` rounds inserts `--change` rows and
deletes as many (`DELETE ... WHERE k BETWEEN ...`), advances the clock and fetches the
subscription's updates. Then `flt`'s full contents are fetched through
`con.table("flt").batches()` (at most `fetch_rows` rows a batch in the driver), and
both views are checked against Spark SQL computing them from scratch over the table's
final contents (`con.table("t").to_spark()`), which is also timed.

Figures: the driver JVM's heap peak (`jstat -gc` sampled every 0.2 s: used eden,
survivor and old space) and its maximum; the Python process's peak RSS
(`ru_maxrss`) and its RSS before the load; seconds per phase and per round.

    python benchmarks/driver_memory.py                       # local[2], 20M rows, 1g
    python benchmarks/driver_memory.py --rows 2000000 --driver-memory 512m --no-write
    python benchmarks/driver_memory.py --cluster             # tests/cluster.py (root)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

AGG = "SELECT w.region, count(*) AS n, sum(t.v) AS s FROM t JOIN w ON t.g = w.g GROUP BY w.region"
FLT = "SELECT k, v FROM t WHERE v < 500"
#: Distinct join keys of `t` (and rows of `w`), and regions they fall into.
KEYS = 100_000
REGIONS = 50


class HeapSampler:
    """The peak heap use of a JVM, sampled with `jstat -gc` in a thread until `stop`."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.pid, self.every = pid, every
        self.peak = 0
        self.capacity = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        done = subprocess.run(
            ["jstat", "-gc", str(self.pid)], capture_output=True, text=True, check=False
        )
        lines = done.stdout.split("\n")
        if done.returncode != 0 or len(lines) < 2:
            return
        fields = dict(zip(lines[0].split(), lines[1].split(), strict=False))
        kb = {k: float(v) for k, v in fields.items() if v.replace(".", "", 1).isdigit()}
        used = sum(kb.get(k, 0.0) for k in ("S0U", "S1U", "EU", "OU")) * 1024
        capacity = sum(kb.get(k, 0.0) for k in ("S0C", "S1C", "EC", "OC")) * 1024
        self.peak = max(self.peak, int(used))
        self.capacity = max(self.capacity, int(capacity))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def jvm_pid() -> int | None:
    """The driver JVM: a `java` process among this process's descendants."""
    children = {os.getpid()}
    found = None
    for _ in range(3):  # spark-submit's shell, then java
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = (entry / "status").read_text()
                cmd = (entry / "cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            parent = int(status.split("PPid:")[1].split()[0])
            if parent in children:
                children.add(int(entry.name))
                if cmd.endswith(b"java"):
                    found = int(entry.name)
    return found


def rss_mb() -> float:
    """This process's resident memory now (MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(master: str | None, state_uri: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """The workload (module docstring) in this process; its figures."""
    import pyarrow as pa

    import dsql
    from dsql.runtime.spark_session import get_spark

    rows, change, rounds = options["rows"], options["change"], options["rounds"]
    conf = {"spark.driver.memory": options["driver_memory"]}
    if master is not None:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from cluster import driver_conf

        conf = {**driver_conf(), **conf}
    res: dict[str, Any] = {"rss_start_mb": rss_mb()}
    spark = get_spark(master=master, conf=conf)
    pid = jvm_pid()
    sampler = HeapSampler(pid) if pid is not None else None
    # Outside /tmp: a cluster's workers each have a private one (tests/cluster.py).
    root = options["data"] or tempfile.mkdtemp(prefix="dsql-driver-memory-", dir="/var/tmp")
    path = f"{root}/t"
    if not Path(path).exists():
        started = time.perf_counter()
        spark.range(0, rows).selectExpr(
            "id AS k", f"id % {KEYS} AS g", "(id * 7919) % 1000 AS v"
        ).write.parquet(path)
        res["write_s"] = time.perf_counter() - started
    res["rss_spark_mb"] = rss_mb()
    con = dsql.connect(
        spark=spark, kernel="auto", placement_threshold=options["threshold"], state_uri=state_uri
    )
    con.execute(f"SET fetch_rows = {options['fetch_rows']}")
    started = time.perf_counter()
    con.create_table("t", path)
    dims = spark.range(0, KEYS).selectExpr("id AS g", f"concat('r', id % {REGIONS}) AS region")
    con.create_table("w", dims)
    res["load_s"] = time.perf_counter() - started
    started = time.perf_counter()
    con.execute(f"CREATE MATERIALIZED VIEW agg AS {AGG}")
    con.execute(f"CREATE MATERIALIZED VIEW flt AS {FLT}")
    res["views_s"] = time.perf_counter() - started
    sub = con.cursor()
    sub.execute("DECLARE c CURSOR FOR SUBSCRIBE agg")
    sub.execute("FETCH ALL c")
    res["snapshot_rows"] = len(sub.fetchall())
    res["rounds_s"] = []
    res["round_updates"] = []
    for r in range(rounds):
        started = time.perf_counter()
        low = rows + r * change
        con.execute(
            f"INSERT INTO t SELECT k, k % {KEYS}, (k * 7919) % 1000 FROM "
            f"generate_series({low}, {low + change - 1}) AS s(k)"
        )
        con.execute(f"DELETE FROM t WHERE k BETWEEN {r * change} AND {(r + 1) * change - 1}")
        con.execute("ADVANCE BY 1000")
        sub.execute("FETCH ALL c")
        res["round_updates"].append(len(sub.fetchall()))
        res["rounds_s"].append(time.perf_counter() - started)
    started = time.perf_counter()
    fetched, total, largest = 0, 0, 0
    for batch in con.table("flt").batches():
        fetched += batch.num_rows
        total += sum(v for v in batch.column("v").to_pylist())
        largest = max(largest, batch.num_rows)
    res["fetch_s"] = time.perf_counter() - started
    res["fetched_rows"], res["largest_batch"] = fetched, largest
    got_agg = sorted(con.execute("SELECT * FROM agg").fetchall())
    # Spark SQL from scratch over the table's final contents (the executors' copy).
    final = con.table("t").to_spark()
    final.createOrReplaceTempView("t_final")
    dims.createOrReplaceTempView("w_final")
    started = time.perf_counter()
    want_agg = sorted(
        tuple(r)
        for r in spark.sql(
            AGG.replace("FROM t ", "FROM t_final t ").replace("JOIN w ", "JOIN w_final w ")
        ).collect()
    )
    res["spark_sql_agg_s"] = time.perf_counter() - started
    started = time.perf_counter()
    want = spark.sql(
        FLT.replace("FROM t ", "FROM t_final ").replace("k, v", "count(*), sum(v)")
    ).head()
    res["spark_sql_flt_s"] = time.perf_counter() - started
    res["check"] = (
        "OK"
        if got_agg == want_agg and (fetched, total) == (want[0], want[1] or 0)
        else f"MISMATCH agg={got_agg == want_agg} flt={(fetched, total)} vs {tuple(want)}"
    )
    con.close()
    if not options["data"]:
        shutil.rmtree(root, ignore_errors=True)
    if sampler is not None:
        sampler.stop()
        res["heap_peak_mb"] = sampler.peak / 2**20
        res["heap_capacity_mb"] = sampler.capacity / 2**20
    res["rss_peak_mb"] = peak_rss_mb()
    res["arrow_pool_peak_mb"] = pa.default_memory_pool().max_memory() / 2**20
    return res


def table(args: argparse.Namespace, res: dict[str, Any]) -> list[tuple[str, str, str]]:
    rounds = res["rounds_s"]
    heap = res.get("heap_peak_mb")
    return [
        ("rows", f"{args.rows:,}",
         f"driver memory {args.driver_memory}; placement threshold {args.threshold:,}; "
         f"fetch_rows {args.fetch_rows:,}"),
        ("driver JVM heap peak", "n/a" if heap is None else f"{heap:.0f} MB",
         f"of {res.get('heap_capacity_mb', 0):.0f} MB committed; jstat every 0.2 s"),
        ("Python RSS peak", f"{res['rss_peak_mb']:.0f} MB",
         f"{res['rss_spark_mb']:.0f} MB once Spark started"),
        ("Arrow memory pool peak", f"{res['arrow_pool_peak_mb']:.0f} MB",
         "every Arrow table the driver built"),
        ("load (executors)", f"{res['load_s']:.1f} s", "create_table of the Parquet path"),
        ("create both views", f"{res['views_s']:.1f} s", "hydration"),
        ("round", f"{sorted(rounds)[len(rounds) // 2]:.1f} s",
         f"median of {len(rounds)}: {args.change} inserts + {args.change} deletes, "
         f"SUBSCRIBE fetched; each {', '.join(f'{x:.1f}' for x in rounds)}"),
        ("fetch flt through batches", f"{res['fetch_s']:.1f} s",
         f"{res['fetched_rows']:,} rows, largest batch {res['largest_batch']:,}"),
        ("Spark SQL: agg from scratch", f"{res['spark_sql_agg_s']:.1f} s", "the final table"),
        ("Spark SQL: flt count from scratch", f"{res['spark_sql_flt_s']:.1f} s", ""),
        ("check", res["check"], "both views against Spark SQL"),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--driver-memory", default="1g")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--change", type=int, default=1000, help="rows inserted and deleted a round")
    ap.add_argument("--fetch-rows", type=int, default=100_000)
    ap.add_argument("--threshold", type=int, default=1_000_000, help="placement threshold")
    ap.add_argument("--data", default=None, help="a directory to keep the Parquet data in")
    ap.add_argument("--cluster", action="store_true", help="tests/cluster.py's cluster")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)
    options = {
        "rows": args.rows,
        "change": args.change,
        "rounds": args.rounds,
        "driver_memory": args.driver_memory,
        "fetch_rows": args.fetch_rows,
        "threshold": args.threshold,
        "data": args.data,
    }
    load = os.getloadavg()[0]
    if args.cluster:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from cluster import Cluster

        cluster = Cluster(Path(tempfile.mkdtemp(prefix="dsql-cluster-", dir="/var/tmp")))
        cluster.start()
        try:
            res = cluster.run(measure, options)
        finally:
            cluster.stop()
    else:
        res = measure(None, None, options)
    if args.json:
        print(json.dumps(res))
        return res
    rows = table(args, res)
    for figure, value, note in rows:
        print(f"{figure:36} {value:>14}  {note}")
    if not args.no_write:
        from recursion import section_head, update_results

        where = "standalone cluster" if args.cluster else "local[2]"
        title = f"## driver_memory.py — {args.rows:,} rows, {where}, driver {args.driver_memory}"
        command = "python benchmarks/driver_memory.py " + shlex.join(argv or sys.argv[1:])
        lines = section_head(title, command, load)
        lines += [f"| {f} | {v} | {n} |" for f, v, n in rows]
        update_results("\n".join(lines) + "\n", title)
    return res


if __name__ == "__main__":
    main()
