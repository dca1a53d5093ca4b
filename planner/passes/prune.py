"""Projection pruning: carry only the columns something reads.

Demand flows from the root (every column) down: a `Linear` needs what its
function's `demand` says of the columns its parent reads; a join needs the
columns its parent reads plus those of its condition; a reduce needs its group
columns and the columns its aggregates read. A node whose input now has fewer
columns is rewritten to the new positions (`JoinFunction.permute`, remapped
conditions). Distinct, threshold, top-k and recursion need whole rows, and
sources keep their columns.

Invariant: given every column as demand, a node keeps its layout, so the
root's columns are unchanged.

>>> from dsql.planner.plan import Column, Get, Project
>>> from dsql.planner.stateful import Join
>>> from dsql.planner import types
>>> from dsql.planner.passes.fuse import fuse_linear
>>> from dsql.planner.show import tree
>>> ab = (Column("a", types.build("int")), Column("b", types.build("int")))
>>> t, u = Get("t", ab), Get("u", ab)
>>> p = fuse_linear(Project(Join(Project(t, (0, 1)), fuse_linear(Project(u, (1, 0)))), (0,)))
>>> print("\\n".join(tree(prune_columns(p))))
Linear (arity 3 -> 1)
  | project (#0)
  Join inner (cross)
    Get t
    Linear (arity 2 -> 1)
      | project (#1)
      Get u
"""

from __future__ import annotations

from dsql.planner.expr import refs, remap
from dsql.planner.linear import JoinFunction
from dsql.planner.passes.fuse import linear
from dsql.planner.plan import Linear, Plan, Union
from dsql.planner.stateful import Join, Reduce

Mapping = dict[int, int]


def prune_columns(plan: Plan) -> Plan:
    """The plan with unread columns dropped below its root."""
    memo: dict[tuple[int, frozenset[int]], tuple[Plan, Mapping]] = {}

    def prune(node: Plan, demand: frozenset[int]) -> tuple[Plan, Mapping]:
        if not demand and node.arity:
            demand = frozenset({0})  # keep one column: arity 0 is a special case downstream
        key = (id(node), demand)
        if key not in memo:
            memo[key] = _prune(node, demand, prune)
        return memo[key]

    out, mapping = prune(plan, frozenset(range(plan.arity)))
    assert all(mapping[i] == i for i in range(plan.arity)), "the root keeps its layout"
    return out


def _identity(node: Plan) -> Mapping:
    return {i: i for i in range(node.arity)}


def _prune(node: Plan, demand: frozenset[int], prune) -> tuple[Plan, Mapping]:  # type: ignore[no-untyped-def]
    match node:
        case Linear(input=inp, function=fn):
            wanted = sorted(demand)
            everything = wanted == list(range(fn.arity))
            narrowed = (fn if everything else fn.project(wanted)).optimize()
            child, m = prune(inp, narrowed.demand())
            moved = narrowed.permute(m, child.arity)
            return linear(child, moved), {c: i for i, c in enumerate(wanted)}
        case Join(left=left, right=right, kind=kind, on=on):
            la = left.arity
            used = set(demand) | (refs(on) if on is not None else set())
            lp, lm = prune(left, frozenset(c for c in used if c < la))
            rp, rm = prune(right, frozenset(c - la for c in used if c >= la))
            mapping = {c: lm[c] for c in used if c < la} | {
                c: lp.arity + rm[c - la] for c in used if c >= la
            }
            new_on = remap(on, dict(mapping)) if on is not None else None
            return Join(lp, rp, kind, new_on), {c: mapping[c] for c in demand}
        case Reduce(input=inp, group=group, aggregates=aggs, names=names, domain=domain):
            needed = frozenset(group) | frozenset(c for a in aggs for c in refs(a))
            child, m = prune(inp, needed)
            new_domain = prune(domain, frozenset(range(domain.arity)))[0] if domain else None
            moved_aggs = tuple(remap(a, dict(m)) for a in aggs)
            reduced = Reduce(child, tuple(m[g] for g in group), moved_aggs, names, new_domain)
            return reduced, _identity(node)
        case Union(parts=parts):
            wanted = sorted(demand)
            new_parts = []
            for part in parts:
                child, m = prune(part, frozenset(wanted))
                layout = JoinFunction.identity(child.arity).project(m[c] for c in wanted)
                new_parts.append(linear(child, layout))
            return Union(tuple(new_parts)), {c: i for i, c in enumerate(wanted)}
    inputs = tuple(prune(i, frozenset(range(i.arity)))[0] for i in node.inputs)
    return node.with_inputs(inputs), _identity(node)


__all__ = ["prune_columns"]
