"""Rendering top-k: ORDER BY ... LIMIT/OFFSET inside views and subqueries.

A `TopK` plan becomes a reduce keyed by its group columns (a constant key when
there are none) whose logic ranks each group's rows (`runtime.operators.topk`).
It is maintained like any reduce: a change re-ranks only the groups it touches.
"""

from __future__ import annotations

from dsql.planner.stateful import TopK
from dsql.runtime.collection import Collection
from dsql.runtime.operators.topk import OrderKey
from dsql.runtime.operators.topk import TopK as TopKLogic


def render_topk(renderer, plan: TopK) -> Collection:  # type: ignore[no-untyped-def]
    """The rows of `plan.input` ranked within the window, per group."""
    rows = renderer.render(plan.input)
    names = rows.columns
    order = tuple(OrderKey(names[o.column], o.desc, o.nulls_first) for o in plan.order)
    logic = TopKLogic(order, plan.limit, plan.offset)
    ranked = rows.reduce([names[g] for g in plan.group], logic=logic)
    return ranked.project(*names) if ranked.columns != names else ranked
