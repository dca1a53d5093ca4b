"""The sqllogictest runner's command line and report.

    python -m tests.slt.runner FILE... --engine duckdb|dsql --mode direct|incremental
        [--kernel local|spark|auto] [--verbose] [--max-failures N] [--skips PATH|none]
        [--json PATH] [--exit-with-parent] [--chunk I/N]

Prints one line per file (`path: P passed, F failed, S skipped (1.2s)`), each failure
with its location and why, the skipped records counted per reason, skip-list entries
that matched nothing, and a final `N passed, M failed, K skipped` line. Exits 1 if a
record failed. `--json PATH` also writes the counts, failures, skip reasons and unused
skip entries there (`SuiteReport.as_json`, and the process's CPU seconds), for a run in
a background process (`background`).
`--exit-with-parent` ends the run when the process that started it is gone (a killed
test run leaves no runner behind). `--chunk I/N` runs every statement but only chunk I
of N of each file's queries (`execute.Chunk`), so N processes can share a file; the
JSON report lists the query lines checked, to show that the chunks cover the file.
`run_suite` is the same as a function, for pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .engines import Engine, make_engine
from .execute import Chunk, FileReport, Mode, file_dialect, run_file
from .records import Query, Statement
from .skips import DEFAULT_SKIPS, SkipList

__all__ = ["SuiteReport", "run_suite", "main"]


@dataclass
class SuiteReport:
    """The reports of every file run, and the skip entries left unused."""

    files: list[FileReport] = field(default_factory=list)
    unused_skips: list[str] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(f.count(status) for f in self.files)  # type: ignore[arg-type]

    @property
    def summary(self) -> str:
        passed, failed, skipped = self.count("pass"), self.count("fail"), self.count("skip")
        return f"{passed} passed, {failed} failed, {skipped} skipped"

    def skip_reasons(self) -> Counter[str]:
        return Counter(o.detail for f in self.files for o in f.outcomes if o.status == "skip")

    def as_json(self) -> dict[str, object]:
        """The report's counts, failures, skip reasons, unused skip entries, the chunk
        run (or None), the number of statement records and each file's query lines."""
        chunks = {str(f.chunk) for f in self.files if f.chunk is not None}
        return {
            "passed": self.count("pass"),
            "failed": self.count("fail"),
            "skipped": self.count("skip"),
            "seconds": round(sum(f.seconds for f in self.files), 1),
            "failures": self.failures(),
            "skip_reasons": dict(self.skip_reasons()),
            "unused_skips": self.unused_skips,
            "chunk": chunks.pop() if len(chunks) == 1 else None,
            "statements": sum(
                isinstance(o.record, Statement) for f in self.files for o in f.outcomes
            ),
            "query_lines": {
                f.path: [o.record.location.line for o in f.outcomes if isinstance(o.record, Query)]
                for f in self.files
            },
        }

    def failures(self) -> list[str]:
        """Each failure as `file:line: detail`."""
        return [
            f"{o.record.location}: {o.detail}"
            for f in self.files
            for o in f.outcomes
            if o.status == "fail"
        ]


def _engine_factory(engine: str, kernel: str):
    def make(path: str) -> Engine:
        sqlite_compat = file_dialect(path) == "sqlite"
        return make_engine(engine, kernel=kernel, sqlite_compat=sqlite_compat)

    return make


def run_suite(
    paths: Sequence[str | Path],
    engine: str = "duckdb",
    mode: Mode = "direct",
    kernel: str = "auto",
    skips: SkipList | None = None,
    max_failures: int | None = None,
    out: TextIO | None = None,
    verbose: bool = False,
    chunk: Chunk | None = None,
) -> SuiteReport:
    """Run every file in `paths` (each on a fresh engine) and report; print if `out`.

    With `chunk`, only that chunk of each file's queries runs (every statement does).
    """
    skips = SkipList.load() if skips is None else skips
    report = SuiteReport()
    make = _engine_factory(engine, kernel)
    for path in paths:
        budget = None if max_failures is None else max_failures - report.count("fail")
        file_report = run_file(str(path), make, engine, mode, skips, budget, chunk)
        report.files.append(file_report)
        if out is not None:
            _print_file(file_report, out, verbose)
        if file_report.stopped:
            if out is not None:
                print(f"stopped after {max_failures} failures", file=out)
            break
    run = [str(p) for p in paths]
    report.unused_skips = [
        f"{e.file}:{e.line or '*'} ({e.reason})"
        for e in skips.unused(engine, mode)
        if any(e.covers(p) for p in run)
    ]
    if out is not None:
        _print_summary(report, out)
    return report


def _print_file(report: FileReport, out: TextIO, verbose: bool) -> None:
    counts = ", ".join(
        f"{report.count(s)} {word}" for s, word in (("pass", "passed"), ("fail", "failed"))
    )
    print(
        f"{report.name}: {counts}, {report.count('skip')} skipped ({report.seconds:.1f}s)", file=out
    )
    for outcome in report.outcomes:
        if outcome.status == "fail":
            print(f"  FAIL {outcome.record.location}: {outcome.detail}", file=out)
            sql = outcome.record.sql if verbose else outcome.record.sql.splitlines()[0]
            print("    " + sql.replace("\n", "\n    "), file=out)
        elif verbose and outcome.status == "skip":
            print(f"  skip {outcome.record.location}: {outcome.detail}", file=out)


def _print_summary(report: SuiteReport, out: TextIO) -> None:
    stats = sum((f.stats for f in report.files), Counter[str]())
    if stats:
        print("how queries were run and compared:", file=out)
        for what, n in sorted(stats.items()):
            print(f"  {n:6d}  {what}", file=out)
    reasons = report.skip_reasons()
    if reasons:
        print("skipped by reason:", file=out)
        for reason, n in reasons.most_common():
            print(f"  {n:6d}  {reason}", file=out)
    known = SkipList.known_failures(reasons)
    if known:
        print(f"known failures (skip list, reason BUG:): {known}", file=out)
    for entry in report.unused_skips:
        print(f"unused skip entry: {entry}", file=out)
    print(report.summary, file=out)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (1 if a record failed)."""
    parser = argparse.ArgumentParser(prog="python -m tests.slt.runner", description=__doc__)
    parser.add_argument("files", nargs="+", help=".slt/.test files")
    parser.add_argument("--engine", choices=["duckdb", "dsql"], default="duckdb")
    parser.add_argument("--mode", choices=["direct", "incremental"], default="direct")
    parser.add_argument("--kernel", choices=["local", "spark", "auto"], default="auto")
    parser.add_argument("--verbose", "-v", action="store_true", help="full SQL, skipped records")
    parser.add_argument("--max-failures", type=int, default=None, metavar="N")
    parser.add_argument("--skips", default=str(DEFAULT_SKIPS), help="skip list (TOML), or `none`")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="report as JSON")
    parser.add_argument("--exit-with-parent", action="store_true", help="end if the parent ends")
    parser.add_argument(
        "--chunk", type=Chunk.parse, default=None, metavar="I/N", help="only chunk I of N's queries"
    )
    args = parser.parse_args(argv)
    if args.exit_with_parent:
        _exit_with_parent()
    skips = SkipList.load(None if args.skips == "none" else Path(args.skips))
    report = run_suite(
        args.files,
        engine=args.engine,
        mode=args.mode,
        kernel=args.kernel,
        skips=skips,
        max_failures=args.max_failures,
        out=sys.stdout,
        verbose=args.verbose,
        chunk=args.chunk,
    )
    if args.json is not None:
        times = os.times()  # the process's CPU time: steadier than wall time on a busy machine
        cpu = {"seconds_cpu": round(times.user + times.system, 1)}
        args.json.write_text(json.dumps(report.as_json() | cpu, indent=1))
    return 1 if report.count("fail") else 0


def _exit_with_parent() -> None:
    """End this process (status 1) once its parent is gone: an orphan is re-parented."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
