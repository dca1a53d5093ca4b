"""Binding: a sqlglot query AST plus a catalog becomes a logical plan (`plan.Query`).

Names resolve to positions (`scope.Scope`), `*` expands, GROUP BY/aggregates
become `Reduce`, set operations become unions of (negated) inputs with
`Distinct`/`Threshold`, VALUES becomes `Constant`, table functions `FlatMap`,
CTEs are inlined (recursive ones become `LetRec`). Subqueries stay as
`SubqueryExpr` values with `Outer` references; `decorrelate` removes them.
Scalar expressions stay sqlglot trees; only PostgreSQL-specific meaning that
the engines would read differently is made explicit (integer division).

This module is the entry (`bind`, `bind_query`, which dispatches on the query form),
CTEs and recursion, and set operations; `bind_select.py` binds a SELECT,
`bind_from.py` its FROM clause and VALUES, `bind_shape.py` ORDER BY/LIMIT and
column renaming and casting; `expr_bind.py` binds scalar expressions.

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
from dsql.planner.bind_from import bind_values
from dsql.planner.bind_select import bind_select
from dsql.planner.bind_shape import (
    alias_columns,
    apply_limit,
    cast_plan,
    column_defs,
    nulls_first_of,
    refuse_outer_order_limit,
    rename_plan,
    visible_plan,
)
from dsql.planner.catalog import Catalog
from dsql.planner.decorrelate import shift_levels
from dsql.planner.expr import Outer
from dsql.planner.plan import (
    Column,
    LocalGet,
    Negate,
    Order,
    Plan,
    Project,
    Query,
    Union,
)
from dsql.planner.recursive_term import check_recursive_term
from dsql.planner.scope import Scope
from dsql.planner.stateful import Distinct, Join, LetRec, Threshold, expressions_of
from dsql.planner.volatile import plan_volatile_calls

#: Default bound on the rounds of a recursive query (WITH RECURSIVE / MUTUALLY RECURSIVE).
DEFAULT_RECURSION_LIMIT = 10_000


@dataclass
class Env:
    """What a query level can see: the catalog and the CTEs in scope.

    `levels` holds, for each CTE that reads the enclosing query's row, the parent scope
    of the level that defined it: its `Outer` references count levels from there, and a
    query nested deeper reads it with them shifted (`cte`).
    """

    catalog: Catalog
    ctes: dict[str, Plan] = field(default_factory=dict)
    levels: dict[str, Scope | None] = field(default_factory=dict)

    def child(self, **ctes: Plan) -> Env:
        levels = {n: p for n, p in self.levels.items() if n not in ctes}
        return Env(self.catalog, {**self.ctes, **ctes}, levels)

    def defined(self, name: str, plan: Plan, parent: Scope | None) -> Env:
        """This env with CTE `name` bound to `plan` by a query whose parent is `parent`."""
        env = self.child(**{name: plan})
        if _reads_outer(plan):
            env.levels[name] = parent
        return env

    def cte(self, name: str, parent: Scope | None) -> Plan:
        """CTE `name` as read by a FROM item of a query whose parent is `parent`: read
        `k` levels below its definition, its outer references reach `k` levels further."""
        plan = self.ctes[name]
        if name not in self.levels:
            return plan
        below, scope = 0, parent
        while scope is not self.levels[name]:
            assert scope is not None, "a CTE is read only below the query defining it"
            below, scope = below + 1, scope.parent
        return shift_levels(plan, below) if below else plan


def _reads_outer(plan: Plan) -> bool:
    """Whether `plan` reads its enclosing query's row: an `Outer` outside the right side
    of a LATERAL join (whose `Outer`s read the join's left row) and outside subqueries."""
    if isinstance(plan, Join) and plan.lateral:
        inputs: tuple[Plan, ...] = (plan.left,)
    else:
        inputs = plan.inputs
    return any(isinstance(n, Outer) for e in expressions_of(plan) for n in e.walk()) or any(
        _reads_outer(i) for i in inputs
    )


def bind(query: Any, catalog: Catalog) -> Query:
    """The logical plan of a query (a sqlglot query, or a grammar `MutuallyRecursive`)."""
    return bind_query(query, Env(catalog), None, top=True)


def bind_query(node: Any, env: Env, parent: Scope | None, top: bool = False) -> Query:
    """Bind any query form; `parent` is the enclosing scope of a subquery."""
    if _is_mutually_recursive(node):
        return _bind_mutually_recursive(node, env, parent, top)
    with_ = node.args.get("with_") if isinstance(node, exp.Expression) else None
    if with_ is None:
        return _bind_form(node, env, parent, top)
    env, once = _bind_ctes(with_, env, parent)
    node = node.copy()
    node.set("with_", None)
    q = _bind_form(node, env, parent, top)
    if not once:
        return q
    names = tuple(once)
    plan = LetRec(names, tuple(once.values()), q.plan, DEFAULT_RECURSION_LIMIT, "error")
    return Query(plan, q.visible, q.order, q.limit, q.offset)


def _bind_form(node: Any, env: Env, parent: Scope | None, top: bool) -> Query:
    match node:
        case exp.Subquery():
            inner = bind_query(node.this, env, parent, top)
            return refuse_outer_order_limit(inner, node, top)
        case exp.Select():
            return bind_select(node, env, parent, top)
        case exp.Union() | exp.Except() | exp.Intersect():
            return _bind_setop(node, env, parent, top)
        case exp.Values():
            plan = bind_values(node, env, parent)
            return apply_limit(Query(plan, plan.arity, _output_order(node, plan)), node, top)
    raise UnsupportedError(
        f"{type(node).__name__} is not a query dsql can compile",
        hint="write SELECT, VALUES, WITH or a set operation",
    )


# --- CTEs and recursion --------------------------------------------------------------


def _bind_ctes(with_: exp.With, env: Env, parent: Scope | None) -> tuple[Env, dict[str, Plan]]:
    """The env with the CTEs of `with_`, and those to evaluate once for all their readers.

    A CTE is evaluated once, as PostgreSQL does: inlined, each reader evaluates it
    again, which changes nothing unless a volatile function (`random()`) decides its
    rows. Such a CTE is a binding of a `LetRec` around the query (it needs no more than
    one round), read by `LocalGet` wherever the query names it, where `_shareable`.
    """
    once: dict[str, Plan] = {}
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
            env = env.defined(name, _bind_recursive_cte(cte, env, parent), parent)
            continue
        q = bind_query(cte.this, env, parent)
        plan = rename_plan(visible_plan(q), alias_columns(cte.args.get("alias")))
        if plan_volatile_calls(plan) and _shareable(plan):
            once[name] = plan
            plan = LocalGet(name, plan.columns)
        env = env.defined(name, plan, parent)
    return env, once


def _shareable(plan: Plan) -> bool:
    """Whether a CTE can be a `LetRec` binding: its columns' types are known (a loop's
    variable has a schema) and it does not read its enclosing query's row."""
    return not _reads_outer(plan) and not any(types.is_unknown(c.type) for c in plan.columns)


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
    columns = column_defs(visible_plan(base), alias_columns(cte.args.get("alias")))
    local = LocalGet(name, columns)
    step = bind_query(body.expression, env.child(**{name: local}), parent)
    base_plan = rename_plan(visible_plan(base), tuple(c.name for c in columns))
    step_plan = cast_plan(visible_plan(step), columns, f"recursive query '{name}'")
    # UNION ALL: SQL feeds each round only the last round's new rows; summed over
    # rounds that is the fixpoint of r = base + step(r) (the step is linear in r).
    # UNION: the same, duplicates removed.
    value: Plan = Union((cast_plan(base_plan, columns, name), step_plan))
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
        values.append(cast_plan(visible_plan(q), locals_[b.name].columns, f"binding '{b.name}'"))
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


# --- set operations ---------------------------------------------------------------------------


def _bind_setop(node: exp.Expression, env: Env, parent: Scope | None, top: bool) -> Query:
    left = visible_plan(bind_query(node.this, env, parent))
    right = visible_plan(bind_query(node.expression, env, parent))
    if node.args.get("by_name"):
        left, right = _corresponding(node, left, right)
    if left.arity != right.arity:
        raise SchemaError(
            f"each {type(node).__name__.upper()} query must have the same number of columns",
            hint=f"the left side has {left.arity}, the right side {right.arity}",
        )
    columns = Union((left, right)).columns
    left = cast_plan(left, columns, "set operation")
    right = cast_plan(right, columns, "set operation")
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
    return apply_limit(Query(plan, plan.arity, _output_order(node, plan)), node, top)


def _output_order(node: exp.Expression, plan: Plan) -> tuple[Order, ...]:
    """The ORDER BY of a set operation or VALUES: output columns by name or position."""
    order_nodes = list(node.args["order"].expressions) if node.args.get("order") else []
    names = [c.name for c in plan.columns]
    order = []
    for o in order_nodes:
        e = o.this
        if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
            k = int(e.this) - 1
            if not 0 <= k < len(names):
                raise SchemaError(f"ORDER BY position {e.this} is not in select list")
        elif isinstance(e, exp.Column) and not e.table and e.name in names:
            k = names.index(e.name)
        else:
            what = "VALUES" if isinstance(node, exp.Values) else "a set operation"
            raise SchemaError(f"ORDER BY of {what} must name an output column or position")
        order.append(Order(k, bool(o.args.get("desc")), nulls_first_of(o)))
    return tuple(order)


def _corresponding(node: exp.Expression, left: Plan, right: Plan) -> tuple[Plan, Plan]:
    """`left` and `right` cut to the columns CORRESPONDING matches by name (the SQL
    standard): those both sides have, in the left side's order, or those `BY (...)`
    lists, in its order.

    >>> from dsql.planner.catalog import StaticCatalog
    >>> from dsql.planner.types import build
    >>> cat = StaticCatalog({"t": (Column("a", build("int")), Column("b", build("int")))})
    >>> sql = "SELECT b, a FROM t UNION CORRESPONDING SELECT a, 1 AS c FROM t"
    >>> bind(sqlglot.parse_one(sql, read="postgres"), cat).column_names
    ('a',)
    """
    what = f"{type(node).__name__.upper()} CORRESPONDING"
    if node.args.get("kind") is None:  # DuckDB's BY NAME: an outer match, NULL-padded
        raise UnsupportedError(
            f"{type(node).__name__.upper()} BY NAME is not supported",
            hint=f"match columns by name with {what} [BY (columns)]",
        )
    sides = {"left": left.column_names, "right": right.column_names}
    listed = [c.name for c in node.args.get("on") or ()]
    if listed:
        names = listed
        if len(set(listed)) != len(listed):
            raise SchemaError(f"{what} BY lists a column more than once")
        for side, have in sides.items():
            missing = [n for n in listed if n not in have]
            if missing:
                raise SchemaError(
                    f"column '{missing[0]}' of {what} BY is not in its {side} query",
                    hint=f"the {side} query's columns: {', '.join(have)}",
                )
    else:
        names = [n for n in sides["left"] if n in sides["right"]]
        if not names:
            raise SchemaError(
                f"the queries of {what} have no column name in common",
                hint="name the columns alike with AS, or match them by position without "
                "CORRESPONDING",
            )
    for side, have in sides.items():
        twice = [n for n in names if have.count(n) > 1]
        if twice:
            raise SchemaError(
                f"column '{twice[0]}' occurs more than once in the {side} query of {what}",
                hint="give each column its own name with AS",
            )
    return (
        Project(left, tuple(left.column_names.index(n) for n in names)),
        Project(right, tuple(right.column_names.index(n) for n in names)),
    )


__all__ = ["DEFAULT_RECURSION_LIMIT", "Env", "bind", "bind_query"]
