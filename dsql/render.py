"""Rendering: a decorrelated logical plan becomes runtime collections.

Every collection a plan node renders to has the columns `_c0 .. _c{n-1}` (the
plan's positions), so plan expressions run unchanged. SQL meaning the runtime
does not give by itself is added here:

- equi-join keys use SQL equality: rows with a NULL key never match (the
  runtime's keys match NULL to NULL, which decorrelation's NULL-safe keys want);
- outer joins are the inner join plus the unmatched rows padded with NULLs
  (unmatched = rows minus the rows that matched, so retractions stay exact);
- a global aggregate has one row even over no input (SQL's empty-group rule);
- a fused `Linear` (and any linear node left unfused) is one runtime
  `join_function` per stretch (`render_linear`); over an inner join it is
  evaluated in the join's output projection, together with the residual
  condition; `mz_now()` bounds become the branch times;
- a join, reduce or distinct that needs a relation arranged by exactly an
  index's keys reads the index (`render_indexed`, through `indexed`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dsql.errors import UnsupportedError
from dsql.planner import types
from dsql.planner.expr import col, conjuncts, held_col, refs, remap
from dsql.planner.linear import JoinFunction
from dsql.planner.passes.fuse import as_function
from dsql.planner.plan import (
    Constant,
    Filter,
    FlatMap,
    Get,
    Linear,
    LocalGet,
    Map,
    Negate,
    Plan,
    Project,
    Union,
)
from dsql.planner.stateful import Distinct, Join, LetRec, Reduce, Threshold, TopK
from dsql.render_empty_group import sentinel_reduce
from dsql.render_indexed import indexed_distinct, indexed_join, indexed_reduce
from dsql.render_linear import names, render_linear
from dsql.runtime.collection import Collection
from dsql.runtime.operators.reduce_logic import Aggregates

Source = Callable[[str], Collection]
#: `indexed(relation, keys)`: an import of an index on the relation by exactly the
#: columns `keys` (any order) and the index's key order, or None (`render_indexed`).
Indexed = Callable[[str, tuple[int, ...]], tuple[Any, tuple[int, ...]] | None]


@dataclass
class Renderer:
    """Renders plans into one worker; `source(name)` gives a catalog relation's collection."""

    source: Source
    unit: Callable[[], Collection]
    time_scale: int = 1
    indexed: Indexed | None = None
    locals: dict[str, Collection] = field(default_factory=dict)
    _memo: dict[int, Collection] = field(default_factory=dict)
    _cores: dict[int, tuple[Collection, list[exp.Expression]]] = field(default_factory=dict)

    def render(self, plan: Plan) -> Collection:
        key = id(plan)
        if key not in self._memo:
            self._memo[key] = self._render(plan)
        return self._memo[key]

    def _render(self, plan: Plan) -> Collection:
        match plan:
            case Get(name=name):
                return self.source(name)
            case LocalGet(name=name):
                return self.locals[name]
            case Constant(rows=rows):
                return self._constant(plan, rows)
            case Map() | Filter() | Project() | FlatMap() | Negate() | Linear():
                return self._linear(plan)
            case Join():
                return self._join(plan)
            case Reduce():
                return self._reduce(plan)
            case Distinct(input=inp):
                return indexed_distinct(self, plan) or self.render(inp).distinct()
            case Union(parts=parts):
                # A relation of no columns is carried as one constant column, kept as is.
                want = [_arrow(c.type) for c in plan.columns] if plan.arity else [None]
                first, *rest = [cast_columns(self.render(p), want) for p in parts]
                return first.concat(*rest)
            case Negate(input=inp):
                return self.render(inp).negate()
            case Threshold(input=inp):
                return self.render(inp).threshold(
                    "CASE WHEN __count__ > 0 THEN __count__ ELSE 0 END"
                )
            case TopK():
                from dsql.render_topk import render_topk

                return render_topk(self, plan)
            case LetRec():
                from dsql.render_recursive import render_letrec

                return render_letrec(self, plan)
        raise UnsupportedError(f"cannot render {type(plan).__name__}")

    # --- pieces ------------------------------------------------------------------------
    def _constant(self, plan: Plan, rows: tuple[tuple[exp.Expression, ...], ...]) -> Collection:
        unit = self.unit()
        if not rows:
            empty = unit.filter("FALSE")
            nulls = (exp.alias_(_typed_null(c.type), f"_c{i}") for i, c in enumerate(plan.columns))
            return empty.map(*nulls) if plan.arity else empty
        if plan.arity == 0:
            # A relation with no columns is carried as one constant column `_c0`.
            return unit if len(rows) == 1 else unit.explode(exp.Literal.number(len(rows)))
        branches = [
            {
                "columns": [
                    exp.alias_(_cast(v, c.type), f"_c{i}")
                    for i, (v, c) in enumerate(zip(row, plan.columns, strict=False))
                ]
            }
            for row in rows
        ]
        return unit.join_function(branches)

    def _linear(self, plan: Plan) -> Collection:
        fn = as_function(plan)
        assert fn is not None
        inp = plan.inputs[0]
        if isinstance(inp, Join) and inp.kind == "inner":
            core, residual = self._join_core(inp)
            fn = JoinFunction.identity(inp.arity).filter(residual).compose(fn)
            return render_linear(core, fn.optimize(), self.time_scale)
        return render_linear(self.render(inp), fn.optimize(), self.time_scale)

    def _join_core(self, plan: Join) -> tuple[Collection, list[exp.Expression]]:
        """The equi-join of the inputs (key columns first) and the residual condition."""
        if id(plan) not in self._cores:
            self._cores[id(plan)] = self._equijoin(plan)
        return self._cores[id(plan)]

    def _join(self, plan: Join) -> Collection:
        core, residual = self._join_core(plan)
        la, ra = plan.left.arity, plan.right.arity
        fn = JoinFunction.identity(la + ra).filter(residual)
        inner = render_linear(core, fn, self.time_scale)
        if plan.kind == "inner":
            return inner
        left, right = self.render(plan.left), self.render(plan.right)
        parts = [inner]
        if plan.kind in ("left", "full"):
            # A left side of no columns is carried as one constant `_c0` (see `_constant`).
            matched = inner.project(*names(la)) if la else inner.map("0 AS _c0")
            unmatched = left.antijoin(matched, on=names(la) or ["_c0"])
            parts.append(
                unmatched.map(
                    *names(la),
                    *(
                        exp.alias_(_typed_null_arrow(right.schema.field(j).type), f"_c{la + j}")
                        for j in range(ra)
                    ),
                )
            )
        if plan.kind in ("right", "full"):
            matched = inner.map(*(exp.alias_(col(la + j), f"_c{j}") for j in range(ra)))
            unmatched = right.antijoin(matched, on=names(ra))
            parts.append(
                unmatched.map(
                    *(
                        exp.alias_(_typed_null_arrow(left.schema.field(i).type), f"_c{i}")
                        for i in range(la)
                    ),
                    *(exp.alias_(col(j), f"_c{la + j}") for j in range(ra)),
                )
            )
        first, *rest = parts
        return first.concat(*(cast_columns(p, first.schema.types) for p in rest))

    def _equijoin(self, plan: Join) -> tuple[Collection, list[exp.Expression]]:
        la, ra = plan.left.arity, plan.right.arity
        keys, residual = _equi_keys(plan.on, la, ra)
        shared = indexed_join(self, plan, keys)
        if shared is not None:
            return shared, residual
        left, right = self.render(plan.left), self.render(plan.right)
        # Outputs are `(name, expression)` pairs handed over as they are: the join
        # condition's `k` is held by the plan, which never changes it, and `remap` copies.
        lk = [(f"__k{i}", k) for i, (k, _, _) in enumerate(keys)] or [
            ("__k0", exp.Literal.number(0))
        ]
        rk = [
            (f"__k{i}", remap(k2, {j: j - la for j in refs(k2)}))
            for i, (_, k2, _) in enumerate(keys)
        ] or [("__k0", exp.Literal.number(0))]
        # A strict key is NULL-free on both sides: the same step keys the rows and drops
        # those whose key is NULL (a condition over the input's own columns).
        strict = [i for i, (_, _, null_safe) in enumerate(keys) if not null_safe]

        def keyed(c: Collection, named: list[tuple[str, exp.Expression]]) -> Collection:
            where = [
                exp.Not(this=exp.Is(this=named[i][1].copy(), expression=exp.Null())) for i in strict
            ]
            return c.join_function(
                [{"columns": named, "where": exp.and_(*where, copy=False) if where else None}]
            )

        # The runtime never changes a join_function's outputs: the references are shared.
        lkeyed = keyed(left, [*lk, *((f"_c{i}", held_col(i)) for i in range(la))])
        rkeyed = keyed(right, [*rk, *((f"_c{la + j}", held_col(j)) for j in range(ra))])
        key_names = [f"__k{i}" for i in range(max(len(keys), 1))]
        return lkeyed.join(rkeyed, on=key_names), residual

    def _reduce(self, plan: Reduce) -> Collection:
        g = len(plan.group)
        key_cols = [f"_c{i}" for i in plan.group]
        named = tuple((f"__a{i}", _agg(a)) for i, a in enumerate(plan.aggregates))
        out = indexed_reduce(self, plan, named)
        if out is not None and plan.domain is None:
            return out
        c = self.render(plan.input)
        if out is None:
            by_sentinel = sentinel_reduce(self, plan, c, named)
            if by_sentinel is not None:
                return by_sentinel
            reduced = c.reduce(list(dict.fromkeys(key_cols)), logic=Aggregates(named))
            out = reduced.map(
                *(exp.alias_(exp.column(k), f"_c{i}") for i, k in enumerate(key_cols)),
                *(exp.alias_(exp.column(n), f"_c{g + i}") for i, (n, _) in enumerate(named)),
            )
        if g and plan.domain is None:
            return out
        # SQL's empty-group rule: a row for each domain key with no input rows.
        if g:
            assert plan.domain is not None  # a grouped reduce without one returned above
            domain = self.render(plan.domain).map(*(exp.alias_(col(i), f"_c{i}") for i in range(g)))
            present = c.map(*(exp.alias_(exp.column(k), f"_c{i}") for i, k in enumerate(key_cols)))
            missing = domain.antijoin(present, on=names(g))
        else:
            present = c.map("0 AS _c0")
            missing = self.unit().antijoin(present, on=["_c0"])
        defaults = missing.map(
            *names(g),
            *(
                exp.alias_(_empty_value(a, out.schema.field(g + i).type), f"_c{g + i}")
                for i, a in enumerate(plan.aggregates)
            ),
        )
        return out.concat(cast_columns(defaults, out.schema.types))


def cast_columns(c: Collection, want: list[pa.DataType | None]) -> Collection:
    """`c` with column i cast to `want[i]` where it differs (None: keep it as it is)."""
    have = c.schema.types
    if all(w is None or h == w for h, w in zip(have, want, strict=True)):
        return c
    return c.map(
        *(
            exp.alias_(
                col(i) if w is None or h == w else exp.Cast(this=col(i), to=types.from_arrow(w)),
                f"_c{i}",
            )
            for i, (h, w) in enumerate(zip(have, want, strict=True))
        )
    )


def _equi_keys(
    on: exp.Expression | None, la: int, ra: int
) -> tuple[list[tuple[exp.Expression, exp.Expression, bool]], list[exp.Expression]]:
    """Split a join condition into (left expr, right expr, null-safe) keys and the rest."""
    if on is None:
        return [], []
    keys = []
    rest = []
    for p in conjuncts(on):
        if isinstance(p, exp.EQ | exp.NullSafeEQ):
            a, b = p.this, p.expression
            ra_, rb_ = refs(a), refs(b)
            if ra_ and rb_:
                if max(ra_) < la and min(rb_) >= la:
                    keys.append((a, b, isinstance(p, exp.NullSafeEQ)))
                    continue
                if max(rb_) < la and min(ra_) >= la:
                    keys.append((b, a, isinstance(p, exp.NullSafeEQ)))
                    continue
        rest.append(p)
    return keys, rest


def _agg(a: exp.Expression) -> exp.Expression:
    """An aggregate call with its FILTER clause folded into the argument."""
    if isinstance(a, exp.Filter):
        cond = a.expression.this
        call = a.this.copy()
        arg = call.this
        if isinstance(call, exp.Count) and (arg is None or isinstance(arg, exp.Star)):
            call.set("this", exp.Case(ifs=[exp.If(this=cond.copy(), true=exp.Literal.number(1))]))
        elif isinstance(arg, exp.Distinct):
            inner = arg.expressions[0]
            arg.set("expressions", [exp.Case(ifs=[exp.If(this=cond.copy(), true=inner.copy())])])
        else:
            call.set("this", exp.Case(ifs=[exp.If(this=cond.copy(), true=arg.copy())]))
        return call
    return a.copy()


def _empty_value(a: exp.Expression, arrow_type: pa.DataType) -> exp.Expression:
    """An aggregate's value over no rows: 0 for count, NULL otherwise."""
    call = a.this if isinstance(a, exp.Filter) else a
    if isinstance(call, exp.Count):
        return exp.Cast(this=exp.Literal.number(0), to=types.from_arrow(arrow_type))
    return _typed_null_arrow(arrow_type)


def _typed_null(t: exp.DataType) -> exp.Expression:
    return exp.Null() if types.is_unknown(t) else exp.Cast(this=exp.Null(), to=t.copy())


def _typed_null_arrow(t: pa.DataType) -> exp.Expression:
    return exp.Null() if pa.types.is_null(t) else exp.Cast(this=exp.Null(), to=types.from_arrow(t))


def _cast(v: exp.Expression, t: exp.DataType) -> exp.Expression:
    return (
        v.copy()
        if types.is_unknown(t) or isinstance(v, exp.Cast)
        else exp.Cast(this=v.copy(), to=t.copy())
    )


def _arrow(t: exp.DataType) -> pa.DataType | None:
    if types.is_unknown(t):
        return None
    try:
        return types.to_arrow(t)
    except Exception:
        return None


__all__ = ["Renderer", "cast_columns", "names"]
