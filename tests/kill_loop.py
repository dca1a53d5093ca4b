"""Crash testing by SIGKILL: a child process runs a workload on a data directory and is
killed at a random moment, again and again; the test checks what each restart recovers.

A server process imports dsql once and forks one child per cycle (`forking_server`), so
a cycle costs a fork, a recovery and the workload, not an interpreter start. The child
(`run_child`) reports to its own file, one line per `write` (which a kill cannot tear):
`{"ready": true}` once recovered, then `{"try": ...}` before each unit of work and
`{"ack": true}` once it returned, or `{"error": traceback}`. The parent (`kill_cycles`)
starts a child, waits for it to be ready (or not, to kill it during recovery), sleeps a
random while, kills it, and hands the test that cycle's report.

Used by `test_kill9.py` (tables and views under a random workload) and `test_sinks.py`
(sinks writing each millisecond once).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

#: A child's report: one JSON message a line.
Say = Callable[[dict[str, Any]], None]

_SERVER = """
import os, signal, sys
sys.path.insert(0, {tests!r})
{preload}
import {module}
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped as they die
for line in sys.stdin:
    args = line.split()
    pid = os.fork()
    if pid == 0:
        {module}.child(*args)
    print(pid, flush=True)
"""


@contextmanager
def forking_server(module: str, preload: str) -> Iterator[subprocess.Popen[str]]:
    """A process that runs `preload` (imports and caches built once, before the forks),
    then forks `module.child(out, *args)` for each line `out args...` it reads, answering
    with the child's pid."""
    script = _SERVER.format(tests=str(Path(__file__).parent), preload=preload, module=module)
    server = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield server
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)


def run_child(out: str, body: Callable[[Say], None]) -> NoReturn:
    """Run a child's `body` with its report file `out`; it never returns (killed, or it
    reports its error and exits)."""
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def say(message: dict[str, Any]) -> None:
        os.write(fd, (json.dumps(message) + "\n").encode())

    try:
        body(say)
    except BaseException:
        say({"error": traceback.format_exc()})
    finally:
        os._exit(1)


def kill_cycles(
    server: subprocess.Popen[str],
    tmp_path: Path,
    rng: random.Random,
    kills: int,
    args: Callable[[], list[str]],
    delay: tuple[float, float],
    early: float = 0.0,
) -> Iterator[list[dict[str, Any]]]:
    """Run `kills` cycles: fork a child with `args()`, kill it with SIGKILL after a
    random `delay` (seconds, once it is ready; with probability `early` during its
    recovery instead), and yield its report; a child's error fails the test."""
    assert server.stdin is not None and server.stdout is not None
    for cycle in range(kills):
        out = tmp_path / f"cycle{cycle}.jsonl"
        server.stdin.write(" ".join([str(out), *args()]) + "\n")
        server.stdin.flush()
        pid = int(server.stdout.readline())
        if early and rng.random() < early:
            time.sleep(rng.uniform(0, 0.3))
        else:
            _wait_ready(out, time.monotonic() + 60)
            time.sleep(rng.uniform(*delay))
        os.kill(pid, signal.SIGKILL)
        _wait_dead(pid)
        messages = _read_lines(out)
        errors = [m["error"] for m in messages if "error" in m]
        assert not errors, errors[0]
        yield messages


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text().split("\n")
    # A line the kill cut short (no newline yet) was never sent.
    return [json.loads(line) for line in lines[:-1] if line.strip()]


def _wait_ready(path: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if any("ready" in m or "error" in m for m in _read_lines(path)):
            return
        time.sleep(0.005)
    raise AssertionError(f"the child did not recover in time: {_read_lines(path)}")


def _wait_dead(pid: int) -> None:
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.002)
