"""Text input: a column of text values read as a SQL type by PostgreSQL's input functions.

COPY (and a file source) receive every value as text; `from_text(values, type)` is the
column `values` spells, each value read as PostgreSQL's input function for the type
reads it: booleans (`t`, `yes`, `on`, `1` and the unique prefixes of true/false/yes/no),
floats (`NaN`, `Infinity`, `1e3`; out of range an error), intervals
(`planner/interval.py`), bytea (`\\x0102` hex, or the escape form), timestamps with a time
zone (an offset, else UTC, dsql's time zone), arrays (`{1,2,NULL}`, each element read as
its type), and numbers, text and dates as INSERT assigns them (`dsql.assignment`).

A value that does not read is a `BadValue`: its position in `values` and the error.

>>> from sqlglot import exp
>>> from_text(["yes", " of", None], exp.DataType.build("boolean")).to_pylist()
[True, False, None]
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from dsql.assignment import assign
from dsql.errors import DataError, DsqlError
from dsql.planner import array_literal, interval, types
from dsql.planner.types import T

_FLOAT = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE)
#: The largest finite `real` (float32).
_REAL_MAX = 3.4028234663852886e38
#: The integers and floats whose text Arrow reads as PostgreSQL does (RE2 syntax).
_INTEGER_TEXT = r"^[ \t\n\r\f]*[0-9]+[ \t\n\r\f]*$|^[ \t\n\r\f]*-[0-9]+[ \t\n\r\f]*$"
_FLOAT_TEXT = (
    r"(?i)^[ \t\n\r\f]*[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?|nan|inf|infinity)"
    r"[ \t\n\r\f]*$"
)
_BOOLEAN_WORDS = (("true", True), ("false", False), ("yes", True), ("no", False))


class BadValue(Exception):
    """Value `index` of a column does not read as its type: `error` says why."""

    def __init__(self, index: int, error: DsqlError) -> None:
        super().__init__(error.message)
        self.index = index
        self.error = error


def from_text(
    values: pa.Array | Sequence[str | None], column_type: exp.DataType, name: str = ""
) -> pa.Array:
    """`values` (text) read as `column_type` (module docstring); a `BadValue` at the
    first value that does not read."""
    column = values if isinstance(values, pa.Array) else pa.array(values, pa.string())
    target = types.to_arrow(column_type)
    fast = _vectorized(column, target)
    if fast is not None:
        return fast
    reader = _READERS.get(column_type.this)
    if column_type.this == T.ARRAY:
        element = types.one_dimensional(column_type).expressions[0]
        reader = _array_reader(element)
    if reader is not None:
        out = []
        for i, v in enumerate(column.to_pylist()):
            try:
                out.append(None if v is None else reader(v))
            except DsqlError as error:
                raise BadValue(i, error) from None
            except (ValueError, OverflowError):
                raise BadValue(i, _invalid(column_type, v or "")) from None
        return pa.array(out, target)
    try:
        return assign(pa.chunked_array([column]), column_type, name).combine_chunks()
    except DsqlError:
        i = _first_bad(column, column_type, name)
        raise BadValue(i, _error(column[i].as_py(), column_type, name)) from None


def _vectorized(column: pa.Array, target: pa.DataType) -> pa.Array | None:
    """`column` read as an integer or double column by Arrow, when every value is in
    the plain spelling both read alike (checked first, so Arrow never accepts what
    PostgreSQL refuses) and fits; None otherwise: the value-by-value reading decides."""
    if pa.types.is_integer(target):
        spelling = _INTEGER_TEXT
    elif pa.types.is_float64(target):
        spelling = _FLOAT_TEXT
    else:
        return None
    if pc.any(pc.invert(pc.match_substring_regex(column, spelling))).as_py():
        return None
    try:
        trimmed = pc.utf8_trim_whitespace(column)
        read = trimmed.cast(pa.int64() if pa.types.is_integer(target) else target)
        if pa.types.is_float64(target) and pc.any(pc.is_inf(read)).as_py():
            return None  # `1e400`: out of range, which the value-by-value reading says
        return read.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _first_bad(column: pa.Array, column_type: exp.DataType, name: str) -> int:
    """The position of the first value `assign` refuses (there is one): a bisection,
    each step one vectorized `assign` of a slice."""
    lo, hi = 0, len(column)  # the first bad value is in column[lo:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            assign(pa.chunked_array([column.slice(lo, mid - lo)]), column_type, name)
            lo = mid
        except DsqlError:
            hi = mid
    return lo


def _error(value: str | None, column_type: exp.DataType, name: str) -> DsqlError:
    """The error of a value `assign` refuses, in PostgreSQL's words where assign's speak
    of a cast (`column 'a' is of type date but ...`)."""
    try:
        assign(pa.chunked_array([pa.array([value], pa.string())]), column_type, name)
    except DsqlError as error:
        if "but the value is of type" not in error.message:
            return error
    return _invalid(column_type, value or "")


def _invalid(column_type: exp.DataType, value: str) -> DataError:
    kind = column_type.sql("postgres").lower()
    return DataError(f'invalid input syntax for type {kind}: "{value}"')


def _boolean(text: str) -> bool:
    word = text.strip().lower()
    if word in ("1", "0"):
        return word == "1"
    if word in ("on", "of", "off"):
        return word == "on"
    for spelled, value in _BOOLEAN_WORDS:
        if word and spelled.startswith(word):
            return value
    raise DataError(f'invalid input syntax for type boolean: "{text}"')


def _float(kind: str, bits: int) -> Callable[[str], float]:
    def read(text: str) -> float:
        word = text.strip()
        if not _FLOAT.fullmatch(word):
            raise DataError(f'invalid input syntax for type {kind}: "{text}"')
        value = float(word)
        if bits == 32 and math.isfinite(value) and abs(value) > _REAL_MAX:
            value = math.inf
        lower = word.lower().lstrip("+-")
        if math.isinf(value) and lower not in ("inf", "infinity"):
            raise DataError(f'"{text}" is out of range for type {kind}')
        return value

    return read


def _interval(text: str) -> pa.MonthDayNano:
    months, days, micros = interval.parse(text)
    return pa.MonthDayNano((months, days, micros * 1000))


def _timestamptz(text: str) -> dt.datetime:
    word = text.strip().replace(" ", "T", 1)
    if re.search(r"[+-]\d\d$", word):  # PostgreSQL's `+02`: Python wants minutes
        word += ":00"
    value = dt.datetime.fromisoformat(word)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def _array_reader(element: exp.DataType) -> Callable[[str], list[Any]]:
    def read(text: str) -> list[Any]:
        items = array_literal.parse(text)
        try:
            return from_text(items, element).to_pylist()
        except BadValue as bad:
            raise bad.error from None

    return read


_READERS: dict[Any, Callable[[str], Any]] = {
    T.BOOLEAN: _boolean,
    T.DOUBLE: _float("double precision", 64),
    T.FLOAT: _float("real", 32),
    T.INTERVAL: _interval,
    T.BINARY: types.read_bytea,
    T.VARBINARY: types.read_bytea,
    T.TIMESTAMPTZ: _timestamptz,
}


__all__ = ["BadValue", "from_text"]
