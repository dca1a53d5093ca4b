"""Constant folding: sub-expressions without columns are evaluated at planning time.

sqlglot's `simplify` evaluates a constant sub-expression built only from
literals, NULL, comparisons, boolean connectives, IS [NOT] NULL and integer
+ - *; its result is kept only if it is a literal (and an integer within
32-bit range, so an overflow still errors at run time). Boolean identities
that hold in SQL's three-valued logic are applied around columns:
`TRUE AND x = x`, `FALSE AND x = FALSE`, `TRUE OR x = TRUE`, `FALSE OR x = x`
(NULL absorbs nothing: `NULL AND x` is kept). sqlglot's other rewrites are not
used: some are wrong for NULLs (e.g. `x = x` is NULL, not TRUE, when x is NULL).
A filter predicate folded to TRUE is dropped.

>>> from dsql.planner.expr import parse_expr
>>> fold(parse_expr("_c0 > 1 + 2 AND (TRUE OR _c1 = 3)")).sql()
'_c0 > 3'
>>> fold(parse_expr("NULL AND _c0 > 1")).sql()
'NULL AND _c0 > 1'
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp
from sqlglot.optimizer.simplify import simplify

from dsql.planner.passes import bottom_up
from dsql.planner.plan import Filter, FlatMap, Map, Plan
from dsql.planner.stateful import Join, Reduce

#: Node types a constant sub-expression may be built from to be evaluated.
_FOLDABLE = (
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Paren,
    exp.Not,
    exp.And,
    exp.Or,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.Is,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Neg,
)
_INT32 = 2**31


def fold_constants(plan: Plan) -> Plan:
    """The plan with constant sub-expressions of maps, filters and joins evaluated."""
    return bottom_up(plan, _fold_node)


def _fold_node(node: Plan) -> Plan:
    # A node nothing folds in is kept as it is (its derived facts, types above all, stay).
    match node:
        case Filter(predicates=preds):
            kept = tuple(p for p in (fold(p) for p in preds) if not _is_true(p))
            return node if _same(kept, preds) else replace(node, predicates=kept)
        case Map(exprs=exprs):
            folded_exprs = tuple(fold(e) for e in exprs)
            return node if _same(folded_exprs, exprs) else replace(node, exprs=folded_exprs)
        case Join(on=on) if on is not None:
            folded = fold(on)
            if folded is on:
                return node
            return replace(node, on=None if _is_true(folded) else folded)
        case FlatMap() | Reduce():
            return node
    return node


def _same(a: tuple[exp.Expression, ...], b: tuple[exp.Expression, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def fold(e: exp.Expression) -> exp.Expression:
    """`e` with constant sub-expressions evaluated and 3VL-safe boolean identities applied
    (`e` itself when nothing folds)."""
    if not _folds(e):
        return e
    root = e.copy()
    changed = False
    for node in reversed(list(root.walk(bfs=False))):  # children before parents
        folded = _fold_one(node)  # type: ignore[arg-type]
        if folded is not node:
            changed = True
            if node is root:
                root = folded
            else:
                node.replace(folded)
    return root if changed else e


def _folds(e: exp.Expression) -> bool:
    """Whether some node of `e` folds (one walk, children first, without copying)."""
    constant: dict[int, bool] = {}
    for node in reversed(list(e.walk(bfs=False))):
        children = [c for c in node.iter_expressions()]
        const = isinstance(node, _FOLDABLE) and all(constant[id(c)] for c in children)
        constant[id(node)] = const
        if isinstance(node, exp.And | exp.Or):
            if any(isinstance(_unparen(x), exp.Boolean) for x in (node.this, node.expression)):
                return True
        elif isinstance(node, exp.Paren) and isinstance(node.this, exp.Boolean | exp.Null):
            return True
        elif const and not isinstance(node, exp.Literal | exp.Boolean | exp.Null):
            return True
    return False


def _fold_one(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.And | exp.Or):
        return _connective(node)
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.Boolean | exp.Null):
        return node.this
    if _constant(node) and not isinstance(node, exp.Literal | exp.Boolean | exp.Null):
        value = simplify(node.copy())
        if isinstance(value, exp.Boolean | exp.Null) or _small_literal(value):
            return value
    return node


def _connective(node: exp.And | exp.Or) -> exp.Expression:
    a, b = _unparen(node.this), _unparen(node.expression)
    absorbing, neutral = (False, True) if isinstance(node, exp.And) else (True, False)
    for x, other in ((a, b), (b, a)):
        if isinstance(x, exp.Boolean) and x.this is absorbing:
            return exp.Boolean(this=absorbing)
        if isinstance(x, exp.Boolean) and x.this is neutral:
            return other
    return node


def _unparen(e: exp.Expression) -> exp.Expression:
    return e.this if isinstance(e, exp.Paren) and isinstance(e.this, exp.Boolean) else e


def _constant(node: exp.Expression) -> bool:
    return all(isinstance(n, _FOLDABLE) for n in node.walk())


def _small_literal(value: exp.Expression) -> bool:
    if isinstance(value, exp.Neg):
        value = value.this
    if not isinstance(value, exp.Literal):
        return False
    if value.is_string:
        return True
    return value.is_int and abs(int(value.this)) < _INT32


def _is_true(p: exp.Expression) -> bool:
    return isinstance(p, exp.Boolean) and p.this is True


__all__ = ["fold", "fold_constants"]
