"""Binding table functions in FROM: `generate_series`, `unnest`, `repeat_row`, `ROWS FROM`.

A table function reads the FROM items to its left (it is implicitly LATERAL) and binds
to a `FlatMap` over them: their columns, then the function's. One function binds as
itself. Several zipped (`ROWS FROM (f(...), g(...))`, `unnest(a, b)`) or `WITH
ORDINALITY` bind as a series of row numbers `n` from 1 to the longest function's length,
each function's `n`-th value computed from `n` (NULL past its end), and `n` itself as
the bigint `ordinality` column: `unnest(a)` is `a[n]` for `n <= cardinality(a)`, an
integer `generate_series(s, e, k)` is `s + (n - 1) * k`.

>>> from dsql.planner.bind import bind
>>> from dsql.planner.catalog import StaticCatalog
>>> sql = "SELECT * FROM unnest(ARRAY[5, 6]) WITH ORDINALITY AS u(v, n)"
>>> bind(sqlglot.parse_one(sql, read="postgres"), StaticCatalog({})).column_names
('v', 'n')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from dsql.errors import SchemaError
from dsql.planner import types
from dsql.planner.bind_shape import alias_columns, types_of
from dsql.planner.expr_bind import ExprBinder
from dsql.planner.plan import FlatMap, Map, Plan, Project
from dsql.planner.scope import Item, Scope, unsupported

if TYPE_CHECKING:
    from dsql.planner.bind import Env

#: The most rows a table function with constant arguments may produce: its rows are
#: built in the driver's memory at once, and no engine can interrupt that allocation.
MAX_CONSTANT_ROWS = 10_000_000

#: The name the row number has while the zipped functions' values are computed from it.
_ROW = "?row number"


def is_table_function(node: exp.Expression) -> bool:
    """Whether a FROM item is a table function call (or `ROWS FROM`), LATERAL or not."""
    if isinstance(node, exp.Lateral):
        return not isinstance(node.this, exp.Subquery | exp.Select)
    if isinstance(node, exp.Table):
        return isinstance(node.this, exp.Func) or bool(node.args.get("rows_from"))
    return isinstance(node, exp.Unnest)


def bind_table_function(
    node: exp.Expression, env: Env, scope: Scope, base: Plan
) -> tuple[Plan, Item]:
    """A table function over `base` (the items to its left, named by `scope`): the plan
    over base ++ its columns, and its scope item."""
    from dsql.planner.bind import bind_query

    inner = node.this if isinstance(node, exp.Lateral) else node
    alias_node = node.args.get("alias") or inner.args.get("alias")
    calls, ordinality = _calls(inner)
    ordinality = ordinality or bool(node.args.get("ordinality"))  # `LATERAL f() WITH ...`
    aliases = alias_columns(alias_node)
    if isinstance(inner, exp.Unnest) and isinstance(inner.args.get("offset"), exp.Identifier):
        aliases = (*aliases, inner.args["offset"].name)  # sqlglot keeps `AS u(v, n)`'s n apart
    alias = alias_node.name if alias_node is not None and alias_node.name else None
    binder = ExprBinder(env, scope, bind_query).with_types(types_of(base))
    if len(calls) == 1 and not ordinality:
        return _single(calls[0], alias, aliases, binder, base)
    return _zipped(calls, ordinality, alias, aliases, env, scope, base)


def _calls(node: exp.Expression) -> tuple[list[exp.Expression], bool]:
    """The functions a FROM item calls (several: zipped), and whether WITH ORDINALITY."""
    if isinstance(node, exp.Unnest):
        offset = node.args.get("offset")
        return [exp.Unnest(expressions=[a.copy()]) for a in node.expressions], bool(offset)
    if not isinstance(node, exp.Table):
        return [node], False
    ordinality = bool(node.args.get("ordinality"))
    if node.args.get("rows_from"):
        calls: list[exp.Expression] = []
        for call in node.args["rows_from"]:
            inner = call.this if isinstance(call, exp.Table) else call
            calls.extend(_calls(inner)[0] if isinstance(inner, exp.Unnest) else [inner])
        return calls, ordinality
    return [node.this], ordinality


def _names(
    defaults: list[str], ordinality: bool, alias: str | None, aliases: tuple[str, ...]
) -> tuple[str, ...]:
    """PostgreSQL's column names: the aliases, else the function's (or the table alias,
    for one function's one column), then `ordinality`."""
    names = list(defaults)
    if alias is not None and len(names) == 1:
        names = [alias]
    if ordinality:
        names.append("ordinality")
    if len(aliases) > len(names):
        raise SchemaError(
            f"table '{alias or defaults[0]}' has {len(names)} columns available "
            f"but {len(aliases)} columns specified"
        )
    return (*aliases, *names[len(aliases) :])


def _single(
    call: exp.Expression,
    alias: str | None,
    aliases: tuple[str, ...],
    binder: ExprBinder,
    base: Plan,
) -> tuple[Plan, Item]:
    """One table function: a `FlatMap` of it."""
    name, function, out_type = table_function(call, binder)
    if name == "repeat_row":
        n = function.expressions[0] if function.expressions else function.this
        return FlatMap(base, n, (), ()), Item(alias or "repeat_row", (), base.arity)
    (col_name,) = _names([name], False, alias, aliases)
    plan = FlatMap(base, function, (col_name,), (out_type,))
    return plan, Item(alias or name, (col_name,), base.arity)


def _zipped(
    calls: list[exp.Expression],
    ordinality: bool,
    alias: str | None,
    aliases: tuple[str, ...],
    env: Env,
    scope: Scope,
    base: Plan,
) -> tuple[Plan, Item]:
    """Several table functions side by side, and/or their row numbers."""
    from dsql.planner.bind import bind_query

    binder = ExprBinder(env, scope, bind_query).with_types(types_of(base))
    parts = [_by_row_number(call, binder) for call in calls]
    lengths = [length for _, length, _, _ in parts]
    longest = (
        lengths[0]
        if len(lengths) == 1
        else exp.func(
            "greatest", *(exp.func("coalesce", n.copy(), exp.Literal.number(0)) for n in lengths)
        )
    )
    series = exp.ExplodingGenerateSeries(
        start=exp.Cast(this=exp.Literal.number(1), to=types.build("bigint")), end=longest
    )
    _, function, row_type = table_function(series, binder)
    flat = FlatMap(base, function, (_ROW,), (row_type,))
    row = Item("", (_ROW,), base.arity, qualified=False)
    row_binder = ExprBinder(env, scope.with_items((*scope.items, row)), bind_query).with_types(
        types_of(flat)
    )
    values: list[exp.Expression] = []
    for _, n, value, out_type in parts:
        if len(parts) > 1:
            value = exp.Case(ifs=[exp.If(this=exp.LTE(this=_row(), expression=n), true=value)])
        bound = row_binder.bind(value)
        values.append(bound if types.is_unknown(out_type) else exp.Cast(this=bound, to=out_type))
    if ordinality:
        values.append(row_binder.bind(_row()))
    names = _names([name for name, _, _, _ in parts], ordinality, alias, aliases)
    mapped = Map(flat, tuple(values), names)
    keep = (*range(base.arity), *range(flat.arity, mapped.arity))
    plan = Project(mapped, keep)
    return plan, Item(alias or names[0], names, base.arity)


def _row() -> exp.Column:
    return exp.column(exp.to_identifier(_ROW, quoted=True))


def _by_row_number(
    call: exp.Expression, binder: ExprBinder
) -> tuple[str, exp.Expression, exp.Expression, exp.DataType]:
    """A zipped function as (its name, its length, its value at row `n`, its type):
    expressions over the unbound arguments and the row number."""
    name, _, out_type = table_function(call, binder)
    if isinstance(call, exp.Anonymous) and call.name.lower() == "regexp_split_to_table":
        split = exp.Anonymous(this="regexp_split_to_array", expressions=call.expressions)
        call = exp.Unnest(expressions=[split])
    if name == "unnest" and isinstance(call, exp.Unnest | exp.Explode):
        (array,) = call.expressions or [call.this]
        length: exp.Expression = exp.Cast(
            this=exp.func("cardinality", array.copy()), to=types.build("bigint")
        )
        # A 1-based subscript (`offset=1`), NULL past the end (`safe`): DuckDB writes
        # `(a)[n]`, Spark `try_element_at(a, n)` (a bare `a[n]` counts from 0 there, and
        # its index is an int).
        index = exp.Cast(this=_row(), to=types.build("int"))
        value: exp.Expression = exp.Bracket(
            this=exp.paren(array.copy()), expressions=[index], offset=1, safe=True
        )
        return name, length, value, out_type
    if name == "generate_series" and types.is_integer(out_type):
        start, end = call.args["start"], call.args["end"]
        step = call.args.get("step") or exp.Literal.number(1)
        length = _template(
            "CASE WHEN k > 0 AND s <= e THEN (CAST(e AS BIGINT) - s) / k + 1 "
            "WHEN k < 0 AND s >= e THEN (CAST(s AS BIGINT) - e) / (-k) + 1 ELSE 0 END",
            s=start,
            e=end,
            k=step,
        )
        value = _template("CAST(s AS BIGINT) + (n - 1) * k", s=start, k=step, n=_row())
        return name, length, value, out_type
    raise unsupported(
        f"{call.sql('postgres')} in ROWS FROM or WITH ORDINALITY",
        "zip unnest(...), regexp_split_to_table(...) and integer generate_series(...) only",
    )


def _template(sql: str, **args: exp.Expression) -> exp.Expression:
    """`sql` with each single-letter column replaced by a copy of its argument."""
    tree = sqlglot.parse_one(sql, read="postgres")
    return tree.transform(
        lambda node: (
            exp.paren(args[node.name].copy(), copy=False)
            if isinstance(node, exp.Column) and not node.table and node.name in args
            else node
        )
    )


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


def _shown(call: exp.Expr) -> str:
    """A call as PostgreSQL text for an error; a bound subquery argument shows as `(...)`."""
    try:
        return call.sql("postgres")
    except ValueError:
        name = call.sql_name() if isinstance(call, exp.Func) else type(call).__name__
        return f"{name.lower()}(...)"


def table_function(fn: exp.Expr, binder: ExprBinder) -> tuple[str, exp.Expression, exp.DataType]:
    """One table function call, bound: its name, its bound call and its column's type."""
    return bound_table_function(binder.bind(fn), binder.input_types(), fn)


def bound_table_function(
    bound: exp.Expression, input_types: list[exp.DataType], written: exp.Expr | None = None
) -> tuple[str, exp.Expression, exp.DataType]:
    """A bound table function call: its name, the call, and the type of its column.

    `written` is the call as the query spells it, for the errors.
    """
    _check_constant_size(bound)
    if isinstance(bound, exp.ExplodingGenerateSeries | exp.GenerateSeries):
        start_type = types.infer(bound.args["start"].copy(), input_types)
        t = start_type if not types.is_unknown(start_type) else types.build("bigint")
        if types.is_integer(t):
            t = types.build("bigint") if t.this == exp.DataType.Type.BIGINT else types.build("int")
        return "generate_series", bound, t
    if isinstance(bound, exp.Unnest | exp.Explode):
        args = bound.expressions or [bound.this]
        if len(args) != 1:
            raise unsupported(f"{_shown(written or bound)} with several arrays", "use ROWS FROM")
        t = types.infer(args[0].copy(), input_types)
        inner = (
            t.expressions[0]
            if t.this == exp.DataType.Type.ARRAY and t.expressions
            else types.build("unknown")
        )
        return "unnest", bound, inner
    if isinstance(bound, exp.Anonymous) and bound.name.lower() == "repeat_row":
        return "repeat_row", bound, types.build("bigint")
    raise unsupported(
        f"table function {_shown(written or bound)}", "use generate_series, unnest or repeat_row"
    )


__all__ = [
    "MAX_CONSTANT_ROWS",
    "bind_table_function",
    "bound_table_function",
    "is_table_function",
    "table_function",
]
