"""The REPL: piped stdin behaves like `dsql run`; on a pseudo-terminal, prompts,
continuation lines, live SUBSCRIBE stopped by Ctrl-C, errors without tracebacks,
shell commands and history."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from dsql.repl import Completer, is_complete

COMMAND = [sys.executable, "-c", "from dsql.cli import main; raise SystemExit(main())"]
#: A bound on waiting for the shell, so a broken REPL fails the test instead of hanging it.
PATIENCE = 180.0


def test_statement_completion_ignores_semicolons_in_strings_and_comments():
    assert is_complete("SELECT 1;")
    assert is_complete("SELECT\n 1 ;  ")
    assert not is_complete("SELECT ';")
    assert not is_complete("SELECT 1 -- ;")
    assert not is_complete("SELECT 'a;b'")


def test_completer_offers_keywords_and_catalog_names():
    import dsql

    con = dsql.connect()
    con.execute("CREATE TABLE orders (order_id int)")
    complete = Completer(con.session).complete
    found = [w for i in range(50) if (w := complete("ord", i)) is not None]
    assert "orders" in found and "order_id" in found and "order" in found
    assert complete("SUBSC", 0) == "SUBSCRIBE"


def test_piped_stdin_behaves_like_dsql_run(tmp_path):
    text = "CREATE TABLE t (a int);\nINSERT INTO t VALUES (1), (2);\nSELECT sum(a) AS s FROM t;\n"
    proc = subprocess.run(COMMAND, input=text, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "CREATE TABLE\nINSERT 0 2\n s\n---\n 3\n(1 row)\n\n"
    bad = subprocess.run(COMMAND, input="SELEC 1;\nSELECT 2;", capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("error: unknown statement 'SELEC'\n  SELEC 1\n  ^\n")


class Terminal:
    """The shell on a pseudo-terminal: send keys, wait for text to appear."""

    def __init__(self, env: dict[str, str]) -> None:
        import pty

        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become the shell
            os.execvpe(COMMAND[0], COMMAND, env)
        self.seen = ""

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def expect(self, pattern: str) -> str:
        """Read until `pattern` (a regex) appears after what was already matched."""
        deadline = time.monotonic() + PATIENCE
        while not (match := re.search(pattern, self.seen)):
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} in the terminal:\n{self.seen[-2000:]}")
            ready, _, _ = select.select([self.fd], [], [], 1.0)
            if ready:
                try:
                    self.seen += os.read(self.fd, 65536).decode(errors="replace")
                except OSError:  # the shell exited
                    break
        if match is None:
            raise AssertionError(f"the shell ended without {pattern!r}:\n{self.seen[-2000:]}")
        before, self.seen = self.seen[: match.end()], self.seen[match.end() :]
        return before

    def wait(self) -> int:
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                os.read(self.fd, 65536)
            except OSError:
                pass
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("the shell did not exit")


@pytest.fixture
def terminal(tmp_path):
    env = dict(os.environ, DSQL_HISTORY=str(tmp_path / "history"), TERM="dumb", NO_COLOR="1")
    env["COLUMNS"] = "120"
    term = Terminal(env)
    yield term
    try:
        os.kill(term.pid, signal.SIGKILL)
        os.waitpid(term.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    os.close(term.fd)


def test_shell_on_a_terminal(terminal, tmp_path):
    t = terminal
    banner = t.expect(r"dsql> ")
    assert "auto kernel, wall clock" in banner and "starting Spark" not in banner
    t.send("CREATE TABLE t (a int, b text);\n")
    t.expect(r"CREATE TABLE")
    t.send("INSERT INTO t\n")  # a statement over several lines
    t.expect(r"  ->  ")
    t.send("VALUES (1, 'x'), (2, 'y');\n")
    t.expect(r"INSERT 0 2")
    t.send("SELECT b, a FROM t ORDER BY a;\n")
    table = t.expect(r"\(2 rows\)")
    assert re.search(r"b\s.*\sa", table) and re.search(r"x\s.*\s1", table)

    t.send("SELECT a FROM t WHER a = 1;\n")  # an error: caret and hint, no traceback
    error = t.expect(r"hint: [^\n]*\n")
    assert "error: " in error and "^" in error and "Traceback" not in error

    t.send("SELECT\n")  # Ctrl-C at a continuation prompt drops the statement
    t.expect(r"  ->  ")
    # The prompt is written before readline waits for a key; a SIGINT in between is only
    # noticed at the next key (CPython's readline loop), so give it time to start waiting.
    time.sleep(0.5)
    t.send("\x03")
    t.expect(r"\^C")
    t.expect(r"dsql> ")

    t.send("SUBSCRIBE t;\n")  # a live table until Ctrl-C; then the shell goes on
    live = t.expect(r"Ctrl-C stops")
    assert "SUBSCRIBE t" in live
    time.sleep(0.5)
    t.send("\x03")
    t.expect(r"subscription ended after 2 updates")
    t.expect(r"dsql> ")

    t.send("\\timing\n")
    t.expect(r"Timing is on")
    t.send("SELECT count(*) AS n FROM t;\n")
    t.expect(r"Time: [0-9.]+ ms")
    t.send("\\help\n")
    t.expect(r"\\q\s+quit")
    t.send("EXPLAIN SELECT a FROM t WHERE a > 1;\n")
    t.expect(r"Get t")
    t.send("\\q\n")
    assert t.wait() == 0
    history = (tmp_path / "history").read_text()
    assert "SELECT count(*) AS n FROM t;" in history


def test_hydration_shows_progress_for_a_slow_view():
    """The bar appears once hydration outlasts the delay (here none) and counts steps."""
    import io

    from rich.console import Console

    import dsql
    from dsql.repl import Hydration

    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t SELECT * FROM generate_series(1, 1000)")
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    worker = con.session.worker
    with Hydration(worker, console, delay=0.0) as shown:
        con.execute("CREATE MATERIALIZED VIEW v AS SELECT a % 7 AS k, count(*) FROM t GROUP BY 1")
    assert shown.stepped >= 1 and shown.progress is not None
    assert "hydrating" in out.getvalue()
    assert worker.on_step is None  # restored
    assert con.execute("SELECT sum(count) FROM v").fetchall() == [(1000,)]
