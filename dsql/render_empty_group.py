"""SQL's empty-group rule by a sentinel row: one reduce instead of a reduce and an antijoin.

A global aggregate has one row even over no input, and a decorrelated reduce has
one row per key of its domain even where the key has no input rows. Instead of
adding the missing rows afterwards (the domain minus the keys present, as an
antijoin), the reduce reads its input plus one *sentinel* row per domain key (one
for a global aggregate): the key columns, NULL in every other column, and a flag
column `_empty` that is TRUE only there. Every aggregate argument is guarded by
the flag (`CASE WHEN NOT _empty THEN arg END`, `count(*)` counts only unflagged
rows), so the sentinel adds nothing to a group with rows and leaves an empty
group with what the aggregate gives over no rows: 0 for `count`, NULL otherwise.

Applies only where that holds exactly: every aggregate ignores NULL arguments
(count, sum, avg, min, max, bool_and, bool_or), and the domain is a set (a
`Distinct`), so each missing key gets one row, as the antijoin gives it.

>>> from dsql.planner.expr import parse_expr
>>> guard(parse_expr("count(*)")).sql()
'COUNT(CASE WHEN NOT _empty THEN 1 END)'
>>> guard(parse_expr("sum(DISTINCT _c1)")).sql()
'SUM(DISTINCT CASE WHEN NOT _empty THEN _c1 END)'
>>> guard(parse_expr("array_agg(_c1)")) is None
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from dsql.planner import types
from dsql.planner.stateful import Distinct, Reduce
from dsql.runtime.collection import Collection
from dsql.runtime.operators.reduce_logic import Aggregates

if TYPE_CHECKING:
    from dsql.render import Renderer

#: The flag column: TRUE on sentinel rows only.
FLAG = "_empty"

#: Aggregates whose value over only NULL arguments is their value over no rows.
_IGNORE_NULLS = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.LogicalAnd, exp.LogicalOr)


def sentinel_reduce(
    renderer: Renderer, plan: Reduce, c: Collection, named: Sequence[tuple[str, exp.Expression]]
) -> Collection | None:
    """The reduce of `c` (the rendered input) with the empty-group rule, by sentinel rows,
    as `__a{i}`-named aggregates after the group columns; None where it does not apply."""
    g = len(plan.group)
    if len(set(plan.group)) != g or (g == 0) != (plan.domain is None):
        return None
    if plan.domain is not None and not isinstance(plan.domain, Distinct):
        return None
    guarded = [(n, guard(a)) for n, a in named]
    if any(a is None for _, a in guarded):
        return None
    have = c.schema
    keys = renderer.render(plan.domain) if plan.domain is not None else renderer.unit()
    if any(keys.schema.field(j).type != have.field(k).type for j, k in enumerate(plan.group)):
        return None  # the antijoin would compare the keys as they are: keep it
    position = {k: j for j, k in enumerate(plan.group)}
    sentinel = keys.map(
        *(
            exp.alias_(
                exp.column(f"_c{position[i]}")
                if i in position
                else _typed_null(have.field(i).type),
                name,
            )
            for i, name in enumerate(c.columns)
        ),
        exp.alias_(exp.true(), FLAG),
    )
    flagged = c.map(*c.columns, exp.alias_(exp.false(), FLAG))
    key_cols = [f"_c{i}" for i in plan.group]
    logic = Aggregates(tuple((n, a) for n, a in guarded if a is not None))
    reduced = flagged.concat(sentinel).reduce(key_cols, logic=logic)
    return reduced.map(
        *(exp.alias_(exp.column(k), f"_c{i}") for i, k in enumerate(key_cols)),
        *(exp.alias_(exp.column(n), f"_c{g + i}") for i, (n, _) in enumerate(named)),
    )


def guard(call: exp.Expression) -> exp.Expression | None:
    """The aggregate call with its argument NULL on sentinel rows; None if it cannot be."""
    if not isinstance(call, _IGNORE_NULLS):
        return None
    if any(value for key, value in call.args.items() if key not in ("this", "big_int")):
        return None  # more arguments than one
    live = exp.Not(this=exp.column(FLAG))
    out = call.copy()
    arg = out.this
    if arg is None or isinstance(arg, exp.Star):
        if not isinstance(out, exp.Count):
            return None
        out.set("this", exp.Case(ifs=[exp.If(this=live, true=exp.Literal.number(1))]))
    elif isinstance(arg, exp.Distinct):
        if len(arg.expressions) != 1:
            return None
        inner = arg.expressions[0]
        arg.set("expressions", [exp.Case(ifs=[exp.If(this=live, true=inner.copy())])])
    else:
        out.set("this", exp.Case(ifs=[exp.If(this=live, true=arg.copy())]))
    return out


def _typed_null(t: pa.DataType) -> exp.Expression:
    return exp.Null() if pa.types.is_null(t) else exp.Cast(this=exp.Null(), to=types.from_arrow(t))


__all__ = ["FLAG", "guard", "sentinel_reduce"]
