"""The `dsql` command: `dsql run file.sql`, `dsql explain file.sql`, and the REPL.

`dsql run` executes a script statement by statement and prints each result; a
SUBSCRIBE keeps printing its updates as later statements change the data, until
the script ends or its UP TO time passes. Under the manual clock (the default for
scripts) the output is deterministic, so scripts double as golden tests. The first
error stops the script with exit code 1 unless `--continue`; an error prints as
`error: message`, the statement with a caret under the position, and a hint, never
a Python traceback. `dsql` with no command opens the REPL (`dsql.repl`).

Output goes through a `Printer` (`dsql.output`-style plain text when stdout is not
a terminal, rich tables when it is); `Script` is the statement loop that the REPL
reuses for piped input.

    dsql run examples/quickstart.sql --echo
    dsql explain examples/quickstart.sql --stage physical
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, TextIO

from dsql import copy_in, errors, grammar
from dsql.grammar.source import Source
from dsql.printer import Printer, one_line

#: Statements `dsql explain` runs for real (they build the catalog; no data moves).
_CATALOG = (
    grammar.CreateTable,
    grammar.CreateIndex,
    grammar.Drop,
    grammar.Begin,
    grammar.Commit,
    grammar.SetVariable,
    grammar.Explain,
    grammar.Show,
)


class Script:
    """Runs statements one at a time on a connection, printing results and live updates.

    Invariants: a statement's result is printed before the next statement runs; the
    updates of running subscriptions are printed after each statement that moved the
    clock (every statement under the wall clock) and once more when the script ends,
    so each printed batch holds whole, consolidated milliseconds.
    """

    def __init__(
        self,
        connection: Any,
        printer: Printer,
        *,
        keep_going: bool = False,
        echo: bool = False,
        explain_stage: str | None = None,
    ) -> None:
        self.connection = connection
        self.printer = printer
        self.keep_going = keep_going
        self.echo = echo
        self.explain_stage = explain_stage
        self.timing = False
        self.subscriptions: list[tuple[str, Any]] = []
        self._seen_ms = self.session.clock.now_ms()

    @property
    def session(self) -> Any:
        return self.connection.session

    def run(self, text: str, filename: str | None = "<stdin>") -> int:
        """Execute every statement of `text`; 0 if all succeeded, else 1.

        Errors say where the statement is (`filename:line`) unless `filename` is None.
        """
        failed = False
        for chunk, data in copy_in.chunks(text):
            try:
                source = Source(chunk)
            except errors.DsqlError as error:
                line = (error.position or (1, 1))[0]
                self.printer.error(error, f"{filename}:{line}" if filename else None)
                return 1
            fragments = list(source.statements())
            for k, fragment in enumerate(fragments):
                line = source.position(fragment.start)[0]
                rows = data if k == len(fragments) - 1 else None
                if not self.statement(
                    fragment.text, f"{filename}:{line}" if filename else None, rows
                ):
                    failed = True
                    if not self.keep_going:
                        break
            if failed and not self.keep_going:
                break
        self.finish()
        return 1 if failed else 0

    def statement(self, text: str, where: str | None, data: str | None = None) -> bool:
        """Parse and execute one statement's text; False (error printed) if it failed.
        `data`: the rows that followed it, for a `COPY ... FROM STDIN`."""
        if self.echo:
            self.printer.echo(text)
        started = time.perf_counter()
        try:
            for stmt in grammar.parse(text):
                self.execute(copy_in.with_data(stmt, data))
        except errors.DsqlError as error:
            if error.statement is None:
                error.statement = text
            self.printer.error(error, _location(where, error))
            return False
        except (KeyboardInterrupt, BrokenPipeError):
            raise
        except Exception as error:  # a bug: report it in words, not a traceback
            self.printer.internal_error(error)
            if os.environ.get("DSQL_TRACEBACK"):
                traceback.print_exc()
            return False
        finally:
            if self.timing:
                self.printer.note(f"Time: {(time.perf_counter() - started) * 1000:.1f} ms")
        self.poll()
        return True

    def execute(self, stmt: Any) -> None:
        """Execute (or, for `dsql explain`, explain) one parsed statement and show it."""
        if self.explain_stage is not None:
            self._explain(stmt)
            return
        result = self.connection.executor.execute(stmt)
        if result.subscription is not None:
            self.subscribed(stmt, result)
        else:
            self.printer.result(result)
        for notice in result.notices:
            self.printer.note(f"NOTICE: {notice}")

    def subscribed(self, stmt: Any, result: Any) -> None:
        """Show a SUBSCRIBE's snapshot and keep it for later updates."""
        self.printer.result(result)
        self.subscriptions.append((one_line(stmt.text), result.subscription))
        self._seen_ms = self.session.clock.now_ms()

    def poll(self, final: bool = False) -> None:
        """Print each running subscription's new updates, if the clock moved (or `final`)."""
        now = self.session.clock.now_ms()
        if not final and self.session.clock.kind == "manual" and now == self._seen_ms:
            return
        self._seen_ms = now
        for label, sub in list(self.subscriptions):
            try:
                with self.connection.executor.guarded(label):  # Ctrl-C waits for the round
                    table = sub.poll()
            except errors.DsqlError as error:  # a view it reads is in error: it waits
                self.printer.error(error, label)
                continue
            if table.num_rows:
                self.printer.updates(label, table)
            if sub.closed:
                self.subscriptions.remove((label, sub))

    def finish(self) -> None:
        """The script ended: print the last updates and close every subscription."""
        self.poll(final=True)
        for _, sub in self.subscriptions:
            sub.close()
        self.subscriptions.clear()

    def _explain(self, stmt: Any) -> None:
        from dsql.explain import explain

        s = self.session
        assert self.explain_stage is not None
        if isinstance(stmt, _CATALOG):
            self.printer.result(self.connection.executor.execute(stmt))
            return
        if isinstance(stmt, grammar.CreateView):
            self.connection.executor.execute(stmt)
            target: Any = stmt.name
        elif isinstance(stmt, grammar.Select):
            target = stmt.query
        elif isinstance(stmt, grammar.Subscribe | grammar.DeclareCursor):
            target = (stmt.subscribe if isinstance(stmt, grammar.DeclareCursor) else stmt).target
        else:
            return  # writes, ADVANCE, FETCH: nothing to plan
        self.printer.plan(one_line(stmt.text), explain(s, target, self.explain_stage))


def _location(where: str | None, error: errors.DsqlError) -> str | None:
    """`file:line` of the error: the statement's first line plus the error's line in it."""
    local = error.local_position
    if local is None or where is None:
        return where
    name, line = where.rsplit(":", 1)
    return f"{name}:{int(line) + local[0] - 1}"


# --- the command line ----------------------------------------------------------------------


def _options(after_command: bool) -> argparse.ArgumentParser:
    """The options that may stand before or after the command: `dsql --master URL run
    f.sql` and `dsql run f.sql --master URL` mean the same.

    argparse fills a command's options into a namespace of its own and copies every
    attribute of it over the top-level one, defaults included; so the command's copy
    (`after_command`) has no defaults (`argparse.SUPPRESS`) and sets only what was
    written after the command, and its `--conf` items go to `conf_after`, added to those
    written before it (`parse`).
    """
    common = argparse.ArgumentParser(
        add_help=False, argument_default=argparse.SUPPRESS if after_command else None
    )
    common.add_argument("--clock", choices=("manual", "wall"), help="how time moves")
    common.add_argument(
        "--kernel",
        choices=("auto", "local", "spark"),
        help="auto (default, or $DSQL_KERNEL): in-process until a relation outgrows "
        "--placement-threshold rows, then Spark; local: DuckDB in-process only; "
        "spark: every step on Spark",
    )
    common.add_argument(
        "--placement-threshold",
        type=int,
        metavar="ROWS",
        help="auto kernel: relations with more rows live on Spark (default 100000)",
    )
    common.add_argument("--master", help="Spark master URL (implies --kernel spark)")
    common.add_argument(
        "--state-uri",
        metavar="URI",
        help="where Spark keeps dsql's state: a URI every node reaches (file:///shared/dir, "
        "hdfs://..., s3a://...); needed with a non-local master (default $DSQL_STATE_URI)",
    )
    common.add_argument(
        "--remote",
        metavar="sc://HOST:PORT",
        help="a Spark Connect server to run Spark's steps on (default $DSQL_REMOTE; "
        "implies --kernel spark)",
    )
    common.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep the catalog and every committed write in DIR and recover them on start "
        "(default $DSQL_DATA_DIR; without one, state is in memory)",
    )
    for flag, metavar, text in (
        (
            "--allow-path",
            "DIR",
            "a directory SQL may read and write files in (COPY, CREATE SOURCE); none by default",
        ),
        ("--conf", "K=V", "a Spark setting"),
    ):
        dest = flag.removeprefix("--").replace("-", "_")
        common.add_argument(
            flag,
            action="append",
            dest=f"{dest}_after" if after_command else dest,
            default=argparse.SUPPRESS if after_command else [],
            metavar=metavar,
            help=text,
        )
    return common


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsql",
        parents=[_options(after_command=False)],
        description="Incremental SQL on Spark. With no command: the interactive shell.",
    )
    parser.add_argument("--version", "-V", action="store_true", help="print the version")
    commands = parser.add_subparsers(dest="command")
    after = _options(after_command=True)
    run = commands.add_parser("run", parents=[after], help="run a .sql script")
    explain = commands.add_parser("explain", parents=[after], help="print a script's plans")
    for sub in (run, explain):
        sub.add_argument("file", help="the script (- for stdin)")
    run.add_argument(
        "--continue", dest="keep_going", action="store_true", help="go on after errors"
    )
    run.add_argument("--echo", "-e", action="store_true", help="print each statement first")
    explain.add_argument(
        "--stage",
        default="optimized",
        choices=("raw", "decorrelated", "optimized", "physical"),
        help="which plan to print",
    )
    return parser


def parse(args: list[str]) -> argparse.Namespace:
    """The command line's options, each global one taken from either side of the command
    (after it wins; `--conf` items from both sides, in order)."""
    options = _parser().parse_args(args)
    options.conf = options.conf + vars(options).pop("conf_after", [])
    options.allow_path = options.allow_path + vars(options).pop("allow_path_after", [])
    return options


def connect(options: argparse.Namespace, default_clock: str, err: TextIO) -> Any:
    """The connection the options ask for; says so on `err` when Spark is about to start."""
    from dsql.api import connect as api_connect

    conf = {}
    for item in options.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise errors.InterfaceError(f"--conf {item!r} is not key=value")
        conf[key] = value
    if options.master and options.remote:
        raise errors.InterfaceError(
            "--master and --remote exclude each other",
            hint="a Spark Connect server has its own master",
        )
    kernel = options.kernel or ("spark" if options.master or options.remote else None)
    if kernel == "spark":  # what runs: a session started, reached, or already running
        from dsql.runtime.spark_session import SparkStart, running_message

        start = SparkStart(options.master, conf or None, options.remote)
        running = start.running()
        action = start.notice() if running is None else running_message(running)
        print(f"dsql: {action}...", file=err, flush=True)
    return api_connect(
        master=options.master,
        remote=options.remote,
        clock=options.clock or default_clock,
        kernel=kernel,
        placement_threshold=options.placement_threshold,
        state_uri=options.state_uri,
        data_dir=options.data_dir or os.environ.get("DSQL_DATA_DIR") or None,
        on_recovery=RecoveryBar(err) if err.isatty() else None,
        allowed_paths=getattr(options, "allow_path", []),
        spark_conf=conf,
    )


class RecoveryBar:
    """A progress bar on `err` over the log bytes a recovery replays, shown once it has
    taken longer than `delay` seconds (`connect(on_recovery=)`)."""

    def __init__(self, err: TextIO, delay: float = 0.5) -> None:
        self.err, self.delay = err, delay
        self.started = time.perf_counter()
        self.progress: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.progress is None:
            if time.perf_counter() - self.started < self.delay:
                return
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

            self.progress = Progress(
                TextColumn("recovering"),
                BarColumn(),
                DownloadColumn(),
                TextColumn("of the log"),
                console=Console(file=self.err),
                transient=True,
            )
            self.task = self.progress.add_task("recovering", total=total)
            self.progress.start()
        self.progress.update(self.task, completed=done, total=total)
        if done >= total:
            self.progress.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `dsql` console script."""
    args = sys.argv[1:] if argv is None else argv
    options = parse(args)
    if not os.environ.get("DSQL_TRACEBACK"):
        warnings.simplefilter("ignore")  # library warnings are not the user's business
    if options.version:
        from dsql import __version__

        print(f"dsql {__version__}")
        return 0
    if options.command is None:
        from dsql.repl import main as repl_main

        return repl_main(options)
    printer = Printer(sys.stdout, sys.stderr)
    try:
        text = _read(options.file)
        connection = connect(options, "manual", sys.stderr)
    except errors.DsqlError as error:
        printer.error(error, None)
        return 1
    stage = options.stage if options.command == "explain" else None
    script = Script(
        connection,
        printer,
        keep_going=getattr(options, "keep_going", False),
        echo=getattr(options, "echo", False),
        explain_stage=stage,
    )
    try:
        return script.run(text, "<stdin>" if options.file == "-" else options.file)
    except KeyboardInterrupt:
        printer.note("interrupted")
        return 130
    except BrokenPipeError:  # the reader left (`dsql run x.sql | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _read(file: str) -> str:
    if file == "-":
        return sys.stdin.read()
    try:
        return Path(file).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise errors.SourceError(
            f"no such file: {file}", hint="check the path (relative to the current directory)"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise errors.SourceError(f"cannot read {file}: {error}") from None


if __name__ == "__main__":
    raise SystemExit(main())
