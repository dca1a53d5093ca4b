"""PostgreSQL's text functions at the edges where the engines' own differ.

Each is a `functions.Spelling` whose tree both engines evaluate as PostgreSQL does:
positions before the text's start (`substring`, `overlay`), an empty delimiter or
fill (`split_part`, `lpad`, `rpad`), a field or length PostgreSQL refuses (raised
where the row is evaluated, as PostgreSQL raises it), and `to_hex` of a negative
integer (PostgreSQL's two's complement is 32 bits wide for an int, in lower case).

>>> call = sqlglot.parse_one("substring(s, n)", read="postgres")
>>> substring_positions(call).sql("postgres")
'SUBSTRING(s FROM CASE WHEN n < 1 THEN 1 ELSE n END)'
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlglot  # noqa: F401 - the doctest parses with it
from sqlglot import exp

from dsql.errors import SchemaError, UnsupportedError
from dsql.planner import types
from dsql.planner.expr import RaiseError
from dsql.planner.spellings import PER_KERNEL

_NEGATIVE_LENGTH = "negative substring length not allowed"


def _case(*arms: tuple[exp.Expr, exp.Expr], default: exp.Expr) -> exp.Case:
    return exp.Case(ifs=[exp.If(this=c, true=v) for c, v in arms], default=default)


def _number(n: int) -> exp.Expression:
    return exp.Literal.number(n)


def _at_least(e: exp.Expression, low: int) -> exp.Expression:
    """`e`, or `low` where `e` is below it; NULL stays NULL (`greatest` skips it)."""
    return _case((exp.LT(this=e.copy(), expression=_number(low)), _number(low)), default=e.copy())


def _raise(message: str) -> exp.Expression:
    return RaiseError(this=exp.Literal.string(message))


def _no_negative_literal(length: exp.Expression | None) -> None:
    value = types.integer_literal(length) if length is not None else None
    if value is not None and value < 0:
        raise SchemaError(_NEGATIVE_LENGTH)


def _positions(
    s: exp.Expression,
    start: exp.Expression,
    length: exp.Expression | None,
    strict: Sequence[exp.Expression] = (),
) -> exp.Expr:
    """The characters of `s` from `start` (1: the first) for `length` (to the end where
    None), those before the first position counted but not taken; a negative length
    is an error unless an argument (`s`, `start`, `length` and `strict`) is NULL."""
    first = _at_least(start, 1)
    if length is None:
        return exp.Substring(this=s.copy(), start=first)
    _no_negative_literal(length)
    end = exp.Add(this=exp.paren(start.copy()), expression=exp.paren(length.copy()))
    taken = _at_least(exp.Sub(this=end, expression=exp.paren(first.copy())), 0)
    present = [
        exp.Not(this=exp.Is(this=a.copy(), expression=exp.Null())) for a in (s, start, *strict)
    ]
    negative = exp.and_(exp.LT(this=length.copy(), expression=_number(0)), *present)
    count = _case(
        (negative, exp.Cast(this=_raise(_NEGATIVE_LENGTH), to=types.build("int"))), default=taken
    )
    return exp.Substring(this=s.copy(), start=first, length=count)


def substring_positions(call: exp.Func) -> exp.Expr:
    """`substring(s, start [, length])` by positions (DuckDB and Spark count a start
    below 1 from the end)."""
    return _positions(call.this, call.args["start"], call.args.get("length"))


def overlay(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`overlay(s placing r from start [for count])`: `s` with `count` characters (as
    many as `r` has) from `start` replaced by `r`."""
    s, r, start = call.this, call.expression, call.args["from_"]
    count = call.args.get("for_") or exp.Length(this=r.copy())
    before = _positions(
        s,
        _number(1),
        exp.Sub(this=exp.paren(start.copy()), expression=_number(1)),
        (start, r, count),
    )
    after = _positions(
        s, exp.Add(this=exp.paren(start.copy()), expression=exp.paren(count.copy())), None
    )
    return exp.DPipe(this=exp.DPipe(this=before, expression=r.copy()), expression=after)


def split_part(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`split_part(s, delimiter, n)`: the `n`-th field (from the end where `n` is
    negative); an empty delimiter does not split; field 0 is an error."""
    s, delimiter, n = call.this, call.args["delimiter"], call.args["part_index"]
    if types.integer_literal(n) == 0:
        raise SchemaError("field position must not be zero")
    nulls = exp.or_(*(exp.Is(this=a.copy(), expression=exp.Null()) for a in (s, delimiter, n)))
    whole = exp.In(this=n.copy(), expressions=[_number(1), _number(-1)])
    unsplit = _case((whole, s.copy()), default=exp.Literal.string(""))
    return _case(
        (nulls, exp.Cast(this=exp.Null(), to=types.build("text"))),
        (
            exp.EQ(this=n.copy(), expression=_number(0)),
            exp.Cast(this=_raise("field position must not be zero"), to=types.build("text")),
        ),
        (exp.EQ(this=delimiter.copy(), expression=exp.Literal.string("")), unsplit),
        default=call,
    )


def chr_(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`chr(i)`: the character of code point `i`; 0 is an error, as PostgreSQL's text
    holds no NUL (the engines would return one)."""
    code = call.expressions[0]
    nul = exp.Cast(this=_raise("null character not permitted"), to=types.build("text"))
    return _case((exp.EQ(this=code.copy(), expression=_number(0)), nul), default=call)


def pad(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`lpad`/`rpad(s, n, fill)`: an empty fill pads nothing (DuckDB raises), so `s` is
    cut to `n` characters; a length below 0 gives ''."""
    fill = call.args.get("fill_pattern")
    if fill is None:
        return call
    n = call.expression
    below = exp.and_(
        exp.LT(this=n.copy(), expression=_number(0)),
        exp.Not(this=exp.Is(this=call.this.copy(), expression=exp.Null())),
    )
    cut = _case(
        (below, exp.Literal.string("")),
        default=exp.Left(this=call.this.copy(), expression=n.copy()),
    )
    empty = exp.EQ(this=fill.copy(), expression=exp.Literal.string(""))
    return _case((empty, cut), default=call)


def to_hex(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`to_hex(n)` in lower case; a negative int as its 32-bit two's complement (both
    engines write 64 bits)."""
    n = call.this
    first = arg_types[0] if arg_types else types.build("unknown")
    if not first.is_type(exp.DataType.Type.BIGINT):
        wide = exp.Cast(this=n.copy(), to=types.build("bigint"))
        negative = exp.LT(this=n.copy(), expression=_number(0))
        n = _case((negative, exp.Add(this=wide, expression=_number(1 << 32))), default=wide.copy())
    return exp.Lower(this=exp.Hex(this=n))


#: PostgreSQL raises "LIKE pattern must not end with escape character" only where
#: matching reaches that end with text left over, and otherwise answers: dsql refuses.
_ESCAPE_AT_END = "a LIKE pattern that ends with its escape character is not supported"
_ESCAPE_HINT = "escape the escape character (\\\\ for a backslash)"


def _like_pattern(pattern: str, escape: str) -> str:
    """A LIKE pattern with escape character `escape` ('' for none) as the same pattern
    with escape `\\`, which both engines read alike: only `%`, `_` and `\\` escaped.

    >>> _like_pattern("a!%b!c_", "!")
    'a\\\\%bc_'
    """
    out: list[str] = []
    k = 0
    while k < len(pattern):
        c = pattern[k]
        if escape and c == escape:
            if k + 1 >= len(pattern):
                raise UnsupportedError(_ESCAPE_AT_END, hint=_ESCAPE_HINT)
            nxt = pattern[k + 1]
            out.append("\\" + nxt if nxt in "%_\\" else nxt)
            k += 2
            continue
        out.append("\\\\" if c == "\\" else c)
        k += 1
    return "".join(out)


def like(
    s: exp.Expression, pattern: exp.Expression, escape: exp.Expression | None, insensitive: bool
) -> exp.Expression:
    """`s LIKE pattern [ESCAPE escape]` (`insensitive`: ILIKE) with PostgreSQL's escapes:
    `\\` unless ESCAPE says otherwise (DuckDB has none by default; Spark refuses an
    escape before an ordinary character, which PostgreSQL reads as that character).

    A literal pattern is rewritten here; another is rewritten where it is evaluated,
    for the default escape only.
    """
    from dsql.planner.regex_spellings import literal_text

    node = exp.ILike if insensitive else exp.Like
    escape_text = "\\" if escape is None else literal_text(escape)
    if escape_text is None or len(escape_text) > 1:
        if escape_text is not None:
            raise SchemaError(
                "invalid escape string", hint="Escape string must be empty or one character."
            )
        raise UnsupportedError(
            "LIKE needs a literal ESCAPE", hint="write the escape character in the query"
        )
    text = literal_text(pattern)
    backslash = exp.Literal.string("\\")
    if text is not None:
        written = exp.Literal.string(_like_pattern(text, escape_text))
        return exp.paren(exp.Escape(this=node(this=s, expression=written), expression=backslash))
    if escape_text != "\\":
        raise UnsupportedError(
            "LIKE with an ESCAPE other than \\ needs a literal pattern",
            hint="write the pattern in the query",
        )
    # Backslash pairs kept, a backslash before another character dropped: the engines
    # read the rest alike; an odd backslash at the end is refused (`_ESCAPE_AT_END`).
    pairs, at_end = exp.Literal.string(r"(\\\\)|\\([^%_\\])"), r"(^|[^\\])(\\\\)*\\\z"
    duck = _case(
        (
            exp.Anonymous(
                this="REGEXP_MATCHES", expressions=[pattern.copy(), exp.Literal.string(at_end)]
            ),
            exp.Cast(this=_raise(_ESCAPE_AT_END), to=types.build("text")),
        ),
        default=exp.Anonymous(
            this="REGEXP_REPLACE",
            expressions=[
                pattern.copy(),
                pairs.copy(),
                exp.Literal.string("\\1\\2"),
                exp.Literal.string("g"),
            ],
        ),
    )
    spark = _case(
        (
            exp.RegexpLike(this=pattern.copy(), expression=exp.Literal.string(at_end)),
            exp.Cast(this=_raise(_ESCAPE_AT_END), to=types.build("text")),
        ),
        default=exp.RegexpReplace(
            this=pattern.copy(), expression=pairs.copy(), replacement=exp.Literal.string("$1$2")
        ),
    )
    checked = exp.Anonymous(this=PER_KERNEL, expressions=[duck, spark])
    return exp.paren(exp.Escape(this=node(this=s, expression=checked), expression=backslash))


__all__ = ["like", "overlay", "pad", "split_part", "substring_positions", "to_hex"]
