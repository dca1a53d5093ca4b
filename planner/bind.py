"""Binding: a sqlglot query AST plus a catalog becomes a logical plan (`plan.Query`).

Names resolve to positions (`scope.Scope`), `*` expands, GROUP BY/aggregates
become `Reduce`, set operations become unions of (negated) inputs with
`Distinct`/`Threshold`, VALUES becomes `Constant`, table functions `FlatMap`,
CTEs are inlined (recursive ones become `LetRec`). Subqueries stay as
`SubqueryExpr` values with `Outer` references; `decorrelate` removes them.
Scalar expressions stay sqlglot trees; only PostgreSQL-specific meaning that
the engines would read differently is made explicit (integer division).

>>> from dsql.planner.catalog import StaticCatalog
>>> from dsql.planner.plan import Column
>>> from dsql.planner.types import build
>>> cat = StaticCatalog({"t": (Column("a", build("int")), Column("b", build("text")))})
>>> q = bind(sqlglot.parse_one("SELECT b, a + 1 AS c FROM t WHERE a > 2", read="postgres"), cat)
>>> [c.name for c in q.columns]
['b', 'c']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlglot  # noqa: F401 - the doctest parses with it
from sqlglot import exp

from dsql.errors import SchemaError, UnsupportedError
from dsql.planner import types
from dsql.planner.catalog import Catalog
from dsql.planner.expr_bind import ExprBinder, aggregate_calls, is_aggregate
from dsql.planner.plan import (
    Column,
    Constant,
    Distinct,
    Filter,
    FlatMap,
    Get,
    Join,
    LetRec,
    LocalGet,
    Map,
    Negate,
    Order,
    Plan,
    Position,
    Project,
    Query,
    Reduce,
    Threshold,
    TopK,
    Union,
    col,
)
from dsql.planner.recursive_term import check_recursive_term
from dsql.planner.scope import Item, Scope, column_name, unsupported

#: Default bound on the rounds of a recursive query (WITH RECURSIVE / MUTUALLY RECURSIVE).
DEFAULT_RECURSION_LIMIT = 10_000


@dataclass
class Env:
    """What a query level can see: the catalog and the CTEs in scope."""

    catalog: Catalog
    ctes: dict[str, Plan] = field(default_factory=dict)

    def child(self, **ctes: Plan) -> Env:
        return Env(self.catalog, {**self.ctes, **ctes})


def bind(query: Any, catalog: Catalog) -> Query:
    """The logical plan of a query (a sqlglot query, or a grammar `MutuallyRecursive`)."""
    return bind_query(query, Env(catalog), None, top=True)


def bind_query(node: Any, env: Env, parent: Scope | None, top: bool = False) -> Query:
    """Bind any query form; `parent` is the enclosing scope of a subquery."""
    if _is_mutually_recursive(node):
        return _bind_mutually_recursive(node, env, parent, top)
    with_ = node.args.get("with_") if isinstance(node, exp.Expression) else None
    if with_ is not None:
        env = _bind_ctes(with_, env, parent)
        node = node.copy()
        node.set("with_", None)
    match node:
        case exp.Subquery():
            inner = bind_query(node.this, env, parent, top)
            return _order_limit(inner, node, top)
        case exp.Select():
            return _bind_select(node, env, parent, top)
        case exp.Union() | exp.Except() | exp.Intersect():
            return _bind_setop(node, env, parent, top)
        case exp.Values():
            plan = _bind_values(node, env, parent)
            return Query(plan, plan.arity)
    raise UnsupportedError(
        f"{type(node).__name__} is not a query dsql can compile",
        hint="write SELECT, VALUES, WITH or a set operation",
    )


# --- CTEs and recursion --------------------------------------------------------------


def _bind_ctes(with_: exp.With, env: Env, parent: Scope | None) -> Env:
    recursive = bool(with_.args.get("recursive"))
    seen: set[str] = set()
    for cte in with_.expressions:
        name = cte.alias_or_name
        if name in seen:
            raise SchemaError(
                f"WITH query name '{name}' is specified more than once",
                hint="give each query of one WITH clause its own name",
            )
        seen.add(name)
        if recursive and _references(cte.this, name):
            env = env.child(**{name: _bind_recursive_cte(cte, env, parent)})
            continue
        q = bind_query(cte.this, env, parent)
        env = env.child(**{name: _rename(_visible(q), _alias_columns(cte.args.get("alias")))})
    return env


def _references(node: exp.Expression, name: str) -> bool:
    return any(t.name == name and not t.args.get("db") for t in node.find_all(exp.Table))


def _bind_recursive_cte(cte: exp.CTE, env: Env, parent: Scope | None) -> Plan:
    """`WITH RECURSIVE r AS (base UNION [ALL] step)`: the SQL standard's fixpoint."""
    name = cte.alias_or_name
    body = cte.this
    if not isinstance(body, exp.Union):
        raise SchemaError(
            f"recursive query '{name}' must be of the form base UNION [ALL] recursive-part",
        )
    check_recursive_term(body, name)
    base = bind_query(body.this, env, parent)
    columns = _column_defs(_visible(base), _alias_columns(cte.args.get("alias")))
    local = LocalGet(name, columns)
    step = bind_query(body.expression, env.child(**{name: local}), parent)
    base_plan = _rename(_visible(base), tuple(c.name for c in columns))
    step_plan = _cast_to(_visible(step), columns, f"recursive query '{name}'")
    # UNION ALL: SQL feeds each round only the last round's new rows; summed over
    # rounds that is the fixpoint of r = base + step(r) (the step is linear in r).
    # UNION: the same, duplicates removed.
    value: Plan = Union((_cast_to(base_plan, columns, name), step_plan))
    if body.args.get("distinct", True):
        value = Distinct(value)
    return LetRec((name,), (value,), LocalGet(name, columns), DEFAULT_RECURSION_LIMIT, "error")


def _is_mutually_recursive(node: Any) -> bool:
    return type(node).__name__ == "MutuallyRecursive"


def _bind_mutually_recursive(node: Any, env: Env, parent: Scope | None, top: bool) -> Query:
    locals_: dict[str, Plan] = {}
    for b in node.bindings:
        cols = tuple(Column(c.name, types.build(c.type)) for c in b.columns)
        locals_[b.name] = LocalGet(b.name, cols)
    inner = env.child(**locals_)
    values = []
    for b in node.bindings:
        q = bind_query(b.query, inner, parent)
        values.append(_cast_to(_visible(q), locals_[b.name].columns, f"binding '{b.name}'"))
    body = bind_query(node.body, inner, parent, top)
    limit = node.limit if node.limit is not None else DEFAULT_RECURSION_LIMIT
    plan = LetRec(
        tuple(b.name for b in node.bindings),
        tuple(values),
        body.plan,
        limit,
        node.on_limit or "error",
    )
    return Query(plan, body.visible, body.order, body.limit, body.offset)


# --- SELECT ----------------------------------------------------------------------------


def _bind_select(sel: exp.Select, env: Env, parent: Scope | None, top: bool) -> Query:
    plan, scope = _bind_from(sel, env, parent)
    binder = ExprBinder(env, scope, bind_query).with_types(_types_of(plan))
    where = sel.args.get("where")
    if where is not None:
        predicate = binder.bind(where.this)
        if is_aggregate(predicate):
            raise SchemaError("aggregate functions are not allowed in WHERE", hint="use HAVING")
        plan = Filter(plan, _conjuncts(predicate))
    items = _select_items(sel, scope)
    exprs = [binder.bind(e) for _, e in items]
    names = [n for n, _ in items]
    having = sel.args.get("having")
    having_expr = binder.bind(having.this) if having is not None else None
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
            plan = Filter(plan, _conjuncts(rewrite(having_expr)))
    elif sel.args.get("group") is None and any(
        is_aggregate(o) for o in orders if not isinstance(o, int)
    ):
        raise SchemaError("aggregate in ORDER BY of a query without GROUP BY")
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
        if hidden:
            raise SchemaError(
                "for SELECT DISTINCT, ORDER BY expressions must appear in the select list"
            )
        distinct = sel.args["distinct"]
        if distinct.args.get("on"):
            raise unsupported("SELECT DISTINCT ON", "use GROUP BY or a window-free top-k subquery")
        plan = Distinct(plan)
    order = tuple(
        Order(k, bool(o.args.get("desc")), _nulls_first(o))
        for k, o in zip(keys, order_nodes, strict=False)
    )
    q = Query(plan, visible, order)
    return _limit(q, sel, top)


def _nulls_first(o: exp.Ordered) -> bool:
    """PostgreSQL's default: NULLs sort as larger than every value."""
    explicit = o.args.get("nulls_first")
    desc = bool(o.args.get("desc"))
    return bool(explicit) if explicit is not None else desc


def _select_items(sel: exp.Select, scope: Scope) -> list[tuple[str, exp.Expression]]:
    out: list[tuple[str, exp.Expression]] = []
    for e in sel.expressions:
        if isinstance(e, exp.Star):
            for item in scope.items:
                out.extend(_item_columns(item))
        elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            out.extend(_item_columns(scope.item(e.table)))
        else:
            value = e.this if isinstance(e, exp.Alias) else e
            out.append((column_name(e), value))
    return out


def _item_columns(item: Item) -> list[tuple[str, exp.Expression]]:
    # By position: a name may occur twice in one item (a view's two `?column?`).
    return [
        (n, Position(this=item.offset + i))
        for i, n in enumerate(item.names)
        if n not in item.hidden
    ]


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
            raise SchemaError(f"ORDER BY position {n} is not in the select list")
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
    out = []
    for g in group.expressions:
        if isinstance(g, exp.Literal) and not g.is_string:
            n = int(g.this)
            if not 1 <= n <= len(items):
                raise SchemaError(f"GROUP BY position {n} is not in the select list")
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
    names = tuple(f"?agg{i}" for i in range(len(calls)))
    for c in calls:
        if any(is_aggregate(a) for a in c.iter_expressions() if isinstance(a, exp.Expression)):
            raise SchemaError(f"aggregate calls cannot be nested: {c.sql('postgres')}")
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
                raise SchemaError(
                    f"column #{node.name[2:]} must appear in the GROUP BY clause "
                    "or be used in an aggregate function",
                    hint="add it to GROUP BY or wrap it in an aggregate such as min(...)",
                )
            return node

        return e.copy().transform(replace)

    return reduce, rewrite


def _limit(q: Query, node: exp.Expression, top: bool) -> Query:
    limit = _int_arg(node.args.get("limit"), "LIMIT")
    offset = _int_arg(node.args.get("offset"), "OFFSET") or 0
    if limit is None and not offset:
        return (
            q if top or not q.order else Query(Project(q.plan, tuple(range(q.visible))), q.visible)
        )
    if top:
        return Query(q.plan, q.visible, q.order, limit, offset)
    plan = TopK(q.plan, (), q.order, limit, offset)
    return Query(Project(plan, tuple(range(q.visible))), q.visible)


def _order_limit(inner: Query, node: exp.Expression, top: bool) -> Query:
    if node.args.get("order") or node.args.get("limit") or node.args.get("offset"):
        raise unsupported(
            "ORDER BY/LIMIT on a parenthesized query", "move it inside the parentheses"
        )
    return inner


def _int_arg(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    value = node.args.get("expression") if isinstance(node, exp.Limit | exp.Offset) else node
    if isinstance(node, exp.Limit | exp.Offset) and value is None:
        value = node.this
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        if int(value.this) >= 2**63:
            raise SchemaError(f"{what} {value.this} is out of range", hint="at most 2^63 - 1")
        return int(value.this)
    if isinstance(value, exp.Null):
        return None
    raise SchemaError(f"{what} must be a non-negative integer literal")


# --- FROM ------------------------------------------------------------------------------


def _bind_from(sel: exp.Select, env: Env, parent: Scope | None) -> tuple[Plan, Scope]:
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
    alias_node = node.args.get("alias")
    aliases = _alias_columns(alias_node)
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
        plan = _rename(plan, aliases)
        return plan, Item(alias or name, tuple(c.name for c in plan.columns), 0)
    if isinstance(node, exp.Subquery):
        if isinstance(node.this, exp.Values):
            plan = _bind_values(node.this, env, scope.parent)
        else:
            plan = _visible(
                bind_query(node.this, env, scope if node.args.get("lateral") else scope.parent)
            )
        plan = _rename(plan, aliases)
        return plan, Item(alias or "", tuple(c.name for c in plan.columns), 0)
    if isinstance(node, exp.Values):
        plan = _rename(_bind_values(node, env, scope.parent), aliases)
        return plan, Item(alias or "", tuple(c.name for c in plan.columns), 0)
    raise unsupported(f"FROM item {node.sql('postgres')}", "read a table, a view or a subquery")


def _bind_lateral(
    fn: exp.Expression,
    alias: str | None,
    aliases: tuple[str, ...],
    env: Env,
    scope: Scope,
    left: Plan | None,
) -> tuple[Plan, Item]:
    base = left if left is not None else Constant(((),), ())
    offset = base.arity
    if isinstance(fn, exp.Subquery | exp.Select):
        query = fn.this if isinstance(fn, exp.Subquery) else fn
        right = _visible(bind_query(query, env, Scope(scope.items, scope.parent)))
        right = _rename(right, aliases)
        plan: Plan = Join(base, right, "inner", None, lateral=True)
        return plan, Item(alias or "", tuple(c.name for c in right.columns), offset)
    binder = ExprBinder(env, scope, bind_query).with_types(_types_of(base))
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


def _check_constant_size(fn: exp.Expression) -> None:
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


def _table_function(
    fn: exp.Expression, binder: ExprBinder
) -> tuple[str, exp.Expression, exp.DataType]:
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
            binder = ExprBinder(env, new_scope, bind_query).with_types(_types_of(plan))
            plan = Filter(plan, _conjuncts(binder.bind(on)))
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
    binder = ExprBinder(env, new_scope, bind_query).with_types(_types_of(left) + _types_of(right))
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
        on_expr = exp.and_(*conds) if conds else None
        hidden_item = Item(item.alias, item.names, offset, hidden=tuple(names))
        new_scope = scope.with_items((*scope.items, hidden_item))
    elif join.args.get("on") is not None:
        on_expr = binder.bind(join.args["on"])
    join_kind = side if side in ("left", "right", "full") else "inner"
    if join_kind != "inner" and on_expr is None:
        raise SchemaError(f"{join_kind.upper()} JOIN needs an ON or USING condition")
    return Join(left, right, join_kind, on_expr), new_scope


# --- set operations and VALUES ---------------------------------------------------------------


def _bind_setop(node: exp.Expression, env: Env, parent: Scope | None, top: bool) -> Query:
    left = _visible(bind_query(node.this, env, parent))
    right = _visible(bind_query(node.expression, env, parent))
    if left.arity != right.arity:
        raise SchemaError(
            f"each {type(node).__name__.upper()} query must have the same number of columns",
            hint=f"the left side has {left.arity}, the right side {right.arity}",
        )
    columns = Union((left, right)).columns
    left = _cast_to(left, columns, "set operation")
    right = _cast_to(right, columns, "set operation")
    distinct = node.args.get("distinct", True) is not False
    plan: Plan
    match node:
        case exp.Union():
            plan = Union((left, right))
            if distinct:
                plan = Distinct(plan)
        case exp.Except():
            if distinct:
                left, right = Distinct(left), Distinct(right)
            plan = Threshold(Union((left, Negate(right))))
        case _:  # Intersect
            if distinct:
                left, right = Distinct(left), Distinct(right)
            plan = Union((left, Negate(Threshold(Union((left, Negate(right)))))))
    order_nodes = list(node.args["order"].expressions) if node.args.get("order") else []
    names = [c.name for c in plan.columns]
    order = []
    for o in order_nodes:
        e = o.this
        if isinstance(e, exp.Literal) and not e.is_string:
            k = int(e.this) - 1
        elif isinstance(e, exp.Column) and e.name in names:
            k = names.index(e.name)
        else:
            raise SchemaError("ORDER BY of a set operation must name an output column or position")
        order.append(Order(k, bool(o.args.get("desc")), _nulls_first(o)))
    return _limit(Query(plan, plan.arity, tuple(order)), node, top)


def _bind_values(node: exp.Values, env: Env, parent: Scope | None) -> Plan:
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
            t = types.common_type(t, types.infer(r[i].copy(), []), "VALUES")
        col_types.append(t)
    rows = [tuple(_cast_value(v, t) for v, t in zip(r, col_types, strict=False)) for r in rows]
    names = _alias_columns(node.args.get("alias")) or tuple(f"column{i + 1}" for i in range(width))
    return Constant(
        tuple(rows), tuple(Column(n, t) for n, t in zip(names, col_types, strict=False))
    )


def _cast_value(v: exp.Expression, t: exp.DataType) -> exp.Expression:
    if types.is_unknown(t):
        return v
    current = types.infer(v.copy(), [])
    if current == t:
        return v
    return exp.Cast(this=v, to=t.copy())


# --- helpers ----------------------------------------------------------------------------------


def _visible(q: Query) -> Plan:
    if q.visible == q.plan.arity and not q.order and q.limit is None and not q.offset:
        return q.plan
    plan = q.plan
    if q.limit is not None or q.offset:
        plan = TopK(plan, (), q.order, q.limit, q.offset)
    return Project(plan, tuple(range(q.visible))) if q.visible != plan.arity else plan


def _alias_columns(alias: exp.Expression | None) -> tuple[str, ...]:
    if alias is None:
        return ()
    return tuple(c.name for c in alias.args.get("columns") or ())


def _rename(plan: Plan, names: tuple[str, ...]) -> Plan:
    """The plan with its first columns renamed (a no-op Map + Project keeps it a value)."""
    if not names:
        return plan
    if len(names) > plan.arity:
        raise SchemaError(f"{len(names)} column aliases given for {plan.arity} columns")
    new_names = tuple(names) + tuple(c.name for c in plan.columns[len(names) :])
    mapped = Map(plan, tuple(col(i) for i in range(plan.arity)), new_names)
    return Project(mapped, tuple(range(plan.arity, 2 * plan.arity)))


def _column_defs(plan: Plan, names: tuple[str, ...]) -> tuple[Column, ...]:
    cols = list(plan.columns)
    return tuple(Column(names[i] if i < len(names) else c.name, c.type) for i, c in enumerate(cols))


def _cast_to(plan: Plan, columns: tuple[Column, ...], where: str) -> Plan:
    """The plan with each column cast to the target type where they differ."""
    if plan.arity != len(columns):
        raise SchemaError(f"{where}: {plan.arity} columns where {len(columns)} are declared")
    casts = []
    changed = False
    for i, (have, want) in enumerate(zip(plan.columns, columns, strict=False)):
        if have.type == want.type or types.is_unknown(want.type):
            casts.append(col(i))
        else:
            types.common_type(want.type, have.type, where)
            casts.append(exp.Cast(this=col(i), to=want.type.copy()))
            changed = True
    if not changed and all(a.name == b.name for a, b in zip(plan.columns, columns, strict=False)):
        return plan
    mapped = Map(plan, tuple(casts), tuple(c.name for c in columns))
    return Project(mapped, tuple(range(plan.arity, 2 * plan.arity)))


def _types_of(plan: Plan) -> list[exp.DataType]:
    return [c.type for c in plan.columns]


def _conjuncts(e: exp.Expression) -> tuple[exp.Expression, ...]:
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    if isinstance(e, exp.Paren):
        return _conjuncts(e.this)
    return (e,)


__all__ = ["DEFAULT_RECURSION_LIMIT", "Env", "bind", "bind_query"]
