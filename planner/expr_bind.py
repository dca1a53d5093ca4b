"""Binding scalar expressions: SQL names become `_c{i}` references (or `Outer`).

Subqueries become `SubqueryExpr` values over their own bound plans;
`x IN (subquery)` becomes two EXISTS tests with SQL's three-valued meaning.
Integer division is made explicit (`IntDiv`) because PostgreSQL truncates
`7 / 2` to 3 while Spark and DuckDB would return 3.5.

>>> from dsql.planner.scope import Item, Scope
>>> b = ExprBinder(None, Scope((Item("t", ("a", "b"), 0),)), None)
>>> b.bind(sqlglot.parse_one("a + t.b", read="postgres")).sql()
'_c0 + _c1'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlglot  # noqa: F401 - the doctest parses with it
from sqlglot import exp

from dsql.errors import DsqlError, SchemaError
from dsql.planner import functions, types
from dsql.planner.bind_shape import visible_plan
from dsql.planner.expr import (
    Outer,
    Position,
    SubqueryExpr,
    as_expression,
    col,
    outer,
    typed,
)
from dsql.planner.plan import Filter, Plan
from dsql.planner.scope import Scope, position_of, unsupported

_AGGREGATES = (
    exp.Count,
    exp.Sum,
    exp.Avg,
    exp.Min,
    exp.Max,
    exp.ArrayAgg,
    exp.GroupConcat,
    exp.LogicalAnd,
    exp.LogicalOr,
    exp.Stddev,
    exp.StddevPop,
    exp.StddevSamp,
    exp.Variance,
    exp.VariancePop,
)


_AGG_HINT = (
    "dsql's aggregates: count, sum, avg, min, max, array_agg, string_agg, bool_and, "
    "bool_or, stddev[_pop|_samp], variance, var_pop"
)


def is_aggregate(e: Any) -> bool:
    """Whether an expression contains an aggregate call (outside subqueries)."""
    return isinstance(e, exp.Expression) and bool(aggregate_calls(e))


def aggregate_calls(e: exp.Expression) -> list[exp.Expression]:
    """The outermost aggregate calls in `e` (with their FILTER clause), not in subqueries."""
    found: list[exp.Expression] = []

    def visit(node: exp.Expression) -> None:
        if isinstance(node, SubqueryExpr):
            return
        if isinstance(node, exp.Filter) and isinstance(node.this, _AGGREGATES):
            found.append(node)
            return
        if isinstance(node, _AGGREGATES):
            found.append(node)
            return
        if isinstance(node, exp.Window):
            raise unsupported("window functions", "use GROUP BY, or a join with an aggregate")
        if isinstance(node, exp.AggFunc):  # an aggregate sqlglot knows and dsql does not
            error = unsupported(f"the aggregate function {node.sql_name().lower()}()", _AGG_HINT)
            error.position = position_of(node)
            raise error
        for child in node.iter_expressions():
            visit(child)

    visit(e)
    return found


class ExprBinder:
    """Binds expressions in one scope; `bind_query` binds subqueries (injected)."""

    def __init__(self, env: Any, scope: Scope, bind_query: Callable[..., Any] | None) -> None:
        self.env = env
        self.scope = scope
        self.bind_query = bind_query
        self._types: list[exp.DataType] | None = None

    def input_types(self) -> list[exp.DataType]:
        """Types of the scope's columns by position (UNKNOWN where not known)."""
        return self._types or [types.build("unknown")] * self.scope.arity

    def with_types(self, column_types: list[exp.DataType]) -> ExprBinder:
        self._types = column_types
        # Subqueries see this scope as their parent: with the types, their outer
        # references are typed too.
        self.scope = Scope(
            self.scope.items, self.scope.parent, self.scope.blocked, types=tuple(column_types)
        )
        return self

    def bind(self, e: exp.Expr) -> exp.Expression:
        """The expression over positional references (a copy; `e` is unchanged)."""
        try:
            bound = self._bind(e.copy())
        except DsqlError as error:
            if error.position is None:
                error.position = position_of(e)
            raise
        return as_expression(bound)

    def _bind(self, e: exp.Expr) -> exp.Expr:
        match e:
            case exp.Column() if isinstance(e.this, exp.Star):
                raise SchemaError("'*' is only allowed in a select list or count(*)")
            case exp.Count() if isinstance(e.this, exp.Star):
                return e
            case exp.Star():  # `(*)`, `* + 1`: not a value
                raise SchemaError("'*' is only allowed in a select list or count(*)")
            case Position():
                return col(e.this)
            case exp.Column():
                level, pos = self.scope.resolve(e.name, e.table or None)
                return col(pos) if level == 0 else outer(pos, level)
            case exp.Subquery() | exp.Select() | exp.Union() | exp.Except() | exp.Intersect():
                query = e.this if isinstance(e, exp.Subquery) else e
                plan = self._subquery(query)
                if plan.arity != 1:
                    raise SchemaError("a subquery used as a value must return exactly one column")
                return SubqueryExpr(this=plan, kind="scalar")
            case exp.Exists():
                return SubqueryExpr(this=self._subquery(e.this), kind="exists")
            case exp.In() if e.args.get("query") is not None:
                return self._in_subquery(e)
            case exp.Any() | exp.All():
                raise unsupported(
                    "ANY/ALL with a subquery", "use IN, EXISTS or a scalar min/max subquery"
                )
            case exp.Placeholder() | exp.Parameter():
                raise SchemaError("a parameter placeholder reached the planner unbound")
            case exp.Div():
                return self._div(e)
            case exp.List():  # DuckDB's list(x) aggregate; PostgreSQL has no list()
                raise SchemaError(
                    "function list() does not exist",
                    hint="aggregate values into an array with array_agg(...)",
                )
            case exp.Cast() if isinstance(e.args.get("to"), exp.DataType):
                types.check_cast_target(e.args["to"])
            case exp.If() if isinstance(e.parent, exp.Case):
                pass  # a WHEN branch; a call `if(...)` is DuckDB's and Spark's, not SQL's
            case exp.Window():
                raise unsupported("window functions", "use GROUP BY, or a join with an aggregate")
            case exp.Func() if not isinstance(e, functions.SYNTAX):
                return self._function(e)
        self._bind_children(e)
        return e

    def _bind_children(self, e: exp.Expr) -> None:
        for key, value in list(e.args.items()):
            if isinstance(value, exp.Expression):
                e.set(key, self._bind(value))
            elif isinstance(value, list):
                e.set(key, [self._bind(v) if isinstance(v, exp.Expression) else v for v in value])

    def _function(self, call: exp.Func) -> exp.Expr:
        """A call of a function in dsql's registry (`functions.py`), in every kernel's
        spelling; refused, at the call's position, if dsql does not list it."""
        position = _call_position(call)
        try:
            if functions.lookup(call) is None:
                functions.check(call, ())  # refuses before the arguments bind
            self._bind_children(call)
            arg_types = [types.infer(a.copy(), self.input_types()) for a in _arguments(call)]
            return functions.check(call, arg_types)
        except DsqlError as error:
            if error.position is None:
                error.position = position
            raise

    def _subquery(self, query: exp.Expression) -> Plan:
        assert self.bind_query is not None
        return visible_plan(self.bind_query(query, self.env, self.scope))

    def _in_subquery(self, e: exp.In) -> exp.Expression:
        """`x IN (S)`: TRUE if some s = x; else NULL if x or some s is NULL (S non-empty);
        else FALSE."""
        subquery = e.args["query"]
        plan = self._subquery(subquery.this if isinstance(subquery, exp.Subquery) else subquery)
        if plan.arity != 1:
            raise SchemaError("the subquery of IN must return exactly one column")
        x = self._bind(e.this.copy())
        # `x` is read one level further out inside the subquery's filters.
        outer_x = x.transform(
            lambda n: (
                outer(int(n.name[2:]))
                if isinstance(n, exp.Column) and n.name.startswith("_c")
                else outer(n.this, n.levels_out + 1)
                if isinstance(n, Outer)
                else n
            )
        )
        equal = Filter(plan, (exp.EQ(this=col(0), expression=outer_x.copy()),))
        unknown = Filter(
            plan,
            (
                as_expression(
                    exp.or_(
                        exp.Is(this=col(0), expression=exp.Null()),
                        exp.Is(this=outer_x.copy(), expression=exp.Null()),
                    )
                ),
            ),
        )
        return exp.Case(
            ifs=[
                exp.If(this=SubqueryExpr(this=equal, kind="exists"), true=exp.true()),
                exp.If(this=SubqueryExpr(this=unknown, kind="exists"), true=exp.Null()),
            ],
            default=exp.false(),
        )

    def _typed(self, e: exp.Expr) -> exp.Expr:
        """A copy of `e` sqlglot can type: outer references and scalar subqueries as
        NULLs of their types (where known)."""

        def replace(node: exp.Expression) -> exp.Expression:
            if isinstance(node, Outer):
                t = self.scope.outer_type(node.levels_out, node.this)
                return exp.Cast(this=exp.Null(), to=t.copy()) if t is not None else exp.Null()
            if isinstance(node, SubqueryExpr):
                return typed(node)
            return node

        return e.copy().transform(replace)

    def _div(self, e: exp.Div) -> exp.Expression:
        left = self._bind(e.this)
        right = self._bind(e.expression)
        e.set("this", left)
        e.set("expression", right)
        if self._types is None:
            return e
        lt = types.infer(self._typed(left), self._types)
        rt = types.infer(self._typed(right), self._types)
        if types.is_integer(lt) and types.is_integer(rt):
            return exp.IntDiv(this=left, expression=right)
        return e


def _call_position(call: exp.Func) -> tuple[int, int] | None:
    """Where a call's name starts (sqlglot records where it ends)."""
    meta = call.meta
    if {"line", "col", "start", "end"} <= meta.keys():
        return meta["line"], meta["col"] - (meta["end"] - meta["start"])
    return position_of(call)


def _arguments(call: exp.Func) -> list[exp.Expression]:
    """A call's arguments in order (sqlglot keeps them under named keys)."""
    found: list[exp.Expression] = []
    for key in call.arg_types:
        value = call.args.get(key)
        if isinstance(value, exp.Expression):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, exp.Expression))
    return found


__all__ = ["ExprBinder", "aggregate_calls", "is_aggregate"]
