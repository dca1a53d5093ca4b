"""Result values as sqllogictest writes them: formatting, sorting, hashing, comparing.

A result row is formatted column by column with the record's type letter (SQLite's
rules): `I` prints an integer (reals truncate toward zero, booleans are 1/0, numeric
text keeps its leading integer), `R` prints `%.3f`, `T` prints text with the empty
string as `(empty)` and control characters as `@` (SQLite also replaces non-ASCII
bytes; Materialize and DuckDB do not, nor does this); NULL is `NULL` under every type;
`B` prints `true`/`false` (Materialize). DuckDB's files are formatted natively
(`format_native`). Rows are then ordered per the sort mode and flattened into one list
of values; a result is compared with the expected values, or with `N values hashing
to <md5>` where the md5 is over every value followed by a newline.

>>> format_row((1, 2.5, "", None), "IRTT")
('1', '2.500', '(empty)', 'NULL')
>>> md5_of(["1", "2"])
'6ddb4095eb719e2a9f0a3f95677d24e0'
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .records import Hashed, SortMode, Values

__all__ = [
    "format_value",
    "format_native",
    "format_row",
    "ordered_values",
    "md5_of",
    "Comparison",
    "compare",
    "render",
]

_LEADING_INT = re.compile(r"^\s*[+-]?\d+")


def _as_int(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float | Decimal):
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return str(int(value))
    match = _LEADING_INT.match(str(value))
    return str(int(match.group(0))) if match else "0"


def _as_real(value: Any) -> str:
    if isinstance(value, bool):
        value = int(value)
    try:
        return f"{float(value):.3f}"
    except (TypeError, ValueError):
        return "0.000"


def _as_text(value: Any) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if text == "":
        return "(empty)"
    return "".join(c if c >= " " and c != "\x7f" else "@" for c in text)


def _as_bool(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "true" if value else "false"


_FORMATTERS = {"I": _as_int, "R": _as_real, "T": _as_text, "B": _as_bool, "O": _as_int}


def format_value(value: Any, type_letter: str) -> str:
    """One result value as sqllogictest prints it under `type_letter`.

    >>> format_value(7.9, "I"), format_value(3, "R"), format_value(None, "T")
    ('7', '3.000', 'NULL')
    """
    if value is None:
        return "NULL"
    return _FORMATTERS.get(type_letter, _as_text)(value)


def format_native(value: Any) -> str:
    """A value as DuckDB's runner prints it, whatever the type letter says.

    DuckDB's files use the letters only to count columns: booleans print as
    `true`/`false`, text and numbers as themselves.

    >>> format_native(True), format_native("x"), format_native(0.5), format_native("")
    ('true', 'x', '0.5', '(empty)')
    """
    if value is None:
        return "NULL"
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return text if text else "(empty)"


def format_row(row: Sequence[Any], types: str, native: bool = False) -> tuple[str, ...]:
    """A result row formatted column by column (`types` has one letter per column).

    `native` formats as DuckDB's files expect (`format_native`), else by type letter.
    """
    if native:
        return tuple(format_native(v) for v in row)
    return tuple(format_value(v, t) for v, t in zip(row, types, strict=True))


def ordered_values(rows: Sequence[Sequence[str]], sort: SortMode) -> list[str]:
    """Formatted rows flattened in the order `sort` asks for.

    >>> ordered_values([("b", "1"), ("a", "2")], SortMode.ROWSORT)
    ['a', '2', 'b', '1']
    >>> ordered_values([("b", "1"), ("a", "2")], SortMode.VALUESORT)
    ['1', '2', 'a', 'b']
    """
    if sort is SortMode.ROWSORT:
        rows = sorted(rows)
    values = [v for row in rows for v in row]
    return sorted(values) if sort is SortMode.VALUESORT else values


def md5_of(values: Sequence[str]) -> str:
    """SQLite's result hash: md5 over each value followed by a newline."""
    digest = hashlib.md5()
    for value in values:
        digest.update(value.encode("utf-8") + b"\n")
    return digest.hexdigest()


def _same_value(expected: str, actual: str) -> bool:
    """Equal as written, or as numbers (DuckDB prints reals unformatted), or by regex.

    DuckDB's `<REGEX>:p` (and `<!REGEX>:p`) must (not) match the whole value.
    """
    if expected == actual:
        return True
    for prefix, want in (("<REGEX>:", True), ("<!REGEX>:", False)):
        if expected.startswith(prefix):
            pattern = expected[len(prefix) :]
            return (re.fullmatch(pattern, actual, re.DOTALL) is not None) == want
    try:
        e, a = float(expected), float(actual)
    except ValueError:
        return False
    return math.isclose(e, a, rel_tol=1e-9, abs_tol=1e-12)


@dataclass(frozen=True, slots=True)
class Comparison:
    """The outcome of comparing a result with an expectation: `ok`, and why not."""

    ok: bool
    detail: str = ""


def render(values: Sequence[str], threshold: int) -> str:
    """Values as the file would show them: one per line, or hashed past `threshold`."""
    if threshold and len(values) > threshold:
        return f"{len(values)} values hashing to {md5_of(values)}"
    return "\n".join(values) if values else "(no rows)"


def compare(
    expected: Hashed | Values, rows: Sequence[Sequence[str]], sort: SortMode, ncols: int
) -> Comparison:
    """Compare formatted `rows` with `expected`, sorting both as `sort` asks.

    Expected values given one by one are sorted the same way (in rows of `ncols`), so
    a hand-written file need not list them pre-sorted.
    """
    actual = ordered_values(rows, sort)
    if isinstance(expected, Hashed):
        if expected.count == len(actual) and expected.md5 == md5_of(actual):
            return Comparison(True)
        return Comparison(
            False,
            f"expected {expected.count} values hashing to {expected.md5}, "
            f"got {len(actual)} values hashing to {md5_of(actual)}",
        )
    want = list(expected.values)
    if sort is not SortMode.NOSORT and ncols and len(want) % ncols == 0:
        want = ordered_values([want[i : i + ncols] for i in range(0, len(want), ncols)], sort)
    if len(want) == len(actual) and all(map(_same_value, want, actual)):
        return Comparison(True)
    return Comparison(False, _diff(want, actual))


def _diff(want: list[str], actual: list[str]) -> str:
    if len(want) != len(actual):
        head = f"expected {len(want)} values, got {len(actual)}"
    else:
        k = next(i for i, (w, a) in enumerate(zip(want, actual, strict=True)) if w != a)
        head = f"value {k + 1} differs: expected {want[k]!r}, got {actual[k]!r}"
    return f"{head}\n  expected: {_short(want)}\n  actual:   {_short(actual)}"


def _short(values: list[str], limit: int = 24) -> str:
    shown = " | ".join(values[:limit])
    return shown + (f" ... ({len(values)} values)" if len(values) > limit else "")
