"""Casts of text to numbers and booleans as PostgreSQL reads the text, on every kernel.

DuckDB and Spark read text more loosely than PostgreSQL's input functions: DuckDB takes
`'1.5'::int` (rounding it), `'1e3'`, `'0x1F'` and `'1_000'` as integers and `'1_000.5'`
as a numeric, and refuses the booleans `'on'`, `'off'` and `' true '`. `spelled`
writes a cast of a text expression as PostgreSQL's reading of it:

- an integer (`int4in`): blanks, an optional sign, digits, blanks;
- a numeric (`numeric_in`): blanks, an optional sign, digits with an optional point
  (or a point and digits), an optional exponent, blanks (`NaN` and `Infinity`, which
  PostgreSQL reads, dsql's numeric does not hold: refused like other text);
- a boolean (`boolin`): trimmed and in any case, a prefix of `true`, `false`, `yes` or
  `no`, or `on`, `off`, `of`, `1`, `0`.

Any other text is PostgreSQL's error, `invalid input syntax for type t: "text"`, raised
per row. Blanks are PostgreSQL's `isspace` characters.

A cast of text computed per row to a date or a timestamp takes ISO text only (a 4-digit
year; a timestamp's seconds to 6 places, any zone ignored as PostgreSQL's timestamp
ignores it); other text is refused per row: DuckDB reads `'1/2/24'` as 0001-02-24,
truncates a 7th digit of a second PostgreSQL rounds, and its infinite dates do not
convert.

A cast of text computed per row to an interval is refused (`interval_refused`):
PostgreSQL's interval grammar (`planner/interval.py`) reads literals at plan time, and
the engines' readers differ from it (DuckDB takes `'1 day -5 seconds'` as 23:59:55,
refuses `'P1D'`).

>>> text = spelled(exp.column("s"), exp.DataType.build("int")).sql("duckdb")
>>> text.startswith("CASE WHEN NOT REGEXP_MATCHES(s, "), "invalid input syntax" in text
(True, True)
"""

from __future__ import annotations

import re

from sqlglot import exp

from dsql.errors import UnsupportedError
from dsql.planner import types
from dsql.planner.expr import RaiseError

#: PostgreSQL's blanks (C's `isspace`), as a regular expression class both engines read.
_BLANK = r"[ \t\n\r\f\x0B]"
_BLANKS = " \t\n\r\f\x0b"
_INTEGER = rf"^{_BLANK}*[+-]?[0-9]+{_BLANK}*$"
_NUMERIC = rf"^{_BLANK}*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?{_BLANK}*$"
#: The date and time text both engines read as PostgreSQL does: ISO dates of a 4-digit
#: year, a time to the minute, second or microsecond, a zone a timestamp ignores.
_DAY = r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
_CLOCK = r"[0-9]{1,2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
_DATE = rf"^{_BLANK}*{_DAY}( {_CLOCK})?{_BLANK}*$"
_TIMESTAMP = (
    rf"^{_BLANK}*{_DAY}([ T]{_CLOCK}( ?([A-Za-z]{{1,5}}|[+-][0-9]{{1,2}}(:?[0-9]{{2}})?))?)?"
    rf"{_BLANK}*$"
)
_TRUE = ("t", "tr", "tru", "true", "y", "ye", "yes", "on", "1")
_FALSE = ("f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0")


def _invalid(value: exp.Expr, name: str) -> exp.Expr:
    """PostgreSQL's error for text `value` that is no `name`, naming the text."""
    return _raised(f'invalid input syntax for type {name}: "', value)


def _raised(said: str, value: exp.Expr) -> exp.Expr:
    """The error `said` followed by the text `value` and a closing quote."""
    message = exp.DPipe(
        this=exp.DPipe(this=exp.Literal.string(said), expression=value.copy()),
        expression=exp.Literal.string('"'),
    )
    return RaiseError(this=message)


def _checked(value: exp.Expr, pattern: str, name: str, cast: exp.Expr) -> exp.Expr:
    """`cast` where text `value` matches `pattern`, else PostgreSQL's error for `name`."""
    matches = exp.RegexpLike(this=value.copy(), expression=exp.Literal.string(pattern))
    return exp.Case(
        ifs=[exp.If(this=exp.Not(this=matches), true=_invalid(value, name))], default=cast
    )


def _trimmed(value: exp.Expr) -> exp.Expr:
    return exp.Trim(this=value.copy(), expression=exp.Literal.string(_BLANKS))


def _boolean(value: exp.Expr) -> exp.Expr:
    word = exp.Lower(this=_trimmed(value))

    def among(words: tuple[str, ...]) -> exp.Expr:
        return exp.In(this=word.copy(), expressions=[exp.Literal.string(w) for w in words])

    return exp.Case(
        ifs=[
            exp.If(this=among(_TRUE), true=exp.true()),
            exp.If(this=among(_FALSE), true=exp.false()),
        ],
        default=exp.Cast(this=_invalid(value, "boolean"), to=types.build("boolean")),
    )


def _literal(value: exp.Expr, target: exp.DataType) -> exp.Expr | None:
    """`value::target` of a string literal PostgreSQL reads: the engine's plain cast of
    the trimmed text (a boolean's value itself); None for text PostgreSQL refuses."""
    if not isinstance(value, exp.Literal) or not value.is_string:
        return None
    text = value.this
    if target.is_type(exp.DataType.Type.BOOLEAN):
        word = text.strip(_BLANKS).lower()
        return exp.true() if word in _TRUE else exp.false() if word in _FALSE else None
    pattern = _INTEGER if types.is_integer(target) else _NUMERIC
    if re.fullmatch(pattern, text) is None:
        return None
    return exp.Cast(this=exp.Literal.string(text.strip(_BLANKS)), to=target.copy())


def spelled(value: exp.Expr, target: exp.DataType) -> exp.Expr | None:
    """`value::target` of a text `value` as PostgreSQL reads the text (module docstring);
    None for a target whose engine reading needs no check here."""
    if _is_target(target) and (plain := _literal(value, target)) is not None:
        return plain
    if types.is_integer(target):
        name = {"SMALLINT": "smallint", "INT": "integer", "BIGINT": "bigint"}.get(
            target.this.name, "integer"
        )
        cast = exp.Cast(this=_trimmed(value), to=target.copy())
        return _checked(value, _INTEGER, name, cast)
    if target.this in (types.T.DECIMAL, types.T.BIGDECIMAL):
        cast = exp.Cast(this=_trimmed(value), to=target.copy())
        return _checked(value, _NUMERIC, "numeric", cast)
    if target.is_type(exp.DataType.Type.BOOLEAN):
        return _boolean(value)
    if target.this in (types.T.DATE, types.T.TIMESTAMP) and not isinstance(value, exp.Literal):
        name = "date" if target.this == types.T.DATE else "timestamp"
        pattern = _DATE if name == "date" else _TIMESTAMP
        matches = exp.RegexpLike(this=value.copy(), expression=exp.Literal.string(pattern))
        refused = RaiseError(
            this=exp.DPipe(
                this=exp.Literal.string(
                    f"{name} text dsql reads only in ISO form ({_FORMS[name]}): "
                ),
                expression=value.copy(),
            )
        )
        return exp.Case(
            ifs=[exp.If(this=exp.Not(this=matches), true=refused)],
            default=exp.Cast(this=value.copy(), to=target.copy()),
        )
    return None


#: The forms `_DATE` and `_TIMESTAMP` take, as the error for other text says them.
_FORMS = {
    "date": "YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]",
    "timestamp": "YYYY-MM-DD[ HH:MM[:SS[.ffffff]][ zone]]",
}


def _is_target(target: exp.DataType) -> bool:
    return (
        types.is_integer(target)
        or target.this in (types.T.DECIMAL, types.T.BIGDECIMAL)
        or target.is_type(exp.DataType.Type.BOOLEAN)
    )


def interval_refused() -> UnsupportedError:
    """dsql's error for a cast of text computed per row to an interval."""
    return UnsupportedError(
        "a cast of text computed per row to interval (PostgreSQL's interval grammar is read "
        "for literals only)",
        hint="write the interval as a literal, or build it from numbers: "
        "make_interval(days => n) or n * interval '1 day'",
    )


__all__ = ["interval_refused", "spelled"]
