"""Join ordering: a tree of inner joins is rebuilt so each join has a condition.

SQL's `FROM t1, t2, t3 WHERE ...` binds to joins in FROM order, and pushdown puts each
predicate on the lowest join that sees both its sides. When the FROM order puts two
relations with no predicate between them next to each other, that join is a cross
product, however selective the whole query is (SQLite's select5 joins up to 64 tables
this way: their cross products do not fit in memory).

The pass flattens each maximal tree of inner joins into its inputs (in FROM order) and
its conjuncts, then builds a left-deep tree greedily: starting from the first input, it
joins next the first remaining input that some conjunct connects to those already
joined, and a cross product only when none is connected. Every conjunct sits on the
lowest join that sees all its columns; a projection restores the original column
order. A tree whose order does not change is returned as it was, so the pass is
idempotent and plans that need no reordering keep their shape.

>>> from dsql.planner.expr import parse_expr
>>> from dsql.planner.plan import Column, Get
>>> from dsql.planner.stateful import Join
>>> from dsql.planner import types
>>> from dsql.planner.show import tree
>>> def t(name): return Get(name, (Column("a", types.build("int")),))
>>> p = Join(Join(t("x"), t("y")), t("z"), "inner", parse_expr("_c0 = _c2 AND _c1 = _c2"))
>>> print("\\n".join(tree(order_joins(p))))
Project (#0, #2, #1)
  Join inner on #2 = #1
    Join inner on #0 = #1
      Get x
      Get z
    Get y
"""

from __future__ import annotations

from sqlglot import exp

from dsql.planner.expr import conjuncts, held_refs, refs, remap
from dsql.planner.plan import Plan, Project
from dsql.planner.stateful import Join


def order_joins(plan: Plan) -> Plan:
    """The plan with every tree of inner joins ordered so joins have conditions."""
    memo: dict[int, Plan] = {}

    def visit(node: Plan) -> Plan:
        if id(node) not in memo:
            if _is_inner(node):
                memo[id(node)] = _reorder(node, visit)
            else:
                memo[id(node)] = node.with_inputs(tuple(visit(i) for i in node.inputs))
        return memo[id(node)]

    return visit(plan)


def _is_inner(node: Plan) -> bool:
    return isinstance(node, Join) and node.kind == "inner"


def _flatten(
    node: Plan, offset: int, leaves: list[tuple[Plan, int]], preds: list[exp.Expression]
) -> None:
    """Collect the inputs (with their first column's position) and the conjuncts, the
    conjuncts' columns numbered over the whole tree's output."""
    if not _is_inner(node):
        leaves.append((node, offset))
        return
    assert isinstance(node, Join)
    _flatten(node.left, offset, leaves, preds)
    _flatten(node.right, offset + node.left.arity, leaves, preds)
    if node.on is not None:  # (no copy where nothing moves: the left spine of a chain)
        shifted = node.on if not offset else remap(node.on, {i: i + offset for i in refs(node.on)})
        preds.extend(conjuncts(shifted))


def _reorder(node: Plan, visit) -> Plan:  # type: ignore[no-untyped-def]
    leaves: list[tuple[Plan, int]] = []
    preds: list[exp.Expression] = []
    _flatten(node, 0, leaves, preds)
    owner = {}  # global column -> leaf number
    for n, (leaf, start) in enumerate(leaves):
        for i in range(start, start + leaf.arity):
            owner[i] = n
    touches = [{owner[i] for i in held_refs(p)} for p in preds]
    order = _greedy(len(leaves), touches)
    if order == list(range(len(leaves))):
        return node.with_inputs(tuple(visit(i) for i in node.inputs))
    # Build the left-deep tree in the new order; `position` maps global columns to the
    # columns of the tree built so far.
    position: dict[int, int] = {}
    placed: set[int] = set()
    pending = list(range(len(preds)))
    tree: Plan | None = None
    for n in order:
        leaf, start = leaves[n]
        width = tree.arity if tree is not None else 0
        for i in range(leaf.arity):
            position[start + i] = width + i
        placed.add(n)
        child = visit(leaf)
        if tree is None:
            tree = child
            continue
        ready = [k for k in pending if touches[k] <= placed]
        pending = [k for k in pending if k not in ready]
        on = [remap(preds[k], {i: position[i] for i in refs(preds[k])}) for k in ready]
        tree = Join(tree, child, "inner", exp.and_(*on, copy=False) if on else None)
    assert tree is not None and not pending
    return Project(tree, tuple(position[i] for i in range(node.arity)))


def _greedy(count: int, touches: list[set[int]]) -> list[int]:
    """Input numbers in join order: each next one the first connected to those taken."""
    order = [0]
    taken = {0}
    while len(order) < count:
        # An input is connected when some predicate touches it, a taken input, and no
        # other: the predicate's one untaken input.
        connected = []
        for t in touches:
            missing = t - taken
            if len(missing) == 1 and len(missing) < len(t):
                connected.extend(missing)
        nxt = min(connected) if connected else min(n for n in range(count) if n not in taken)
        order.append(nxt)
        taken.add(nxt)
    return order


__all__ = ["order_joins"]
