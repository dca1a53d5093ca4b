"""Fusion: every chain of linear nodes becomes one `Linear` node.

Map, Filter, Project, FlatMap and Negate are steps of a `JoinFunction`; a run
of them (and of `Linear` nodes) over one input is composed into one function
and put in normal form (`JoinFunction.optimize`). A function that does nothing
disappears.

Invariant: no linear node has a linear node as its input.

>>> from dsql.planner.expr import parse_expr
>>> from dsql.planner.plan import Column, Filter, Get, Project
>>> from dsql.planner import types
>>> t = Get("t", (Column("a", types.build("int")), Column("b", types.build("int"))))
>>> fused = fuse_linear(Project(Filter(t, (parse_expr("_c1 > 1"),)), (0,)))
>>> fused.function.describe()
['filter #1 > 1', 'project (#0)']
"""

from __future__ import annotations

from dsql.planner.linear import JoinFunction
from dsql.planner.linear_steps import MapStep, NegateStep, TableStep
from dsql.planner.passes import bottom_up
from dsql.planner.plan import (
    Column,
    Filter,
    FlatMap,
    Linear,
    Map,
    Negate,
    Plan,
    Project,
)


def as_function(node: Plan) -> JoinFunction | None:
    """The node's own work as a `JoinFunction` over its input (None: not linear)."""
    match node:
        case Linear(function=f):
            return f
        case Map(input=inp, exprs=exprs):
            cols = node.columns[inp.arity :]
            return JoinFunction(inp.arity, (MapStep(exprs, cols),))
        case Filter(input=inp, predicates=preds):
            return JoinFunction.identity(inp.arity).filter(preds)
        case Project(input=inp, outputs=outs):
            return JoinFunction.identity(inp.arity).project(outs)
        case FlatMap(input=inp, function=f, names=names, types=ts):
            cols = tuple(Column(n, t) for n, t in zip(names, ts, strict=True))
            return JoinFunction(inp.arity, (TableStep(f, cols),))
        case Negate(input=inp):
            return JoinFunction(inp.arity, (NegateStep(),))
    return None


def fuse_linear(plan: Plan) -> Plan:
    """The plan with each maximal chain of linear nodes fused into one `Linear`."""
    return bottom_up(plan, _fuse)


def _fuse(node: Plan) -> Plan:
    fn = as_function(node)
    if fn is None:
        return node
    inp = node.inputs[0]
    if isinstance(inp, Linear):
        fn = inp.function.compose(fn)
        inp = inp.input
    return linear(inp, fn)


def linear(inp: Plan, fn: JoinFunction) -> Plan:
    """`inp` followed by `fn` (normalized), or `inp` itself if `fn` does nothing."""
    fn = fn.optimize()
    return inp if not fn.steps else Linear(inp, fn)


__all__ = ["as_function", "fuse_linear", "linear"]
