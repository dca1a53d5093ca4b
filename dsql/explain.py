"""EXPLAIN: a plan at one stage, as text.

Stages: `raw` (as bound, subqueries still in expressions), `decorrelated`
(subqueries turned into joins), `optimized` (after the optimizer's passes:
fused `Linear` operators shown with their steps and time bounds) and
`physical` (the runtime operators the optimized plan renders to). The logical
stages print as indented trees with `#n` column references (`planner/show.py`).
"""

from __future__ import annotations

from typing import Any

from dsql.errors import UnsupportedError
from dsql.planner.decorrelate import decorrelate
from dsql.planner.expr import show_expr
from dsql.planner.optimize import optimize
from dsql.planner.plan import Plan
from dsql.planner.show import tree

#: Expressions as EXPLAIN prints them (kept under its old name for callers).
render_expr = show_expr


def stage_text(plan: Plan, stage: str) -> str:
    """A logical plan at `raw`, `decorrelated` or `optimized`."""
    if stage == "raw":
        return "\n".join(tree(plan))
    if stage == "decorrelated":
        return "\n".join(tree(decorrelate(plan)))
    if stage == "optimized":
        return "\n".join(tree(optimize(decorrelate(plan))))
    raise UnsupportedError(f"unknown EXPLAIN stage {stage!r}")


def physical_tree(root: Any, fresh: set[int], kernel: Any = None) -> list[str]:
    """Runtime nodes from `root` down, children indented; a node seen before is `^n`.

    Nodes not in `fresh` (shared arrangements of other views) are shown without
    their inputs. Under automatic placement, once Spark has started, an arrangement
    that holds data says where it lives (`[local]`, `[spark]`; `kernel`: the worker's).
    """
    numbers: dict[int, int] = {}
    lines: list[str] = []

    def visit(node: Any, depth: int) -> None:
        pad = "  " * depth
        if id(node) in numbers:
            lines.append(f"{pad}^{numbers[id(node)]}")
            return
        numbers[id(node)] = len(numbers)
        where = _placement(kernel, node)
        note = f"  [{where}]" if where else ""
        lines.append(f"{pad}{numbers[id(node)]}: {node.describe()}{note}")
        if id(node) in fresh:
            for child in node.inputs:
                visit(child, depth + 1)

    visit(root, 0)
    return lines


def placement(kernel: Any, trace: Any) -> str:
    """Where an arrangement lives: "spark" if any batch of its trace does, else "local"."""
    places = {kernel.placement(frame) for frame in trace.frames()} or {kernel.placement()}
    return "spark" if "spark" in places else "local"


def _placement(kernel: Any, node: Any) -> str | None:
    """Where an arrangement's data lives, when placement is automatic and Spark runs."""
    if kernel is None or kernel.name != "auto" or not getattr(kernel, "started", False):
        return None
    try:
        trace = node.trace
    except (AttributeError, NotImplementedError):  # not an arrangement
        return None
    return placement(kernel, trace) if trace.frames() else None


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
    if stage == "physical":
        start = len(session.worker.nodes)
        try:
            root = session._render(plan).node
            fresh = {id(n) for n in session.worker.nodes[start:]}
            return "\n".join(physical_tree(root, fresh, session.worker.kernel))
        finally:
            session.worker.drop(session.worker.nodes[start:])
    return stage_text(plan, stage)


__all__ = ["explain", "physical_tree", "placement", "render_expr", "stage_text", "tree"]
