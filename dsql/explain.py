"""EXPLAIN: a plan as an indented tree, one operator per line, columns as `#n`.

Stages: `raw` (as bound, subqueries still in expressions), `decorrelated`
(subqueries turned into joins), `optimized` (currently the decorrelated plan:
the optimizer passes are not written yet) and `physical` (the runtime operators
a plan renders to, with fused linear stages).
"""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp

from dsql.errors import UnsupportedError
from dsql.planner.decorrelate import decorrelate
from dsql.planner.plan import (
    Constant,
    Distinct,
    Filter,
    FlatMap,
    Get,
    Join,
    LetRec,
    LocalGet,
    Map,
    Negate,
    Outer,
    Plan,
    Project,
    Reduce,
    SubqueryExpr,
    Threshold,
    TopK,
    Union,
)

_REF = re.compile(r"\b_c(\d+)\b")


def render_expr(e: exp.Expression) -> str:
    """An expression with positional references printed `#n`."""

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, SubqueryExpr):
            return exp.Anonymous(this=f"<{node.args['kind']} subquery>")
        if isinstance(node, Outer):
            return exp.column(f"__outer{node.this}")
        return node

    text = e.copy().transform(replace).sql("postgres")
    text = re.sub(r"\b__outer(\d+)\b", r"^#\1", text)
    return _REF.sub(r"#\1", text).replace('"', "")


def tree(plan: Plan, indent: int = 0) -> list[str]:
    """The plan's lines, children indented under their parent."""
    pad = "  " * indent
    line = pad + _describe(plan)
    lines = [line]
    for child in plan.inputs:
        lines += tree(child, indent + 1)
    return lines


def _describe(plan: Plan) -> str:
    match plan:
        case Get(name=name):
            return f"Get {name}"
        case LocalGet(name=name):
            return f"LocalGet {name}"
        case Constant(rows=rows):
            shown = "; ".join("(" + ", ".join(render_expr(v) for v in r) + ")" for r in rows[:5])
            return f"Constant {shown}" + (" ..." if len(rows) > 5 else "")
        case Map(exprs=exprs, input=inp):
            return "Map " + ", ".join(
                f"#{inp.arity + i} = {render_expr(e)}" for i, e in enumerate(exprs)
            )
        case Filter(predicates=preds):
            return "Filter " + " AND ".join(render_expr(p) for p in preds)
        case Project(outputs=outs):
            return "Project (" + ", ".join(f"#{o}" for o in outs) + ")"
        case FlatMap(function=f):
            return f"FlatMap {render_expr(f)}"
        case Join(kind=kind, on=on):
            return f"Join {kind}" + (f" on {render_expr(on)}" if on is not None else " (cross)")
        case Reduce(group=group, aggregates=aggs, domain=dom):
            keys = ", ".join(f"#{g}" for g in group)
            text = f"Reduce group=({keys}) aggregates=[{', '.join(render_expr(a) for a in aggs)}]"
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
            return f"TopK group=({', '.join(f'#{g}' for g in group)}) order=({keys}) limit={limit} offset={offset}"
        case LetRec(names=names, limit=limit, on_limit=on_limit):
            return f"LetRec {', '.join(names)} (limit {limit}, {on_limit} at limit)"
    return type(plan).__name__


def explain(session: Any, target: Any, stage: str) -> str:
    """The plan of a query or view at a stage, as text."""
    if isinstance(target, str):
        rel = session.relations.get(target)
        if rel is None or rel.plan is None:
            session.columns(target)
            raise UnsupportedError(f"'{target}' is a table; EXPLAIN a view or a query")
        plan = rel.plan
    else:
        plan = session.plan(target).plan
    if stage == "raw":
        return "\n".join(tree(plan))
    if stage in ("decorrelated", "optimized"):
        return "\n".join(tree(decorrelate(plan)))
    if stage == "physical":
        start = len(session.worker.nodes)
        try:
            session._render(plan)
            nodes = session.worker.nodes[start:]
            return "\n".join(f"{i}: {n.describe()}" for i, n in enumerate(nodes))
        finally:
            session.worker.drop(session.worker.nodes[start:])
    raise UnsupportedError(f"unknown EXPLAIN stage {stage!r}")


__all__ = ["explain", "render_expr", "tree"]
