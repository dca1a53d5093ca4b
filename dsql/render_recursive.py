"""Rendering recursion: a `LetRec` becomes a runtime loop with one variable per binding.

Each binding is a `Variable` of a new scope (times `(outer, round)`), set to its
value rendered inside the scope, where catalog relations and enclosing bindings
enter the loop. The body reads the bindings' fixpoints (`leave`). The loop's
round limit and what happens there (error or return) come from the plan.
"""

from __future__ import annotations

import pyarrow as pa

from dsql.errors import TypeMismatchError
from dsql.planner import types
from dsql.planner.stateful import LetRec
from dsql.runtime.collection import Collection

_LIMIT_HINT = (
    "make the recursion converge (UNION instead of UNION ALL, or a bound on the depth), "
    "or use WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT n) to keep the values "
    "after n iterations"
)


def render_letrec(renderer, plan: LetRec) -> Collection:  # type: ignore[no-untyped-def]
    """The body of `plan` over the fixpoint of its bindings."""
    from dsql.render import Renderer, cast_columns

    unit = renderer.unit()
    # A LetRec rendered inside another loop (a recursive CTE read by a recursive CTE's
    # step) is a loop nested in that one, so the outer loop's collections can enter it.
    parent = unit.node.scope
    make_scope = parent.scope if parent is not None else unit.worker.scope
    loop = make_scope(name=", ".join(plan.names), limit=plan.limit, on_limit=plan.on_limit)
    loop.hint = _LIMIT_HINT
    with loop:
        variables = {}
        for name, value in zip(plan.names, plan.values, strict=True):
            variables[name] = loop.variable(_schema(name, value.columns))
        inner = Renderer(
            source=lambda n: renderer.source(n).enter(loop),
            unit=lambda: renderer.unit().enter(loop),
            time_scale=renderer.time_scale,
            locals={**{k: v.enter(loop) for k, v in renderer.locals.items()}, **variables},
        )
        for name, value in zip(plan.names, plan.values, strict=True):
            variable = variables[name]
            variable.set(cast_columns(inner.render(value), variable.schema.types))
    left = {name: v.leave() for name, v in variables.items()}
    outer = Renderer(
        source=renderer.source,
        unit=renderer.unit,
        time_scale=renderer.time_scale,
        locals={**renderer.locals, **left},
    )
    return outer.render(plan.body)


def _schema(name: str, columns) -> pa.Schema:  # type: ignore[no-untyped-def]
    fields = []
    for i, c in enumerate(columns):
        if types.is_unknown(c.type):
            raise TypeMismatchError(
                f"the type of column '{c.name}' of recursive query '{name}' is unknown",
                hint="cast it in the base case, e.g. SELECT CAST(NULL AS int)",
            )
        fields.append((f"_c{i}", types.to_arrow(c.type)))
    return pa.schema(fields)
