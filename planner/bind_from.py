"""Binding FROM: tables, CTE references, subqueries, VALUES, LATERAL, table functions, joins.

A FROM clause is a comma-separated list of join trees; JOIN binds tighter than the
comma (`a, b FULL JOIN c ON ...` is `a, (b FULL JOIN c ...)`). Each tree binds to a
`Bound`: a plan over the columns of the items to its left (its context) followed by
its own, the scope items naming them, and its output columns in `*` order.

Items to the left are joined left-deep, so LATERAL subqueries and table functions
(`bind_table_function.py`) see them and become a lateral `Join` or a `FlatMap` over
them. A tree holding a RIGHT or FULL join is bound on its own and then crossed with
its context (its unmatched right rows pair with every context row). An ON clause sees
only its join's two sides. `USING`/`NATURAL` joins compare the named columns and
expose each once, merged: the left column for INNER/LEFT, the right for RIGHT,
`COALESCE(left, right)` for FULL, cast to the pair's common type; `*` lists the merged
columns first, then the left side's others, then the right side's.
Subqueries go back to `bind.bind_query`, imported where called (it dispatches here).

>>> from dsql.planner.bind import bind
>>> from dsql.planner.catalog import StaticCatalog
>>> from dsql.planner.plan import Column
>>> from dsql.planner.types import build
>>> cat = StaticCatalog({"t": (Column("a", build("int")), Column("b", build("int")))})
>>> sql = "SELECT * FROM t x JOIN t y USING (a)"
>>> bind(sqlglot.parse_one(sql, read="postgres"), cat).column_names
('a', 'b', 'b')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import sqlglot  # noqa: F401 - the doctest parses with it
from sqlglot import exp

from dsql.errors import SchemaError
from dsql.planner import types
from dsql.planner.bind_shape import (
    alias_columns,
    and_operands,
    rename_plan,
    types_of,
    visible_plan,
)
from dsql.planner.bind_table_function import bind_table_function, is_table_function
from dsql.planner.expr import as_expression, col, index
from dsql.planner.expr_bind import ExprBinder
from dsql.planner.plan import Column, Constant, Filter, Get, Map, Plan
from dsql.planner.scope import InvisibleReference, Item, Scope, unsupported
from dsql.planner.stateful import Join

if TYPE_CHECKING:
    from dsql.planner.bind import Env


@dataclass(frozen=True, slots=True)
class Bound:
    """A FROM item or join tree, bound after its context (the items to its left).

    `plan` reads the context's columns, then the tree's own; `items` are the names the
    tree adds (positions in `plan`); `columns` is its output, in `*` order; `hidden`
    are the tables inside an aliased join, which no name reaches.
    """

    plan: Plan
    items: tuple[Item, ...]
    columns: Item
    hidden: tuple[Item, ...] = ()

    def shifted(self, by: int) -> Bound:
        """The names `by` positions further right (the plan is the caller's)."""
        return Bound(
            self.plan,
            tuple(i.shifted(by) for i in self.items),
            self.columns.shifted(by),
            tuple(i.shifted(by) for i in self.hidden),
        )


@dataclass(frozen=True, slots=True)
class _Level:
    """What binding a FROM clause sees: the environment, the enclosing query's scope,
    and the items of this clause that the part being bound may not reference."""

    env: Env
    parent: Scope | None
    blocked: tuple[Item, ...] = ()
    #: The FROM items left of a tree holding a RIGHT or FULL JOIN: PostgreSQL lets a
    #: LATERAL item inside read them, dsql does not (the tree is bound on its own).
    apart: tuple[Item, ...] = ()

    def blocking(self, items: tuple[Item, ...]) -> _Level:
        return _Level(self.env, self.parent, self.blocked + items, self.apart)


def bind_from(sel: exp.Select, env: Env, parent: Scope | None) -> tuple[Plan, Scope]:
    """The plan of a SELECT's FROM clause and joins, and the scope naming its columns."""
    from_ = sel.args.get("from_")
    if from_ is None:
        return Constant(((),), ()), Scope((), parent)
    context: Bound | None = None
    for first, joins in _comma_list(from_.this, _nest_right(list(sel.args.get("joins") or []))):
        own = _bind_chain(first, joins, _Level(env, parent), context)
        context = _with_context(context, own)
    assert context is not None
    _check_aliases(context.items)
    return context.plan, Scope(context.items, parent, context.hidden)


def _comma_list(
    first: exp.Expression, joins: list[exp.Join]
) -> list[tuple[exp.Expression, list[exp.Join]]]:
    """The FROM list's elements: each a first item and the joins that follow it.

    sqlglot lists `a, b JOIN c` flat; a join with no kind, side, condition or method
    is a comma, and starts the next element.
    """
    elements: list[tuple[exp.Expression, list[exp.Join]]] = [(first, [])]
    for join in joins:
        if _is_comma(join):
            elements.append((join.this, []))
        else:
            elements[-1][1].append(join)
    return elements


def _nest_right(joins: list[exp.Join]) -> list[exp.Join]:
    """The joins with those sqlglot flattened out of a join's right side nested back.

    `a JOIN b NATURAL JOIN c ON p` is `a JOIN (b NATURAL JOIN c) ON p` (a NATURAL or
    CROSS join takes no condition), which sqlglot lists as `JOIN b`, `NATURAL JOIN c ON p`.
    """
    out: list[exp.Join] = []
    for join in joins:
        condition = {k: join.args[k] for k in ("on", "using") if join.args.get(k)}
        k = len(out) - 1
        while condition and _takes_none(join) and k >= 0 and _takes_none(out[k]):
            k -= 1
        if not condition or not _takes_none(join) or k < 0 or _has_condition(out[k]):
            out.append(join)
            continue
        right = out[k].this.copy()
        inner = [j.copy() for j in (*out[k + 1 :], join)]
        for key in condition:
            inner[-1].set(key, None)
        right.set("joins", [*(right.args.get("joins") or []), *inner])
        outer = out[k].copy()
        outer.set("this", right)
        for key, value in condition.items():
            outer.set(key, value.copy() if isinstance(value, exp.Expression) else value)
        out[k:] = [outer]
    return out


def _takes_none(join: exp.Join) -> bool:
    """Whether a join takes no condition of its own (NATURAL, CROSS)."""
    natural = str(join.args.get("method") or "").upper() == "NATURAL"
    return natural or (join.kind or "").upper() == "CROSS"


def _has_condition(join: exp.Join) -> bool:
    return bool(join.args.get("on") or join.args.get("using"))


def _is_comma(join: exp.Join) -> bool:
    return not any(join.args.get(k) for k in ("kind", "side", "on", "using", "method"))


def _side(join: exp.Join) -> str:
    side = (join.side or "").lower()
    return side if side in ("left", "right", "full") else "inner"


def _cross(context: Bound, own: Bound) -> Bound:
    """`own`, bound on its own, after the items to its left (every pair of rows)."""
    right = own.shifted(context.plan.arity)
    return Bound(
        Join(context.plan, own.plan, "inner", None), right.items, right.columns, right.hidden
    )


def _with_context(context: Bound | None, own: Bound) -> Bound:
    """The FROM so far: the context's names followed by `own`'s (over `own.plan`)."""
    if context is None:
        return own
    return Bound(own.plan, context.items + own.items, own.columns, context.hidden + own.hidden)


def _names(bound: Bound | None) -> tuple[Item, ...]:
    """Every name a bound tree holds, reachable or not."""
    return () if bound is None else bound.items + bound.hidden


def _hidden(bound: Bound | None) -> tuple[Item, ...]:
    return () if bound is None else bound.hidden


def _bind_chain(
    first: exp.Expression,
    joins: list[exp.Join],
    at: _Level,
    context: Bound | None,
) -> Bound:
    """`first` joined with each of `joins` in turn, after `context`."""
    if context is not None and any(_side(j) in ("right", "full") for j in joins):
        apart = _Level(at.env, at.parent, at.blocked + _names(context), _names(context))
        own = _bind_chain(first, joins, apart, None)
        return _cross(context, own)
    tree = _bind_node(first, at, context)
    for join in joins:
        tree = _bind_join(join, tree, at, context)
    return tree


def _bind_node(node: exp.Expression, at: _Level, context: Bound | None) -> Bound:
    """One FROM item, a parenthesized join (aliased or not), or an item with its joins."""
    joins = node.args.get("joins")
    if joins:
        first = node.copy()
        first.set("joins", None)
        return _bind_chain(first, _nest_right(list(joins)), at, context)
    if isinstance(node, exp.Subquery) and not _is_query(node.this):
        inner = _bind_node(node.this, at, context)
        alias_node = node.args.get("alias")
        if alias_node is None:
            return inner
        return _aliased(inner, alias_node)
    return _bind_leaf(node, at, context)


def _aliased(tree: Bound, alias_node: exp.Expression) -> Bound:
    """`(join) AS j(c, ...)`: one item over the join's columns; the tables inside hidden."""
    names = alias_columns(alias_node)
    if len(names) > len(tree.columns.names):
        raise SchemaError(
            f"table '{alias_node.name}' has {len(tree.columns.names)} columns available "
            f"but {len(names)} columns specified"
        )
    _check_aliases(tree.items)
    renamed = names + tree.columns.names[len(names) :]
    item = Item(alias_node.name, renamed, at=tree.columns.positions)
    return Bound(tree.plan, (item,), item, tree.hidden + tree.items)


def _bind_leaf(node: exp.Expression, at: _Level, context: Bound | None) -> Bound:
    """A table, view, CTE, subquery or VALUES (crossed with the context), or a table
    function or LATERAL subquery (over the context, which it may read)."""
    from dsql.planner.bind import bind_query

    if not _is_lateral(node):
        plan, name = _bind_relation(node, at.env, at.parent)
        alias_node = node.args.get("alias")
        plan = rename_plan(plan, alias_columns(alias_node))
        item = Item(alias_node.name if alias_node is not None else name, plan.column_names, 0)
        own = Bound(plan, (item,), item)
        return own if context is None else _cross(context, own)
    base = context.plan if context is not None else Constant(((),), ())
    scope = Scope(
        context.items if context else (),
        at.parent,
        at.blocked + _hidden(context),
        types=tuple(types_of(base)),
    )
    query = node.this if isinstance(node, exp.Lateral | exp.Subquery) else None
    if isinstance(query, exp.Subquery):
        query = query.this
    try:
        if query is None or not _is_query(query):
            plan, item = bind_table_function(node, at.env, scope, base)
            return Bound(plan, (item,), item)
        right = visible_plan(bind_query(query, at.env, scope))
    except InvisibleReference as error:
        if not at.apart:
            raise
        raise unsupported(
            "a LATERAL reference to an earlier FROM item from inside a RIGHT or FULL JOIN",
            "move the earlier item into the join, or the LATERAL item out of it",
        ) from error
    alias_node = node.args.get("alias")
    right = rename_plan(right, alias_columns(alias_node))
    item = Item(alias_node.name if alias_node is not None else "", right.column_names, base.arity)
    return Bound(Join(base, right, "inner", None, lateral=True), (item,), item)


def _is_query(node: exp.Expression) -> bool:
    """Whether parentheses hold a query (a subquery), not a join or a FROM item."""
    if isinstance(node, exp.Subquery):
        return not node.args.get("joins") and not node.args.get("alias") and _is_query(node.this)
    return isinstance(node, exp.Select | exp.SetOperation | exp.Values)


def _is_lateral(node: exp.Expression) -> bool:
    """Whether a FROM item may read the items to its left (LATERAL, table functions)."""
    return (
        isinstance(node, exp.Lateral)
        or is_table_function(node)
        or (isinstance(node, exp.Subquery) and bool(node.args.get("lateral")))
    )


def _bind_relation(node: exp.Expression, env: Env, parent: Scope | None) -> tuple[Plan, str]:
    """A FROM item that reads no other item: its plan and its default alias."""
    from dsql.planner.bind import bind_query

    if isinstance(node, exp.Table) and isinstance(node.this, exp.Values):
        return bind_values(node.this, env, parent), ""
    if isinstance(node, exp.Table):
        if node.args.get("db"):
            raise SchemaError(f"schemas are not supported: {node.sql('postgres')}")
        name = node.name
        if name in env.ctes:
            return env.cte(name, parent), name
        return Get(name, env.catalog.columns(name)), name
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Values):
        return bind_values(node.this, env, parent), ""
    if isinstance(node, exp.Subquery):
        return visible_plan(bind_query(node.this, env, parent)), ""
    if isinstance(node, exp.Values):
        return bind_values(node, env, parent), ""
    raise unsupported(f"FROM item {node.sql('postgres')}", "read a table, a view or a subquery")


def _bind_join(join: exp.Join, left: Bound, at: _Level, context: Bound | None) -> Bound:
    """`left JOIN right ...`: the join's plan (after `context`) and its names."""
    from dsql.planner.bind import bind_query

    kind = _side(join)
    lateral = _is_lateral(join.this) and kind == "inner"
    if lateral:
        right = _bind_node(join.this, at, _with_context(context, left))
        column_types = types_of(right.plan)
    else:
        right = _bind_apart(join.this, kind, at.blocking(_names(context) + _names(left)))
        right = right.shifted(left.plan.arity)
        column_types = types_of(left.plan) + types_of(right.plan)
    condition: exp.Expression | None = None
    merged: list[tuple[str, exp.Expression]] = []
    using = join.args.get("using")
    if _takes_none(join) and _has_condition(join):
        raise SchemaError(
            "a NATURAL or CROSS JOIN takes no ON or USING condition",
            hint="drop the condition, or write JOIN ... ON",
        )
    if using or str(join.args.get("method") or "").upper() == "NATURAL":
        names = [u.name for u in using] if using else _common_names(left.columns, right.columns)
        conditions, merged = _using(names, left.columns, right.columns, kind, column_types)
        condition = as_expression(exp.and_(*conditions)) if conditions else exp.true()
    elif join.args.get("on") is not None:
        scope = Scope(left.items + right.items, at.parent, at.blocked + _names(context))
        binder = ExprBinder(at.env, scope, bind_query).with_types(column_types)
        condition = binder.bind(join.args["on"])
    elif kind != "inner":
        raise SchemaError(f"{kind.upper()} JOIN needs an ON or USING condition")
    plan: Plan
    if lateral:
        plan = right.plan if condition is None else Filter(right.plan, and_operands(condition))
    else:
        plan = Join(left.plan, right.plan, kind, condition)
    return _joined(plan, left, right, merged)


def _bind_apart(node: exp.Expression, kind: str, at: _Level) -> Bound:
    """A join's right side, bound on its own: the items to its left are `blocked`."""
    try:
        return _bind_node(node, at, None)
    except InvisibleReference as error:
        if kind == "inner":
            raise unsupported(
                "a LATERAL reference from inside a parenthesized join",
                "join the LATERAL item directly, not inside parentheses",
            ) from error
        if kind == "left":
            raise unsupported(
                "LEFT JOIN LATERAL that reads its left side",
                "use an inner LATERAL join and a filter",
            ) from error
        raise


def _common_names(left: Item, right: Item) -> list[str]:
    """NATURAL's columns: the left side's names the right side also has, in its order."""
    return [n for n in dict.fromkeys(left.names) if n in right.names]


def _using(
    names: list[str], left: Item, right: Item, kind: str, column_types: list[exp.DataType]
) -> tuple[list[exp.Expression], list[tuple[str, exp.Expression]]]:
    """USING's equalities, and each merged column's name and value (by position)."""
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SchemaError(f"column name '{dup}' appears more than once in USING clause")
    conditions: list[exp.Expression] = []
    merged: list[tuple[str, exp.Expression]] = []
    for name in names:
        lpos = _only(name, left, "left")
        rpos = _only(name, right, "right")
        ltype, rtype = column_types[lpos], column_types[rpos]
        common = types.common_type(ltype, rtype, "JOIN/USING")
        conditions.append(exp.EQ(this=col(lpos), expression=col(rpos)))
        lvalue = _cast(col(lpos), ltype, common)
        rvalue = _cast(col(rpos), rtype, common)
        if kind == "full":
            value: exp.Expression = exp.Coalesce(this=lvalue, expressions=[rvalue])
        else:
            value = rvalue if kind == "right" else lvalue
        merged.append((name, value))
    return conditions, merged


def _only(name: str, side: Item, which: str) -> int:
    """The position of the one column `name` of a join side."""
    found = [p for n, p in zip(side.names, side.positions, strict=True) if n == name]
    if not found:
        raise SchemaError(
            f"column '{name}' specified in USING clause does not exist in {which} table"
        )
    if len(found) > 1:
        raise SchemaError(f"common column name '{name}' appears more than once in {which} table")
    return found[0]


def _cast(value: exp.Expression, have: exp.DataType, want: exp.DataType) -> exp.Expression:
    if have == want or types.is_unknown(want) or types.is_unknown(have):
        return value
    return exp.Cast(this=value, to=want.copy())


def _joined(
    plan: Plan, left: Bound, right: Bound, merged: list[tuple[str, exp.Expression]]
) -> Bound:
    """The join's names: its sides' tables by alias, its columns (merged ones first).

    A merged column that is one side's column as it is keeps that position; the others
    are computed by a `Map` after the join.
    """
    kept = [index(e) if isinstance(e, exp.Column) else None for _, e in merged]
    computed = [(n, e) for (n, e), k in zip(merged, kept, strict=True) if k is None]
    if computed:
        plan = Map(plan, tuple(e for _, e in computed), tuple(n for n, _ in computed))
    fresh = iter(range(plan.arity - len(computed), plan.arity))
    positions = [k if k is not None else next(fresh) for k in kept]
    names = [n for n, _ in merged]
    for side in (left.columns, right.columns):
        for n, p in zip(side.names, side.positions, strict=True):
            if n not in names[: len(merged)]:
                names.append(n)
                positions.append(p)
    columns = Item("", tuple(names), at=tuple(positions), qualified=False)
    tables = tuple(replace(i, unqualified=False) for i in left.items + right.items if i.qualified)
    return Bound(plan, (*tables, columns), columns, left.hidden + right.hidden)


def _check_aliases(items: tuple[Item, ...]) -> None:
    seen: set[str] = set()
    for item in items:
        if item.qualified and item.alias:
            if item.alias in seen:
                raise SchemaError(
                    f"table name '{item.alias}' specified more than once", hint="give it an alias"
                )
            seen.add(item.alias)


def bind_values(node: exp.Values, env: Env, parent: Scope | None) -> Plan:
    """VALUES as a `Constant`: each column typed by its rows' common type."""
    from dsql.planner.bind import bind_query

    binder = ExprBinder(env, Scope((), parent), bind_query)
    rows = []
    for t in node.expressions:
        values = t.expressions if isinstance(t, exp.Tuple) else [t]
        rows.append(tuple(binder.bind(v) for v in values))
    if len({len(r) for r in rows}) != 1:
        raise SchemaError("VALUES lists must all be the same length")
    width = len(rows[0])
    col_types = []
    for i in range(width):
        t = types.build("unknown")
        for r in rows:
            if not _untyped(r[i]):
                t = types.common_type(t, types.infer(r[i].copy(), []), "VALUES")
        if types.is_unknown(t) and any(_untyped(r[i]) for r in rows):
            t = types.build("text")
        col_types.append(t)
    rows = [tuple(_cast_value(v, t) for v, t in zip(r, col_types, strict=False)) for r in rows]
    names = alias_columns(node.args.get("alias")) or tuple(f"column{i + 1}" for i in range(width))
    return Constant(
        tuple(rows), tuple(Column(n, t) for n, t in zip(names, col_types, strict=False))
    )


def _untyped(v: exp.Expression) -> bool:
    """Whether a VALUES item is a quoted literal, whose type PostgreSQL takes from the
    column's other rows (`VALUES ('1e3'), (2.5)` is a column of numbers)."""
    return isinstance(v, exp.Literal) and v.is_string


def _cast_value(v: exp.Expression, t: exp.DataType) -> exp.Expression:
    if types.is_unknown(t):
        return v
    current = types.infer(v.copy(), [])
    if current == t:
        return v
    return exp.Cast(this=v, to=t.copy())


__all__ = ["bind_from", "bind_values"]
