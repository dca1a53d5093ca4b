"""Statement timeouts: `SET statement_timeout = '2s'` bounds how long one statement runs.

A duration is PostgreSQL's: a number with a unit (`us`, `ms`, `s`, `min`, `h`, `d`),
or a bare number of milliseconds; `0` (or `DEFAULT`) disables the bound. The bound
is cooperative: the worker checks it between rounds and a loop between its inner
steps (`Worker.deadline`), so a statement ends within about one step of its
deadline with `QueryCanceledError`, and the dataflow it built is dropped while the
rest of the session stays as it was.

>>> parse_duration("2s"), parse_duration("1500"), parse_duration("0")
(2.0, 1.5, None)
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dsql.errors import TypeMismatchError

#: Seconds per unit, as PostgreSQL spells the units of time settings.
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_duration(value: Any) -> float | None:
    """Seconds of a timeout given as text (`'2s'`, `'500ms'`, `'1000'`) or a number of
    seconds (from Python); None when it disables the bound."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise _invalid(value)
        return float(value) or None
    text = str(value).strip()
    if text.lower() == "default":
        return None
    match = _DURATION.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in ("", *_UNITS):
        raise _invalid(value)
    seconds = float(match.group(1)) * _UNITS.get(unit, 1e-3)
    return seconds or None


def _invalid(value: Any) -> TypeMismatchError:
    return TypeMismatchError(
        f'invalid value for parameter "statement_timeout": "{value}"',
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
