"""Recursion benchmark: differential iteration against WITH RECURSIVE recomputation.

Two graphs, each a seeded random directed graph (`edges(src bigint, dst bigint)`):

- reach: nodes reachable from node 0, on `--reach-nodes` nodes / `--reach-edges` edges
  (default 10k / 20k);
- closure: all-pairs transitive closure on `--tc-nodes` / `--tc-edges` (default 1k / 2k).

The dataflows (`dsql.runtime`, `--kernel local|spark`):

    by_src = edges.arrange_by_key("src")        # shared, entered without a copy
    reach = roots.iterate(lambda s, r: r.map("node AS src").arrange_by_key("src")
        .join_core(by_src.enter(s)).map("dst AS node").concat(roots.enter(s)).distinct())
    tc = edges.iterate(lambda s, p: p.map("src AS a", "dst AS src").arrange_by_key("src")
        .join_core(by_src.enter(s)).map("a AS src", "dst").concat(edges.enter(s)).distinct())

Phases per graph: hydration (load the edges, given as the Arrow table the DuckDB
baseline reads, and one round to the fixpoint), then
`--rounds` single-edge rounds alternating "delete a random present edge" and "insert
a random new edge", each `advance_to` + `flush` + `Worker.step()`; p50 and max. The
output is captured and its accumulation checked against DuckDB at the end.

Baselines in the same run over the same final edges: DuckDB `WITH RECURSIVE ... UNION`
over the Arrow table (median of `--reps`), and with `--spark-sql` Spark SQL's
recursive CTE (Spark 4 accepts only UNION ALL: a per-level DISTINCT and a depth bound
keep it finite; median of `--spark-reps`), run after every graph's other measurements
so that Spark's JVM does not share the cores with them.

    python benchmarks/recursion.py --kernel local
    python benchmarks/recursion.py --kernel local --spark-sql --only reach
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from skip_level import git_rev, machine, median, ms

from dsql.runtime.dataflow import Worker

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"

REACH_SQL = """
WITH RECURSIVE reach(node) AS (
  SELECT 0 UNION SELECT e.dst FROM reach r JOIN edges e ON e.src = r.node)
SELECT count(*) FROM reach"""
TC_SQL = """
WITH RECURSIVE tc(src, dst) AS (
  SELECT src, dst FROM edges UNION SELECT t.src, e.dst FROM tc t JOIN edges e ON e.src = t.dst)
SELECT count(*) FROM tc"""
# Spark: UNION ALL only. Each level keeps the pairs found at that depth (DISTINCT per
# level); a depth bound ends it; the final DISTINCT removes pairs found at several depths.
SPARK_REACH = """
WITH RECURSIVE r(node, depth) AS (
  SELECT 0L, 0 UNION ALL
  SELECT DISTINCT e.dst, r.depth + 1 FROM r JOIN edges e ON e.src = r.node WHERE r.depth < {depth})
SELECT count(DISTINCT node) FROM (SELECT * FROM r LIMIT 100000000)"""
SPARK_TC = """
WITH RECURSIVE tc(src, dst, depth) AS (
  SELECT src, dst, 0 FROM edges UNION ALL
  SELECT DISTINCT t.src, e.dst, t.depth + 1 FROM tc t JOIN edges e ON e.src = t.dst
  WHERE t.depth < {depth})
SELECT count(*) FROM (SELECT DISTINCT src, dst FROM (SELECT * FROM tc LIMIT 100000000))"""


def random_edges(nodes: int, edges: int, seed: int) -> set[tuple[int, int]]:
    rng = random.Random(seed)
    out: set[tuple[int, int]] = set()
    while len(out) < edges:
        a, b = rng.randrange(nodes), rng.randrange(nodes)
        if a != b:
            out.add((a, b))
    return out


def table(edges: set[tuple[int, int]]) -> pa.Table:
    pairs = sorted(edges)
    return pa.table(
        {
            "src": pa.array([a for a, _ in pairs], pa.int64()),
            "dst": pa.array([b for _, b in pairs], pa.int64()),
        }
    )


def make_kernel(name: str) -> Any:
    if name == "local":
        from dsql.runtime.kernel.local import LocalKernel

        return LocalKernel()
    if name == "auto":
        from dsql.runtime.kernel.auto import AutoKernel

        return AutoKernel(notice=None)
    from dsql.runtime.kernel.spark import SparkKernel

    return SparkKernel()


def build(worker: Worker, graph: str) -> tuple[Any, Any, Any]:
    """The input sessions (edges, roots) and the capture of the recursive result."""
    edges_in = worker.new_input({"src": "bigint", "dst": "bigint"})
    roots_in = worker.new_input({"node": "bigint"})
    edges, roots = edges_in.to_collection(), roots_in.to_collection()
    by_src = edges.arrange_by_key("src")
    if graph == "reach":

        def body(s: Any, r: Any) -> Any:
            step = r.map("node AS src").arrange_by_key("src").join_core(by_src.enter(s))
            return step.map("dst AS node").concat(roots.enter(s)).distinct()

        result = roots.iterate(body, name="reach")
    else:

        def body(s: Any, p: Any) -> Any:
            step = p.map("src AS a", "dst AS src").arrange_by_key("src").join_core(by_src.enter(s))
            return step.map("a AS src", "dst").concat(edges.enter(s)).distinct()

        result = edges.iterate(body, name="closure")
    return edges_in, roots_in, result.capture()


def load(worker: Worker, edges_in: Any, roots_in: Any, data: pa.Table) -> None:
    """Hydration: the edges as one Arrow table and the root node 0 at time 0, one step."""
    edges_in.load_arrow(data)
    roots_in.insert((0,))
    for s in (edges_in, roots_in):
        s.advance_to(1)
        s.flush()
    worker.step()


def change_one_edge(
    i: int,
    edges: set[tuple[int, int]],
    rng: random.Random,
    nodes: int,
    edges_in: Any,
    roots_in: Any,
) -> None:
    """Round `i`'s input (not stepped): delete a random present edge (even `i`) or insert
    a random new one (odd), at time `i + 1`, both inputs advanced past it; `edges`
    follows."""
    if i % 2 == 0:
        edge = rng.choice(sorted(edges))
        edges.discard(edge)
        edges_in.remove(edge)
    else:
        edge = (rng.randrange(nodes), rng.randrange(nodes))
        while edge in edges or edge[0] == edge[1]:
            edge = (rng.randrange(nodes), rng.randrange(nodes))
        edges.add(edge)
        edges_in.insert(edge)
    for s in (edges_in, roots_in):
        s.advance_to(i + 2)
        s.flush()


def warm_up(kernel: Any, graph: str, nodes: int) -> None:
    """Hydrate and change a 100-edge graph of the same shape on the same kernel, so the
    measured run does not pay what a process pays once (imports, queries rendered once
    per shape, which every later loop of that shape reuses)."""
    worker = Worker(kernel)
    edges_in, roots_in, out = build(worker, graph)
    small = random_edges(min(nodes, 50), 100, 0)
    edges_in.load_arrow(table(small))
    roots_in.insert((0,))
    for t, change in ((1, None), (2, sorted(small)[0])):
        if change is not None:
            edges_in.remove(change)
        for s in (edges_in, roots_in):
            s.advance_to(t)
            s.flush()
        worker.step()
        out.poll()


def run_graph(args: argparse.Namespace, graph: str) -> dict[str, Any]:
    nodes, count = (
        (args.reach_nodes, args.reach_edges) if graph == "reach" else (args.tc_nodes, args.tc_edges)
    )
    edges = random_edges(nodes, count, args.seed)
    kernel = make_kernel(args.kernel)
    if not args.cold:
        warm_up(kernel, graph, nodes)
    worker = Worker(kernel)
    edges_in, roots_in, out = build(worker, graph)
    total = 0
    data = table(edges)  # the same Arrow table DuckDB's baseline is given, built untimed
    start = time.perf_counter()
    load(worker, edges_in, roots_in, data)
    hydration = time.perf_counter() - start
    total += sum(out.poll()["__diff__"].to_pylist())
    hydrated = total
    rng = random.Random(args.seed + 1)
    deletes, inserts = [], []
    for i in range(args.rounds):
        change_one_edge(i, edges, rng, nodes, edges_in, roots_in)
        began = time.perf_counter()
        worker.step()
        (deletes if i % 2 == 0 else inserts).append(time.perf_counter() - began)
        total += sum(out.poll()["__diff__"].to_pylist())
    duck = duckdb_baseline(edges, REACH_SQL if graph == "reach" else TC_SQL, args.reps)
    res = {
        "graph": graph,
        "nodes": nodes,
        "edges": count,
        "hydration": hydration,
        "hydrated_rows": hydrated,
        "deletes": deletes,
        "inserts": inserts,
        "rounds": deletes + inserts,
        "final_rows": total,
        "duckdb": duck[0],
        "duckdb_rows": duck[1],
        "spark": None,
        "cold": args.cold,
        "final_edges": edges,
    }
    return res


def duckdb_baseline(edges: set[tuple[int, int]], sql: str, reps: int) -> tuple[float, int]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    con.register("edges", table(edges))
    times, rows = [], 0
    for _ in range(reps):
        began = time.perf_counter()
        rows = con.execute(sql).fetchone()[0]
        times.append(time.perf_counter() - began)
    return median(times), rows


def spark_baseline(edges: set[tuple[int, int]], sql: str, reps: int) -> tuple[float, int]:
    from dsql.runtime.spark_session import get_spark

    spark = get_spark()
    # The recursion stops at 1M rows by default; the closure's levels hold more.
    spark.conf.set("spark.sql.cteRecursionRowLimit", "100000000")
    frame = spark.createDataFrame(table(edges)).cache()
    frame.count()
    frame.createOrReplaceTempView("edges")
    times, rows = [], 0
    for _ in range(reps):
        began = time.perf_counter()
        rows = spark.sql(sql).collect()[0][0]
        times.append(time.perf_counter() - began)
    frame.unpersist()
    return median(times), rows


def rows_of(res: dict[str, Any]) -> list[tuple[str, str, str]]:
    duck = res["duckdb"]
    p50 = median(res["rounds"])
    check = "OK" if res["final_rows"] == res["duckdb_rows"] else "MISMATCH"
    out = [
        (
            "hydration (load edges, one round to the fixpoint)"
            + (", cold process" if res.get("cold") else ""),
            ms(res["hydration"]),
            f"{res['hydrated_rows']:,} rows; {res['hydration'] / duck:.0f}x DuckDB (target <= 5x)",
        ),
        ("one-edge round p50 (all)", ms(p50), f"{p50 / duck:.1f}x DuckDB recompute (target < 1x)"),
        (
            "one-edge delete p50 / max",
            f"{ms(median(res['deletes']))} / {ms(max(res['deletes']))}",
            f"{len(res['deletes'])} rounds",
        ),
        (
            "one-edge insert p50 / max",
            f"{ms(median(res['inserts']))} / {ms(max(res['inserts']))}",
            f"{len(res['inserts'])} rounds",
        ),
        ("DuckDB WITH RECURSIVE recompute", ms(duck), f"median; {res['duckdb_rows']:,} rows"),
    ]
    if res["spark"] is not None:
        out.append(
            (
                "Spark SQL recursive CTE recompute",
                ms(res["spark"][0]),
                f"UNION ALL, per-level DISTINCT, depth bound; {res['spark'][1]:,} rows",
            )
        )
    out.append(("check: output rows vs DuckDB", check, f"{res['final_rows']:,}"))
    return out


def section_head(title: str, command: str, load: float) -> list[str]:
    """A RESULTS.md section's opening lines: title, date, machine (with the load average at
    the start and now), code, command, and the header of the figure table."""
    return [
        title,
        "",
        f"- date: {dt.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- machine: {machine()}; load average {load:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end",
        f"- code: {git_rev()}; Python {platform.python_version()}",
        f"- command: `{command}`",
        "",
        "| figure | value | note |",
        "|---|---:|---|",
    ]


def markdown(args: argparse.Namespace, res: dict[str, Any], command: str, load: tuple) -> str:
    lines = section_head(section_title(args, res), command, load[0])
    lines += [f"| {f} | {v} | {n} |" for f, v, n in rows_of(res)]
    lines.append(
        "\nRound latencies (ms, deletes then inserts): "
        + ", ".join(f"{x * 1000:.0f}" for x in res["rounds"])
    )
    return "\n".join(lines) + "\n"


def section_title(args: argparse.Namespace, res: dict[str, Any]) -> str:
    return (
        f"## recursion: {res['graph']}, kernel={args.kernel}, "
        f"{res['nodes']:,} nodes / {res['edges']:,} edges" + (", cold" if args.cold else "")
    )


def update_results(text_section: str, title: str) -> None:
    text = RESULTS.read_text()
    pattern = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: text_section + "\n", text)
    else:
        text = text.rstrip("\n") + "\n\n" + text_section
    RESULTS.write_text(text.rstrip("\n") + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", choices=("local", "auto", "spark"), default="local")
    ap.add_argument("--only", choices=("reach", "closure"), default=None)
    ap.add_argument("--reach-nodes", type=int, default=10_000)
    ap.add_argument("--reach-edges", type=int, default=20_000)
    ap.add_argument("--tc-nodes", type=int, default=1_000)
    ap.add_argument("--tc-edges", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=10, help="one-edge rounds (default 10)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5, help="DuckDB repetitions")
    ap.add_argument("--spark-sql", action="store_true", help="also time Spark SQL's CTE")
    ap.add_argument("--spark-reps", type=int, default=1)
    ap.add_argument("--spark-depth", type=int, default=40, help="depth bound for Spark SQL")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    ap.add_argument(
        "--cold", action="store_true", help="no warm-up: hydration pays imports and rendering"
    )
    args = ap.parse_args(argv)
    command = "python benchmarks/recursion.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    runs = []
    for graph in ("reach", "closure"):
        if args.only and args.only != graph:
            continue
        load = os.getloadavg()
        runs.append((run_graph(args, graph), load))
    # Spark's baselines last: its JVM, once started, competes for the cores and memory
    # with every measurement after it.
    if args.spark_sql:
        for res, _ in runs:
            sql = SPARK_REACH if res["graph"] == "reach" else SPARK_TC
            res["spark"] = spark_baseline(
                res["final_edges"], sql.format(depth=args.spark_depth), args.spark_reps
            )
    for res, load in runs:
        print(section_title(args, res))
        for f, v, n in rows_of(res):
            print(f"  {f:52} {v:>18}  {n}")
        if not args.no_write:
            update_results(markdown(args, res, command, load), section_title(args, res))


if __name__ == "__main__":
    main()
