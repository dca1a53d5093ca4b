"""Rounds on Spark against Spark's own floor: what a one-row round costs when the
arrangements live on Spark, in seconds and in Spark jobs.

Issue 38 item 3. In one process and one Spark session (local mode, or with `--cluster`
the standalone cluster of `tests/cluster.py`: a master and two one-core workers, each in
a mount namespace of its own, state under a root every process sees):

- **floor**: a trivial job (`spark.range(1).count()`); a broadcast-join probe of one key
  against a cached table partitioned by key; a filter by key on a stored Parquet table.
- **join**: tables `customers(id, region)` and `orders(id, customer, amount)` and the
  maintained view `SELECT c.region, count(*), sum(o.amount) FROM orders o JOIN customers c
  ON o.customer = c.id GROUP BY c.region` watched by `SUBSCRIBE`, per kernel in `--kernels`
  (`spark`: every step on Spark; `auto` with `--threshold` rows, so the orders'
  arrangements live on Spark; `local`: every step in-process, the floor the others are
  compared with): hydration (load, create, snapshot); one-row rounds
  (`INSERT` or `DELETE` of an order, `ADVANCE BY 1`, `FETCH ALL`), p50 / p95 and Spark
  jobs per round; `--changes` order inserts, each at its own millisecond, staged as one
  Arrow table with `__time__` and one `ADVANCE`: changes/s, and the subscription's
  output checked time by time against a model of the view (each insert moves its
  region's count and sum), the final view against DuckDB.
- **w1**: the skip-level join of `skip_level.py` over `--w1-n` rows at the runtime level
  (load, one-change rounds, `--changes` changes at their own times in one flush), per
  kernel, checked against DuckDB's count of the join.
- **baselines**, same run: Spark SQL recomputing each view over cached DataFrames
  (`collect`), DuckDB recomputing it over the Arrow tables.

Spark jobs are counted by the DAG scheduler's job counter (`skip_level.Jobs`), read
before and after each round.

    python benchmarks/spark_rounds.py --orders 300000 --customers 30000 --w1-n 10000000
    python benchmarks/spark_rounds.py --cluster --orders 300000 --customers 30000
    python benchmarks/spark_rounds.py --orders 500 --customers 50 --w1-n 2000 --rounds 2 --no-write
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent / "tests"))

from recursion import section_head, update_results  # noqa: E402
from skip_level import Dataflow, Jobs, manages_table, median, ms, pct  # noqa: E402

import dsql  # noqa: E402

VIEW = (
    "SELECT c.region, count(*) AS n, sum(o.amount) AS total "
    "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region"
)
W1 = "SELECT count(*) FROM manages b JOIN manages p ON b.m1 = p.m2"  # bosses.k = people.k
REGIONS = 20


def tables(customers: int, orders: int, seed: int) -> tuple[pa.Table, pa.Table]:
    """The join's two tables: customer i in region `r{i % 20}`, orders at random customers."""
    rng = np.random.default_rng(seed)
    ids = np.arange(customers, dtype=np.int32)
    cust = pa.table({"id": ids, "region": pa.array([f"r{i % REGIONS}" for i in range(customers)])})
    order = pa.table(
        {
            "id": np.arange(orders, dtype=np.int64),
            "customer": rng.integers(0, customers, orders, dtype=np.int32),
            "amount": rng.integers(1, 100, orders, dtype=np.int32),
        }
    )
    return cust, order


def timed(fn: Any, reps: int, jobs: Jobs | None = None) -> tuple[float, float]:
    """Median seconds of `reps` calls of `fn`, and the Spark jobs of one call."""
    times, counts = [], []
    for _ in range(reps):
        j0 = jobs.last() if jobs else 0
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        counts.append((jobs.last() - j0) if jobs else 0)
    return median(times), median(counts)


# --------------------------------------------------------------------------- the floor
def floor(spark: Any, jobs: Jobs, args: argparse.Namespace, root: str) -> dict[str, Any]:
    """Spark's own cost of the smallest things a round could do."""
    from pyspark.sql import functions as F

    out: dict[str, Any] = {}
    spark.range(1).count()  # warm
    out["trivial"] = timed(lambda: spark.range(1).count(), args.reps * 3, jobs)
    n = args.orders
    parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
    table = spark.range(n).selectExpr("id AS k", "id * 2 AS v").repartition(parts, "k").cache()
    table.count()
    probe = spark.createDataFrame([(n // 2,)], "k long")

    def broadcast_probe() -> None:
        rows = table.join(F.broadcast(probe), "k").collect()
        assert len(rows) == 1, rows

    broadcast_probe()
    out["broadcast_probe"] = timed(broadcast_probe, args.reps * 3, jobs)
    path = f"{root}/floor-{os.getpid()}"
    spark.range(n).selectExpr("id AS k", "id * 2 AS v").repartitionByRange(parts, "k").write.mode(
        "overwrite"
    ).parquet(path)
    stored = spark.read.parquet(path)

    def parquet_filter() -> None:
        rows = stored.where(F.col("k") == n // 3).collect()
        assert len(rows) == 1, rows

    parquet_filter()
    out["parquet_filter"] = timed(parquet_filter, args.reps * 3, jobs)
    table.unpersist()
    return out


# --------------------------------------------------------------------------- join + aggregate
def fetch(con: Any) -> list[tuple]:
    return con.execute("FETCH ALL c").fetchall()


def run_join(
    spark: Any, jobs: Jobs, kernel: str, args: argparse.Namespace, state_uri: str | None
) -> dict[str, Any]:
    """Hydration, one-row rounds and one flush of many times through the view on `kernel`."""
    from dsql.clock import TICKS_PER_MS

    cust, order = tables(args.customers, args.orders, args.seed)
    con = dsql.connect(
        spark=spark, kernel=kernel, placement_threshold=args.threshold, state_uri=state_uri
    )
    j0 = jobs.last()
    t0 = time.perf_counter()
    con.create_table("customers", cust)
    con.create_table("orders", order)
    con.execute(f"CREATE MATERIALIZED VIEW revenue AS {VIEW}")
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE revenue")
    snapshot = fetch(con)
    res: dict[str, Any] = {"hydration": (time.perf_counter() - t0, jobs.last() - j0)}
    region = {i: f"r{i % REGIONS}" for i in range(args.customers)}
    view = {r: (n, s) for _, _, r, n, s in snapshot}
    rng = np.random.default_rng(args.seed + 1)
    next_id = args.orders
    lat, per_round, changed = [], [], []
    for r in range(args.warmup + args.rounds):
        j0 = jobs.last()
        t0 = time.perf_counter()
        if r % 2 == 0:
            cid = int(rng.integers(args.customers))
            con.execute(f"INSERT INTO orders VALUES ({next_id}, {cid}, 7)")
            n, s = view.get(region[cid], (0, 0))
            view[region[cid]] = (n + 1, s + 7)
        else:
            con.execute(f"DELETE FROM orders WHERE id = {next_id}")
            n, s = view[region[cid]]
            view[region[cid]] = (n - 1, s - 7)
            next_id += 1
        con.execute("ADVANCE BY 1")
        got = fetch(con)
        if r >= args.warmup:
            lat.append(time.perf_counter() - t0)
            per_round.append(jobs.last() - j0)
            changed.append(len(got))
    res["rounds"], res["jobs"], res["changed"] = lat, per_round, changed
    # Many changes, each at a millisecond of its own, in one flush and one round.
    k = args.changes
    session = con.session
    start_ms = session.clock.now_ms() + 1
    cids = rng.integers(0, args.customers, k, dtype=np.int32)
    amounts = rng.integers(1, 100, k, dtype=np.int32)
    staged = pa.table(
        {
            "_c0": np.arange(next_id + 1, next_id + 1 + k, dtype=np.int64),
            "_c1": cids,
            "_c2": amounts,
            "__time__": (start_ms + np.arange(k, dtype=np.int64)) * TICKS_PER_MS,
            "__diff__": np.ones(k, dtype=np.int64),
        }
    )
    j0 = jobs.last()
    t0 = time.perf_counter()
    session.relations["orders"].input.load_arrow(staged)
    con.execute(f"ADVANCE TO {start_ms + k}")
    got = fetch(con)
    res["changes"] = (time.perf_counter() - t0, jobs.last() - j0)
    by_time: dict[int, Counter[tuple]] = {}
    for ts, diff, r_, n, s in got:
        by_time.setdefault(ts, Counter())[(r_, n, s)] += diff
    bad = 0
    for i in range(k):
        r_ = region[int(cids[i])]
        n, s = view.get(r_, (0, 0))
        new = (n + 1, s + int(amounts[i]))
        want = Counter({(r_, *new): 1})
        if n:
            want[(r_, n, s)] -= 1
        view[r_] = new
        if nonzero(by_time.pop(start_ms + i, Counter())) != nonzero(want):
            bad += 1
    res["per_time_check"] = "OK" if not bad and not by_time else f"MISMATCH at {bad} times"
    final = sorted(con.execute("SELECT * FROM revenue").fetchall())
    ok = final == sorted((r_, n, s) for r_, (n, s) in view.items() if n)
    mirror = duckdb.connect()
    mirror.register("customers", cust)
    mirror.register("orders", con.execute("SELECT * FROM orders").fetch_arrow_table())
    ok = ok and final == sorted(mirror.execute(VIEW).fetchall())
    ok = ok and sorted(row[2:] for row in snapshot) == recompute(cust, order)
    res["final_check"] = "OK" if ok else "MISMATCH (snapshot or final view against DuckDB)"
    con.close()
    return res


def nonzero(changes: Counter[tuple]) -> dict[tuple, int]:
    return {row: d for row, d in changes.items() if d}


def recompute(cust: pa.Table, order: pa.Table) -> list[tuple]:
    """The view's rows by DuckDB over the two tables."""
    con = duckdb.connect()
    con.register("customers", cust)
    con.register("orders", order)
    return sorted(con.execute(VIEW).fetchall())


def join_baselines(spark: Any, jobs: Jobs, args: argparse.Namespace) -> dict[str, Any]:
    """Spark SQL over cached DataFrames and DuckDB over Arrow, recomputing the view."""
    cust, order = tables(args.customers, args.orders, args.seed)
    out: dict[str, Any] = {}
    frames = [spark.createDataFrame(t.to_pandas()).cache() for t in (cust, order)]
    for name, frame in zip(("customers", "orders"), frames, strict=True):
        frame.count()
        frame.createOrReplaceTempView(name)
    spark.sql(VIEW).collect()
    out["spark"] = timed(lambda: spark.sql(VIEW).collect(), args.reps, jobs)
    for frame in frames:
        frame.unpersist()
    con = duckdb.connect()
    con.register("customers", cust)
    con.register("orders", order)
    out["duckdb"] = timed(lambda: con.execute(VIEW).fetchall(), args.reps)
    return out


# --------------------------------------------------------------------------- W1
def make_kernel(kind: str, spark: Any, threshold: int, state_uri: str | None) -> Any:
    from dsql.runtime.kernel.auto import AutoKernel
    from dsql.runtime.kernel.local import LocalKernel
    from dsql.runtime.kernel.spark import SparkKernel

    if kind == "local":
        return LocalKernel()
    if kind == "spark":
        return SparkKernel(spark, state_uri=state_uri)
    return AutoKernel(threshold, spark=spark, notice=None)


def run_w1(
    spark: Any, jobs: Jobs, kernel: str, args: argparse.Namespace, state_uri: str | None
) -> dict[str, Any]:
    """The skip-level join at the runtime level: load, one-change rounds, many times."""
    n = args.w1_n
    flow = Dataflow(make_kernel(kernel, spark, args.w1_threshold, state_uri), "count")
    j0 = jobs.last()
    t0 = time.perf_counter()
    flow.input.load_arrow(manages_table(n))
    flow.input.advance_to(1)
    flow.input.flush()
    flow.step()
    res: dict[str, Any] = {"hydration": (time.perf_counter() - t0, jobs.last() - j0)}
    t, top = 1, n
    lat, per_round = [], []
    for i in range(args.warmup + args.rounds):
        top -= 1
        j0 = jobs.last()
        t0 = time.perf_counter()
        flow.input.remove((top // 2, top))
        flow.input.insert((top // 3, top))
        t += 1
        flow.input.advance_to(t)
        flow.input.flush()
        flow.step()
        if i >= args.warmup:
            lat.append(time.perf_counter() - t0)
            per_round.append(jobs.last() - j0)
    res["rounds"], res["jobs"] = lat, per_round
    k = min(args.changes, top - 1)
    p = np.arange(1, k + 1, dtype=np.int64)
    staged = pa.table(
        {
            "m2": np.concatenate([p // 2, p // 3]),
            "m1": np.concatenate([p, p]),
            "__time__": np.concatenate([t + p, t + p]),
            "__diff__": np.concatenate([-np.ones(k, np.int64), np.ones(k, np.int64)]),
        }
    )
    j0 = jobs.last()
    t0 = time.perf_counter()
    flow.input.load_arrow(staged)
    flow.input.advance_to(t + k + 1)
    flow.input.flush()
    flow.step()
    res["changes"] = (time.perf_counter() - t0, jobs.last() - j0, k)
    final = manages_table(n).to_pandas()
    moved = np.arange(1, k + 1)
    final.loc[moved, "m2"] = moved // 3
    rounds_p = np.arange(top, n)
    final.loc[rounds_p, "m2"] = rounds_p // 3
    mirror = duckdb.connect()
    mirror.register("manages", pa.Table.from_pandas(final, preserve_index=False))
    expected = mirror.execute(W1).fetchall()[0][0]
    res["check"] = "OK" if flow.net == expected else f"MISMATCH {flow.net} vs {expected}"
    return res


def w1_baselines(spark: Any, jobs: Jobs, args: argparse.Namespace) -> dict[str, Any]:
    table = manages_table(args.w1_n)
    frame = spark.range(args.w1_n).selectExpr("id DIV 2 AS m2", "id AS m1").cache()
    frame.count()
    frame.createOrReplaceTempView("manages")
    out = {"spark": timed(lambda: spark.sql(W1).collect(), max(1, args.reps // 2), jobs)}
    frame.unpersist()
    con = duckdb.connect()
    con.register("manages", table)
    out["duckdb"] = timed(lambda: con.execute(W1).fetchall(), args.reps)
    return out


# --------------------------------------------------------------------------- report
def rows_of(args: argparse.Namespace, res: dict[str, Any]) -> list[tuple[str, str, str]]:
    fl = res["floor"]
    triv = fl["trivial"][0]
    out = [
        ("floor: spark.range(1).count()", ms(triv), f"{fl['trivial'][1]:.0f} job(s)"),
        (
            "floor: broadcast-join probe of a cached key-partitioned table",
            ms(fl["broadcast_probe"][0]),
            f"{args.orders:,} rows; {fl['broadcast_probe'][1]:.0f} job(s); collect",
        ),
        (
            "floor: key filter on a stored Parquet table",
            ms(fl["parquet_filter"][0]),
            f"{args.orders:,} rows, range-partitioned; {fl['parquet_filter'][1]:.0f} job(s)",
        ),
    ]
    jb = res.get("join_base")
    for name, w, base, size in (
        ("join", "join", jb, f"{args.customers:,} customers / {args.orders:,} orders"),
        ("w1", "w1", res.get("w1_base"), f"N = {args.w1_n:,}"),
    ):
        if base is None:
            continue
        spark_s, duck_s = base["spark"][0], base["duckdb"][0]
        out.append(
            (
                f"{name}: Spark SQL / DuckDB recompute",
                f"{ms(spark_s)} / {ms(duck_s)}",
                f"{size}; Spark {base['spark'][1]:.0f} job(s), cached DataFrames, collect",
            )
        )
        for kernel in args.kernels:
            r = res.get(f"{w}_{kernel}")
            if r is None:
                continue
            p50 = median(r["rounds"])
            out += [
                (
                    f"{name}, kernel={kernel}: round p50 / p95",
                    f"{ms(p50)} / {ms(pct(r['rounds'], 0.95))}",
                    f"{len(r['rounds'])} rounds; jobs p50 {median(r['jobs']):.0f} (max "
                    f"{max(r['jobs'])}); 1/{spark_s / p50:.1f} of Spark SQL, "
                    f"{p50 / triv:.1f}x the trivial job, {p50 / duck_s:.1f}x DuckDB",
                ),
                (
                    f"{name}, kernel={kernel}: hydration",
                    ms(r["hydration"][0]),
                    f"{r['hydration'][1]} jobs; {r['hydration'][0] / spark_s:.1f}x Spark SQL",
                ),
            ]
            secs, njobs = r["changes"][:2]
            k = r["changes"][2] if len(r["changes"]) > 2 else args.changes
            check = r.get("per_time_check") or r.get("check")
            if "final_check" in r:
                check += f"; snapshot and final view against DuckDB {r['final_check']}"
            out.append(
                (
                    f"{name}, kernel={kernel}: {k:,} changes at {k:,} times, one flush",
                    f"{k / secs:,.0f} changes/s",
                    f"{ms(secs)}, {njobs} jobs; check {check}",
                )
            )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--customers", type=int, default=3_000)
    ap.add_argument("--orders", type=int, default=30_000)
    ap.add_argument("--w1-n", type=int, default=100_000, help="rows of the skip-level input")
    ap.add_argument("--kernels", default="spark,auto", help="comma-separated: spark, auto, local")
    ap.add_argument("--threshold", type=int, default=10_000, help="auto: rows kept in-process")
    ap.add_argument("--w1-threshold", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--only", choices=("join", "w1"), default=None)
    ap.add_argument("--cluster", action="store_true", help="run on tests/cluster.py's cluster")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)
    args.kernels = [k for k in args.kernels.split(",") if k]
    command = "python benchmarks/spark_rounds.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    load = os.getloadavg()[0]
    cluster = None
    state_uri: str | None = None
    tmp = tempfile.mkdtemp(prefix="spark-rounds-")
    if args.cluster:
        from cluster import Cluster, cluster_session

        cluster = Cluster(Path("/var/tmp") / f"dsql-bench-cluster-{os.getpid()}")
        cluster.start()
        state_uri = cluster.state_uri
        os.environ["DSQL_STATE_URI"] = state_uri  # the auto kernel's Spark side
        spark = cluster_session(cluster.master_url)
        root = state_uri
    else:
        from dsql.runtime.spark_session import get_spark

        spark = get_spark()
        root = Path(tmp).as_uri()
    try:
        jobs = Jobs(spark)
        res: dict[str, Any] = {"floor": floor(spark, jobs, args, root)}
        if args.only in (None, "join"):
            res["join_base"] = join_baselines(spark, jobs, args)
            for kernel in args.kernels:
                print(f"[join] kernel={kernel}", flush=True)
                res[f"join_{kernel}"] = run_join(spark, jobs, kernel, args, state_uri)
        if args.only in (None, "w1"):
            res["w1_base"] = w1_baselines(spark, jobs, args)
            for kernel in args.kernels:
                print(f"[w1] kernel={kernel}", flush=True)
                res[f"w1_{kernel}"] = run_w1(spark, jobs, kernel, args, state_uri)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if cluster is not None:
            spark.stop()
            cluster.stop()
    where = "cluster (master + 2 one-core workers)" if args.cluster else "local mode"
    title = f"## spark_rounds: {where}, {args.customers:,} / {args.orders:,}, W1 N = {args.w1_n:,}"
    print(title)
    rows = rows_of(args, res)
    for f, v, n in rows:
        print(f"  {f:64} {v:>20}  {n}")
    if not args.no_write:
        lines = section_head(title, command, load) + [f"| {f} | {v} | {n} |" for f, v, n in rows]
        update_results("\n".join(lines) + "\n", title)


if __name__ == "__main__":
    main()
