"""Statement timeouts: `SET statement_timeout = '2s'` bounds how long one statement runs.

A duration is PostgreSQL's: a number with a unit (`us`, `ms`, `s`, `min`, `h`, `d`),
or a bare number of milliseconds; `0` (or `DEFAULT`) disables the bound. The bound
is cooperative: the worker checks it between rounds and a loop between its inner
steps (`Worker.deadline`), so a statement ends within about one step of its
deadline with `QueryCanceledError`, and the dataflow it built is dropped while the
rest of the session stays as it was.

Ctrl-C (SIGINT) cancels a statement the same way (`interrupt_cancels`): it moves the
deadline to now, so the statement stops at its next safe point (between rounds, or in a
query of its own), never in the middle of a round that maintains the views; then
`KeyboardInterrupt` is raised, the statement's effects undone as for a timeout.
Once a statement's record is being written to the log (`dsql.durable`), it is past
canceling: `interrupts_deferred` holds the signal until the record is synced and the
session holds what it describes, and `KeyboardInterrupt` is raised after that, with the
statement's effects kept.

>>> parse_duration("2s"), parse_duration("1500"), parse_duration("0")
(2.0, 1.5, None)
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dsql.errors import TypeMismatchError

#: Seconds per unit, as PostgreSQL spells the units of time settings.
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_duration(value: Any, name: str = "statement_timeout") -> float | None:
    """Seconds of a timeout given as text (`'2s'`, `'500ms'`, `'1000'`) or a number of
    seconds (from Python); None when it disables the bound. `name` is the setting's, for
    the error."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise _invalid(value, name)
        return float(value) or None
    text = str(value).strip()
    if text.lower() == "default":
        return None
    match = _DURATION.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in ("", *_UNITS):
        raise _invalid(value, name)
    seconds = float(match.group(1)) * _UNITS.get(unit, 1e-3)
    return seconds or None


def _invalid(value: Any, name: str) -> TypeMismatchError:
    return TypeMismatchError(
        f'invalid value for parameter "{name}": "{value}"',
        hint="give a duration such as '2s', '500ms' or '1min' (a bare number is "
        "milliseconds; 0 disables the timeout)",
    )


@contextmanager
def statement_deadline(worker: Any, seconds: float | None) -> Iterator[None]:
    """Run a statement inside the block: the nodes it builds are its own (they may be cut
    short at the deadline, or fail, without failing the rounds of older dataflows)."""
    previous = worker.deadline, worker.cancelable_from
    worker.deadline = None if seconds is None else time.monotonic() + seconds
    worker.cancelable_from = len(worker.nodes)
    worker.kernel.set_deadline(worker.deadline)  # building a dataflow may run queries too
    try:
        yield
    finally:
        worker.deadline, worker.cancelable_from = previous
        worker.kernel.set_deadline(None)


@contextmanager
def interrupt_cancels(worker: Any) -> Iterator[None]:
    """Run a statement (or a poll) inside the block with Ctrl-C deferred to a safe point.

    While the block runs, SIGINT sets the worker's deadline to now instead of raising
    wherever Python happens to be (which could be between two nodes of a round, leaving a
    view's arrangement without its batch). The statement then stops as a timed-out one
    does, and `KeyboardInterrupt` is raised when the block ends, after the statement's
    dataflow is dropped; a statement that completes first keeps its effects. Only the main
    thread receives signals, and a handler the program installed itself is left alone.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    interrupted = False
    previous = worker.deadline

    def cancel(signum: int, frame: Any) -> None:
        # The worker hands the deadline to the kernel only for the statement's own nodes,
        # so the views' maintenance is never cut short.
        nonlocal interrupted
        interrupted = True
        worker.deadline = time.monotonic()

    signal.signal(signal.SIGINT, cancel)
    try:
        yield
    except BaseException:
        if interrupted:
            raise KeyboardInterrupt("canceling statement due to user request") from None
        raise
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        worker.deadline = previous
    if interrupted:
        raise KeyboardInterrupt("canceling statement due to user request")


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block whole: a SIGINT arriving inside it is handled once the block ends.

    For steps that must not stop half-way, such as a log record written and synced and
    the session state it describes (`dsql.durable`): a `KeyboardInterrupt` raised between
    two of them would leave one without the other. The signal reaches the handler that
    was in place (by default it raises `KeyboardInterrupt`) when the block has finished
    or failed on its own. Blocks nest; only the main thread receives signals, elsewhere
    (and under a handler installed outside Python) the block runs as it is.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    caught: list[tuple[int, Any]] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(*caught[0])
        elif caught and previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)
