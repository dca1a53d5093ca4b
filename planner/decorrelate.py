"""Decorrelation: subqueries used as values become joins.

For a node whose expressions hold a subquery `S` reading outer columns `C`:

1. `D` = the distinct values of `C` in the node's input;
2. `S` is *lifted* over `D`: every operator of `S` gets `D`'s columns in front
   (uncorrelated leaves are crossed with `D`, joins also match on `D`, reduces
   group by `D` and keep SQL's empty-group row per `D` key), and each `Outer(c)`
   becomes a reference to `D`'s copy of `c`;
3. the input is left-joined with the lifted `S` on `C` (NULL-safe), and the
   subquery is replaced by the joined column: the value for scalar subqueries,
   `COALESCE(found, FALSE)` for EXISTS.

A scalar subquery whose shape does not bound it to one row per key is first reduced
to one (its rows counted, `RAISE_ERROR` where a key has two: PostgreSQL's "more than
one row returned by a subquery used as an expression").

A LATERAL join's right side is lifted the same way. Uncorrelated subqueries
are the case `C = ()` (a left join with no keys).

Subqueries are decorrelated innermost first. A reference two or more levels out
(`Outer` with `level` k) is left in place by a lift, one level closer (k - 1): once
the inner subquery is a join of its container, the reference is the container's, and
the container's own decorrelation lifts it in turn (`shift_levels`).

Invariant: the result has no `SubqueryExpr` and no `Outer`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import replace

from sqlglot import exp

from dsql.errors import UnsupportedError
from dsql.planner import types
from dsql.planner.expr import (
    Outer,
    RaiseError,
    SubqueryExpr,
    as_expression,
    col,
    remap,
    shift,
)
from dsql.planner.expr import outer as outer_ref
from dsql.planner.plan import (
    Column,
    Constant,
    Filter,
    FlatMap,
    LocalGet,
    Map,
    Negate,
    Order,
    Plan,
    Project,
    Union,
    walk,
)
from dsql.planner.stateful import Distinct, Join, LetRec, Reduce, Threshold, TopK, expressions_of


def decorrelate(plan: Plan) -> Plan:
    """The plan with every subquery expression and LATERAL dependency turned into joins."""
    plan = plan.with_inputs(tuple(decorrelate(i) for i in plan.inputs))
    match plan:
        case Filter(input=inp, predicates=preds) if _has_subquery(preds):
            joined, new = _apply(inp, preds)
            return Project(Filter(joined, new), tuple(range(inp.arity)))
        case Map(input=inp, exprs=exprs, names=names) if _has_subquery(exprs):
            joined, new = _apply(inp, exprs)
            mapped = Map(joined, new, names)
            keep = tuple(range(inp.arity)) + tuple(range(joined.arity, mapped.arity))
            return Project(mapped, keep)
        case FlatMap(input=inp, function=f, names=names, types=ts) if _has_subquery((f,)):
            joined, (function,) = _apply(inp, (f,))
            flat = FlatMap(joined, function, names, ts)
            keep = tuple(range(inp.arity)) + tuple(range(joined.arity, flat.arity))
            return Project(flat, keep)
        case Join(left=l, right=r, kind=kind, on=on) if on is not None and _has_subquery((on,)):
            if kind != "inner":
                raise UnsupportedError(
                    "a subquery in the ON condition of an outer join is not supported",
                    hint="move the subquery into WHERE or a derived table",
                )
            return decorrelate(Filter(Join(l, r, "inner", None, plan.lateral), (on,)))
        case Join(left=l, right=r, kind="inner", on=on, lateral=True) if _correlated(r):
            return _lateral(l, r, on)
        case Join(left=l, right=r, kind=kind, on=on, lateral=True):
            # Reads no column of its left side: a derived table, whose references one
            # level further out are the join's own enclosing row.
            return Join(l, shift_levels(r, -1), kind, on)
        case Reduce(aggregates=aggs) if _has_subquery(aggs):
            raise UnsupportedError(
                "a subquery inside an aggregate is not supported",
                hint="compute the subquery in a derived table and aggregate its column",
            )
    return plan


def _has_subquery(exprs: tuple[exp.Expression, ...]) -> bool:
    return any(isinstance(n, SubqueryExpr) for e in exprs for n in e.walk())


def _outer_columns(plan: Plan) -> list[int]:
    """The columns of the enclosing row (one level out) that a decorrelated plan reads."""
    found: set[int] = set()
    for node in walk(plan):
        for e in expressions_of(node):
            found.update(n.this for n in e.walk() if isinstance(n, Outer) and n.levels_out == 1)
    return sorted(found)


def shift_levels(plan: Plan, by: int, above: int = 0) -> Plan:
    """`plan` with every `Outer` that reaches past `above` levels moved `by` levels.

    Levels count from where each reference sits: inside a subquery of `plan`, or the
    right side of a LATERAL join, one more level is the plan's own. A subquery lifted
    into a join reads its enclosing rows one level closer (`by` -1); a correlated CTE
    read from a query nested `k` levels below its own reads them `k` further (`by` k).
    """

    def move(e: exp.Expression, depth: int) -> exp.Expression:
        def visit(n: exp.Expression) -> exp.Expression:
            if isinstance(n, Outer) and n.levels_out > depth:
                return outer_ref(n.this, n.levels_out + by)
            if isinstance(n, SubqueryExpr):
                return SubqueryExpr(this=shift_levels(n.plan, by, depth + 1), kind=n.args["kind"])
            return n

        return e.transform(visit)

    inputs: tuple[Plan, ...]
    if isinstance(plan, Join) and plan.lateral:
        inputs = (shift_levels(plan.left, by, above), shift_levels(plan.right, by, above + 1))
    else:
        inputs = tuple(shift_levels(i, by, above) for i in plan.inputs)
    changed = any(a is not b for a, b in zip(inputs, plan.inputs, strict=True))
    node = plan.with_inputs(inputs) if changed else plan
    return map_expressions(node, lambda e: move(e, above))


def map_expressions(plan: Plan, f: Callable[[exp.Expression], exp.Expression]) -> Plan:
    """`plan` with `f` applied to each expression it holds (its inputs unchanged)."""
    match plan:
        case Map(exprs=exprs):
            return replace(plan, exprs=tuple(f(e) for e in exprs))
        case Filter(predicates=preds):
            return replace(plan, predicates=tuple(f(p) for p in preds))
        case FlatMap(function=fn):
            return replace(plan, function=f(fn))
        case Join(on=on) if on is not None:
            return replace(plan, on=f(on))
        case Reduce(aggregates=aggs):
            return replace(plan, aggregates=tuple(f(a) for a in aggs))
        case Constant(rows=rows):
            return replace(plan, rows=tuple(tuple(f(v) for v in row) for row in rows))
    return plan


def _correlated(plan: Plan) -> bool:
    return bool(_outer_columns(plan))


def _apply(inp: Plan, exprs: tuple[exp.Expression, ...]) -> tuple[Plan, tuple[exp.Expression, ...]]:
    """Join each subquery of `exprs` onto `inp`; the expressions rewritten to read it."""
    current = inp
    out = []
    for original in exprs:
        e = original.copy()
        subqueries: list[SubqueryExpr] = [n for n in e.walk() if isinstance(n, SubqueryExpr)]
        replacements: dict[int, exp.Expression] = {}
        for s in subqueries:
            current, value = _join_subquery(current, s)
            replacements[id(s)] = value
        out.append(_replace(e, replacements))
    return current, tuple(out)


def _replace(e: exp.Expression, replacements: dict[int, exp.Expression]) -> exp.Expression:
    def visit(node: exp.Expression) -> exp.Expression:
        if id(node) in replacements:
            return replacements[id(node)].copy()
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expression):
                node.set(key, visit(value))
            elif isinstance(value, list):
                node.set(key, [visit(v) if isinstance(v, exp.Expression) else v for v in value])
        return node

    return visit(e)


def _join_subquery(inp: Plan, s: SubqueryExpr) -> tuple[Plan, exp.Expression]:
    sub = decorrelate(s.plan)
    read = _outer_columns(sub)
    d = len(read)
    domain = Distinct(Project(inp, tuple(read)))
    lifted = _lift(sub, read, domain) if read else shift_levels(sub, -1)
    right: Plan
    checked = False
    if s.args["kind"] == "exists":
        right = Map(Distinct(Project(lifted, tuple(range(d)))), (exp.true(),), ("?exists",))
    elif _at_most_one_row_per_key(lifted, d):
        right = lifted
    else:
        right, checked = _counted(lifted, d, domain if read else None), True
    on = (
        as_expression(
            exp.and_(
                *(
                    exp.NullSafeEQ(this=col(c), expression=col(inp.arity + j))
                    for j, c in enumerate(read)
                )
            )
        )
        if read
        else None
    )
    # A subquery with exactly one row per key of the domain (an aggregate without HAVING)
    # matches every input row once: the outer join would add no unmatched rows.
    kind = "inner" if _one_row_per_key(right, domain if read else None) else "left"
    joined = Join(inp, right, kind, on)
    value: exp.Expression = col(inp.arity + d)
    if checked:
        value = _single_value(col(inp.arity + d), col(inp.arity + d + 1), right.columns[d + 1])
    if s.args["kind"] == "exists":
        value = exp.Coalesce(this=value, expressions=[exp.false()])
    return joined, value


#: PostgreSQL's error (SQLSTATE 21000) for a scalar subquery with a second row.
MORE_THAN_ONE_ROW = "more than one row returned by a subquery used as an expression"


def _counted(lifted: Plan, d: int, domain: Plan | None) -> Plan:
    """`lifted` (keys, value) as one row per key of `domain` (one row in all when None):
    the keys, the number of rows, and the least value (the value where there is one)."""
    return Reduce(
        lifted,
        tuple(range(d)),
        (exp.Count(this=exp.Star()), exp.Min(this=col(d))),
        ("?rows", lifted.columns[d].name),
        domain,
    )


def _single_value(rows: exp.Expression, value: exp.Expression, column: Column) -> exp.Expression:
    """The subquery's value: `value`, or an error where it has more than one row.

    An expression of the joined row, so the error fires only where an input row reads
    the value, as PostgreSQL evaluates a subquery only for the rows that need it (an
    unread one, pruned, never)."""
    error: exp.Expression = RaiseError(this=exp.Literal.string(MORE_THAN_ONE_ROW))
    if not types.is_unknown(column.type):
        error = exp.Cast(this=error, to=column.type.copy())
    return exp.Case(
        ifs=[exp.If(this=exp.GT(this=rows, expression=exp.Literal.number(1)), true=error)],
        default=value,
    )


def _at_most_one_row_per_key(plan: Plan, d: int) -> bool:
    """Whether `plan` has at most one row per value of its first `d` columns (the lifted
    domain's keys; at most one row in all when `d` is 0), as its shape guarantees: an
    aggregate grouped by those keys, a LIMIT 1, one constant row crossed with the keys."""
    match plan:
        case Map(input=inp) | Filter(input=inp):
            return _at_most_one_row_per_key(inp, d)
        case Project(input=inp, outputs=outs):
            return outs[:d] == tuple(range(d)) and _at_most_one_row_per_key(inp, d)
        case Reduce(group=group):
            return len(group) <= d
        case TopK(group=group, limit=limit):
            return limit is not None and limit <= 1 and set(group) <= set(range(d))
        case Distinct():
            return plan.arity <= d
        case Constant(rows=rows):
            return len(rows) <= 1
        case Join(left=left, right=right, kind="inner" | "left"):
            return (
                left.arity == d
                and _at_most_one_row_per_key(left, d)
                and _at_most_one_row_per_key(right, 0)
            )
    return False


def _one_row_per_key(plan: Plan, domain: Plan | None) -> bool:
    """Whether `plan` has exactly one row per row of `domain` (keys first), or exactly one
    row when `domain` is None: a reduce over the domain with no other grouping, or a
    global aggregate, under maps and projections only."""
    match plan:
        case Map(input=inp) | Project(input=inp):
            return _one_row_per_key(inp, domain)
        case Reduce(group=group, domain=dom):
            if domain is None:
                return not group and dom is None
            d = domain.arity
            return dom is domain and group == tuple(range(d))
    return False


def _lateral(left: Plan, right: Plan, on: exp.Expression | None) -> Plan:
    outer = _outer_columns(right)
    d = len(outer)
    domain = Distinct(Project(left, tuple(outer)))
    lifted = _lift(right, outer, domain)
    keys = [
        exp.NullSafeEQ(this=col(c), expression=col(left.arity + j)) for j, c in enumerate(outer)
    ]
    extra = (
        [remap(on, {i: i + d for i in range(left.arity, left.arity + right.arity)})]
        if on is not None
        else []
    )
    joined = Join(left, lifted, "inner", as_expression(exp.and_(*keys, *extra)))
    keep = tuple(range(left.arity)) + tuple(range(left.arity + d, joined.arity))
    return Project(joined, keep)


#: The bindings of the `LetRec`s being lifted: their values already carry the domain's
#: columns in front, so a `LocalGet` of one is lifted by widening it, not by a cross join.
_LIFTED: ContextVar[frozenset[str]] = ContextVar("lifted_bindings", default=frozenset())


def _reads_lifted(plan: Plan) -> bool:
    lifted = _LIFTED.get()
    return bool(lifted) and any(isinstance(n, LocalGet) and n.name in lifted for n in walk(plan))


def _lift_letrec(plan: LetRec, outer: list[int], domain: Plan) -> LetRec:
    """A recursion inside a correlated subquery: one independent fixpoint per domain row,
    every binding keyed by the domain's columns (joins on a binding match those keys)."""
    token = _LIFTED.set(_LIFTED.get() | set(plan.names))
    try:
        values = tuple(_lift(v, outer, domain) for v in plan.values)
        body = _lift(plan.body, outer, domain)
    finally:
        _LIFTED.reset(token)
    return _retyped(LetRec(plan.names, values, body, plan.limit, plan.on_limit))


def _retyped(plan: LetRec) -> LetRec:
    """`plan` with its bindings' reads typed by their lifted values.

    A binding's columns were typed at binding time, when an outer reference in its
    base case had no type yet (`SELECT _corr`); lifted, that reference is a column of
    the domain, so the value now knows the type its `LocalGet`s were missing. Refined
    until no read changes (a binding typed through another binding takes two rounds).
    """
    for _ in range(sum(len(v.columns) for v in plan.values) + 1):
        known = {name: value.columns for name, value in zip(plan.names, plan.values, strict=True)}
        refined = LetRec(
            plan.names,
            tuple(_refine_reads(v, known) for v in plan.values),
            _refine_reads(plan.body, known),
            plan.limit,
            plan.on_limit,
        )
        if refined == plan:
            return plan
        plan = refined
    return plan


def _refine_reads(plan: Plan, known: dict[str, tuple[Column, ...]]) -> Plan:
    """`plan` with each `LocalGet` of a `known` binding given the types it lacks."""
    from dsql.planner.passes import bottom_up

    def refine(node: Plan) -> Plan:
        if not isinstance(node, LocalGet) or node.name not in known:
            return node
        columns = tuple(
            Column(c.name, v.type) if types.is_unknown(c.type) else c
            for c, v in zip(node.columns, known[node.name], strict=True)
        )
        return node if columns == node.columns else LocalGet(node.name, columns)

    return bottom_up(plan, refine)


def _lift(plan: Plan, outer: list[int], domain: Plan) -> Plan:
    """`plan` with `domain`'s columns in front; `Outer(outer[j])` reads column j."""
    d = len(outer)
    if not _correlated(plan) and not _reads_lifted(plan):
        return Join(domain, shift_levels(plan, -1), "inner", None)
    where = {c: j for j, c in enumerate(outer)}

    def lower(n: exp.Expression) -> exp.Expression:
        # One level out is now the domain's columns; further levels are one closer.
        if not isinstance(n, Outer):
            return n
        return col(where[n.this]) if n.levels_out == 1 else outer_ref(n.this, n.levels_out - 1)

    def fix(e: exp.Expression, by: int = d) -> exp.Expression:
        return shift(e, by).transform(lower)

    match plan:
        case LocalGet(name=name, columns=columns):  # a binding lifted by _lift_letrec
            return LocalGet(name, domain.columns + columns)
        case LetRec():
            return _lift_letrec(plan, outer, domain)
        case Map(input=inp, exprs=exprs, names=names):
            return Map(_lift(inp, outer, domain), tuple(fix(e) for e in exprs), names)
        case Filter(input=inp, predicates=preds):
            return Filter(_lift(inp, outer, domain), tuple(fix(e) for e in preds))
        case Project(input=inp, outputs=outs):
            return Project(_lift(inp, outer, domain), tuple(range(d)) + tuple(o + d for o in outs))
        case FlatMap(input=inp, function=f, names=names, types=ts):
            return FlatMap(_lift(inp, outer, domain), fix(f), names, ts)
        case Join(left=l, right=r, kind=kind, on=on):
            la, ra = l.arity, r.arity
            ll, rl = _lift(l, outer, domain), _lift(r, outer, domain)
            keys = [exp.NullSafeEQ(this=col(j), expression=col(d + la + j)) for j in range(d)]
            cond = (
                [
                    remap(
                        on, {i: (i + d if i < la else i + 2 * d) for i in range(la + ra)}
                    ).transform(lower)
                ]
                if on is not None
                else []
            )
            joined = Join(ll, rl, kind, as_expression(exp.and_(*keys, *cond)))
            if kind in ("right", "full"):
                raise UnsupportedError(
                    "a RIGHT/FULL join inside a correlated subquery is not supported",
                    hint="rewrite it as a LEFT join",
                )
            keep = tuple(range(d + la)) + tuple(range(2 * d + la, 2 * d + la + ra))
            return Project(joined, keep)
        case Reduce(input=inp, group=group, aggregates=aggs, names=names, domain=dom):
            lifted_domain = (
                _lift(dom, outer, domain) if dom is not None else (domain if not group else None)
            )
            return Reduce(
                _lift(inp, outer, domain),
                tuple(range(d)) + tuple(g + d for g in group),
                tuple(fix(a) for a in aggs),
                names,
                lifted_domain,
            )
        case Distinct(input=inp):
            return Distinct(_lift(inp, outer, domain))
        case Negate(input=inp):
            return Negate(_lift(inp, outer, domain))
        case Threshold(input=inp):
            return Threshold(_lift(inp, outer, domain))
        case Union(parts=parts):
            return Union(tuple(_lift(p, outer, domain) for p in parts))
        case TopK(input=inp, group=group, order=order, limit=limit, offset=offset):
            return TopK(
                _lift(inp, outer, domain),
                tuple(range(d)) + tuple(g + d for g in group),
                tuple(Order(o.column + d, o.desc, o.nulls_first) for o in order),
                limit,
                offset,
            )
    raise UnsupportedError(
        f"a correlated subquery containing {type(plan).__name__} is not supported",
        hint="rewrite the subquery as a join",
    )


__all__ = ["decorrelate", "map_expressions", "shift_levels"]
