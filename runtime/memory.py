"""The memory budget: how many bytes one query's intermediate state may hold.

A session's kernel evaluates each step as a query; the budget bounds what one query may
allocate inside DuckDB (its `memory_limit`) and what its result may take once read into
the driver as Arrow. A query past the budget stops with `ResourceLimitError`; the step
that ran it fails as any failed step does (a one-off read or a new view leaves nothing
behind), so the session stays usable.

Sizes are written as PostgreSQL writes memory settings, with a unit: `B`, `kB`, `MB`,
`GB`, `TB` (powers of 1024).

>>> parse_size("2GB"), parse_size("512 MB"), parse_size(4096)
(2147483648, 536870912, 4096)
"""

from __future__ import annotations

import os
import re
from typing import Any

from dsql.errors import ResourceLimitError, TypeMismatchError

_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$", re.IGNORECASE)
#: The share of the machine's memory a session's queries may use by default.
DEFAULT_SHARE = 0.5
#: The smallest budget accepted: DuckDB needs a few blocks to run any query at all.
MIN_BYTES = 16 << 20


def machine_bytes() -> int | None:
    """The machine's physical memory in bytes (None where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def default_budget() -> int:
    """`DEFAULT_SHARE` of the machine's memory (4 GB where it is unknown)."""
    total = machine_bytes()
    return max(int(total * DEFAULT_SHARE), MIN_BYTES) if total else 4 << 30


def parse_size(value: Any) -> int:
    """Bytes of a budget given as text with a unit (`'2GB'`), or as a number of bytes;
    `'default'` (or None) is `default_budget()`."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "default"):
        return default_budget()
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        match = _SIZE.match(str(value))
        unit = match.group(2).lower() if match else ""
        if match is None or unit not in _UNITS:
            raise TypeMismatchError(
                f'invalid value for parameter "memory_limit": "{value}"',
                hint="give a size with a unit: B, kB, MB, GB or TB, such as '2GB'",
            )
        size = int(float(match.group(1)) * _UNITS[unit])
    if size < MIN_BYTES:
        raise TypeMismatchError(
            f'invalid value for parameter "memory_limit": "{value}"',
            hint=f"give at least {MIN_BYTES >> 20}MB",
        )
    return size


def show_size(size: int) -> str:
    """A size in the largest unit that divides it (as PostgreSQL shows settings).

    >>> show_size(2 << 30), show_size(1536 << 20)
    ('2GB', '1536MB')
    """
    for unit, factor in sorted(_UNITS.items(), key=lambda u: -u[1]):
        if size % factor == 0:
            return f"{size // factor}{unit.upper() if unit != 'kb' else 'kB'}"
    return f"{size}B"


def exceeded(limit: int, detail: str = "") -> ResourceLimitError:
    """The error of a query whose state outgrew `limit` bytes."""
    return ResourceLimitError(
        f"out of memory: a query needs more than memory_limit ({show_size(limit)})"
        + (f": {detail}" if detail else ""),
        hint="make the query's intermediate results smaller (a cross join of two big "
        "inputs holds every pair), or raise the budget: SET memory_limit = '8GB'",
    )


__all__ = ["default_budget", "exceeded", "machine_bytes", "parse_size", "show_size"]
