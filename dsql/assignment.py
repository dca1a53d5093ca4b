"""Assignment casts: values stored into a column of a declared type, as PostgreSQL stores them.

INSERT and UPDATE convert each value to its column's type. Where Arrow's cast is exact
it is used as is; otherwise each value is converted by PostgreSQL's rules:

- text into a number: surrounding blanks ignored, `'1e3'` is 1000; numeric has no NaN here
  (an error, not a wrong value);
- into `numeric(p, s)`: rounded half away from zero to `s` digits, "numeric field
  overflow" past `p - s` integer digits; into `numeric` without precision (stored with
  10 digits after the point, 38 in all) an error for a value it would round or that
  needs more digits, where PostgreSQL keeps every digit;
- into an integer: "integer out of range" (smallint, bigint) past the type's range;
- into `varchar(n)` / `char(n)`: "value too long for type character varying(n)" past `n`
  characters, except for trailing blanks, which are cut (char(n) is stored without its
  padding blanks, which PostgreSQL's comparisons ignore).

>>> assign(pa.chunked_array([["1e3", " 12.5 "]]), exp.DataType.build("numeric(6, 1)"), "x")
<pyarrow.lib.ChunkedArray object at ...>
[
  [
    1000.0,
    12.5
  ]
]
"""

from __future__ import annotations

import decimal
from decimal import Decimal
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dsql.errors import NUMERIC_LIMIT, NUMERIC_OVERFLOW, DataError, TypeMismatchError
from dsql.planner import interval, types
from dsql.planner.types import T

_INTEGER_RANGE = {
    pa.int16(): ("smallint", 2**15),
    pa.int32(): ("integer", 2**31),
    pa.int64(): ("bigint", 2**63),
}


def assign(values: pa.ChunkedArray, column_type: exp.DataType, name: str) -> pa.ChunkedArray:
    """`values` as column `name` of `column_type` stores them; a DsqlError where
    PostgreSQL refuses a value."""
    target = types.to_arrow(column_type)
    if column_type.this in (types.T.VARCHAR, types.T.CHAR) and column_type.expressions:
        return _bounded_text(_cast(values, target, name), column_type)
    if values.type == target:
        return values
    if pa.types.is_string(values.type) and column_type.this in _READ_AS_INPUT:
        return _read(values, column_type, name)
    if _exact(values.type, target):
        try:
            return values.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # out of range or not exact: converted value by value below
    if not (pa.types.is_decimal(target) or pa.types.is_integer(target)):
        return _cast(values, target, name)
    if not (
        pa.types.is_string(values.type)
        or pa.types.is_floating(values.type)
        or pa.types.is_integer(values.type)
        or pa.types.is_decimal(values.type)
        or pa.types.is_null(values.type)
    ):
        return _cast(values, target, name)
    convert = _to_decimal if pa.types.is_decimal(target) else _to_integer
    out = [None if v is None else convert(v, target, column_type) for v in values.to_pylist()]
    return pa.chunked_array([pa.array(out, target)], target)


def typed_literals(query: exp.Expression, targets: list[exp.DataType]) -> exp.Expression:
    """`query`, an INSERT's VALUES, with the literals PostgreSQL reads by their column's
    type cast to it: a number literal bound for a float column (PostgreSQL reads `1e300`
    as a numeric and assigns it as a double, where dsql's numeric could not hold it on
    the way) and a string bound for an interval column (read by PostgreSQL's interval
    grammar, `planner/interval.py`, not the kernel's)."""
    if not isinstance(query, exp.Values):
        return query
    kinds = {i: t.this for i, t in enumerate(targets) if t.this in (T.DOUBLE, T.FLOAT, T.INTERVAL)}
    if not kinds:
        return query
    query = query.copy()
    for row in query.expressions:
        for i, value in enumerate(row.expressions):
            number = value.this if isinstance(value, exp.Neg) else value
            if i not in kinds or not isinstance(number, exp.Literal):
                continue
            if kinds[i] == T.INTERVAL and number is value and value.is_string:
                parts = interval.parse(value.this)
                value.replace(exp.cast(exp.Literal.string(interval.canonical(parts)), T.INTERVAL))
            elif kinds[i] != T.INTERVAL and not number.is_string:
                # A numeric has no negative zero: `-0.0` assigns the double 0.
                zero = number is not value and Decimal(number.this) == 0
                written = number if zero else value
                value.replace(exp.Cast(this=written.copy(), to=targets[i].copy()))
    return query


#: The types whose text Arrow reads otherwise than PostgreSQL's input function: text
#: assigned to them is read by `dsql.text_input` (`'on'` a boolean, `'\\x0102'` two bytes).
_READ_AS_INPUT = frozenset((T.BOOLEAN, T.BINARY, T.VARBINARY, T.TIMESTAMPTZ, T.INTERVAL))


def _read(values: pa.ChunkedArray, column_type: exp.DataType, name: str) -> pa.ChunkedArray:
    """Text `values` read by PostgreSQL's input function for `column_type`."""
    # text_input assigns numbers and dates through this module: imported here, not above.
    from dsql.text_input import BadValue, from_text

    try:
        read = from_text(values.combine_chunks(), column_type, name)
    except BadValue as bad:
        raise bad.error from None
    return pa.chunked_array([read], read.type)


def _exact(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether Arrow's safe cast from `source` to `target` is PostgreSQL's where it
    succeeds: into numbers only from integers and decimals (Arrow neither reads text as
    PostgreSQL does nor rounds floats to a scale half away from zero)."""
    if pa.types.is_decimal(target) or pa.types.is_integer(target):
        return pa.types.is_integer(source) or pa.types.is_decimal(source)
    return True


def _number(value: Any, kind: str = "numeric") -> Decimal:
    """A value read as a number; text as PostgreSQL reads input of type `kind`."""
    if isinstance(value, float):  # its shortest spelling, as PostgreSQL prints it
        value = repr(value)
    if not isinstance(value, str):
        return Decimal(value)
    text = value.strip()
    try:
        number = Decimal(text)
    except decimal.InvalidOperation:
        number = None
    if number is None or not text or "_" in text:
        raise TypeMismatchError(f'invalid input syntax for type {kind}: "{value}"')
    if not number.is_finite():
        raise DataError(
            f'"{value}" cannot be stored: dsql\'s numeric has no NaN or infinity',
            hint="store NULL, or use double precision",
        )
    return number


def _to_decimal(value: Any, target: pa.Decimal128Type, column_type: exp.DataType) -> Decimal:
    """A value rounded to the column's scale; "numeric field overflow" past its precision.

    A column declared `numeric` without precision is PostgreSQL's unbounded numeric,
    which keeps every digit: a value it would round, or one past dsql's 38 digits, is
    an error rather than a value PostgreSQL would not store."""
    exact = _number(value)
    number = _rounded(exact, target.scale)
    unbounded = not column_type.expressions
    if unbounded and number != exact:
        raise DataError(
            f"numeric value {exact} has more than {target.scale} digits after the point",
            hint=f"a numeric column declared without precision keeps {target.scale} digits "
            "after the point (PostgreSQL's keeps them all): declare it numeric(38, s) to keep "
            "s of them, or round the value",
        )
    if number.adjusted() >= target.precision - target.scale:
        hint = (
            NUMERIC_LIMIT
            if unbounded
            else f"a field with precision {target.precision}, scale {target.scale} must "
            f"round to an absolute value less than 10^{target.precision - target.scale}"
        )
        raise DataError(NUMERIC_OVERFLOW, hint=hint)
    return number


def _rounded(number: Decimal, scale: int) -> Decimal:
    """`number` rounded half away from zero to `scale` places, exactly at any magnitude
    (the default context's 28 digits would fail on `1e308` or 40-digit numerics)."""
    digits = max(number.adjusted(), 0) + scale + 2
    with decimal.localcontext(prec=max(digits, decimal.getcontext().prec)):
        return number.quantize(Decimal(1).scaleb(-scale), decimal.ROUND_HALF_UP)


def _to_integer(value: Any, target: pa.DataType, column_type: exp.DataType) -> int:
    """A value as an integer (rounded half away from zero); out of range an error."""
    kind, bound = _INTEGER_RANGE[target]
    number = _number(value, kind)
    if isinstance(value, str) and not value.strip().lstrip("+-").isdigit():
        raise TypeMismatchError(f'invalid input syntax for type {kind}: "{value}"')
    whole = int(_rounded(number, 0))
    if not -bound <= whole < bound:
        raise DataError(f"{kind} out of range")
    return whole


def _bounded_text(values: pa.ChunkedArray, column_type: exp.DataType) -> pa.ChunkedArray:
    """Text of at most n characters (trailing blanks past n cut); longer is an error."""
    n = int(column_type.expressions[0].this.this)
    kind = "character varying" if column_type.this == types.T.VARCHAR else "character"
    out = []
    for v in values.to_pylist():
        if v is not None:
            if column_type.this == types.T.CHAR:
                v = v.rstrip(" ")
            elif len(v) > n and not v[n:].strip(" "):
                v = v[:n]
            if len(v) > n:
                raise DataError(f"value too long for type {kind}({n})")
        out.append(v)
    return pa.chunked_array([pa.array(out, pa.string())], pa.string())


def _cast(values: pa.ChunkedArray, target: pa.DataType, name: str) -> pa.ChunkedArray:
    """Arrow's safe cast; a TypeMismatchError naming the column where there is none."""
    if values.type == target:
        return values
    try:
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        want = types.from_arrow(target).sql("postgres").lower()
        have = types.from_arrow(values.type).sql("postgres").lower()
        raise TypeMismatchError(
            f"column '{name}' is of type {want} but the value is of type {have}",
            hint=f"cast the value: CAST(... AS {want}) ({error})",
        ) from None


__all__ = ["assign"]
