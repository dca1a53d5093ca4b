"""Predicate pushdown: filters move towards the sources.

Works on fused plans: the predicates a `Linear` applies to its input (the first
stretch's, `JoinFunction.peel_predicates`) sink into the input where that is
the same relation:

- inner join: a predicate over one side's columns filters that side; one over
  both sides joins the condition (so an equality becomes a join key); the
  condition's one-sided conjuncts sink the same way;
- left (right) join: predicates over the preserved side filter it; the
  condition's conjuncts over the other side filter that side;
- union: every part; distinct, threshold: their input;
- reduce (without a domain): predicates over group columns filter its input.

Temporal predicates (`mz_now()`) stay where they are, and so does anything a
node does not let through (full joins, top-k, recursion).

>>> from dsql.planner.expr import parse_expr
>>> from dsql.planner.plan import Column, Filter, Get
>>> from dsql.planner.stateful import Join
>>> from dsql.planner import types
>>> from dsql.planner.passes.fuse import fuse_linear
>>> from dsql.planner.show import tree
>>> t = Get("t", (Column("a", types.build("int")),))
>>> p = Filter(Join(t, t), (parse_expr("_c0 = _c1 AND _c1 > 2"),))
>>> print("\\n".join(tree(push_predicates(fuse_linear(p)))))
Join inner on #0 = #1
  Get t
  Linear (arity 1 -> 1)
    | filter #0 > 2
    Get t
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from dsql.planner.expr import as_expression, conjuncts, refs, remap, shift
from dsql.planner.linear import JoinFunction
from dsql.planner.passes.fuse import linear
from dsql.planner.plan import Linear, Plan, Union
from dsql.planner.stateful import Distinct, Join, Reduce, Threshold
from dsql.planner.temporal import mentions_mz_now


def push_predicates(plan: Plan) -> Plan:
    """The plan with every pushable predicate as deep as it can go."""
    memo: dict[int, Plan] = {}

    def clean(node: Plan) -> Plan:
        """`node` with pushdown applied inside it (nothing pushed from above)."""
        if id(node) not in memo:
            memo[id(node)] = sink(node, ())
        return memo[id(node)]

    def sink(node: Plan, preds: tuple[exp.Expression, ...]) -> Plan:
        """`node` filtered by `preds`, with the predicates pushed as deep as they go."""
        match node:
            case Linear(input=inp, function=fn):
                peeled, rest = (
                    fn.filter(preds).optimize().peel_predicates()
                    if preds
                    else (fn.peel_predicates())
                )
                return linear(sink(inp, peeled) if peeled else clean(inp), rest)
            case Join(kind=kind) if kind != "full":
                return _join(node, preds, sink, clean)
            case Union(parts=parts):
                if not preds:
                    return Union(tuple(clean(p) for p in parts))
                return Union(tuple(sink(p, preds) for p in parts))
            case Distinct(input=inp) | Threshold(input=inp):
                return replace(node, input=sink(inp, preds) if preds else clean(inp))
            case Reduce(domain=None, group=group) if preds and group:
                # Without a group (a global aggregate) even no input rows make a row, so
                # a filter of that row (a constant HAVING) cannot move below.
                down = {i: g for i, g in enumerate(group)}
                below = tuple(remap(p, dict(down)) for p in preds if refs(p) <= set(down))
                above = tuple(p for p in preds if not refs(p) <= set(down))
                inner = node.with_inputs((sink(node.inputs[0], below),))
                return _filtered(inner, above)
        inner = node.with_inputs(tuple(clean(i) for i in node.inputs))
        return _filtered(inner, preds)

    return clean(plan)


def _join(node: Join, preds: tuple[exp.Expression, ...], sink, clean) -> Plan:  # type: ignore[no-untyped-def]
    la = node.left.arity
    left_side, right_side = set(range(la)), set(range(la, node.arity))
    existing = conjuncts(node.on) if node.on is not None else []
    to_left: list[exp.Expression] = []
    to_right: list[exp.Expression] = []
    on: list[exp.Expression] = []
    above: list[exp.Expression] = []
    kind = node.kind
    for p in (c for q in preds for c in conjuncts(q)):  # from WHERE: above the join
        used = refs(p)
        if used and used <= left_side and kind in ("inner", "left"):
            to_left.append(p)
        elif used and used <= right_side and kind in ("inner", "right"):
            to_right.append(shift(p, -la))
        elif used and kind == "inner":
            on.append(p)
        else:
            above.append(p)
    for p in existing:  # from ON: filter the side that is not preserved
        used = refs(p)
        if mentions_mz_now(p) or not used:
            on.append(p)
        elif used <= left_side and kind in ("inner", "right"):
            to_left.append(p)
        elif used <= right_side and kind in ("inner", "left"):
            to_right.append(shift(p, -la))
        else:
            on.append(p)
    left = sink(node.left, tuple(to_left)) if to_left else clean(node.left)
    right = sink(node.right, tuple(to_right)) if to_right else clean(node.right)
    condition = as_expression(exp.and_(*on)) if on else None
    return _filtered(Join(left, right, kind, condition), tuple(above))


def _filtered(node: Plan, preds: tuple[exp.Expression, ...]) -> Plan:
    if not preds:
        return node
    return linear(node, JoinFunction.identity(node.arity).filter(preds))


__all__ = ["push_predicates"]
