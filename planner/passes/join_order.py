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

import heapq

from sqlglot import exp

from dsql.planner.expr import as_expression, conjuncts, held_refs, refs, remap
from dsql.planner.plan import Plan, Project
from dsql.planner.stateful import Join


def order_joins(plan: Plan) -> Plan:
    """The plan with every tree of inner joins ordered so joins have conditions."""
    memo: dict[int, Plan] = {}
    # A chain left in its order has its left input visited next, and that input is a
    # prefix of the chain: its flattening is a prefix of the chain's, so it is sliced
    # from it (`_Flat.prefix`) rather than flattened again, level after level.
    known: dict[int, _Flat] = {}

    def visit(node: Plan) -> Plan:
        if id(node) not in memo:
            if _is_inner(node):
                memo[id(node)] = _reorder(node, visit, known)
            else:
                memo[id(node)] = node.with_inputs(tuple(visit(i) for i in node.inputs))
        return memo[id(node)]

    return visit(plan)


def _is_inner(node: Plan) -> bool:
    return isinstance(node, Join) and node.kind == "inner"


class _Flat:
    """A tree of inner joins flattened: its inputs (each with its first column's position
    in the tree's output), its conjuncts over those positions, the inputs each conjunct
    touches, and for each inner join on its left spine (whose columns start at 0) how
    many inputs and conjuncts its own flattening has (a prefix of these)."""

    def __init__(self, node: Plan) -> None:
        self.leaves: list[tuple[Plan, int]] = []
        self.preds: list[exp.Expression] = []
        self.spine: dict[int, tuple[int, int]] = {}
        self._flatten(node, 0)
        owner = {}  # global column -> leaf number
        for n, (leaf, start) in enumerate(self.leaves):
            for i in range(start, start + leaf.arity):
                owner[i] = n
        self.touches = [{owner[i] for i in held_refs(p)} for p in self.preds]

    def _flatten(self, node: Plan, offset: int) -> None:
        if not _is_inner(node):
            self.leaves.append((node, offset))
            return
        assert isinstance(node, Join)
        self._flatten(node.left, offset)
        self._flatten(node.right, offset + node.left.arity)
        if node.on is not None:  # (no copy where nothing moves: the left spine of a chain)
            shifted = (
                node.on if not offset else remap(node.on, {i: i + offset for i in refs(node.on)})
            )
            self.preds.extend(conjuncts(shifted))
        if not offset:
            self.spine[id(node)] = (len(self.leaves), len(self.preds))

    def prefix(self, node: Plan) -> _Flat:
        """The flattening of `node`, an inner join on this tree's left spine."""
        leaves, preds = self.spine[id(node)]
        flat = _Flat.__new__(_Flat)
        flat.leaves, flat.preds = self.leaves[:leaves], self.preds[:preds]
        flat.touches, flat.spine = self.touches[:preds], self.spine
        return flat


def _reorder(node: Plan, visit, known: dict[int, _Flat]) -> Plan:  # type: ignore[no-untyped-def]
    flat = known.pop(id(node), None) or _Flat(node)
    leaves, preds, touches = flat.leaves, flat.preds, flat.touches
    order = _greedy(len(leaves), touches)
    if order == list(range(len(leaves))):
        assert isinstance(node, Join)
        if _is_inner(node.left):
            known[id(node.left)] = flat.prefix(node.left)
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
        condition = as_expression(exp.and_(*on, copy=False)) if on else None
        tree = Join(tree, child, "inner", condition)
    assert tree is not None and not pending
    return Project(tree, tuple(position[i] for i in range(node.arity)))


def _greedy(count: int, touches: list[set[int]]) -> list[int]:
    """Input numbers in join order: each next one the first connected to those taken.

    An input is connected when some conjunct touches it, a taken input, and no other
    untaken one. Taking inputs only shrinks what a conjunct misses, so an input once
    connected stays so until taken: the connected ones wait in a heap, and each take
    updates only the conjuncts touching the input taken (a 64-way join's conjuncts were
    all scanned at every step, for every sub-chain)."""
    missing = [set(t) for t in touches]
    touching: list[list[int]] = [[] for _ in range(count)]
    for k, t in enumerate(touches):
        if len(t) > 1:  # a conjunct of one input connects nothing
            for n in t:
                touching[n].append(k)
    connected: list[int] = []
    taken = [False] * count
    order: list[int] = []
    first_free = 0

    def take(n: int) -> None:
        taken[n] = True
        order.append(n)
        for k in touching[n]:
            left = missing[k]
            left.discard(n)
            if len(left) == 1:
                heapq.heappush(connected, next(iter(left)))

    take(0)
    while len(order) < count:
        while connected and taken[connected[0]]:
            heapq.heappop(connected)
        if connected:
            take(heapq.heappop(connected))
            continue
        while taken[first_free]:
            first_free += 1
        take(first_free)
    return order


__all__ = ["order_joins"]
