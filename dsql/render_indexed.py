"""Rendering over indexes: joins, reductions and DISTINCT that read an index's trace.

An index (`dsql.indexes`) arranges a relation by key columns. Where a join, a reduce or
a distinct needs a relation (or a projection of it) arranged by exactly the columns of
an index, the renderer imports the index's arrangement instead of arranging its input
again; otherwise these functions return None and the ordinary rendering applies.

- join: the indexed side is the join's arranged left input; the other side is arranged
  by its key expressions (in the index's key order), its columns renamed `__o{i}` so
  they cannot clash with the index's `_c{j}`; a final projection restores the plan's
  layout `_c0 .. _c{la + ra - 1}` (it fuses with whatever linear step follows).
- reduce: grouping columns that are an index's keys reduce the index's arrangement;
  aggregates are rewritten over the relation's columns.
- distinct: an index whose keys are every column of the relation.

Invariant: the collections returned have the columns the ordinary rendering gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dsql.planner.expr import col, index, remap
from dsql.planner.plan import Get, Linear, Plan, Project
from dsql.planner.stateful import Distinct, Join, Reduce
from dsql.runtime.collection import Arrangement, Collection
from dsql.runtime.operators.reduce_logic import Aggregates
from dsql.runtime.operators.reduce_logic import Distinct as DistinctLogic

if TYPE_CHECKING:
    from dsql.render import Renderer

#: An index found for a plan: the imported arrangement, its keys as plan columns (in
#: the index's order), and for each plan column the relation column it copies.
Found = tuple[Arrangement, tuple[int, ...], tuple[int, ...]]


def relation_columns(plan: Plan) -> tuple[str, tuple[int, ...]] | None:
    """The relation `plan` reads and, per output column, the relation column it copies;
    None unless the plan is a relation or a projection of one (no filter, no map)."""
    match plan:
        case Get(name=name):
            return name, tuple(range(plan.arity))
        case Project(input=Get(name=name), outputs=outputs):
            return name, outputs
        case Linear(input=Get(name=name), function=fn) if len(fn.segments()) == 1:
            ((segment, table),) = fn.segments()
            copied = tuple(m for m in segment.meta if isinstance(m, int))
            plain = len(copied) == len(segment.meta)
            if table is None and plain and not (segment.predicates or segment.negated):
                return name, copied
    return None


def find_index(renderer: Renderer, plan: Plan, keys: Sequence[int]) -> Found | None:
    """An index arranging `plan`'s rows by exactly the plan columns `keys` (see `Found`)."""
    if renderer.indexed is None:
        return None
    found = relation_columns(plan)
    if found is None:
        return None
    name, mapping = found
    by_relation = {mapping[k]: k for k in keys}
    if len(by_relation) != len(keys):
        return None
    hit = renderer.indexed(name, tuple(by_relation))
    if hit is None:
        return None
    arrangement, order = hit
    return arrangement, tuple(by_relation[r] for r in order), mapping


def indexed_join(
    renderer: Renderer, plan: Join, keys: list[tuple[exp.Expression, exp.Expression, bool]]
) -> Collection | None:
    """The equi-join of `plan`'s inputs over an index of one side, or None.

    `keys` are (left expression, right expression, null-safe) over the join's columns.
    """
    la, ra = plan.left.arity, plan.right.arity
    if not keys:
        return None
    right = [(b, a, safe) for a, b, safe in keys]
    for indexed_left, side, other, pairs in ((True, plan.left, plan.right, keys),
                                             (False, plan.right, plan.left, right)):  # fmt: skip
        offset = 0 if indexed_left else la
        # The indexed side's key columns (its own positions) with the other side's keys.
        by_position: dict[int, tuple[exp.Expression, bool]] = {}
        for mine, theirs, safe in pairs:
            at = index(mine) if isinstance(mine, exp.Column) else None
            if at is None:
                break
            by_position[at - offset] = (theirs, safe)
        if len(by_position) != len(pairs):
            continue
        found = find_index(renderer, side, list(by_position))
        if found is None:
            continue
        arrangement, order, mapping = found
        shift: dict[int, int | exp.Expression] = (
            {j: j - la for j in range(la, la + ra)} if indexed_left else {}
        )
        other_keys = [(remap(by_position[p][0], shift), by_position[p][1]) for p in order]
        core = _join_index(renderer.render(other), arrangement, other_keys)
        n_other = other.arity
        own = [exp.alias_(col(m), f"_c{i + offset}") for i, m in enumerate(mapping)]
        rest = [
            exp.alias_(exp.column(f"__o{j}"), f"_c{j + (la if indexed_left else 0)}")
            for j in range(n_other)
        ]
        return core.map(*(own + rest if indexed_left else rest + own))
    return None


def _join_index(
    other: Collection, index: Arrangement, keys: list[tuple[exp.Expression, bool]]
) -> Collection:
    """`index` joined with `other` by `other`'s key expressions (index key order); the
    output has the index's columns, then `other`'s as `__o{j}`. A key compared with SQL
    equality (not null-safe) never matches NULL: `other`'s NULL keys are dropped."""
    names = [f"__k{i}" for i in range(len(keys))]
    keyed = other.map(
        *(exp.alias_(e.copy(), n) for (e, _), n in zip(keys, names, strict=True)),
        *(exp.alias_(col(j), f"__o{j}") for j in range(len(other.columns))),
    )
    strict = [
        exp.Not(this=exp.Is(this=exp.column(n), expression=exp.Null()))
        for (_, safe), n in zip(keys, names, strict=True)
        if not safe
    ]
    if strict:
        keyed = keyed.filter(exp.and_(*strict))
    return index.join_core(keyed.arrange_by_key(*names))


def indexed_reduce(
    renderer: Renderer, plan: Reduce, aggregates: Sequence[tuple[str, exp.Expression]]
) -> Collection | None:
    """`plan`'s groups and aggregates (`__a{i}` named) over an index of its input whose
    keys are the grouping columns, as `_c0 ..` (keys, then aggregates); or None."""
    if not plan.group:
        return None
    found = find_index(renderer, plan.input, tuple(dict.fromkeys(plan.group)))
    if found is None:
        return None
    arrangement, _, mapping = found
    moved: dict[int, int | exp.Expression] = dict(enumerate(mapping))
    logic = Aggregates(tuple((n, remap(a, moved)) for n, a in aggregates))
    reduced = arrangement.reduce(logic).as_collection()
    g = len(plan.group)
    return reduced.map(
        *(exp.alias_(col(mapping[k]), f"_c{i}") for i, k in enumerate(plan.group)),
        *(exp.alias_(exp.column(n), f"_c{g + i}") for i, (n, _) in enumerate(aggregates)),
    )


def indexed_distinct(renderer: Renderer, plan: Distinct) -> Collection | None:
    """`plan`'s distinct rows from an index keyed by every column of its input; or None."""
    found = find_index(renderer, plan.input, tuple(range(plan.input.arity)))
    if found is None or found[0].node.values:
        return None
    arrangement, _, mapping = found
    distinct = arrangement.reduce(DistinctLogic()).as_collection()
    if mapping == tuple(range(len(mapping))):
        return distinct
    return distinct.map(*(exp.alias_(col(m), f"_c{i}") for i, m in enumerate(mapping)))


__all__: list[Any] = ["find_index", "indexed_distinct", "indexed_join", "indexed_reduce"]
