"""The interactive shell: `dsql` with no command.

A statement may span lines and ends at a `;` outside strings and comments; `\\help`,
`\\timing` and `\\q` are shell commands. Results print as rich tables; a SUBSCRIBE
shows a live-updating table until Ctrl-C, and the shell goes on; errors print with a
caret under the position and a hint, never a traceback; a statement whose new
dataflow takes a while to hydrate shows a progress bar of its operator steps. Ctrl-C at
the prompt drops the statement being typed, Ctrl-D leaves. History persists across runs in
`~/.dsql_history` (or the file `DSQL_HISTORY` names); Tab completes keywords and the
names of relations and columns.

The shell uses the wall clock and the in-process kernel unless told otherwise, so
Spark starts only with `--kernel spark` (it says so). With stdin not a terminal it
behaves like `dsql run` on the piped text (manual clock, stop at the first error).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from rich.markup import escape

from dsql import copy_in, errors
from dsql.cli import Script, connect
from dsql.grammar.source import Source
from dsql.printer import Printer, one_line

PROMPT = "dsql> "
CONTINUATION = "  ->  "
#: Rows a live SUBSCRIBE table shows (the most recent ones).
LIVE_ROWS = 40
HELP = """\
Statements end with ';' and may span lines. Some to try:
  CREATE TABLE t (a int, b text);  INSERT INTO t VALUES (1, 'x');
  CREATE MATERIALIZED VIEW v AS SELECT b, count(*) FROM t GROUP BY b;
  SUBSCRIBE v;            (a live table of changes; Ctrl-C stops it)
  SELECT * FROM v;  EXPLAIN VIEW v;  SHOW TABLES;  ADVANCE BY 1000;
Shell commands:
  \\help        this text
  \\timing      print how long each statement takes (toggle; or \\timing on|off)
  \\q           quit (Ctrl-D too)"""

KEYWORDS = (
    "SELECT FROM WHERE GROUP BY HAVING ORDER LIMIT OFFSET JOIN LEFT RIGHT FULL OUTER INNER "
    "CROSS ON USING AS AND OR NOT NULL IS IN EXISTS BETWEEN LIKE CASE WHEN THEN ELSE END "
    "DISTINCT UNION ALL EXCEPT INTERSECT WITH RECURSIVE MUTUALLY VALUES INSERT INTO UPDATE "
    "SET DELETE CREATE TABLE MATERIALIZED VIEW INDEX DEFAULT DROP CASCADE IF SUBSCRIBE TO "
    "SNAPSHOT PROGRESS OF UP DECLARE CURSOR FOR FETCH CLOSE EXPLAIN PHYSICAL RAW SHOW TABLES "
    "VIEWS COLUMNS ARRANGEMENTS ADVANCE BEGIN COMMIT ROLLBACK INTERVAL TIMESTAMP mz_now "
    "count sum min max avg generate_series"
).split()


class ReplScript(Script):
    """`Script` whose SUBSCRIBE is a live table until Ctrl-C, and whose statements show
    a progress bar while a new dataflow hydrates (`Hydration`)."""

    def execute(self, stmt: Any) -> None:
        with Hydration(self.connection.session.worker, self.printer.console):
            super().execute(stmt)

    def subscribed(self, stmt: Any, result: Any) -> None:
        from rich.live import Live

        sub = result.subscription
        label = one_line(stmt.text, 60)
        rows: pa.Table = result.table
        console = self.printer.console
        console.print(f"[dim]{escape(label)}: live; Ctrl-C stops[/dim]", highlight=False)
        try:
            with Live(_live_table(label, rows), console=console, refresh_per_second=8) as live:
                while not sub.closed:
                    time.sleep(0.2)
                    with self.connection.executor.guarded(stmt.text):  # Ctrl-C: between rounds
                        fresh = sub.poll()
                    if fresh.num_rows:
                        rows = pa.concat_tables([rows, fresh])
                        live.update(_live_table(label, rows))
        except KeyboardInterrupt:
            pass
        finally:
            sub.close()
        console.print(f"[dim]subscription ended after {rows.num_rows} updates[/dim]")


class Hydration:
    """A progress bar for a statement that builds a dataflow and fills it from the
    existing data (a view on large inputs, a one-off read): operators stepped out of
    the new dataflow's operators, shown once the work takes longer than `delay`
    seconds, gone when it ends. Within `with`, the worker reports each step.

    Invariant: the worker's `on_step` hook is restored on exit, error or not.
    """

    def __init__(self, worker: Any, console: Any, delay: float = 0.5) -> None:
        self.worker, self.console, self.delay = worker, console, delay
        self.first = len(worker.nodes)
        self.stepped = 0
        self.progress: Any = None

    def __enter__(self) -> Hydration:
        self.started = time.perf_counter()
        self.saved, self.worker.on_step = self.worker.on_step, self.step
        return self

    def __exit__(self, *exc: Any) -> None:
        self.worker.on_step = self.saved
        if self.progress is not None:
            self.progress.stop()

    def step(self, node: Any) -> None:
        """Count a step of one of the new dataflow's operators; show the bar when due."""
        if node.id < self.first:  # an older dataflow's operator (ids count up)
            return
        self.stepped += 1
        built = len(self.worker.nodes) - self.first
        if self.progress is None:
            if time.perf_counter() - self.started < self.delay:
                return
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.progress = Progress(
                TextColumn("hydrating"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("operator steps"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self.task = self.progress.add_task("hydrating", total=built)
            self.progress.start()
        # Loops step their operators once per round: the total grows with them.
        total = max(built, self.stepped)
        self.progress.update(self.task, completed=self.stepped, total=total)


def _live_table(label: str, rows: pa.Table) -> Any:
    from rich.table import Table

    from dsql.printer import column_texts

    shown = rows.slice(max(rows.num_rows - LIVE_ROWS, 0))
    title = f"{escape(label)}  [dim]({rows.num_rows} updates)[/dim]"
    view = Table(title=title, title_justify="left")
    for field in rows.schema:
        view.add_column(field.name)
    for row in zip(*(column_texts(c) for c in shown.columns), strict=True):
        view.add_row(*row)
    return view


def is_complete(text: str) -> bool:
    """Whether `text` ends a statement: its last token is a `;` (not in a string or comment)."""
    try:
        tokens = Source(text).tokens
    except errors.DsqlError:
        return False  # an unterminated string or comment: keep reading
    return bool(tokens) and tokens[-1].text == ";"


class Completer:
    """Readline completion: keywords, and the catalog's relation and column names."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._matches: list[str] = []

    def words(self) -> list[str]:
        names = list(self.session.relations)
        for rel in self.session.relations.values():
            names += [c.name for c in rel.columns]
        return sorted(set(names)) + KEYWORDS

    def complete(self, text: str, state: int) -> str | None:
        if state == 0:
            low = text.lower()
            self._matches = []
            for word in self.words():
                if word.lower().startswith(low) and word not in self._matches:
                    upper = text[:1].isupper() and word.isupper()
                    self._matches.append(word if upper or not word.isupper() else word.lower())
        return self._matches[state] if state < len(self._matches) else None


def _history_file() -> Path:
    return Path(os.environ.get("DSQL_HISTORY") or Path.home() / ".dsql_history")


def _setup_readline(session: Any) -> Any:
    try:
        import readline
    except ImportError:  # no readline on this platform: plain input()
        return None
    readline.set_completer(Completer(session).complete)
    readline.set_completer_delims(" \t\n()[],;.=<>*+-/'\"")
    if "libedit" in (readline.__doc__ or ""):
        readline.parse_and_bind("bind ^I rl_complete")
    else:
        readline.parse_and_bind("tab: complete")
    try:
        readline.read_history_file(_history_file())
    except OSError:
        pass  # no history yet
    readline.set_history_length(2000)
    return readline


def _shell_command(line: str, script: ReplScript) -> bool:
    """Run a backslash command; False when it asks to quit."""
    word, _, arg = line.strip().partition(" ")
    out = script.printer
    if word in ("\\q", "\\quit"):
        return False
    if word in ("\\help", "\\h", "\\?"):
        out.console.print(HELP, markup=False)
    elif word == "\\timing":
        arg = arg.strip().lower()
        script.timing = (not script.timing) if not arg else arg == "on"
        out.console.print(f"Timing is {'on' if script.timing else 'off'}.")
    else:
        out.error(errors.InterfaceError(f"unknown command {word}", hint="\\help lists them"), None)
    return True


def interact(connection: Any, printer: Printer) -> int:
    """The read-eval-print loop on a terminal; returns the exit code."""
    from dsql import __version__

    script = ReplScript(connection, printer)
    readline = _setup_readline(connection.session)
    printer.console.print(
        f"dsql {__version__} ({connection.session.kernel_name} kernel, "
        f"{connection.session.clock.kind} clock). End statements with ';'. "
        "\\help for help, \\q to quit.",
        markup=False,
    )
    buffer: list[str] = []
    try:
        while True:
            try:
                line = input(CONTINUATION if buffer else PROMPT)
            except EOFError:
                printer.console.print()
                return 0
            except KeyboardInterrupt:
                printer.console.print("^C")
                buffer = []
                continue
            if not buffer and line.strip().startswith("\\"):
                if not _shell_command(line, script):
                    return 0
                continue
            if not buffer and not line.strip():
                continue
            buffer.append(line)
            text = "\n".join(buffer)
            if is_complete(text):
                buffer = []
                if copy_in.wants_data(text):
                    text += "\n" + _copy_rows(printer)
                try:
                    script.run(text, None)
                except KeyboardInterrupt:
                    printer.console.print("[dim]cancelled[/dim]")
    finally:
        if readline is not None:
            try:
                readline.write_history_file(_history_file())
            except OSError:
                pass  # an unwritable history file must not break the shell


def _copy_rows(printer: Printer) -> str:
    """The rows typed after a `COPY ... FROM STDIN`, through the line `\\.` (psql's
    prompt and end marker; Ctrl-D ends them too)."""
    printer.console.print(copy_in.PROMPT, markup=False)
    lines = []
    while True:
        try:
            line = input(">> ")
        except EOFError:
            break
        lines.append(line)
        if line == "\\.":
            break
    return "".join(line + "\n" for line in lines)


def main(options: argparse.Namespace) -> int:
    """`dsql` with no command: the shell on a terminal, `dsql run` semantics on a pipe."""
    tty = sys.stdin.isatty()
    printer = Printer(sys.stdout, sys.stderr, rich=True if tty else None)
    try:
        connection = connect(options, "wall" if tty else "manual", sys.stderr)
    except errors.DsqlError as error:
        printer.error(error, None)
        return 1
    if not tty:
        return Script(connection, printer).run(sys.stdin.read(), "<stdin>")
    return interact(connection, printer)


__all__ = ["Completer", "Hydration", "ReplScript", "interact", "is_complete", "main"]
