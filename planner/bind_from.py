"""Binding FROM: tables, CTE references, subqueries, VALUES, LATERAL, table functions, joins.

Each FROM item is bound to a plan over its own columns plus a scope `Item` naming
them; joins concatenate the items' columns (left then right) under one `Scope`.
LATERAL subqueries and table functions (`generate_series`, `unnest`, `repeat_row`)
see the items to their left and become a lateral `Join` or a `FlatMap` over them.
Subqueries go back to `bind.bind_query`, imported where called (it dispatches here).

>>> from dsql.planner.bind import bind
>>> from dsql.planner.catalog import StaticCatalog
>>> from dsql.planner.plan import Column
>>> from dsql.planner.types import build
>>> cat = StaticCatalog({"t": (Column("a", build("int")),)})
>>> q = bind(sqlglot.parse_one("SELECT * FROM t x JOIN t y USING (a)", read="postgres"), cat)
>>> q.column_names
('a',)
"""

from __future__ import annotations

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
from dsql.planner.expr import as_expression, col
from dsql.planner.expr_bind import ExprBinder
from dsql.planner.plan import (
    Column,
    Constant,
    Filter,
    FlatMap,
    Get,
    Plan,
)
from dsql.planner.scope import Item, Scope, unsupported
from dsql.planner.stateful import Join

if TYPE_CHECKING:
    from dsql.planner.bind import Env


def bind_from(sel: exp.Select, env: Env, parent: Scope | None) -> tuple[Plan, Scope]:
    """The plan of a SELECT's FROM clause and joins, and the scope naming its columns."""
    from_ = sel.args.get("from_")
    if from_ is None:
        return Constant(((),), ()), Scope((), parent)
    plan, item = _bind_item(from_.this, env, Scope((), parent), None)
    scope = Scope((item,), parent)
    for join in sel.args.get("joins") or []:
        plan, scope = _bind_join(join, plan, scope, env)
    return plan, scope


def _bind_item(
    node: exp.Expression, env: Env, scope: Scope, left: Plan | None
) -> tuple[Plan, Item]:
    """One FROM item as a plan over its own columns (offset 0), and its scope item.

    Table functions and LATERAL subqueries are bound against `scope` (the items
    to their left) and returned as a plan over left ++ own columns.
    """
    from dsql.planner.bind import bind_query

    alias_node = node.args.get("alias")
    aliases = alias_columns(alias_node)
    alias = alias_node.name if alias_node is not None and alias_node.name else None
    if isinstance(node, exp.Lateral):
        return _bind_lateral(node.this, alias, aliases, env, scope, left)
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Func):
        return _bind_lateral(node.this, alias, aliases, env, scope, left)
    if isinstance(node, exp.Unnest):
        return _bind_lateral(node, alias, aliases, env, scope, left)
    if isinstance(node, exp.Table):
        name = node.name
        if node.args.get("db"):
            raise SchemaError(f"schemas are not supported: {node.sql('postgres')}")
        if name in env.ctes:
            plan = env.ctes[name]
        else:
            plan = Get(name, env.catalog.columns(name))
        plan = rename_plan(plan, aliases)
        return plan, Item(alias or name, tuple(c.name for c in plan.columns), 0)
    if isinstance(node, exp.Subquery):
        if isinstance(node.this, exp.Values):
            plan = bind_values(node.this, env, scope.parent)
        else:
            plan = visible_plan(
                bind_query(node.this, env, scope if node.args.get("lateral") else scope.parent)
            )
        plan = rename_plan(plan, aliases)
        return plan, Item(alias or "", tuple(c.name for c in plan.columns), 0)
    if isinstance(node, exp.Values):
        plan = rename_plan(bind_values(node, env, scope.parent), aliases)
        return plan, Item(alias or "", tuple(c.name for c in plan.columns), 0)
    raise unsupported(f"FROM item {node.sql('postgres')}", "read a table, a view or a subquery")


def _bind_lateral(
    fn: exp.Expr,
    alias: str | None,
    aliases: tuple[str, ...],
    env: Env,
    scope: Scope,
    left: Plan | None,
) -> tuple[Plan, Item]:
    from dsql.planner.bind import bind_query

    base = left if left is not None else Constant(((),), ())
    offset = base.arity
    if isinstance(fn, exp.Subquery | exp.Select):
        query = fn.this if isinstance(fn, exp.Subquery) else fn
        right = visible_plan(bind_query(query, env, Scope(scope.items, scope.parent)))
        right = rename_plan(right, aliases)
        plan: Plan = Join(base, right, "inner", None, lateral=True)
        return plan, Item(alias or "", tuple(c.name for c in right.columns), offset)
    binder = ExprBinder(env, scope, bind_query).with_types(types_of(base))
    name, function, out_type = _table_function(fn, binder)
    if name == "repeat_row":
        n = function.expressions[0] if function.expressions else function.this
        plan = FlatMap(base, n, (), ())
        return plan, Item(alias or "repeat_row", (), offset)
    col_name = aliases[0] if aliases else (alias or name)
    plan = FlatMap(base, function, (col_name,), (out_type,))
    return plan, Item(alias or name, (col_name,), offset)


#: The most rows a table function with constant arguments may produce: its rows are
#: built in the driver's memory at once, and no engine can interrupt that allocation.
MAX_CONSTANT_ROWS = 10_000_000


def _check_constant_size(fn: exp.Expr) -> None:
    """Refuse `generate_series`/`repeat_row` whose literal arguments ask for too many rows."""
    if isinstance(fn, exp.ExplodingGenerateSeries | exp.GenerateSeries):
        args = [fn.args.get("start"), fn.args.get("end"), fn.args.get("step")]
    elif isinstance(fn, exp.Anonymous) and fn.name.lower() == "repeat_row":
        args = [exp.Literal.number(1), *fn.expressions[:1]]
    else:
        return
    values = [types.integer_literal(a) if a is not None else 1 for a in args]
    if None in values or len(values) < 2:
        return
    start, end, step = (values + [1])[:3]
    assert start is not None and end is not None and step is not None
    count = (end - start) // step + 1 if step else 0
    if count > MAX_CONSTANT_ROWS:
        raise unsupported(
            f"{fn.sql('postgres')} would produce {count} rows at once "
            f"(at most {MAX_CONSTANT_ROWS:,})",
            "generate the rows in parts, or load them from a file",
        )


def _table_function(fn: exp.Expr, binder: ExprBinder) -> tuple[str, exp.Expression, exp.DataType]:
    bound = binder.bind(fn)
    _check_constant_size(bound)
    if isinstance(bound, exp.ExplodingGenerateSeries | exp.GenerateSeries):
        start_type = types.infer(bound.args["start"].copy(), binder.input_types())
        t = start_type if not types.is_unknown(start_type) else types.build("bigint")
        if types.is_integer(t):
            t = types.build("bigint") if t.this == exp.DataType.Type.BIGINT else types.build("int")
        return "generate_series", bound, t
    if isinstance(bound, exp.Unnest | exp.Explode):
        arg = (bound.expressions or [bound.this])[0]
        t = types.infer(arg.copy(), binder.input_types())
        inner = (
            t.expressions[0]
            if t.this == exp.DataType.Type.ARRAY and t.expressions
            else types.build("unknown")
        )
        return "unnest", bound, inner
    if isinstance(bound, exp.Anonymous) and bound.name.lower() == "repeat_row":
        return "repeat_row", bound, types.build("bigint")
    raise unsupported(
        f"table function {fn.sql('postgres')}", "use generate_series, unnest or repeat_row"
    )


def _bind_join(join: exp.Join, left: Plan, scope: Scope, env: Env) -> tuple[Plan, Scope]:
    from dsql.planner.bind import bind_query

    side = (join.side or "").lower()
    kind = (join.kind or "").lower()
    this = join.this
    lateral_fn = (
        isinstance(this, exp.Lateral)
        or (isinstance(this, exp.Table) and isinstance(this.this, exp.Func))
        or isinstance(this, exp.Unnest)
    )
    if lateral_fn:
        if side in ("right", "full"):
            raise unsupported(f"{side.upper()} JOIN with a table function", "use an inner join")
        plan, item = _bind_item(this, env, scope, left)
        if join.args.get("on") is not None and side == "left":
            raise unsupported("LEFT JOIN LATERAL ... ON", "use an inner LATERAL join and a filter")
        new_scope = scope.with_items((*scope.items, item))
        on = join.args.get("on")
        if on is not None:
            binder = ExprBinder(env, new_scope, bind_query).with_types(types_of(plan))
            plan = Filter(plan, and_operands(binder.bind(on)))
        return plan, new_scope
    right, item = _bind_item(this, env, scope, None)
    offset = left.arity
    item = Item(item.alias, item.names, offset)
    if any(i.alias == item.alias and item.alias for i in scope.items):
        raise SchemaError(
            f"table name '{item.alias}' specified more than once", hint="give it an alias"
        )
    using = join.args.get("using")
    natural = kind == "natural" or bool(
        join.args.get("method") and str(join.args.get("method")).upper() == "NATURAL"
    )
    new_scope = scope.with_items((*scope.items, item))
    binder = ExprBinder(env, new_scope, bind_query).with_types(types_of(left) + types_of(right))
    on_expr: exp.Expression | None = None
    if using or natural:
        names = (
            [u.name for u in using]
            if using
            else [n for n in item.names if any(n in i.names for i in scope.items)]
        )
        conds = []
        for n in names:
            _, lpos = scope.resolve(n, None)
            rpos = offset + item.names.index(n)
            conds.append(exp.EQ(this=col(lpos), expression=col(rpos)))
        on_expr = as_expression(exp.and_(*conds)) if conds else None
        hidden_item = Item(item.alias, item.names, offset, hidden=tuple(names))
        new_scope = scope.with_items((*scope.items, hidden_item))
    elif join.args.get("on") is not None:
        on_expr = binder.bind(join.args["on"])
    join_kind = side if side in ("left", "right", "full") else "inner"
    if join_kind != "inner" and on_expr is None:
        raise SchemaError(f"{join_kind.upper()} JOIN needs an ON or USING condition")
    return Join(left, right, join_kind, on_expr), new_scope


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


__all__ = [
    "MAX_CONSTANT_ROWS",
    "bind_from",
    "bind_values",
]
