"""The optimizer: the passes, in order, run to a fixpoint.

Input: a decorrelated plan (no subquery expressions). Output: the same
relation, with constants folded, predicates as close to the sources as they
may go (equalities across a join's sides in its condition, where they become
keys), only the columns something reads carried through joins and reduces,
and every chain of linear operators fused into one `Linear` node.

`PASSES` is the one ordered tuple of passes; `optimize` repeats it until the
plan stops changing and fails loudly if that takes more than `MAX_ROUNDS`
(passes undoing each other's work).

>>> from dsql.planner.expr import parse_expr
>>> from dsql.planner.plan import Column, Filter, Get, Project
>>> from dsql.planner import types
>>> t = Get("t", (Column("a", types.build("int")), Column("b", types.build("int"))))
>>> print(fingerprint(optimize(Project(Filter(t, (parse_expr("_c1 > 1 AND TRUE"),)), (0,)))))
Linear (arity 2 -> 1)
  | filter #1 > 1
  | project (#0)
  Get t
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from sqlglot import exp

from dsql.errors import DsqlError
from dsql.planner.expr import held_key
from dsql.planner.linear import JoinFunction
from dsql.planner.passes.fold import fold_constants
from dsql.planner.passes.fuse import fuse_linear
from dsql.planner.passes.join_order import order_joins
from dsql.planner.passes.prune import prune_columns
from dsql.planner.passes.pushdown import push_predicates
from dsql.planner.plan import Column, Linear, Plan

Pass = Callable[[Plan], Plan]

#: The passes in the order they run. Fusion comes first so that pushdown and
#: pruning see one `Linear` per chain; it runs again last to merge what they split.
PASSES: tuple[tuple[str, Pass], ...] = (
    ("fold_constants", fold_constants),
    ("fuse_linear", fuse_linear),
    ("push_predicates", push_predicates),
    ("order_joins", order_joins),
    ("prune_columns", prune_columns),
    ("fuse_linear", fuse_linear),
)

MAX_ROUNDS = 5


class OptimizerError(DsqlError):
    """The passes did not reach a fixpoint (a bug in the optimizer)."""


def optimize(plan: Plan) -> Plan:
    """The plan after the passes, repeated until nothing changes."""
    before = shape(plan)
    for _ in range(MAX_ROUNDS):
        for _name, run in PASSES:
            plan = run(plan)
        after = shape(plan)
        if after == before:
            return plan
        before = after
    raise OptimizerError(
        f"the optimizer passes did not converge in {MAX_ROUNDS} rounds",
        hint="report this query: EXPLAIN DECORRELATED PLAN FOR it shows the input",
    )


def stages(plan: Plan) -> list[tuple[str, Plan]]:
    """The plan after each pass of the first round (for EXPLAIN goldens)."""
    out = []
    for name, run in PASSES:
        plan = run(plan)
        out.append((name, plan))
    return out


def shape(plan: Plan) -> tuple:
    """A value equal for equal plans (the fixpoint test): each node's kind and fields,
    expressions as SQL text, then its inputs' shapes; a node shared by several parents
    is described once (`fingerprint` says the same, as EXPLAIN prints it, at more cost)."""
    memo: dict[int, tuple] = {}

    def visit(node: Plan) -> tuple:
        key = id(node)
        if key not in memo:
            memo[key] = (_fields(node), tuple(visit(i) for i in node.inputs))
        return memo[key]

    return visit(plan)


def _fields(node: Plan) -> tuple:
    """The node's own fields (not its inputs), expressions and functions as text."""
    if isinstance(node, Linear):
        return ("Linear", node.function.input_arity, _steps(node.function))
    out: list[object] = [type(node).__name__]
    for f in fields(node):  # type: ignore[arg-type]
        value = getattr(node, f.name)
        if isinstance(value, Plan) or (
            isinstance(value, tuple) and value and isinstance(value[0], Plan)
        ):
            continue  # an input: described by `visit`
        out.append(_text(value))
    return tuple(out)


def _steps(fn: JoinFunction) -> tuple:
    return tuple(
        (type(step).__name__, *(_text(getattr(step, f.name)) for f in fields(step)))
        for step in fn.steps
    )


def _text(value: object) -> object:
    if isinstance(value, exp.Expression):
        return held_key(value)
    if isinstance(value, tuple):
        return tuple(_text(v) for v in value)
    if isinstance(value, Column):
        return (value.name, held_key(value.type), value.nullable)
    return value


def fingerprint(plan: Plan) -> str:
    """The plan as EXPLAIN prints it (equal text: equal plans for the fixpoint test)."""
    from dsql.planner.show import tree

    return "\n".join(tree(plan))


__all__ = ["MAX_ROUNDS", "PASSES", "OptimizerError", "fingerprint", "optimize", "shape", "stages"]
