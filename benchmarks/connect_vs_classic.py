"""Spark Connect against a classic session: a round and a big SELECT, in one run.

Each mode runs in a Python process of its own (a process that opens a Connect session
stays in Connect mode): `kernel="spark"` on a classic `local[2]` session, and on the
Connect server at `--remote` (start one with PySpark's
`$SPARK_HOME/sbin/start-connect-server.sh --master local[2]`). The scenario: a table
`t(k, g, v)` of `--rows` rows loaded from Arrow, a materialized view `agg` (count and
sum per `g`, 100 groups) over it; then `--rounds` times an `INSERT` of one row (a round:
the write delivered to the view) and a read of the view; then `--selects` times a
`SELECT * FROM t` of every row, fetched through a cursor (streamed by the executors in
pieces of `fetch_rows` rows). Both modes must return the same rows.

Figures: the median seconds of a round (the INSERT statement), of the view's read, and
of the whole SELECT.

    python benchmarks/connect_vs_classic.py --remote sc://127.0.0.1:15002
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def scenario(remote: str | None, rows: int, rounds: int, selects: int) -> dict[str, Any]:
    """The scenario in this process (module docstring): per phase, its median seconds;
    the rows read, to compare across modes."""
    import pyarrow as pa

    import dsql

    con = (
        dsql.connect(remote=remote, kernel="spark")
        if remote
        else dsql.connect(kernel="spark", master="local[2]")
    )
    k = pa.array(range(rows), pa.int64())
    con.create_table("t", pa.table({"k": k, "g": pa.array([i % 100 for i in range(rows)]), "v": k}))
    con.execute(
        "CREATE MATERIALIZED VIEW agg AS SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g"
    )
    con.execute(f"INSERT INTO t VALUES ({rows}, 0, 0)")  # warm: the first round's setup
    timings: dict[str, list[float]] = {"round": [], "view read": [], "select": []}
    view: list[Any] = []
    for i in range(rounds):
        start = time.perf_counter()
        con.execute(f"INSERT INTO t VALUES ({rows + 1 + i}, {i % 100}, {i})")
        timings["round"].append(time.perf_counter() - start)
        start = time.perf_counter()
        view = con.execute("SELECT * FROM agg ORDER BY g").fetchall()
        timings["view read"].append(time.perf_counter() - start)
    count = 0
    for _ in range(selects):
        start = time.perf_counter()
        cursor = con.execute("SELECT * FROM t")
        count = len(cursor.fetchall())
        timings["select"].append(time.perf_counter() - start)
    con.close()
    return {
        "medians": {name: statistics.median(times) for name, times in timings.items()},
        "view": view,
        "selected": count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--remote", required=True, help="the Connect server, sc://host:port")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--selects", type=int, default=3)
    args = parser.parse_args()
    results = {}
    for mode, remote in (("classic local[2]", None), ("Spark Connect", args.remote)):
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=context) as process:
            results[mode] = process.submit(
                scenario, remote, args.rows, args.rounds, args.selects
            ).result()
    first, second = results.values()
    assert first["view"] == second["view"], "the modes' views differ"
    assert first["selected"] == second["selected"] == args.rows + 1 + args.rounds
    print(f"rows {args.rows:,}, rounds {args.rounds}, selects {args.selects}\n")
    print("| phase (median s) | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for phase in first["medians"]:
        cells = " | ".join(f"{r['medians'][phase]:.3f}" for r in results.values())
        print(f"| {phase} | {cells} |")


if __name__ == "__main__":
    main()
