"""Times given in SQL (`ADVANCE TO`, `ADVANCE BY`, `AS OF`, `UP TO`) as milliseconds.

A time is an expression or a parenthesized query. It is bound against the session's
catalog and evaluated as a one-off read like any other query, so it reaches only what a
query may (the catalog's relations and dsql's functions) and runs on the session's
kernel. It must yield exactly one row of one non-NULL value of a time-like type:
milliseconds since the Unix epoch (an integer), a date or timestamp, or for `ADVANCE BY`
an interval.

>>> from dsql.session import Session
>>> s = Session(kernel="local")
>>> time_ms(s, sqlglot.parse_one("TIMESTAMP '1970-01-01 00:00:01'", read="postgres"))
1000
>>> time_ms(s, sqlglot.parse_one("(SELECT 40 + 2)", read="postgres"))
42
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import pyarrow as pa
import sqlglot  # noqa: F401 - the doctest parses with it
from sqlglot import exp

from dsql.clock import MAX_MS
from dsql.errors import DsqlError, TimeError, TypeMismatchError
from dsql.planner.scope import position_of

if TYPE_CHECKING:
    from dsql.session import Session

_HINT = "give milliseconds, TIMESTAMP '2024-01-01 00:00:00', or a query of one such value"
_INTERVAL_HINT = "give milliseconds or INTERVAL '5 minutes'"


def time_ms(session: Session, e: exp.Expression, interval: bool = False) -> int:
    """Milliseconds since the Unix epoch of time expression `e` (for `interval`, an
    `ADVANCE BY` amount: milliseconds or an interval)."""
    try:
        return _checked(_value(session, e, interval), e, interval)
    except DsqlError as error:
        if error.position is None:
            error.position = position_of(e)
        raise


def _value(session: Session, e: exp.Expression, interval: bool) -> object:
    """The one value `e` evaluates to, by the binder and the session's kernel."""
    if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
        return int(e.this)  # the common case needs no query
    if isinstance(e, exp.Neg):
        raise TypeMismatchError("a time cannot be negative", hint=_HINT)
    inner = e
    while isinstance(inner, exp.Paren | exp.Subquery) and not inner.args.get("alias"):
        inner = inner.this
    query = inner.copy() if isinstance(inner, exp.Query) else exp.select(e.copy())
    bound = session.plan(query)
    what = "a time interval" if interval else "a time"
    if bound.visible != 1:
        raise TypeMismatchError(
            f"{what} must be one value; the query returns {bound.visible} columns",
            hint=_INTERVAL_HINT if interval else _HINT,
        )
    kind = bound.columns[0].type
    if not _time_like(kind, interval):
        raise TypeMismatchError(
            f"{e.sql('postgres')} is not {what}: it is of type {kind.sql('postgres').lower()}",
            hint=_INTERVAL_HINT if interval else _HINT,
        )
    table = session.read(bound)
    if table.num_rows != 1:
        raise TypeMismatchError(
            f"{what} must be one value; the query returns {table.num_rows} rows",
            hint=_INTERVAL_HINT if interval else _HINT,
        )
    value = table.column(0)[0].as_py()
    if value is None:
        raise TypeMismatchError(
            f"{what} cannot be NULL", hint=_INTERVAL_HINT if interval else _HINT
        )
    return value


def _time_like(kind: exp.DataType, interval: bool) -> bool:
    """Whether values of type `kind` may be a time (or, for `interval`, an amount)."""
    if kind.is_type(exp.DataType.Type.UNKNOWN) or kind.is_type(*exp.DataType.INTEGER_TYPES):
        return True
    if interval:
        return kind.is_type(exp.DataType.Type.INTERVAL)
    return kind.is_type(*exp.DataType.TEMPORAL_TYPES) and not kind.is_type(
        exp.DataType.Type.TIME, exp.DataType.Type.TIMETZ
    )


def _checked(value: object, e: exp.Expression, interval: bool) -> int:
    """`value` as milliseconds, refused when negative or beyond the last time."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        ms = int(value.timestamp() * 1000)
    elif isinstance(value, dt.date):
        ms = int(dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp() * 1000)
    elif isinstance(value, dt.timedelta) and interval:
        ms = int(value.total_seconds() * 1000)
    elif isinstance(value, pa.MonthDayNano) and interval:
        # PostgreSQL's epoch of an interval counts a month as 30 days.
        ms = ((value.months * 30 + value.days) * 86_400_000_000_000 + value.nanoseconds) // 10**6
    elif isinstance(value, int) and not isinstance(value, bool):
        ms = value
    else:
        raise TypeMismatchError(
            f"{e.sql('postgres')} is not a time", hint=_INTERVAL_HINT if interval else _HINT
        )
    if ms < 0:
        raise TypeMismatchError(
            "a time cannot be negative", hint="give milliseconds since the Unix epoch"
        )
    if ms > MAX_MS:
        raise TimeError(f"time {ms} is beyond the last time, {MAX_MS} ms")
    return ms


__all__ = ["time_ms"]
