"""Shaping bound plans: a query's presentation, and its columns' names and types.

A bound `Query` is a plan plus presentation: `visible` columns, ORDER BY keys,
LIMIT/OFFSET. `visible_plan` turns one into a plain plan (a `TopK` where LIMIT/OFFSET
apply, hidden ORDER BY columns projected away), as a subquery, a CTE or a view
reads it. `rename_plan` and `cast_plan` give a plan's columns the names of an alias list
or the types of a declaration (set operations, recursive CTEs).

>>> from dsql.planner.plan import Column, Get
>>> from dsql.planner.types import build
>>> t = Get("t", (Column("a", build("int")), Column("b", build("text"))))
>>> rename_plan(t, ("x",)).column_names
('x', 'b')
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import sqlglot  # noqa: F401 - the doctests parse with it
from sqlglot import exp

from dsql.errors import SchemaError
from dsql.planner import types
from dsql.planner.expr import col
from dsql.planner.plan import (
    Column,
    Map,
    Plan,
    Project,
    Query,
)
from dsql.planner.scope import unsupported
from dsql.planner.stateful import TopK


def nulls_first_of(o: exp.Ordered) -> bool:
    """PostgreSQL's default: NULLs sort as larger than every value."""
    explicit = o.args.get("nulls_first")
    desc = bool(o.args.get("desc"))
    return bool(explicit) if explicit is not None else desc


def apply_limit(q: Query, node: exp.Expression, top: bool) -> Query:
    """The query with its LIMIT/OFFSET: kept for a top-level read, a `TopK` inside."""
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


def refuse_outer_order_limit(inner: Query, node: exp.Expression, top: bool) -> Query:
    """`inner`, refusing ORDER BY/LIMIT/OFFSET on the parentheses around it."""
    if node.args.get("order") or node.args.get("limit") or node.args.get("offset"):
        raise unsupported(
            "ORDER BY/LIMIT on a parenthesized query", "move it inside the parentheses"
        )
    return inner


def _int_arg(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    if isinstance(node, exp.Fetch):  # FETCH {FIRST|NEXT} [n] {ROW|ROWS} ONLY
        options = node.args.get("limit_options")
        if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
            raise unsupported("FETCH ... PERCENT or WITH TIES", "use FETCH FIRST n ROWS ONLY")
        node = node.args.get("count") or exp.Literal.number(1)
    value = node.args.get("expression") if isinstance(node, exp.Limit | exp.Offset) else node
    if isinstance(value, exp.Var) and value.name.upper() == "ALL":  # LIMIT ALL: no limit
        return None
    if isinstance(node, exp.Limit | exp.Offset) and value is None:
        value = node.this
    if isinstance(value, exp.Null):
        return None
    number = _constant_integer(value) if isinstance(value, exp.Expression) else None
    if number is None and isinstance(value, exp.Literal) and not value.is_string:
        # A decimal is cast to bigint, as PostgreSQL does: rounded half away from zero.
        exact = Decimal(value.this)
        if exact.is_finite():
            number = int(exact.to_integral_value(rounding=ROUND_HALF_UP))
    if number is None:
        if value is not None and value.find(exp.Column):
            raise SchemaError(f"argument of {what} must not contain variables")
        raise SchemaError(
            f"{what} must be a constant integer expression", hint=f"{what} 10, or {what} 2 * 5"
        )
    if number < 0:
        raise SchemaError(f"{what} must not be negative")
    if number >= 2**63:
        raise SchemaError(f"{what} {number} is out of range", hint="at most 2^63 - 1")
    return number


#: The integer operators a constant LIMIT or OFFSET may use, as PostgreSQL computes them
#: (division truncates toward zero; the remainder has the dividend's sign).
_INTEGER_OPERATORS = {
    exp.Add: lambda a, b: a + b,
    exp.Sub: lambda a, b: a - b,
    exp.Mul: lambda a, b: a * b,
    exp.Div: lambda a, b: abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1),
    exp.Mod: lambda a, b: abs(a) % abs(b) * (1 if a >= 0 else -1),
}


def _constant_integer(e: exp.Expression) -> int | None:
    """The value of an integer expression without columns (literals, `+ - * / %`,
    parentheses, casts to an integer type), else None.

    >>> _constant_integer(sqlglot.parse_one("(1 + 2) * 3 - 7 / 2"))
    6
    """
    match e:
        case exp.Literal() if not e.is_string and e.this.isdigit():
            return int(e.this)
        case exp.Paren():
            return _constant_integer(e.this)
        case exp.Neg():
            inner = _constant_integer(e.this)
            return None if inner is None else -inner
        case exp.Cast() if e.to.this in exp.DataType.INTEGER_TYPES:
            return _constant_integer(e.this)
        case exp.Binary() if type(e) in _INTEGER_OPERATORS:
            a, b = _constant_integer(e.this), _constant_integer(e.expression)
            if a is None or b is None:
                return None
            if b == 0 and isinstance(e, exp.Div | exp.Mod):
                raise SchemaError("division by zero")
            return _INTEGER_OPERATORS[type(e)](a, b)  # type: ignore[no-untyped-call]
    return None


def visible_plan(q: Query) -> Plan:
    """The plan a query's reader sees: LIMIT/OFFSET as a `TopK`, hidden columns dropped."""
    if q.visible == q.plan.arity and not q.order and q.limit is None and not q.offset:
        return q.plan
    plan = q.plan
    if q.limit is not None or q.offset:
        plan = TopK(plan, (), q.order, q.limit, q.offset)
    return Project(plan, tuple(range(q.visible))) if q.visible != plan.arity else plan


def alias_columns(alias: exp.Expression | None) -> tuple[str, ...]:
    """The column names of an alias (`AS t(a, b)`), or none."""
    if alias is None:
        return ()
    return tuple(c.name for c in alias.args.get("columns") or ())


def rename_plan(plan: Plan, names: tuple[str, ...]) -> Plan:
    """The plan with its first columns renamed (a no-op Map + Project keeps it a value)."""
    if not names:
        return plan
    if len(names) > plan.arity:
        raise SchemaError(f"{len(names)} column aliases given for {plan.arity} columns")
    new_names = tuple(names) + tuple(c.name for c in plan.columns[len(names) :])
    mapped = Map(plan, tuple(col(i) for i in range(plan.arity)), new_names)
    return Project(mapped, tuple(range(plan.arity, 2 * plan.arity)))


def column_defs(plan: Plan, names: tuple[str, ...]) -> tuple[Column, ...]:
    """The plan's columns with the first ones renamed to `names`."""
    cols = list(plan.columns)
    return tuple(Column(names[i] if i < len(names) else c.name, c.type) for i, c in enumerate(cols))


def cast_plan(plan: Plan, columns: tuple[Column, ...], where: str) -> Plan:
    """The plan with each column cast to the target type where they differ."""
    if plan.arity != len(columns):
        raise SchemaError(f"{where}: {plan.arity} columns where {len(columns)} are declared")
    casts: list[exp.Expression] = []
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


def types_of(plan: Plan) -> list[exp.DataType]:
    """The SQL types of the plan's columns."""
    return [c.type for c in plan.columns]


def and_operands(e: exp.Expression) -> tuple[exp.Expression, ...]:
    """The operands of a conjunction, flattened through parentheses."""
    if isinstance(e, exp.And):
        return and_operands(e.this) + and_operands(e.expression)
    if isinstance(e, exp.Paren):
        return and_operands(e.this)
    return (e,)


__all__ = [
    "alias_columns",
    "and_operands",
    "apply_limit",
    "cast_plan",
    "column_defs",
    "nulls_first_of",
    "refuse_outer_order_limit",
    "rename_plan",
    "types_of",
    "visible_plan",
]
