"""Rendering a `JoinFunction`: one runtime `join_function` per stretch, one kernel query.

Each stretch of the function's normal form (`JoinFunction.segments`) becomes a
runtime `join_function` whose branch computes every output column and the
filter from the stretch's input directly; temporal bounds become the branch
times (enter at `max(t, lo)`, leave at `max(t, hi)` with the diff negated,
DESIGN §2.5); a negation is the branch's diff factor; a table function
between stretches is a runtime `flat_map` (or `explode` for `repeat_row`).
The runtime chains consecutive linear steps into one node, so the whole
function is one projection per batch.
"""

from __future__ import annotations

from sqlglot import exp

from dsql.errors import UnsupportedError
from dsql.planner.expr import is_col
from dsql.planner.linear import JoinFunction
from dsql.planner.linear_steps import Segment
from dsql.planner.temporal import Interval, mentions_mz_now
from dsql.runtime.collection import Collection


def names(n: int) -> list[str]:
    return [f"_c{i}" for i in range(n)]


def render_linear(c: Collection, fn: JoinFunction, time_scale: int) -> Collection:
    """`c` (columns `_c0..`, possibly more) transformed by `fn`; output columns `_c0..`."""
    for seg, table in fn.segments():
        c = _segment(c, seg, time_scale)
        if table is None:
            continue
        width = len(seg.outputs)
        if table.columns:
            c = c.flat_map(table.function.copy(), f"_c{width}", keep=names(width))
        else:
            c = c.explode(table.function.copy())
    return c


def _segment(c: Collection, seg: Segment, time_scale: int) -> Collection:
    safe, intervals = seg.split(time_scale)
    if any(mentions_mz_now(e) for e in (*seg.outputs, *safe.predicates)):
        raise UnsupportedError(
            "mz_now() in a view or SUBSCRIBE may only be compared with the row's columns "
            "in WHERE or HAVING",
            hint="a one-off SELECT may return mz_now(); a view filters with it, e.g. "
            "WHERE mz_now() < ts + 1000",
        )
    n = len(seg.outputs)
    # The cheap tests first: comparing the outputs hashes every expression.
    unchanged = n == seg.input_arity and not (safe.predicates or intervals or seg.negated)
    if unchanged and c.columns == tuple(names(n)):
        if all(is_col(e, i) for i, e in enumerate(seg.outputs)):
            return c
    # The outputs are handed over as they are: neither the plan nor the runtime changes an
    # expression a step holds (planner/expr.py), so no copy is needed.
    outputs: list[tuple[str, exp.Expression]] = (
        [(f"_c{i}", e) for i, e in enumerate(seg.outputs)]
        if n
        else [("_c0", exp.Literal.number(0))]  # arity 0 is carried as one column
    )
    where = exp.and_(*(p.copy() for p in safe.predicates), copy=False) if safe.predicates else None
    diff = "-1" if seg.negated else None
    sign = -1 if seg.negated else 1
    if not intervals:
        return c.join_function([{"columns": outputs, "where": where, "time": None, "diff": diff}])
    branches = [b for i in intervals for b in temporal_branches(outputs, where, i, sign)]
    return c.join_function(branches)


def temporal_branches(
    columns: list[tuple[str, exp.Expression]],
    where: exp.Expr | None,
    interval: Interval,
    sign: int,
) -> list[dict]:
    """Runtime branches: the row counted `sign * interval.sign` times from the interval's
    lower bound (the row's time if none) until its upper bound (if any).

    A NULL bound makes the comparison NULL, so the row is never in that interval.
    """
    lo = _fold(exp.Greatest, list(interval.lower))
    hi = _fold(exp.Least, list(interval.upper))
    known: list[exp.Expression] = [
        exp.Not(this=exp.Is(this=b.copy(), expression=exp.Null()))
        for b in (*interval.lower, *interval.upper)
    ]
    window: list[exp.Expression] = (
        [exp.GT(this=hi.copy(), expression=lo.copy())] if lo is not None and hi else []
    )
    parts = [p.copy() for p in ([where] if where is not None else [])]
    parts += [g.copy() for g in interval.guard] + known + window
    cond = exp.and_(*parts, copy=False) if parts else None
    weight = sign * interval.sign
    enter = {"columns": columns, "where": cond, "time": lo, "diff": _diff(weight)}
    if hi is None:
        return [enter]
    leave = {
        "columns": columns,
        "where": cond.copy() if cond is not None else None,
        "time": hi,
        "diff": _diff(-weight),
    }
    return [enter, leave]


def _diff(weight: int) -> str | None:
    return None if weight == 1 else str(weight)


def _fold(kind: type[exp.Func], bounds: list[exp.Expression]) -> exp.Expr | None:
    if not bounds:
        return None
    if len(bounds) == 1:
        return bounds[0].copy()
    return kind(this=bounds[0].copy(), expressions=[b.copy() for b in bounds[1:]])


__all__ = ["names", "render_linear", "temporal_branches"]
