"""A grouped aggregate over a table too big to stay in-process: hydration and one-row rounds.

Through the SQL surface (`dsql.connect`): a table `t(k, v)` of `--n` rows (default
2,000,000, above the placement threshold of 1,000,000, so under automatic placement its
arrangement is stored by Spark) with `--n / 10` distinct keys, and the maintained view

    SELECT k, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi FROM t GROUP BY k

watched by `SUBSCRIBE`. Hydration is `CREATE MATERIALIZED VIEW` and the snapshot's
`FETCH ALL` (the table is created from an Arrow table first, not timed). A round is one
`INSERT` of a row (or the `DELETE` of the row the round before inserted), `ADVANCE BY 1`
and `FETCH ALL`: a retraction and an insertion of one group's row. Measured under
automatic placement and, for reference, with the in-process kernel, beside DuckDB and
Spark SQL (over a cached DataFrame) recomputing the same aggregate.

    python benchmarks/big_groupby.py
    python benchmarks/big_groupby.py --n 200000 --rounds 10 --no-write
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recursion import section_head, update_results  # noqa: E402
from skip_level import median, ms, pct  # noqa: E402

import dsql  # noqa: E402

VIEW = "SELECT k, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi FROM t GROUP BY k"


def table(n: int, seed: int) -> pa.Table:
    """`n` rows of `(k, v)`: `n // 10` keys, values below 1,000."""
    rng = np.random.default_rng(seed)
    return pa.table({"k": rng.integers(0, max(n // 10, 1), n), "v": rng.integers(0, 1000, n)})


def run_view(args: argparse.Namespace, data: pa.Table, kernel: str) -> dict[str, Any]:
    """Hydration and one-row rounds of the view on `kernel`."""
    con = dsql.connect(kernel=kernel)
    con.create_table("t", data)
    started = time.perf_counter()
    con.execute(f"CREATE MATERIALIZED VIEW totals AS {VIEW}")
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE totals")
    snapshot = con.execute("FETCH ALL c").fetchall()
    hydration = time.perf_counter() - started
    rng = np.random.default_rng(args.seed + 1)
    keys = max(args.n // 10, 1)
    rounds: list[float] = []
    inserted: tuple[int, int] | None = None
    for r in range(args.warmup + args.rounds):
        t0 = time.perf_counter()
        if inserted is None:
            inserted = (int(rng.integers(keys)), 1000 + r)  # a value no loaded row has
            con.execute(f"INSERT INTO t VALUES {inserted}")
        else:
            con.execute(f"DELETE FROM t WHERE k = {inserted[0]} AND v = {inserted[1]}")
            inserted = None
        con.execute("ADVANCE BY 1")
        out = con.execute("FETCH ALL c").fetchall()
        if r >= args.warmup:
            rounds.append(time.perf_counter() - t0)
        assert len(out) == 2, out  # one group's row retracted and inserted again
    if inserted is not None:  # an odd number of rounds: back to the loaded rows, untimed
        con.execute(f"DELETE FROM t WHERE k = {inserted[0]} AND v = {inserted[1]}")
    final = sorted(con.execute("SELECT * FROM totals").fetchall())
    con.close()
    return {"hydration": hydration, "snapshot": len(snapshot), "rounds": rounds, "final": final}


def duckdb_view(args: argparse.Namespace, data: pa.Table) -> tuple[float, list[tuple]]:
    """DuckDB recomputing the view over the loaded rows: median of `--reps` runs."""
    con = duckdb.connect()
    con.register("t", data)
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        result = con.execute(VIEW).fetchall()
        times.append(time.perf_counter() - t0)
    return median(times), sorted(result)


def spark_view(args: argparse.Namespace, data: pa.Table) -> float:
    """Spark SQL recomputing the view over a cached DataFrame of the rows (the groups
    counted, not collected): median of `--reps` runs after one warm run."""
    from dsql.runtime.spark_session import get_spark

    spark = get_spark()
    frame = spark.createDataFrame(data).cache()
    frame.count()
    frame.createOrReplaceTempView("t")
    spark.sql(VIEW).count()
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        spark.sql(VIEW).count()
        times.append(time.perf_counter() - t0)
    frame.unpersist()
    return median(times)


def rows_of(args: argparse.Namespace, res: dict[str, Any]) -> list[tuple[str, str, str]]:
    duck = res["duckdb"][0]
    rows = []
    for kernel in ("auto", "local"):
        if kernel not in res:
            continue
        r = res[kernel]
        ok = "OK" if r["final"] == res["final_expected"] else "MISMATCH"
        rows += [
            (
                f"kernel={kernel}: hydration",
                ms(r["hydration"]),
                f"{r['snapshot']:,} groups; {r['hydration'] / duck:.0f}x DuckDB",
            ),
            (
                f"kernel={kernel}: one-row round p50 / p95",
                f"{ms(median(r['rounds']))} / {ms(pct(r['rounds'], 0.95))}",
                f"{len(r['rounds'])} rounds; {median(r['rounds']) / duck:.2f}x DuckDB; "
                f"final view {ok}",
            ),
        ]
    rows.append(("DuckDB recompute of the view", ms(duck), f"median of {args.reps}"))
    if "spark" in res:
        rows.append(
            ("Spark SQL recompute (cached DF, count)", ms(res["spark"]), f"median of {args.reps}")
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2_000_000, help="rows in the table")
    ap.add_argument("--rounds", type=int, default=20, help="measured one-row rounds")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each recompute")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-local", action="store_true", help="skip the in-process kernel")
    ap.add_argument("--no-spark", action="store_true", help="skip Spark SQL's recompute")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)
    command = "python benchmarks/big_groupby.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    load = os.getloadavg()[0]
    data = table(args.n, args.seed)
    res: dict[str, Any] = {"duckdb": duckdb_view(args, data), "auto": run_view(args, data, "auto")}
    if not args.no_local:
        res["local"] = run_view(args, data, "local")
    if not args.no_spark:
        res["spark"] = spark_view(args, data)
    # The rounds end with their last inserted row deleted: the view is then the aggregate
    # of the loaded rows.
    res["final_expected"] = res["duckdb"][1]
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"## big_groupby: {args.n:,} rows, {max(args.n // 10, 1):,} keys ({when})"
    print(title)
    for f, v, n in rows_of(args, res):
        print(f"  {f:44} {v:>20}  {n}")
    if not args.no_write:
        lines = section_head(title, command, load)
        lines += [f"| {f} | {v} | {n} |" for f, v, n in rows_of(args, res)]
        update_results("\n".join(lines) + "\n", title)


if __name__ == "__main__":
    main()
