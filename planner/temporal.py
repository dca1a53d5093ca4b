"""Temporal filters: `mz_now()` comparisons become the intervals a row is present in.

`mz_now() >= lo` (or `>`, `<`, `<=`, `=`, BETWEEN) over the row's columns says
the row is in the result from time `lo` on, or until `hi`. `presence` separates
the ordinary predicates from signed intervals, with bounds as expressions of the
runtime's time (`time_scale` runtime ticks per millisecond). A row at time `t`
then enters at `max(t, lo)` and leaves at `max(t, hi)` (DESIGN §2.5); an OR is
a union of intervals, written by inclusion–exclusion.

>>> from dsql.planner.expr import parse_expr
>>> safe, [i] = presence((parse_expr("mz_now() >= _c0"), parse_expr("_c1 > 2")), 1)
>>> [p.sql() for p in safe], [e.sql() for e in i.lower], i.upper
(['_c1 > 2'], ['CAST(_c0 AS BIGINT)'], ())
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations

from sqlglot import exp

from dsql.errors import UnsupportedError
from dsql.planner.expr import conjuncts, nodes

_REWRITE_HINT = (
    "compare mz_now() directly with an expression over the row, joined by AND or OR, "
    "e.g. WHERE mz_now() >= t AND mz_now() < t + 1000; rewrite CASE and NOT as such "
    "comparisons"
)


def is_mz_now(e: exp.Expression) -> bool:
    return isinstance(e, exp.Anonymous) and e.name.lower() == "mz_now"


def mentions_mz_now(e: exp.Expression) -> bool:
    """Whether `e` calls mz_now() anywhere in it (asked of every output of every linear
    step, a 64-way join's hundreds of column references: one is answered at once)."""
    return type(e) is not exp.Column and any(is_mz_now(n) for n in nodes(e))


@dataclass(frozen=True)
class Interval:
    """A row is present from `max(lower)` (inclusive) until `min(upper)` (exclusive),
    where `guard` holds, counted `sign` times. No lower bound: from the row's time on;
    no upper bound: for ever. Bounds are in runtime time units.
    """

    sign: int
    lower: tuple[exp.Expression, ...] = ()
    upper: tuple[exp.Expression, ...] = ()
    guard: tuple[exp.Expression, ...] = ()

    def meet(self, other: Interval) -> Interval:
        """The intersection (signs multiply)."""
        return Interval(
            self.sign * other.sign,
            self.lower + other.lower,
            self.upper + other.upper,
            self.guard + other.guard,
        )


#: Disjuncts of one OR are combined by inclusion–exclusion: 2^n - 1 intervals.
MAX_INTERVALS = 16


def presence(
    predicates: tuple[exp.Expression, ...] | list[exp.Expression], time_scale: int
) -> tuple[list[exp.Expression], list[Interval]]:
    """(ordinary predicates, signed intervals whose sum is the row's presence in time).

    A conjunction of `mz_now()` comparisons is one interval. A disjunction is the
    union of its disjuncts' intervals, written exactly by inclusion–exclusion: the
    signed intersections of every non-empty subset of disjuncts, so at any time
    the signs add up to one where some disjunct holds and to zero elsewhere. An
    ordinary predicate inside a disjunct guards that disjunct's interval. No
    temporal predicate: no intervals (always present).
    """
    safe: list[exp.Expression] = []
    result: list[Interval] | None = None
    for p in predicates:
        if not mentions_mz_now(p):
            safe.append(p)
            continue
        terms = _union([_conjunction(d, time_scale) for d in _disjuncts(p)])
        result = terms if result is None else [a.meet(b) for a in result for b in terms]
        if len(result) > MAX_INTERVALS:
            raise UnsupportedError(
                f"the temporal filter needs more than {MAX_INTERVALS} intervals",
                hint="split the query into a UNION ALL of simpler temporal filters",
            )
    return safe, result or []


def _disjuncts(p: exp.Expression) -> list[exp.Expression]:
    if isinstance(p, exp.Paren):
        return _disjuncts(p.this)
    if isinstance(p, exp.Or):
        return _disjuncts(p.this) + _disjuncts(p.expression)
    return [p]


def _conjunction(p: exp.Expression, time_scale: int) -> Interval:
    """One disjunct: its mz_now() comparisons bound the interval, the rest guard it."""
    lower: list[exp.Expression] = []
    upper: list[exp.Expression] = []
    guard: list[exp.Expression] = []
    for atom in conjuncts(p):
        if not mentions_mz_now(atom):
            guard.append(atom)
            continue
        for lo, hi in _bounds(atom):
            if lo is not None:
                lower.append(_scaled(lo, time_scale))
            if hi is not None:
                upper.append(_scaled(hi, time_scale))
    return Interval(1, tuple(lower), tuple(upper), tuple(guard))


def _union(intervals: list[Interval]) -> list[Interval]:
    """Inclusion–exclusion: the signed intersections of every non-empty subset."""
    if 2 ** len(intervals) - 1 > MAX_INTERVALS:
        raise UnsupportedError(
            f"mz_now() in an OR of {len(intervals)} alternatives is too many to compile",
            hint="split the query into a UNION ALL of simpler temporal filters",
        )
    terms: list[Interval] = []
    for r in range(1, len(intervals) + 1):
        for subset in combinations(intervals, r):
            term = subset[0]
            for other in subset[1:]:
                term = term.meet(other)
            terms.append(term if r % 2 else replace(term, sign=-term.sign))
    return terms


def _bounds(p: exp.Expression) -> list[tuple[exp.Expression | None, exp.Expression | None]]:
    """Each mz_now() comparison as (inclusive lower ms, exclusive upper ms)."""
    if isinstance(p, exp.Paren):
        return _bounds(p.this)
    if isinstance(p, exp.Between) and is_mz_now(p.this):
        return [(p.args["low"], None), (None, _plus_one(p.args["high"]))]
    if isinstance(p, exp.EQ | exp.GT | exp.GTE | exp.LT | exp.LTE):
        a, b = p.this, p.expression
        flipped: dict[type[exp.Binary], type[exp.Binary]] = {
            exp.GT: exp.LT,
            exp.GTE: exp.LTE,
            exp.LT: exp.GT,
            exp.LTE: exp.GTE,
            exp.EQ: exp.EQ,
        }
        kind: type[exp.Binary] = type(p)
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


__all__ = ["Interval", "is_mz_now", "mentions_mz_now", "presence"]
