"""Plans as text: an indented tree, one operator per line, columns as `#n`.

This is what EXPLAIN prints for the logical stages (raw, decorrelated,
optimized), and what the optimizer compares to detect a fixpoint. A fused
`Linear` prints its steps under it, each line starting with `|`, then its time
bounds (in milliseconds; the row is present from `max(t, lower)` until `upper`).

>>> from dsql.planner.expr import parse_expr
>>> from dsql.planner.plan import Column, Filter, Get
>>> from dsql.planner import types
>>> t = Get("t", (Column("a", types.build("int")),))
>>> print("\\n".join(tree(Filter(t, (parse_expr("_c0 > 1"),)))))
Filter #0 > 1
  Get t
"""

from __future__ import annotations

from dsql.errors import DsqlError
from dsql.planner.expr import show_expr
from dsql.planner.plan import (
    Constant,
    Filter,
    FlatMap,
    Get,
    Linear,
    LocalGet,
    Map,
    Negate,
    Plan,
    Project,
    Union,
)
from dsql.planner.stateful import Distinct, Join, LetRec, Reduce, Threshold, TopK


def tree(plan: Plan, indent: int = 0) -> list[str]:
    """The plan's lines, children indented under their parent."""
    pad = "  " * indent
    lines = [pad + describe(plan)]
    if isinstance(plan, Linear):
        lines += [f"{pad}  | {step}" for step in linear_lines(plan)]
    for child in plan.inputs:
        lines += tree(child, indent + 1)
    return lines


def linear_lines(plan: Linear) -> list[str]:
    """A fused operator's steps, then its time bounds if it has any."""
    lines = plan.function.describe()
    try:
        _, intervals = plan.function.split(1)
    except DsqlError as e:
        return [*lines, f"time bounds: {e.message}"]
    for i in intervals:
        lo = ", ".join(show_expr(e) for e in i.lower) or "-"
        hi = ", ".join(show_expr(e) for e in i.upper) or "-"
        sign = "" if len(intervals) == 1 else ("+ " if i.sign > 0 else "- ")
        guard = " if " + " AND ".join(show_expr(g) for g in i.guard) if i.guard else ""
        lines.append(f"time bounds: {sign}lower {lo}; upper {hi}{guard}")
    return lines


def describe(plan: Plan) -> str:
    """One node's line (without its inputs)."""
    match plan:
        case Get(name=name):
            return f"Get {name}"
        case LocalGet(name=name):
            return f"LocalGet {name}"
        case Constant(rows=rows):
            shown = "; ".join("(" + ", ".join(show_expr(v) for v in r) + ")" for r in rows[:5])
            return f"Constant {shown}" + (" ..." if len(rows) > 5 else "")
        case Linear(input=inp):
            return f"Linear (arity {inp.arity} -> {plan.arity})"
        case Map(exprs=exprs, input=inp):
            return "Map " + ", ".join(
                f"#{inp.arity + i} = {show_expr(e)}" for i, e in enumerate(exprs)
            )
        case Filter(predicates=preds):
            return "Filter " + " AND ".join(show_expr(p) for p in preds)
        case Project(outputs=outs):
            return "Project (" + ", ".join(f"#{o}" for o in outs) + ")"
        case FlatMap(function=f):
            return f"FlatMap {show_expr(f)}"
        case Join(kind=kind, on=on):
            return f"Join {kind}" + (f" on {show_expr(on)}" if on is not None else " (cross)")
        case Reduce(group=group, aggregates=aggs, domain=dom):
            keys = ", ".join(f"#{g}" for g in group)
            text = f"Reduce group=({keys}) aggregates=[{', '.join(show_expr(a) for a in aggs)}]"
            return text + (" with domain" if dom is not None else "")
        case Distinct():
            return "Distinct"
        case Union(parts=parts):
            return f"Union ({len(parts)} inputs)"
        case Negate():
            return "Negate"
        case Threshold():
            return "Threshold"
        case TopK(group=group, order=order, limit=limit, offset=offset):
            keys = ", ".join(f"#{o.column}{' desc' if o.desc else ''}" for o in order)
            groups = ", ".join(f"#{g}" for g in group)
            return f"TopK group=({groups}) order=({keys}) limit={limit} offset={offset}"
        case LetRec(names=names, limit=limit, on_limit=on_limit):
            return f"LetRec {', '.join(names)} (limit {limit}, {on_limit} at limit)"
    return type(plan).__name__


__all__ = ["describe", "linear_lines", "tree"]
