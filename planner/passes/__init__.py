"""Optimizer passes, one per module, each named after its one public function.

The order they run in is `dsql.planner.optimize.PASSES`. `bottom_up` is the
shared traversal: it rebuilds a plan children first, visiting a node shared by
several parents once, so sharing (e.g. decorrelation's reuse of an input) survives.
"""

from __future__ import annotations

from collections.abc import Callable

from dsql.planner.plan import Plan


def bottom_up(plan: Plan, rewrite: Callable[[Plan], Plan]) -> Plan:
    """`rewrite` applied to every node after its inputs were rewritten."""
    memo: dict[int, Plan] = {}

    def visit(node: Plan) -> Plan:
        key = id(node)
        if key not in memo:
            inputs = tuple(visit(i) for i in node.inputs)
            changed = any(a is not b for a, b in zip(inputs, node.inputs, strict=True))
            memo[key] = rewrite(node.with_inputs(inputs) if changed else node)
        return memo[key]

    return visit(plan)


__all__ = ["bottom_up"]
