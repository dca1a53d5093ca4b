"""Binding a SELECT: WHERE, the select list, GROUP BY and aggregates, HAVING, ORDER BY.

Aggregation becomes a `Reduce` over the FROM plan (group expressions first mapped to
columns), and the select list, HAVING and ORDER BY expressions are rewritten onto its
output; an ORDER BY key outside the select list becomes a hidden column after the
visible ones (`Query.visible`). The FROM clause is `bind_from.py`'s; subqueries in
expressions go back to `bind.bind_query`, imported where called (it dispatches here).

>>> from dsql.planner.bind import bind
>>> from dsql.planner.catalog import StaticCatalog
>>> from dsql.planner.plan import Column
>>> from dsql.planner.types import build
>>> cat = StaticCatalog({"t": (Column("a", build("int")),)})
>>> sql = "SELECT a, count(*) FROM t GROUP BY a ORDER BY 2"
>>> q = bind(sqlglot.parse_one(sql, read="postgres"), cat)
>>> q.visible, q.order[0].column
(2, 1)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import sqlglot  # noqa: F401 - the doctest parses with it
from sqlglot import exp

from dsql.errors import DsqlError, ParseError, SchemaError
from dsql.planner import numeric
from dsql.planner.bind_from import bind_from
from dsql.planner.bind_shape import (
    and_operands,
    apply_limit,
    nulls_first_of,
    types_of,
)
from dsql.planner.bind_table_function import bound_table_function
from dsql.planner.expr import Outer, Position, SubqueryExpr, col
from dsql.planner.expr_bind import ExprBinder, aggregate_calls, is_aggregate
from dsql.planner.plan import (
    Filter,
    FlatMap,
    Map,
    Order,
    Plan,
    Project,
    Query,
)
from dsql.planner.scope import Item, Scope, column_name, position_of, unsupported
from dsql.planner.stateful import Distinct, Reduce

if TYPE_CHECKING:
    from dsql.planner.bind import Env

E = TypeVar("E", bound=DsqlError)


def bind_select(sel: exp.Select, env: Env, parent: Scope | None, top: bool) -> Query:
    """The query a SELECT binds to: FROM, WHERE, grouping, select list, ORDER BY, LIMIT."""
    from dsql.planner.bind import bind_query

    plan, scope = bind_from(sel, env, parent)
    binder = ExprBinder(env, scope, bind_query).with_types(types_of(plan))
    where = sel.args.get("where")
    if where is not None:
        predicate = binder.bind(where.this)
        if is_aggregate(predicate):
            raise SchemaError("aggregate functions are not allowed in WHERE", hint="use HAVING")
        _refuse_set_returning(predicate, "WHERE")
        plan = Filter(plan, and_operands(predicate))
    items = _select_items(sel, scope)
    exprs = [binder.bind(e) for _, e in items]
    for e in exprs:  # refused where PostgreSQL refuses them, before aggregation hides them
        _set_returning_calls(e)
    names = [n for n, _ in items]
    having = sel.args.get("having")
    having_expr = binder.bind(having.this) if having is not None else None
    if having_expr is not None:
        _refuse_set_returning(having_expr, "HAVING")
    order_nodes = list(sel.args["order"].expressions) if sel.args.get("order") else []
    orders = [_order_target(o.this, names, items, binder) for o in order_nodes]
    group_node = sel.args.get("group")
    grouped = (
        group_node is not None
        or any(
            is_aggregate(e) for e in [*exprs, *(o for o in orders if isinstance(o, exp.Expression))]
        )
        or having_expr is not None
    )
    if grouped:
        group_exprs = _group_exprs(group_node, names, items, binder)
        plan, rewrite = _aggregate(plan, group_exprs, [*exprs, having_expr, *orders])
        exprs = [rewrite(e) for e in exprs]
        orders = [rewrite(o) if isinstance(o, exp.Expression) else o for o in orders]
        if having_expr is not None:
            plan = Filter(plan, and_operands(rewrite(having_expr)))
    elif sel.args.get("group") is None and any(
        is_aggregate(o) for o in orders if not isinstance(o, int)
    ):
        raise SchemaError("aggregate in ORDER BY of a query without GROUP BY")
    plan, exprs, orders = _expand_set_returning(plan, exprs, orders)
    base = plan.arity
    hidden = [o for o in orders if isinstance(o, exp.Expression)]
    plan = Map(
        plan,
        tuple(exprs) + tuple(hidden),
        tuple(names) + tuple(f"?order{i}" for i in range(len(hidden))),
    )
    visible = len(exprs)
    keys: list[int] = []
    h = 0
    for o in orders:
        if isinstance(o, int):
            keys.append(o)
        else:
            keys.append(visible + h)
            h += 1
    plan = Project(plan, tuple(range(base, base + visible + len(hidden))))
    if sel.args.get("distinct") is not None:
        if not items:  # PostgreSQL's grammar wants a select list after DISTINCT
            raise ParseError('syntax error at or near "FROM"', hint="name what DISTINCT compares")
        if hidden:
            raise SchemaError(
                "for SELECT DISTINCT, ORDER BY expressions must appear in the select list"
            )
        distinct = sel.args["distinct"]
        if distinct.args.get("on"):
            raise unsupported("SELECT DISTINCT ON", "use GROUP BY or a window-free top-k subquery")
        plan = Distinct(plan)
    order = tuple(
        Order(k, bool(o.args.get("desc")), nulls_first_of(o))
        for k, o in zip(keys, order_nodes, strict=False)
    )
    q = Query(plan, visible, order)
    return apply_limit(q, sel, top)


#: The set-returning functions a select list may call: each row of the function's result
#: is a row of the query (PostgreSQL's `SELECT x, generate_series(1, x) FROM t`).
SET_RETURNING = (exp.Explode, exp.Unnest, exp.ExplodingGenerateSeries, exp.GenerateSeries)

#: Where PostgreSQL refuses a set-returning function inside an expression.
_CONDITIONAL: dict[type, str] = {exp.Case: "CASE", exp.If: "CASE", exp.Coalesce: "COALESCE"}


def _set_returning_calls(e: exp.Expression) -> list[exp.Expression]:
    """The set-returning calls in `e` (not in subqueries); an error where PostgreSQL
    refuses one (inside CASE, COALESCE, an aggregate or another such call)."""
    found: list[exp.Expression] = []

    def visit(node: exp.Expression, inside: str | None) -> None:
        if isinstance(node, SubqueryExpr):
            return
        if isinstance(node, exp.Anonymous) and node.name.lower() == "repeat_row":
            raise _located(
                SchemaError(
                    "repeat_row() may only be called in FROM",
                    hint="SELECT ... FROM t, repeat_row(n)",
                ),
                node,
            )
        if isinstance(node, SET_RETURNING):
            if inside is not None:
                raise _located(
                    SchemaError(
                        f"set-returning functions are not allowed in {inside}",
                        hint="call it in FROM (a LATERAL table function) and use its column",
                    ),
                    node,
                )
            found.append(node)
            inside = "the arguments of a set-returning function"
        elif type(node) in _CONDITIONAL and not node.meta.get(numeric.ZERO_GUARD):
            inside = inside or _CONDITIONAL[type(node)]
        elif isinstance(node, exp.AggFunc):
            inside = inside or "aggregate function calls"
        for child in node.iter_expressions():
            visit(child, inside)

    visit(e, None)
    return found


def _located(error: E, node: exp.Expression) -> E:
    error.position = position_of(node)
    return error


def _refuse_set_returning(e: exp.Expression, clause: str) -> None:
    calls = _set_returning_calls(e)
    if calls:
        raise _located(
            SchemaError(
                f"set-returning functions are not allowed in {clause}",
                hint="call it in FROM (a LATERAL table function) and filter its column",
            ),
            calls[0],
        )


def _expand_set_returning(
    plan: Plan, exprs: list[exp.Expression], orders: list[Any]
) -> tuple[Plan, list[exp.Expression], list[Any]]:
    """The select list's set-returning call as a `FlatMap` over `plan`, and the select
    list and ORDER BY reading its column: a table function, not a value, so that no
    pass drops it with its column (it decides how many rows there are).

    Equal calls are one (PostgreSQL runs them in step: the same rows). Different calls
    PostgreSQL zips row by row, padding the shorter with NULLs; that is refused.
    """
    calls: list[exp.Expression] = []
    for e in [*exprs, *(o for o in orders if isinstance(o, exp.Expression))]:
        for call in _set_returning_calls(e):
            if call not in calls:
                calls.append(call)
    if not calls:
        return plan, exprs, orders
    if len(calls) > 1:
        raise unsupported(
            "several different set-returning functions in one select list",
            "call them in FROM, joined as you need them (FROM unnest(a) AS x, "
            "generate_series(1, 3) AS g), or keep one per select list",
        )
    (call,) = calls
    name, function, out_type = bound_table_function(call, types_of(plan))
    position = plan.arity
    flat = FlatMap(plan, function, (name,), (out_type,))

    def read(e: Any) -> Any:
        if not isinstance(e, exp.Expression):
            return e
        return e.transform(lambda n: col(position) if n == call else n)

    return flat, [read(e) for e in exprs], [read(o) for o in orders]


def _select_items(sel: exp.Select, scope: Scope) -> list[tuple[str, exp.Expression]]:
    out: list[tuple[str, exp.Expression]] = []
    for e in sel.expressions:
        if isinstance(e, exp.Star):
            for item in scope.items:
                if item.unqualified:
                    out.extend(_item_columns(item))
        elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            out.extend(_item_columns(scope.item(e.table)))
        else:
            value = e.this if isinstance(e, exp.Alias) else e
            out.append((column_name(e), value))
    return out


def _item_columns(item: Item) -> list[tuple[str, exp.Expression]]:
    # By position: a name may occur twice in one item (a view's two `?column?`).
    return [(n, Position(this=p)) for n, p in zip(item.names, item.positions, strict=True)]


def _order_target(
    e: exp.Expression, names: list[str], items: list[tuple[str, exp.Expression]], binder: ExprBinder
) -> int | exp.Expression:
    """An ORDER BY key: an output position (ordinal or output name) or an expression."""
    if isinstance(e, exp.Literal) and not e.is_string:
        if not e.this.isdigit():
            raise SchemaError(
                f"non-integer constant {e.this} in ORDER BY",
                hint="order by a column's position (ORDER BY 1) or by an expression",
            )
        n = int(e.this)
        if not 1 <= n <= len(names):
            raise SchemaError(f"ORDER BY position {n} is not in select list")
        return n - 1
    if isinstance(e, exp.Column) and not e.table and e.name in names:
        return names.index(e.name)
    bound = binder.bind(e)
    for i, (_, item) in enumerate(items):
        if binder.bind(item) == bound:
            return i
    return bound


def _group_exprs(
    group: exp.Group | None,
    names: list[str],
    items: list[tuple[str, exp.Expression]],
    binder: ExprBinder,
) -> list[exp.Expression]:
    if group is None:
        return []
    for kind in ("grouping_sets", "rollup", "cube"):
        if group.args.get(kind):
            raise unsupported(
                "GROUPING SETS, ROLLUP and CUBE are",
                "write one GROUP BY query per grouping set and combine them with UNION ALL",
            )
    out = []
    for g in group.expressions:
        if isinstance(g, exp.Tuple) and not g.expressions:
            continue  # `()`, the empty grouping set: one group of all rows, even of none
        if isinstance(g, exp.Neg) and isinstance(g.this, exp.Literal) and g.this.is_number:
            # PostgreSQL's grammar folds the sign into the constant: `-2.25` is a
            # non-integer constant, `-1` a position that is not in the select list.
            if g.this.this.isdigit():
                raise _located(
                    SchemaError(f"GROUP BY position -{g.this.this} is not in select list"), g
                )
            raise _located(SchemaError("non-integer constant in GROUP BY"), g)
        if isinstance(g, exp.GroupingSets | exp.Rollup | exp.Cube):
            raise _located(
                unsupported(
                    "GROUPING SETS, ROLLUP and CUBE are",
                    "write one GROUP BY query per grouping set and combine them with UNION ALL",
                ),
                g,
            )
        if isinstance(g, exp.Boolean | exp.Null) or (
            isinstance(g, exp.Literal) and (g.is_string or not g.this.isdigit())
        ):
            # PostgreSQL reads a constant as an output position only when it is an integer;
            # any other constant is an error rather than one group of every row.
            raise _located(SchemaError("non-integer constant in GROUP BY"), g)
        if isinstance(g, exp.Literal):
            n = int(g.this)
            if not 1 <= n <= len(items):
                raise SchemaError(f"GROUP BY position {n} is not in select list")
            out.append(binder.bind(items[n - 1][1]))
            continue
        try:
            out.append(binder.bind(g))
        except SchemaError:
            if isinstance(g, exp.Column) and not g.table and g.name in names:
                out.append(binder.bind(items[names.index(g.name)][1]))
            else:
                raise
    return out


def _aggregate(plan: Plan, group: list[exp.Expression], uses: list[Any]):  # type: ignore[no-untyped-def]
    """A Reduce for the grouping, and a rewrite of post-aggregation expressions onto it."""
    calls: list[exp.Expression] = []
    for u in uses:
        if isinstance(u, exp.Expression):
            for c in aggregate_calls(u):
                if c not in calls:
                    calls.append(c)
    n = plan.arity
    mapped = (
        Map(plan, tuple(group), tuple(f"?group{i}" for i in range(len(group)))) if group else plan
    )
    if not group and not calls:
        # A HAVING or GROUP BY () without aggregates still makes one group of all rows;
        # count(*) gives that group's row a column (its value is never read).
        calls.append(exp.Count(this=exp.Star()))
    names = tuple(f"?agg{i}" for i in range(len(calls)))
    for c in calls:
        if any(is_aggregate(a) for a in c.iter_expressions() if isinstance(a, exp.Expression)):
            raise _located(SchemaError("aggregate function calls cannot be nested"), c)
        if _of_outer_rows(c):
            raise unsupported(
                "an aggregate in a subquery whose arguments are all columns of an outer query",
                "aggregate in the outer query and pass the result in (PostgreSQL evaluates "
                "such an aggregate as part of the outer query)",
            )
    reduce = Reduce(mapped, tuple(range(n, n + len(group))), tuple(calls), names)
    g = len(group)

    def rewrite(e: exp.Expression) -> exp.Expression:
        def replace(node: exp.Expression) -> exp.Expression:
            for i, ge in enumerate(group):
                if node == ge:
                    return col(i)
            for i, c in enumerate(calls):
                if node == c:
                    return col(g + i)
            if isinstance(node, exp.Column) and node.name.startswith("_c"):
                name = plan.column_names[int(node.name[2:])]
                raise SchemaError(
                    f'column "{name}" must appear in the GROUP BY clause '
                    "or be used in an aggregate function",
                    hint="add it to GROUP BY or wrap it in an aggregate such as min(...)",
                )
            return node

        return e.copy().transform(replace)

    return reduce, rewrite


def _of_outer_rows(call: exp.Expression) -> bool:
    """Whether a bound aggregate call reads an outer query's columns and none of its own
    query's: PostgreSQL makes it an aggregate of the outer query (over the outer rows),
    not of the subquery's rows."""
    nodes = list(call.walk())
    outer = any(isinstance(n, Outer) for n in nodes)
    own = any(isinstance(n, exp.Column) and n.name.startswith("_c") for n in nodes)
    return outer and not own


__all__ = [
    "bind_select",
]
