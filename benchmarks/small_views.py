"""Small views: one-row changes through a join + aggregate, and one INSERT under 1,000 views.

Issue 3's latency targets, through the SQL surface a user has (`dsql.connect`):

- `join`: tables `customers(id, region)` and `orders(id, customer, amount)`, small
  (default 200 and 5,000 rows), and the maintained view

      SELECT c.region, count(*) AS n, sum(o.amount) AS total
      FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region

  watched by `SUBSCRIBE`. A round is one `INSERT` (or `DELETE`) of one order,
  `ADVANCE BY 1` and `FETCH ALL` of the subscription, which returns the round's
  changes to the view (a retraction and an insertion of one region's row). Measured
  with automatic placement and with every step forced onto Spark, beside DuckDB
  recomputing the same query over the same rows (the same round's work from scratch).
- `fanout`: one table `t(k, v)` and `--views` maintained views over it (filters,
  projections and grouped sums, each with its own constant), then one `INSERT` of one
  row and one read: the time until every view has taken the change, beside DuckDB
  running all the views' queries once.

    python benchmarks/small_views.py
    python benchmarks/small_views.py --views 200 --rounds 20 --no-spark --no-write
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import duckdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recursion import section_head, update_results  # noqa: E402
from skip_level import median, ms, pct  # noqa: E402

import dsql  # noqa: E402

VIEW = (
    "SELECT c.region, count(*) AS n, sum(o.amount) AS total "
    "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region"
)


def fanout_query(i: int) -> str:
    """The i-th view of the fan-out: three shapes, each with its own constants."""
    match i % 3:
        case 0:
            return f"SELECT k, v FROM t WHERE k % 97 = {i % 97}"
        case 1:
            return f"SELECT k, v * {i} AS w FROM t WHERE v > {i}"
        case _:
            return f"SELECT k % {i % 50 + 2} AS g, sum(v) AS s FROM t GROUP BY k % {i % 50 + 2}"


def load_join(con: Any, customers: int, orders: int, rng: random.Random) -> list[tuple]:
    con.execute("CREATE TABLE customers (id int, region text)")
    con.execute("CREATE TABLE orders (id bigint, customer int, amount int)")
    rows = [(i, f"r{i % 20}") for i in range(customers)]
    con.execute("INSERT INTO customers VALUES " + ", ".join(f"({i}, '{r}')" for i, r in rows))
    order_rows = [(i, rng.randrange(customers), rng.randrange(1, 100)) for i in range(orders)]
    for start in range(0, orders, 1000):
        part = order_rows[start : start + 1000]
        con.execute(
            "INSERT INTO orders VALUES " + ", ".join(f"({a}, {b}, {c})" for a, b, c in part)
        )
    return order_rows


def run_join(args: argparse.Namespace, kernel: str) -> dict[str, Any]:
    """One-row rounds through the join + aggregate view on `kernel`."""
    rng = random.Random(args.seed)
    con = dsql.connect(kernel=kernel)
    started = time.perf_counter()
    order_rows = load_join(con, args.customers, args.orders, rng)
    con.execute(f"CREATE MATERIALIZED VIEW revenue AS {VIEW}")
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE revenue")
    snapshot = con.execute("FETCH ALL c").fetchall()
    hydration = time.perf_counter() - started
    rounds: list[float] = []
    changed: list[int] = []
    next_id = len(order_rows)
    cpu: list[float] = []
    for r in range(args.warmup + args.rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        if r % 2 == 0:
            con.execute(
                f"INSERT INTO orders VALUES ({next_id}, {rng.randrange(args.customers)}, 7)"
            )
        else:
            con.execute(f"DELETE FROM orders WHERE id = {next_id}")
            next_id += 1
        con.execute("ADVANCE BY 1")
        out = con.execute("FETCH ALL c").fetchall()
        if r >= args.warmup:
            rounds.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            changed.append(len(out))
    if (args.warmup + args.rounds) % 2:  # the last round inserted: retract it, untimed
        con.execute(f"DELETE FROM orders WHERE id = {next_id}")
    final = sorted(con.execute("SELECT * FROM revenue").fetchall())
    con.close()
    return {
        "hydration": hydration,
        "snapshot_rows": len(snapshot),
        "rounds": rounds,
        "cpu": cpu,
        "changed": changed,
        "final": final,
    }


def duckdb_join(args: argparse.Namespace) -> tuple[float, list[tuple]]:
    """DuckDB recomputing the view over the same rows: median of `--reps` runs."""
    rng = random.Random(args.seed)
    con = duckdb.connect()
    load_join(con, args.customers, args.orders, rng)
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        result = con.execute(VIEW).fetchall()
        times.append(time.perf_counter() - t0)
    return median(times), sorted(result)


def run_fanout(args: argparse.Namespace) -> dict[str, Any]:
    """`--views` views over one table, then one INSERT read back through one view."""
    con = dsql.connect(kernel="auto")
    con.execute("CREATE TABLE t (k int, v int)")
    con.execute(
        "INSERT INTO t VALUES " + ", ".join(f"({k}, {k * 7 % 101})" for k in range(args.rows))
    )
    t0 = time.perf_counter()
    for i in range(args.views):
        con.execute(f"CREATE MATERIALIZED VIEW v{i} AS {fanout_query(i)}")
    create = time.perf_counter() - t0
    rounds, cpu = [], []
    for r in range(3):
        k = args.rows + r
        t0, c0 = time.perf_counter(), time.process_time()
        con.execute(f"INSERT INTO t VALUES ({k}, {k * 7 % 101})")
        con.execute("SELECT count(*) FROM v0").fetchall()  # closes the time: every view steps
        rounds.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    t0 = time.perf_counter()
    last = con.execute(f"SELECT count(*) FROM v{args.views - 1}").fetchall()
    read_after = time.perf_counter() - t0
    con.close()
    oracle = duckdb.connect()
    oracle.execute("CREATE TABLE t (k int, v int)")
    oracle.execute(
        "INSERT INTO t SELECT k, k * 7 % 101 FROM range(?) r(k)", [args.rows + len(rounds)]
    )
    t0 = time.perf_counter()
    for i in range(args.views):
        oracle.execute(fanout_query(i)).fetchall()
    recompute = time.perf_counter() - t0
    expected = oracle.execute(f"SELECT count(*) FROM ({fanout_query(args.views - 1)})").fetchall()
    return {
        "create": create,
        "rounds": rounds,
        "cpu": cpu,
        "read_after": read_after,
        "recompute": recompute,
        "check": "OK" if last == expected else f"MISMATCH {last} vs {expected}",
    }


def rows_of(args: argparse.Namespace, res: dict[str, Any]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    duck, expected = res["duckdb"]
    for kernel in ("auto", "spark"):
        j = res.get(kernel)
        if j is None:
            continue
        p50 = median(j["rounds"])
        out += [
            (
                f"join: one-row round p50 / p95, kernel={kernel}",
                f"{ms(p50)} / {ms(pct(j['rounds'], 0.95))}",
                f"{len(j['rounds'])} rounds (INSERT or DELETE, ADVANCE BY 1, FETCH ALL) after "
                f"{args.warmup} warm-up; {median(j['changed']):.0f} changed rows per round; "
                f"{p50 / duck:.1f}x DuckDB's recompute; process CPU p50 {ms(median(j['cpu']))}",
            ),
            (
                f"join: hydration, kernel={kernel}",
                ms(j["hydration"]),
                f"load {args.customers:,} + {args.orders:,} rows, create the view, snapshot "
                f"{j['snapshot_rows']} rows; final contents "
                + ("equal DuckDB's" if j["final"] == expected else "DIFFER from DuckDB's"),
            ),
        ]
    if "auto" in res and "spark" in res:
        ratio = median(res["spark"]["rounds"]) / median(res["auto"]["rounds"])
        out.append(
            ("join: round p50, spark-forced / auto", f"{ratio:.1f}x", "target: auto <= 10 ms")
        )
    out.append(("join: DuckDB recompute of the view", ms(duck), f"median of {args.reps}"))
    f = res.get("fanout")
    if f is not None:
        out += [
            (
                f"fanout: one INSERT through {args.views:,} views",
                ms(median(f["rounds"])),
                f"median of {len(f['rounds'])} (INSERT + one read, which steps every view): "
                + ", ".join(ms(x) for x in f["rounds"])
                + f"; process CPU {', '.join(ms(x) for x in f['cpu'])}"
                + f"; a second read afterwards {ms(f['read_after'])}; target <= 2 s",
            ),
            (
                f"fanout: DuckDB running the {args.views:,} queries once",
                ms(f["recompute"]),
                f"{args.rows:,} rows; check {f['check']}",
            ),
            (f"fanout: creating the {args.views:,} views", ms(f["create"]), ""),
        ]
    return out


def markdown(
    title: str, args: argparse.Namespace, res: dict[str, Any], command: str, load: float
) -> str:
    lines = section_head(title, command, load)
    lines += [f"| {f} | {v} | {n} |" for f, v, n in rows_of(args, res)]
    for kernel in ("auto", "spark"):
        if kernel in res:
            lines.append(
                f"\nRound latencies, kernel={kernel} (ms, in order): "
                + ", ".join(f"{x * 1000:.1f}" for x in res[kernel]["rounds"])
            )
    return "\n".join(lines) + "\n"


def section_title(args: argparse.Namespace) -> str:
    """The RESULTS.md section's title: dated, so each run adds a section beside the
    earlier ones (figures before and after a change stay side by side)."""
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"## small_views: {args.customers:,} customers / {args.orders:,} orders ({when})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--customers", type=int, default=200)
    ap.add_argument("--orders", type=int, default=5_000)
    ap.add_argument("--rounds", type=int, default=40, help="measured one-row rounds")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--reps", type=int, default=9, help="DuckDB repetitions")
    ap.add_argument("--views", type=int, default=1_000, help="views in the fan-out")
    ap.add_argument("--rows", type=int, default=10_000, help="rows under the fan-out")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark-forced run")
    ap.add_argument("--no-fanout", action="store_true", help="skip the fan-out")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)
    command = "python benchmarks/small_views.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    load = os.getloadavg()[0]
    res: dict[str, Any] = {"duckdb": duckdb_join(args), "auto": run_join(args, "auto")}
    if not args.no_spark:
        res["spark"] = run_join(args, "spark")
    if not args.no_fanout:
        res["fanout"] = run_fanout(args)
    title = section_title(args)
    print(title)
    for f, v, n in rows_of(args, res):
        print(f"  {f:52} {v:>18}  {n}")
    if not args.no_write:
        update_results(markdown(title, args, res, command, load), title)


if __name__ == "__main__":
    main()
