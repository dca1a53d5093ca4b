"""The fuzz harness: one session, statements in, outcomes and invariant checks out.

`Harness.run(text)` executes a text through the PEP 249 cursor (a text of several
statements one statement at a time, so a failure is checked against the state just
before it) and classifies the outcome: `ok`, `parse` (a `ParseError` refused the text
before any of it ran), `error` (another `DsqlError`), `timeout` (`QueryCanceledError`),
or `crash` (any other exception: a bug; the test fails on any).

After every error:
- the session answers a control query. When the statement ran nothing (the worker's
  rounds, its nodes and the clock are as before: a parse error, or a name or type
  refused while binding), the control is `SHOW TABLES` through the cursor, which must
  list the tables; when it reached the runtime, the control reads a materialized view
  (a dataflow import, a round and a read), which costs tens of milliseconds and is
  therefore kept for the errors where the runtime was involved;
- no table changed. Each table's contents are read from its arrangement (the trace's
  updates consolidated in Arrow: about a millisecond for all of them, where a `SELECT`
  per table would build and run a dataflow each) and compared with a snapshot taken
  after the last statement that succeeded and could write (its status says INSERT,
  UPDATE, DELETE, CREATE TABLE or DROP: nothing else changes a table).
Every `full_every` errors, and at the end (`final_check`), the tables are also read
with `SELECT *` and compared with the arrangements, and each materialized view is
compared with its query evaluated from scratch, so the cheap check is tied to what
users read, and errors cannot have corrupted views maintained meanwhile.
"""

from __future__ import annotations

import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

import dsql
from dsql import grammar
from dsql.errors import DsqlError, ParseError, QueryCanceledError
from dsql.runtime.lattice import DIFF

from .corpus import VIEWS, setup_statements

#: Status prefixes of statements that may change a table's contents or the set of tables.
WRITES = ("INSERT", "UPDATE", "DELETE", "CREATE TABLE", "DROP")
#: The control query when the runtime was involved: a read of a materialized view.
CONTROL = "SELECT * FROM fuzz_control_count"


@dataclass
class Outcomes:
    """Counts by outcome class and by error class, the crashes, and the slowest statements."""

    counts: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    crashes: list[tuple[str, str]] = field(default_factory=list)
    slowest: list[tuple[float, str]] = field(default_factory=list)

    def summary(self) -> str:
        top = ", ".join(f"{k} {v}" for k, v in self.errors.most_common(8))
        slow = "; ".join(f"{t:.2f}s {s[:60]!r}" for t, s in sorted(self.slowest)[-3:])
        return (
            f"outcomes: {dict(sorted(self.counts.items()))}\n"
            f"errors by class: {top}\nslowest: {slow}"
        )


class Harness:
    """A fuzz session over the corpus's tables (see module docstring)."""

    def __init__(self, outcomes: Outcomes, timeout: str = "250ms", full_every: int = 200) -> None:
        self.outcomes = outcomes
        self.full_every = full_every
        self.con = dsql.connect(kernel="local")
        self.cursor = self.con.cursor()
        for statement in setup_statements():
            try:
                self.cursor.execute(statement)
            except DsqlError:
                pass  # a definition or row that does not fit the chosen table
        self.cursor.execute("CREATE TABLE fuzz_control (x int)")
        self.cursor.execute("INSERT INTO fuzz_control VALUES (1), (2)")
        self.cursor.execute(
            "CREATE MATERIALIZED VIEW fuzz_control_count AS SELECT count(*) FROM fuzz_control"
        )
        for name, query in VIEWS.items():
            self.cursor.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
        self.cursor.execute(f"SET statement_timeout = '{timeout}'")  # after the set-up
        self.snapshot = self.tables()
        self.failures = 0

    @property
    def session(self) -> Any:
        return self.con.session

    def tables(self) -> dict[str, Any]:
        """Each table's columns and consolidated contents, read from its arrangement."""
        s = self.session
        s.close_time()  # writes so far reach the arrangements
        out: dict[str, Any] = {}
        for name, rel in s.relations.items():
            if rel.kind != "table":
                continue
            data = [f"_c{i}" for i in range(len(rel.columns))]
            counts: Counter[str] = Counter()  # by repr: rows may hold NULLs, lists, NaN
            values: dict[str, tuple[Any, ...]] = {}
            for frame in rel.arrangement.trace.frames():
                for r in s.worker.kernel.to_arrow(frame).select([*data, DIFF]).to_pylist():
                    row = tuple(r[c] for c in data)
                    counts[repr(row)] += r[DIFF]
                    values[repr(row)] = row
            rows = [(values[k], n) for k, n in sorted(counts.items()) if n]
            out[name] = (id(rel), rel.columns, rows)
        return out

    def run(self, text: str) -> str:
        """Execute `text`; returns its outcome class (also counted)."""
        started = time.monotonic()
        outcome = self._run(text)
        took = time.monotonic() - started
        self.outcomes.counts[outcome] += 1
        self.outcomes.slowest = sorted([*self.outcomes.slowest, (took, text)])[-5:]
        return outcome

    def _run(self, text: str) -> str:
        if ";" in text.rstrip().rstrip(";"):
            try:
                statements = [s.text for s in grammar.parse(text)]
            except DsqlError as error:
                return self._after_error(text, error, self._mark())
            except Exception:  # noqa: BLE001 - any other exception is the bug being hunted
                return self._crash(text)
        else:
            statements = [text]
        for statement in statements:
            mark = self._mark()
            try:
                self.cursor.execute(statement)
                self.cursor.fetchall()
            except DsqlError as error:
                return self._after_error(statement, error, mark)
            except Exception:  # noqa: BLE001
                return self._crash(text)
            if self.cursor.status.startswith(WRITES):
                self.snapshot = self.tables()
        return "ok"

    def _mark(self) -> tuple[int, ...]:
        """What running anything changes: the worker's rounds and nodes, the clock (a write
        marks it dirty; it is clean before each statement, as a write is followed by a
        snapshot, which closes the tick)."""
        s = self.session
        return s.worker.rounds, len(s.worker.nodes), s.clock.tick, s.clock.dirty

    def _after_error(self, text: str, error: DsqlError, mark: tuple[int, ...]) -> str:
        self.outcomes.errors[type(error).__name__] += 1
        with self.unbounded():  # the control must answer, however loaded the machine
            touched = self._mark() != mark
            if not touched:
                names = {r[0] for r in self.cursor.execute("SHOW TABLES").fetchall()}
                assert names == set(self.snapshot), f"SHOW TABLES changed after {text!r}"
            else:
                rows = self.cursor.execute(CONTROL).fetchall()
                assert rows == [(2,)], f"control query answered {rows} after {text!r}"
        if touched:  # else nothing ran: no table can have changed
            assert self.tables() == self.snapshot, f"a table changed after {text!r} failed"
        self.failures += 1
        if self.failures % self.full_every == 0:
            self.final_check()
        if isinstance(error, QueryCanceledError):
            return "timeout"
        return "parse" if isinstance(error, ParseError) and not touched else "error"

    def _crash(self, text: str) -> str:
        self.outcomes.crashes.append((text, traceback.format_exc()))
        self.snapshot = self.tables()  # the crash may have written: go on from here
        return "crash"

    @contextmanager
    def unbounded(self) -> Iterator[None]:
        """The checks' own statements run without the statement timeout."""
        executor = self.con.executor
        timeout, executor.statement_timeout = executor.statement_timeout, None
        try:
            yield
        finally:
            executor.statement_timeout = timeout

    def final_check(self) -> None:
        """Tables read by SQL equal their arrangements; views equal their queries from scratch."""
        with self.unbounded():
            self._final_check()

    def _final_check(self) -> None:
        snapshot = self.tables()
        for name, (_, columns, rows) in snapshot.items():
            names = ", ".join(f'"{c.name}"' for c in columns)
            read = self.con.cursor().execute(f'SELECT {names} FROM "{name}"').fetchall()
            expanded = [row for row, n in rows for _ in range(n)]
            assert sorted(read, key=repr) == sorted(expanded, key=repr), name
        for name, query in VIEWS.items():
            if name not in self.session.relations:
                continue  # the fuzz dropped it (a statement that succeeded)
            try:
                kept = self.con.cursor().execute(f"SELECT * FROM {name}").fetchall()
            except DsqlError as error:  # it failed on rows the fuzz wrote: so must its query
                assert "failed" in error.message, error
                with pytest.raises(DsqlError):
                    self.con.cursor().execute(query).fetchall()
                continue
            fresh = self.con.cursor().execute(query).fetchall()
            assert sorted(kept, key=repr) == sorted(fresh, key=repr), name

    def close(self) -> None:
        self.con.close()
