"""Interval operations neither engine spells as PostgreSQL does, written over the parts.

DuckDB's INTERVAL keeps PostgreSQL's three parts (months, days, microseconds) and
already agrees with PostgreSQL on `+`, `-`, unary minus, `* number`, `/ number`,
timestamp and date arithmetic, `date_trunc`, comparison (a month counted as 30 days, a
day as 24 hours), and grouping. What it spells otherwise is written here, as calls of
`DSQL_IV_*` functions over the parts that the in-process kernel defines as macros
(`runtime/kernel/interval_macros.py`):

- `x::text`: PostgreSQL's text (`IntervalStyle` postgres), not DuckDB's `1 month`;
- `sum(x)`: the parts summed apart (DuckDB has no interval sum); `avg(x)`: that sum
  divided by the count, as PostgreSQL's `interval / bigint` divides (fractions of a
  month spill into days, of a day into microseconds);
- `extract(field from x)`: a numeric, as PostgreSQL's; `epoch`, `second`,
  `millisecond` and `microsecond` computed exactly (DuckDB answers a double, or whole
  seconds), the other fields the engine's integer;
- `justify_days`, `justify_hours`, `justify_interval` and `make_interval`.

Spark has no interval it can store (its CalendarIntervalType cannot be written to
Parquet), so the Spark kernel refuses interval values (`runtime/kernel/spark`).

>>> text(exp.column("_c0")).sql()
'CAST(DSQL_IV_TEXT(_c0) AS TEXT)'
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dsql.errors import SchemaError
from dsql.planner import types

#: The prefix of the functions `interval_macros.py` defines.
PREFIX = "DSQL_IV_"


def _call(name: str, *args: exp.Expr) -> exp.Anonymous:
    return exp.Anonymous(this=PREFIX + name, expressions=[a.copy() for a in args])


def _interval(e: exp.Expr) -> exp.Expr:
    """`e` typed as an interval for the planner's type inference (a cast the engine skips)."""
    return exp.Cast(this=e, to=types.build("interval"))


def checked(x: exp.Expr) -> exp.Expr:
    """An interval `x` computed by the engine, or an error where its time part is past
    what dsql stores (`interval.MAX_MICROS`)."""
    return _interval(_call("CHECKED", x))


def is_interval(dtype: exp.DataType) -> bool:
    return dtype.is_type(exp.DType.INTERVAL)


def text(x: exp.Expr) -> exp.Expr:
    """`x::text` of an interval `x`: PostgreSQL's text."""
    return exp.Cast(this=_call("TEXT", x), to=types.build("text"))


def sum_of(x: exp.Expr) -> exp.Expr:
    """`sum(x)` of an interval `x`: each part summed (NULL over no values)."""
    parts = [exp.Sum(this=_call(part, x)) for part in ("MONTHS", "DAYS", "MICROS")]
    return _interval(_call("OF", *parts))


def avg_of(x: exp.Expr) -> exp.Expr:
    """`avg(x)` of an interval `x`: the parts' sums divided by the count."""
    return _interval(exp.Div(this=sum_of(x), expression=exp.Count(this=x.copy())))


#: `extract` fields answered exactly as PostgreSQL's numeric, by macro.
_EXACT_FIELDS = {
    "epoch": "EPOCH",
    "second": "SECOND",
    "seconds": "SECOND",
    "millisecond": "MILLISECOND",
    "milliseconds": "MILLISECOND",
    "microsecond": "MICROSECOND",
    "microseconds": "MICROSECOND",
}


def extract(call: exp.Extract) -> exp.Expr:
    """`extract(field from x)` of an interval `x` (bound), a numeric as PostgreSQL's:
    exact where the engine answers a double or whole seconds, else the engine's
    integer as a numeric."""
    name = _EXACT_FIELDS.get(call.this.name.lower())
    value = (
        exp.Cast(this=call, to=types.build("decimal(38, 0)"))
        if name is None
        else _call(name, call.expression)
    )
    if call.meta.get("date_part"):  # PostgreSQL's date_part is a double precision
        return exp.Cast(this=value, to=types.build("double"))
    return value


def justify(kind: str, x: exp.Expr) -> exp.Expr:
    """`justify_days(x)`, `justify_hours(x)` or `justify_interval(x)` (`kind`: the suffix)."""
    return _interval(_call("JUSTIFY_" + kind.upper(), x))


#: `make_interval`'s parameters, in order, as sqlglot names them.
_MAKE_PARAMETERS = ("year", "month", "week", "day", "hour", "minute", "second")
#: PostgreSQL's names of them, for a call by name.
_MAKE_NAMES = dict(
    zip(
        ("years", "months", "weeks", "days", "hours", "mins", "secs"), _MAKE_PARAMETERS, strict=True
    )
)


def make_interval(call: exp.Expr) -> exp.Expr:
    """`make_interval(years, months, weeks, days, hours, mins, secs)`, by position or by
    name (`days => 3`), each 0 where not given."""
    given: dict[str, exp.Expr] = {}
    for key in _MAKE_PARAMETERS:
        value = call.args.get(key)
        if isinstance(value, exp.Kwarg | exp.PropertyEQ):  # `days => 3`, `days := 3`
            name = _MAKE_NAMES.get(value.this.name.lower())
            if name is None:
                raise SchemaError(
                    f"make_interval has no parameter {value.this.name}",
                    hint="its parameters: years, months, weeks, days, hours, mins, secs",
                )
            given[name] = value.expression
        elif value is not None:
            given[key] = value
    zero = exp.Literal.number(0)
    args: Sequence[exp.Expr] = [given.get(key, zero) for key in _MAKE_PARAMETERS]
    return _interval(_call("MAKE", *args))


__all__ = [
    "PREFIX",
    "avg_of",
    "checked",
    "extract",
    "is_interval",
    "justify",
    "make_interval",
    "sum_of",
    "text",
]
