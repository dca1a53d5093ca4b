"""Temporal filters: `mz_now()` comparisons become bounds on when a row is present.

`mz_now() >= lo` (or `>`, `<`, `<=`, `=`, BETWEEN) over the row's columns says
the row is in the result from time `lo` on, or until `hi`. `split_temporal`
separates a conjunction into the ordinary predicates and the lower and upper
bounds, as expressions of the runtime's time (`time_scale` runtime ticks per
millisecond). A row at time `t` then enters at `max(t, lo)` and leaves at
`max(t, hi)` (DESIGN §2.5).

>>> from dsql.planner.plan import parse_expr
>>> safe, lo, hi = split_temporal((parse_expr("mz_now() >= _c0"), parse_expr("_c1 > 2")), 1)
>>> [p.sql() for p in safe], [e.sql() for e in lo], hi
(['_c1 > 2'], ['CAST(_c0 AS BIGINT)'], [])
"""

from __future__ import annotations

from sqlglot import exp

from dsql.errors import UnsupportedError

_REWRITE_HINT = (
    "compare mz_now() directly with an expression over the row, joined by AND, e.g. "
    "WHERE mz_now() >= t AND mz_now() < t + 1000; an OR can be split into a UNION ALL of "
    "two queries"
)


def is_mz_now(e: exp.Expression) -> bool:
    return isinstance(e, exp.Anonymous) and e.name.lower() == "mz_now"


def mentions_mz_now(e: exp.Expression) -> bool:
    return any(is_mz_now(n) for n in e.walk())


def split_temporal(
    predicates: tuple[exp.Expression, ...] | list[exp.Expression], time_scale: int
) -> tuple[list[exp.Expression], list[exp.Expression], list[exp.Expression]]:
    """(ordinary predicates, lower bounds, upper bounds); bounds in runtime time units."""
    safe: list[exp.Expression] = []
    lower: list[exp.Expression] = []
    upper: list[exp.Expression] = []
    for p in predicates:
        if not mentions_mz_now(p):
            safe.append(p)
            continue
        for lo, hi in _bounds(p):
            if lo is not None:
                lower.append(_scaled(lo, time_scale))
            if hi is not None:
                upper.append(_scaled(hi, time_scale))
    return safe, lower, upper


def _bounds(p: exp.Expression) -> list[tuple[exp.Expression | None, exp.Expression | None]]:
    """Each mz_now() comparison as (inclusive lower ms, exclusive upper ms)."""
    if isinstance(p, exp.Paren):
        return _bounds(p.this)
    if isinstance(p, exp.And):
        return _bounds(p.this) + _bounds(p.expression)
    if isinstance(p, exp.Between) and is_mz_now(p.this):
        return [(p.args["low"], None), (None, _plus_one(p.args["high"]))]
    if isinstance(p, exp.EQ | exp.GT | exp.GTE | exp.LT | exp.LTE):
        a, b = p.this, p.expression
        flipped = {
            exp.GT: exp.LT,
            exp.GTE: exp.LTE,
            exp.LT: exp.GT,
            exp.LTE: exp.GTE,
            exp.EQ: exp.EQ,
        }
        kind = type(p)
        if is_mz_now(b) and not is_mz_now(a):
            a, b, kind = b, a, flipped[kind]
        if is_mz_now(a) and not mentions_mz_now(b):
            if kind is exp.GTE:
                return [(b, None)]
            if kind is exp.GT:
                return [(_plus_one(b), None)]
            if kind is exp.LT:
                return [(None, b)]
            if kind is exp.LTE:
                return [(None, _plus_one(b))]
            return [(b, None), (None, _plus_one(b))]
    if isinstance(p, exp.Or | exp.Case | exp.If | exp.Not):
        raise UnsupportedError(
            f"mz_now() inside {type(p).__name__.upper()} cannot be compiled to a temporal filter",
            hint=_REWRITE_HINT,
        )
    raise UnsupportedError(
        f"mz_now() may only be compared with an expression over the row: {p.sql('postgres')}",
        hint=_REWRITE_HINT,
    )


def _plus_one(e: exp.Expression) -> exp.Expression:
    return exp.Add(this=exp.paren(e.copy()), expression=exp.Literal.number(1))


def _scaled(e: exp.Expression, time_scale: int) -> exp.Expression:
    ms = exp.Cast(this=e.copy(), to=exp.DataType.build("bigint"))
    return ms if time_scale == 1 else exp.Mul(this=ms, expression=exp.Literal.number(time_scale))


__all__ = ["is_mz_now", "mentions_mz_now", "split_temporal"]
