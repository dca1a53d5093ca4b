"""Run one parsed sqllogictest file against an engine; every record gets an `Outcome`.

`plan_file` decides, before anything runs, which records are skipped and why
(`skipif`/`onlyif`, `halt`, unmet `require`, a parser skip, the skip list). `run_file`
then runs the rest in order on a fresh engine, in one of two modes:

- `direct`: each statement and query runs as written;
- `incremental`: each query is also a materialized view created as soon as the
  relations it reads exist (see incremental.py); at the query's place the view is read
  and compared.

A record passes, fails (with a detail saying why) or is skipped (with a reason). An
exception other than `EngineError` from the engine is a crash: the record fails, also
where an error was expected.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .engines import Engine, EngineError
from .incremental import IncrementalViews, ViewPlan, strip_terminator
from .parser import parse_file
from .records import (
    Disposition,
    Entry,
    ExpectedError,
    Halt,
    Hashed,
    Query,
    Record,
    Require,
    SortMode,
    Statement,
)
from .results import compare, format_row, ordered_values, render
from .skips import SkipList

__all__ = [
    "Chunk",
    "Outcome",
    "FileReport",
    "file_dialect",
    "plan_file",
    "run_file",
    "SATISFIED_REQUIREMENTS",
]

Mode = Literal["direct", "incremental"]
Status = Literal["pass", "fail", "skip"]

# DuckDB `require` arguments every engine here satisfies: this runner never runs
# DuckDB's alternative verification.
SATISFIED_REQUIREMENTS = frozenset({"no_alternative_verify"})


def file_dialect(path: str) -> str:
    """`duckdb` for DuckDB's own files (under a `duckdb/` folder), else `sqlite`.

    DuckDB's files expect DuckDB's semantics and print values natively; all other
    files expect SQLite's semantics and type-directed formatting.

    >>> file_dialect("/work/shared/slt/duckdb/test_cte.test")
    'duckdb'
    """
    return "duckdb" if "duckdb" in Path(path).parts else "sqlite"


@dataclass(frozen=True, slots=True)
class Chunk:
    """Chunk `index` of `count` (1-based) of a file's query records.

    Every statement record runs in every chunk (each chunk sees the file's data); the
    queries are dealt out round robin in file order, so each chunk checks about
    `1/count` of them, spread over the whole file (in incremental mode, each chunk's
    writes update about `1/count` of the views). Queries sharing a label are dealt as
    one (SQLite's select3-5 label each query pair), so labels are still compared. The
    chunks of a file check each of its queries exactly once.

    >>> Chunk.parse("2/3").takes(4), Chunk.parse("2/3").takes(5)
    (True, False)
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise ValueError(f"chunk {self.index}/{self.count}: need 1 <= i <= n")

    @staticmethod
    def parse(text: str) -> Chunk:
        """`i/n` as a chunk; raises ValueError if it is not one."""
        index, _, count = text.partition("/")
        return Chunk(int(index), int(count))

    def takes(self, ordinal: int) -> bool:
        """Whether the 0-based `ordinal`th query (or label group) is this chunk's."""
        return ordinal % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def select(self, plan: list[tuple[Record, str | None]]) -> list[tuple[Record, str | None]]:
        """`plan` with only this chunk's queries (every other record kept)."""
        kept: list[tuple[Record, str | None]] = []
        groups: dict[str | int, int] = {}  # label (or a query's index) -> its deal ordinal
        for index, (record, skip) in enumerate(plan):
            if isinstance(record, Query):
                group = groups.setdefault(record.label or index, len(groups))
                if not self.takes(group):
                    continue
            kept.append((record, skip))
        return kept


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one record: `status`, and the reason or failure detail."""

    record: Record
    status: Status
    detail: str = ""


@dataclass
class FileReport:
    """The outcomes of one file, in record order, and the seconds it took."""

    path: str
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    stopped: bool = False  # --max-failures reached inside this file
    stats: Counter[str] = field(default_factory=Counter)  # how queries ran (views, order)
    chunk: Chunk | None = None  # only this chunk's queries were run

    def count(self, status: Status) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def name(self) -> str:
        """The path, and the chunk if only one was run: `select4.test [chunk 2/3]`."""
        return self.path if self.chunk is None else f"{self.path} [chunk {self.chunk}]"


def plan_file(
    entries: Sequence[Entry], names: frozenset[str], skips: SkipList, engine: str, mode: Mode
) -> list[tuple[Record, str | None]]:
    """Each record with the reason it is skipped (None: it runs)."""
    plan: list[tuple[Record, str | None]] = []
    stop: str | None = None  # a halt or unmet require: skips everything after
    for entry in entries:
        excluded = next((str(c) for c in entry.conditions if c.excludes(names)), None)
        if isinstance(entry, Halt | Require):
            if excluded or stop:
                continue
            if isinstance(entry, Halt):
                stop = f"after `halt` (line {entry.location.line})"
            elif entry.what not in SATISFIED_REQUIREMENTS:
                stop = f"`require {entry.what}` not supported"
            continue
        reason = stop or entry.skip_reason or excluded
        loc = entry.location
        reason = reason or skips.reason(loc.file, loc.line, entry.sql, engine, mode)
        plan.append((entry, reason))
    return plan


def _error_detail(expected: ExpectedError | None, message: str, engine: Engine) -> str | None:
    """None if `message` satisfies `expected`, else why not."""
    if expected is None or expected.pattern is None:
        return None
    if expected.dialect is not None and expected.dialect not in engine.error_dialects:
        return None  # written for another engine's messages: only the error itself counts
    found = re.search(expected.pattern, message, re.DOTALL) is not None
    if found != expected.negate:
        return None
    verb = "matching" if not expected.negate else "not matching"
    return f"expected an error {verb} {expected.pattern!r}, got: {message}"


class _FileRun:
    """The state of running one file: engine, mode, views and query labels."""

    def __init__(
        self, engine: Engine, mode: Mode, plan: list[tuple[Record, str | None]], native: bool
    ) -> None:
        self.engine = engine
        self.mode = mode
        self.native = native
        self.labels: dict[str, list[str]] = {}
        self.stats: Counter[str] = Counter()  # how queries were compared, for the report
        self.views: IncrementalViews | None = None
        if mode == "incremental":
            queries = {
                k: r
                for k, (r, skip) in enumerate(plan)
                if skip is None and isinstance(r, Query) and r.error is None
            }
            self.views = IncrementalViews(engine, queries)

    def statement(self, record: Statement) -> Outcome:
        if self.views is not None:
            self.views.before_statement(record.sql)
        try:
            self.engine.execute(record.sql)
        except EngineError as e:
            if record.disposition is Disposition.OK:
                return Outcome(record, "fail", f"statement failed: {e}")
            detail = _error_detail(record.error, str(e), self.engine)
            return Outcome(record, "fail" if detail else "pass", detail or "")
        if self.views is not None:
            self.views.after_statement(record.sql, True)
        if record.disposition is Disposition.ERROR:
            return Outcome(record, "fail", "statement succeeded; an error was expected")
        return Outcome(record, "pass")

    def query(self, index: int, record: Query) -> Outcome:
        if record.error is not None or record.expected is None:
            return self.error_query(record)
        if self.native and _unordered(record):
            # DuckDB's files expect DuckDB's row order where SQL leaves it unspecified.
            self.stats["unordered nosort results compared as multisets (DuckDB files)"] += 1
            record = dataclasses.replace(record, sort=SortMode.ROWSORT)
        plan = self.views.plan(index) if self.views is not None else None
        try:
            if self.views is None or plan is None:
                if self.views is not None:
                    self.views.stats["queries run directly (no SELECT)"] += 1
                rows = self.rows(self.engine.execute(record.sql), record)
                return self.check(record, rows)
            view_rows = self.rows(self.views.read(index), record)
            if self.order_from_direct(record, plan.order_by):
                self.views.stats["order checked by a direct run"] += 1
                return self.check_against_direct(record, view_rows)
            if plan.order_by is not None:
                self.views.stats["order read from the view (ORDER BY positions)"] += 1
            return self.check(record, view_rows)
        except EngineError as e:
            return Outcome(record, "fail", f"query failed: {e}")
        except _ColumnCountError as e:
            return Outcome(record, "fail", str(e))

    def error_query(self, record: Query) -> Outcome:
        try:
            self.engine.execute(record.sql)
        except EngineError as e:
            detail = _error_detail(record.error, str(e), self.engine)
            return Outcome(record, "fail" if detail else "pass", detail or "")
        return Outcome(record, "fail", "query succeeded; an error was expected")

    def rows(self, rows: list[tuple[Any, ...]] | None, record: Query) -> list[tuple[str, ...]]:
        """Format result rows by the record's types (a column count mismatch fails)."""
        out = []
        for row in rows or []:
            if len(row) != len(record.types):
                raise _ColumnCountError(
                    f"expected {len(record.types)} columns ({record.types}), got {len(row)}"
                )
            out.append(format_row(row, record.types, self.native))
        return out

    @staticmethod
    def order_from_direct(record: Query, order_by: str | None) -> bool:
        """Whether the view's order cannot be read back: take it from a direct run."""
        if record.sort is not SortMode.NOSORT or order_by is not None or not record.types:
            return False
        expected = record.expected
        count = expected.count if isinstance(expected, Hashed) else len(expected.values or ())
        return count > len(record.types)  # more than one row

    def check_against_direct(self, record: Query, view_rows: list[tuple[str, ...]]) -> Outcome:
        direct = self.rows(self.engine.execute(strip_terminator(record.sql)), record)
        outcome = self.check(record, direct)
        if outcome.status == "fail" or sorted(direct) == sorted(view_rows):
            return outcome
        want = render(ordered_values(direct, SortMode.ROWSORT), record.hash_threshold)
        got = render(ordered_values(view_rows, SortMode.ROWSORT), record.hash_threshold)
        return Outcome(
            record, "fail", f"view differs from direct run (as multisets):\n{want}\n---\n{got}"
        )

    def check(self, record: Query, rows: list[tuple[str, ...]]) -> Outcome:
        assert record.expected is not None
        comparison = compare(record.expected, rows, record.sort, len(record.types))
        if not comparison.ok:
            return Outcome(record, "fail", comparison.detail)
        if record.label is not None:
            values = ordered_values(rows, record.sort)
            first = self.labels.setdefault(record.label, values)
            if first != values:
                return Outcome(record, "fail", f"result differs from label {record.label}")
        return Outcome(record, "pass")


def _unordered(record: Query) -> bool:
    """Whether a `nosort` query has several rows and no top-level ORDER BY."""
    if record.sort is not SortMode.NOSORT or not _FileRun.order_from_direct(record, None):
        return False
    plan = ViewPlan.of(record.sql, "duckdb")
    return plan is not None and plan.relations is not None and not plan.ordered


class _ColumnCountError(Exception):
    """The result has a different number of columns than the record's types."""


def run_file(
    path: str,
    make_engine: Callable[[str], Engine],
    engine_name: str,
    mode: Mode,
    skips: SkipList,
    max_failures: int | None = None,
    chunk: Chunk | None = None,
) -> FileReport:
    """Run the file at `path` on a fresh engine; stop after `max_failures` failures.

    With `chunk`, only that chunk's queries run (and every statement).
    """
    started = time.perf_counter()
    report = FileReport(path, chunk=chunk)
    engine = make_engine(path)
    try:
        plan = plan_file(parse_file(path), engine.names, skips, engine_name, mode)
        if chunk is not None:
            plan = chunk.select(plan)
        run = _FileRun(engine, mode, plan, native=file_dialect(path) == "duckdb")
        for index, (record, skip) in enumerate(plan):
            if skip is not None:
                report.outcomes.append(Outcome(record, "skip", skip))
                continue
            report.outcomes.append(_run_record(run, index, record))
            if max_failures is not None and report.count("fail") >= max_failures:
                report.stopped = True
                break
        report.stats = run.stats + (run.views.stats if run.views is not None else Counter())
    finally:
        engine.close()
        report.seconds = time.perf_counter() - started
    return report


def _run_record(run: _FileRun, index: int, record: Record) -> Outcome:
    try:
        if isinstance(record, Statement):
            return run.statement(record)
        return run.query(index, record)
    except EngineError as e:
        return Outcome(record, "fail", f"engine error outside the record's SQL: {e}")
    except Exception as e:  # noqa: BLE001 - a crash of the engine under test is a result
        return Outcome(record, "fail", f"crash: {type(e).__name__}: {e}")
