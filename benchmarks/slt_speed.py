"""sqllogictest speed: milliseconds per query for dsql (direct and incremental) and DuckDB.

Runs a sqllogictest file (default SQLite's select1.test: one table, 30 inserts, 1000
queries) through the runner (`tests/slt`) with each engine and mode, and reports per
query: wall time, process CPU time, and the median of the per-record wall times.
`--queries N` keeps the file's first N queries (and every statement before them).

- `duckdb direct`: DuckDB in-memory, the baseline.
- `dsql direct`: each query is a one-off SELECT (a short-lived dataflow, read once).
- `dsql incremental`: each query becomes a materialized view as soon as its tables
  exist; the file's writes reach every live view; the view is read at the query's place.

The figures are appended to RESULTS.md as a section with the date, machine, load
average, commit and the exact command (append only: earlier sections stay).

    python benchmarks/slt_speed.py
    python benchmarks/slt_speed.py --queries 200 --no-results
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from skip_level import git_rev, machine  # noqa: E402
from slt import engines  # noqa: E402
from slt.records import Query  # noqa: E402
from slt.runner import run_suite  # noqa: E402

RESULTS = HERE / "RESULTS.md"
SELECT1 = ROOT / "tests" / "slt" / "suites" / "sqlite" / "select1.test"

#: (engine, mode) pairs measured, in the order of the table.
RUNS = (("duckdb", "direct"), ("dsql", "direct"), ("dsql", "incremental"))


def head(path: Path, queries: int | None) -> Path:
    """`path` itself, or a temporary copy holding its records up to the N-th query."""
    if queries is None:
        return path
    kept, seen = [], 0
    for block in path.read_text().split("\n\n"):
        kept.append(block)
        seen += block.lstrip().startswith("query")
        if seen >= queries:
            break
    out = Path(tempfile.mkdtemp(prefix="slt-speed-")) / path.name
    out.write_text("\n\n".join(kept) + "\n")
    return out


def measure(path: Path, engine: str, mode: str) -> dict[str, float]:
    """Run the file once; totals and the per-record wall times of `execute` calls."""
    per_record: list[float] = []
    original = engines._PEP249Engine.execute

    def timed(self, sql):  # noqa: ANN001, ANN202 - wraps the adapter's method
        start = time.perf_counter()
        try:
            return original(self, sql)
        finally:
            per_record.append(time.perf_counter() - start)

    engines._PEP249Engine.execute = timed  # type: ignore[method-assign]
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        report = run_suite([path], engine=engine, mode=mode, kernel="local")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        engines._PEP249Engine.execute = original  # type: ignore[method-assign]
    queries = sum(1 for f in report.files for o in f.outcomes if isinstance(o.record, Query))
    return {
        "queries": queries,
        "passed": report.count("pass"),
        "failed": report.count("fail"),
        "wall_ms": wall / queries * 1000,
        "cpu_ms": cpu / queries * 1000,
        "median_ms": statistics.median(per_record) * 1000 if per_record else 0.0,
        "seconds": wall,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=SELECT1)
    parser.add_argument("--queries", type=int, default=None, help="first N queries only")
    parser.add_argument("--no-results", action="store_true", help="do not touch RESULTS.md")
    args = parser.parse_args(argv)
    path = head(args.file, args.queries)
    load_before = os.getloadavg()
    rows = [(engine, mode, measure(path, engine, mode)) for engine, mode in RUNS]
    load_after = os.getloadavg()
    lines = [
        "| engine | mode | queries | passed/failed | ms/query (wall) | ms/query (CPU) "
        "| median record ms | total s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for engine, mode, r in rows:
        lines.append(
            f"| {engine} | {mode} | {r['queries']:.0f} | {r['passed']:.0f}/{r['failed']:.0f} "
            f"| {r['wall_ms']:.1f} | {r['cpu_ms']:.1f} | {r['median_ms']:.1f} "
            f"| {r['seconds']:.1f} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.no_results:
        return
    command = "python benchmarks/slt_speed.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    section = (
        f"\n## sqllogictest speed: {args.file.name}"
        f"{'' if args.queries is None else f' (first {args.queries} queries)'}\n\n"
        f"{time.strftime('%Y-%m-%d %H:%M')}, {machine()}, commit {git_rev()}, load average "
        f"{load_before[0]:.2f} at start, {load_after[0]:.2f} at end, local kernel.\n"
        f"`{command.strip()}`\n\n{table}\n"
    )
    with RESULTS.open("a") as out:
        out.write(section)


if __name__ == "__main__":
    main()
