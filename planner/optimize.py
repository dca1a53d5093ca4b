"""The optimizer: the passes, in order, run to a fixpoint.

Input: a decorrelated plan (no subquery expressions). Output: the same
relation, with constants folded, predicates as close to the sources as they
may go (equalities across a join's sides in its condition, where they become
keys), only the columns something reads carried through joins and reduces,
and every chain of linear operators fused into one `Linear` node.

`PASSES` is the one ordered tuple of passes; `optimize` repeats it until the
plan stops changing and fails loudly if that takes more than `MAX_ROUNDS`
(passes undoing each other's work).

>>> from dsql.planner.plan import Column, Filter, Get, Project, parse_expr
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

from dsql.errors import DsqlError
from dsql.planner.passes.fold import fold_constants
from dsql.planner.passes.fuse import fuse_linear
from dsql.planner.passes.prune import prune_columns
from dsql.planner.passes.pushdown import push_predicates
from dsql.planner.plan import Plan

Pass = Callable[[Plan], Plan]

#: The passes in the order they run. Fusion comes first so that pushdown and
#: pruning see one `Linear` per chain; it runs again last to merge what they split.
PASSES: tuple[tuple[str, Pass], ...] = (
    ("fold_constants", fold_constants),
    ("fuse_linear", fuse_linear),
    ("push_predicates", push_predicates),
    ("prune_columns", prune_columns),
    ("fuse_linear", fuse_linear),
)

MAX_ROUNDS = 5


class OptimizerError(DsqlError):
    """The passes did not reach a fixpoint (a bug in the optimizer)."""


def optimize(plan: Plan) -> Plan:
    """The plan after the passes, repeated until nothing changes."""
    before = fingerprint(plan)
    for _ in range(MAX_ROUNDS):
        for _name, run in PASSES:
            plan = run(plan)
        after = fingerprint(plan)
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


def fingerprint(plan: Plan) -> str:
    """The plan as EXPLAIN prints it (equal text: equal plans for the fixpoint test)."""
    from dsql.planner.show import tree

    return "\n".join(tree(plan))


__all__ = ["MAX_ROUNDS", "PASSES", "OptimizerError", "optimize", "stages"]
