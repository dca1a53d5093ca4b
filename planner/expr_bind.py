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

import re
from collections.abc import Callable
from typing import Any

import sqlglot  # noqa: F401 - the doctest parses with it
from sqlglot import exp

from dsql.errors import (
    NUMERIC_LIMIT,
    NUMERIC_OVERFLOW,
    DsqlError,
    ExecutionError,
    SchemaError,
    TypeMismatchError,
    UnsupportedError,
)
from dsql.planner import (
    array_literal,
    datetime_text,
    functions,
    interval_spellings,
    numeric,
    regex_spellings,
    row_comparison,
    spellings,
    temporal,
    text_casts,
    text_spellings,
    types,
)
from dsql.planner.bind_shape import types_of, visible_plan
from dsql.planner.expr import (
    Outer,
    Position,
    SubqueryExpr,
    arguments,
    as_expression,
    col,
    outer,
    typed,
)
from dsql.planner.plan import Filter, Map, Plan, Project
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
    "bool_or, every, stddev[_pop|_samp], variance, var_pop"
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
            raise unsupported("a window function", "use GROUP BY, or a join with an aggregate")
        if isinstance(node, exp.AggFunc):  # an aggregate sqlglot knows and dsql does not
            error = unsupported(f"the aggregate function {node.sql_name().lower()}()", _AGG_HINT)
            error.position = position_of(node)
            raise error
        for child in node.iter_expressions():
            visit(child)

    visit(e)
    return found


def _shown_as_is(node: exp.Expr, top: exp.Expr) -> bool:
    """Whether `node` is a rectangular array constructor of constructors, `top`'s value
    itself (under aliases, parentheses and the constructors it is part of)."""
    if not isinstance(node, exp.Array) or not all(
        isinstance(x, exp.Array) for x in node.expressions
    ):
        return False
    at: exp.Expr | None = node
    while at is not None and at is not top:
        at = at.parent
        if not isinstance(at, exp.Array | exp.Alias | exp.Paren):
            return False
    return _rectangular(node) is not None


def _rectangular(node: exp.Expr) -> tuple[int, ...] | None:
    """The dimensions of a constructor whose elements are all constructors of one shape,
    recursively (`ARRAY[[1, 2], [3, 4]]`: (2, 2)); () for a value; None otherwise."""
    if not isinstance(node, exp.Array):
        return ()
    shapes = {_rectangular(element) for element in node.expressions}
    if len(shapes) != 1 or None in shapes:
        return None
    (inner,) = shapes
    assert inner is not None
    if inner == () and any(isinstance(x, exp.Array) for x in node.expressions):
        return None
    if inner != () and not all(isinstance(x, exp.Array) for x in node.expressions):
        return None
    return (len(node.expressions), *inner)


def _inside_query(node: exp.Expr, top: exp.Expr) -> bool:
    """Whether `node` sits in a subquery of `top` (whose names another scope binds)."""
    at: exp.Expr | None = node
    while at is not None and at is not top:
        at = at.parent
        if isinstance(at, exp.Query | exp.Subquery):
            return True
    return False


def _float_spread(call: exp.Expression, arg: exp.Expression) -> exp.Expression:
    """A float variance or standard deviation as PostgreSQL's: NaN once an input is
    infinite or NaN (NaN sorts above every float in all the engines, infinity next), NULL
    below the rows it needs; else the engine's own."""
    sample = isinstance(call, exp.Variance | exp.Stddev | exp.StddevSamp)
    special = exp.or_(
        exp.In(
            this=exp.Max(this=arg.copy()),
            expressions=[_float_literal("Infinity"), _float_literal("NaN")],
        ),
        exp.EQ(this=exp.Min(this=arg.copy()), expression=_float_literal("-Infinity")),
    )
    too_few = exp.LT(
        this=exp.Count(this=arg.copy()), expression=exp.Literal.number(2 if sample else 1)
    )
    return exp.Case(
        ifs=[
            exp.If(this=too_few, true=exp.Null()),
            exp.If(this=special, true=_float_literal("NaN")),
        ],
        default=call,
    )


def _float_literal(text: str) -> exp.Expression:
    return exp.Cast(this=exp.Literal.string(text), to=types.build("double precision"))


#: Aggregates whose value depends on the order of their input: their ORDER BY is kept.
_ORDERED_AGGREGATES = (exp.ArrayAgg, exp.GroupConcat)


def _drop_needless_order(call: exp.AggFunc) -> None:
    """`call(... ORDER BY ...)` without its ORDER BY where the order cannot change the
    value (`min(x ORDER BY y)` is `min(x)`), in place. With DISTINCT, each ORDER BY key
    must be one of the arguments, as PostgreSQL requires.

    >>> e = sqlglot.parse_one("min(x ORDER BY y)", read="postgres")
    >>> _drop_needless_order(e); e.sql("postgres")
    'MIN(x)'
    """
    order = call.this
    assert isinstance(order, exp.Order)
    if isinstance(order.this, exp.Distinct):
        arguments = order.this.expressions
        for key in order.expressions:
            if not any(key.this == argument for argument in arguments):
                raise SchemaError(
                    "in an aggregate with DISTINCT, ORDER BY expressions must appear in "
                    "argument list",
                    position=position_of(key.this),
                )
    if not isinstance(call, _ORDERED_AGGREGATES):
        call.set("this", order.this)


def _is_every(e: exp.Expression) -> bool:
    return isinstance(e, exp.Anonymous) and e.name.lower() == "every"


def _every(e: exp.Expression) -> exp.Expression:
    """`every(x)`, the SQL standard's name for bool_and, as `bool_and(x)` (other calls
    as they are)."""
    if not _is_every(e):
        return e
    if len(e.expressions) != 1:
        raise SchemaError("function every() takes 1 argument")
    return exp.LogicalAnd(this=e.expressions[0])


def filtered(call: exp.Expression, condition: exp.Expression) -> exp.Expression:
    """`call FILTER (WHERE condition)` as one aggregate call over the rows where the
    condition holds: the value argument is NULL elsewhere (`CASE WHEN condition THEN x
    END`), which every aggregate but array_agg skips (array_agg keeps its NULLs:
    `spellings.array_agg_filtered`).

    >>> filtered(sqlglot.parse_one("count(*)"), sqlglot.parse_one("a > 1")).sql()
    'COUNT(CASE WHEN a > 1 THEN 1 END)'
    """
    call = call.copy()

    def only_where(value: exp.Expression) -> exp.Expression:
        return exp.Case(ifs=[exp.If(this=condition.copy(), true=value)])

    if isinstance(call, exp.Count) and (call.this is None or isinstance(call.this, exp.Star)):
        call.set("this", only_where(exp.Literal.number(1)))
    elif isinstance(call.this, exp.Distinct):
        values = call.this.expressions
        call.this.set("expressions", [only_where(v) for v in values])
    elif isinstance(call.this, exp.Order):
        call.this.set("this", only_where(call.this.this))
    else:
        call.set("this", only_where(call.this))
    return call


def _is_text(t: exp.DataType) -> bool:
    """Whether a type is text (text, varchar, char)."""
    return t.is_type(*exp.DataType.TEXT_TYPES)


def _unbounded_numeric(t: exp.DataType) -> bool:
    """Whether a cast's type is numeric without precision or scale."""
    return t.this in (types.T.DECIMAL, types.T.BIGDECIMAL) and not t.expressions


def _bytea_literal(e: exp.Cast) -> exp.HexString | None:
    """A string literal cast to bytea as PostgreSQL reads it (`types.read_bytea`: hex
    digits or the escape form, where both engines would take the text's own bytes);
    None for any other cast."""
    literal = e.this
    if e.to.this not in (types.T.VARBINARY, types.T.BINARY):
        return None
    if not isinstance(literal, exp.Literal) or not literal.is_string:
        return None
    try:
        return exp.HexString(this=types.read_bytea(literal.this).hex())
    except DsqlError as error:
        raise SchemaError(
            error.message, hint="write bytes as '\\x' and an even number of hex digits"
        ) from None


def _era_literal(e: exp.Cast) -> bool:
    """Whether `e` casts a string literal naming an era (`'0044-03-15 BC'`, `AD`) to a
    date or timestamp type: the engines read it as a year of our era, or not at all."""
    return (
        e.to.is_type(exp.DType.DATE, exp.DType.TIMESTAMP, exp.DType.TIMESTAMPTZ)
        and isinstance(e.this, exp.Literal)
        and e.this.is_string
        and re.search(r"\b(?:BC|AD)\b", e.this.this, re.IGNORECASE) is not None
    )


def _datetime_kind(e: exp.Cast) -> str | None:
    """`date`, `timestamp` or `timestamptz` where `e` casts a string literal to that
    type (read at plan time: `datetime_text`), else None."""
    if not (isinstance(e.this, exp.Literal) and e.this.is_string) or e.to.expressions:
        return None
    kinds = {exp.DType.DATE: "date", exp.DType.TIMESTAMP: "timestamp"}
    return kinds.get(e.to.this, "timestamptz" if e.to.is_type(exp.DType.TIMESTAMPTZ) else None)


#: The expressions that compare their operands with one another.
_COMPARED = (
    exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ, exp.NullSafeNEQ,
    exp.In, exp.Between, exp.Case,
)  # fmt: skip


def _compared_operands(e: exp.Expr) -> list[exp.Expression]:
    """The operands a comparison-like expression compares (a simple CASE: its subject
    and its WHEN values)."""
    if isinstance(e, exp.In):
        return [e.this, *e.expressions]
    if isinstance(e, exp.Between):
        return [e.this, e.args["low"], e.args["high"]]
    if isinstance(e, exp.Case):
        subject = e.this
        return [subject, *(i.this for i in e.args.get("ifs") or [])] if subject else []
    return [e.this, e.expression]


def _beside_char(e: exp.Expression, t: exp.DataType | None) -> exp.Expression:
    """An operand compared with a char(n) value as PostgreSQL reads it there: a string
    literal, or a varchar(n) column or cast (of type `t`), as a char(n), without its
    trailing blanks. Other expressions sqlglot types as varchar are PostgreSQL's text."""
    if (isinstance(e, exp.Literal) and e.is_string) or isinstance(e, exp.RawString):
        return exp.Literal.string(e.this.rstrip(" "))  # RawString: $$...$$
    if (
        isinstance(e, exp.Column | Outer | exp.Cast)
        and t is not None
        and t.this == types.T.VARCHAR
        and t.expressions
    ):
        return exp.Trim(this=e, expression=exp.Literal.string(" "), position="TRAILING")
    return e


_TEXT_TYPES = {types.T.TEXT, types.T.VARCHAR, types.T.CHAR, types.T.NCHAR, types.T.NVARCHAR}
_MOMENT_TYPES = {types.T.DATE, types.T.TIMESTAMP, types.T.TIMESTAMPTZ}


def _family(t: exp.DataType) -> str | None:
    """The family of types PostgreSQL compares among one another that `t` is in (text,
    number, moment, boolean); None for any other type."""
    if t.this in _TEXT_TYPES:
        return "text"
    if numeric.kind_of_type(t) is not None:
        return "number"
    if t.this in _MOMENT_TYPES:
        return "moment"
    return "boolean" if t.this == types.T.BOOLEAN else None


#: PostgreSQL's names of the types its errors name most often.
_PG_TYPE_NAMES = {
    types.T.SMALLINT: "smallint", types.T.INT: "integer", types.T.BIGINT: "bigint",
    types.T.DECIMAL: "numeric", types.T.FLOAT: "real", types.T.DOUBLE: "double precision",
    types.T.TEXT: "text", types.T.VARCHAR: "character varying", types.T.CHAR: "character",
}  # fmt: skip

_COMPARISON_SYMBOLS: dict[type[exp.Expr], str] = {
    exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}  # fmt: skip

#: PostgreSQL's symbols of the binary arithmetic operators.
_ARITHMETIC_SYMBOLS: dict[type[exp.Expression], str] = {
    exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%",
}  # fmt: skip


def _array_of_rows(query: exp.Query) -> exp.Expression:
    """`ARRAY(subquery)` as the array of the subquery's rows in its order, `{}` for none:
    `COALESCE((SELECT array_agg(v ORDER BY keys) FROM (query) rows), '{}')`, the ORDER BY
    keys carried out of the subquery as columns of their own (its LIMIT keeps its ORDER BY)."""
    if not isinstance(query, exp.Select):  # a set operation: its ORDER BY names its column
        rows = query.subquery()
        rows.set("alias", exp.TableAlias(this="__rows", columns=[exp.to_identifier("__c")]))
        order = query.args.get("order")
        query = exp.select("__c").from_(rows)
        if order is not None:
            keys = [o.copy() for o in order.expressions]
            for key in keys:
                key.set("this", exp.column("__c"))
            query.set("order", exp.Order(expressions=keys))
    items = query.expressions
    if len(items) != 1 or isinstance(items[0], exp.Star):
        raise (
            SchemaError("subquery must return only one column")
            if len(items) != 1
            else unsupported("ARRAY(SELECT * ...)", "name the column: ARRAY(SELECT x ...)")
        )
    value = items[0].unalias() if isinstance(items[0], exp.Alias) else items[0]
    orders = query.args["order"].expressions if query.args.get("order") else []
    keys = []
    for o in orders:
        key = o.this
        if (
            isinstance(key, exp.Literal)
            and key.is_int
            or (
                isinstance(key, exp.Column) and not key.table and key.name == items[0].alias_or_name
            )
        ):
            key = value  # a position, or the output's name
        keys.append(key)
    distinct = query.args.get("distinct") is not None
    inner = query.copy()
    if distinct and any(k != value for k in keys):
        raise SchemaError(
            "for SELECT DISTINCT, ORDER BY expressions must appear in the select list"
        )
    # With DISTINCT each ORDER BY key is the value itself.
    carried = [] if distinct else [exp.alias_(k.copy(), f"__o{i}") for i, k in enumerate(keys)]
    inner.set("expressions", [exp.alias_(value.copy(), "__v"), *carried])

    def ordered(i: int) -> exp.Ordered:
        o = orders[i]
        name = "__v" if distinct else f"__o{i}"
        return exp.Ordered(
            this=exp.column(name), desc=o.args.get("desc"), nulls_first=o.args.get("nulls_first")
        )

    by = [ordered(i) for i in range(len(orders))]
    if orders and (inner.args.get("limit") or inner.args.get("offset")):
        inner.set("order", exp.Order(expressions=[o.copy() for o in by]))
    else:
        inner.set("order", None)
    value_ref = exp.column("__v")
    agg = exp.ArrayAgg(this=exp.Order(this=value_ref, expressions=by) if by else value_ref)
    gathered = exp.select(agg).from_(inner.subquery("__array_rows"))
    return exp.Coalesce(this=exp.Subquery(this=gathered), expressions=[exp.Literal.string("{}")])


def _of_untyped_null(call: exp.Expression) -> bool:
    """Whether an aggregate call's argument is a bare NULL (`sum(NULL)`,
    `avg(DISTINCT NULL)`), whose type no single one of its variants decides."""
    arg = call.this
    while isinstance(arg, exp.Order | exp.Distinct):
        arg = arg.this if isinstance(arg, exp.Order) else arg.expressions[0]
    return isinstance(_unparenthesized(arg), exp.Null)


def _unparenthesized(e: exp.Expression) -> exp.Expression:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def _bounded_text(t: exp.DataType) -> exp.Expression | None:
    """The length n of a varchar(n) or char(n) type, else None."""
    if t.this in (types.T.VARCHAR, types.T.CHAR) and t.expressions:
        length = t.expressions[0].this
        return length.copy() if isinstance(length, exp.Literal) else None
    return None


def _literal_scale(e: exp.Expr) -> int | None:
    """The digits after the point of a number literal, or of a string literal that is a
    number (`'1e3'` has none, `'1.50'` two); None for anything else."""
    while isinstance(e, exp.Neg | exp.Paren):
        e = e.this
    return numeric.literal_scale(e.this) if isinstance(e, exp.Literal) else None


def _quantified_array(e: exp.Expr) -> tuple[exp.Expression, bool] | None:
    """The array of `ANY (array)` / `ALL (array)` and whether it is ALL; None for
    anything else (a subquery's ANY/ALL among them)."""
    if isinstance(e, exp.Any | exp.All):
        inner, every = e.this, isinstance(e, exp.All)
    elif isinstance(e, exp.Anonymous) and e.name.upper() == "ALL" and len(e.expressions) == 1:
        inner, every = e.expressions[0], True
    else:
        return None
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Query | exp.Subquery):
        return None
    return inner, every


def _quantified_query(e: exp.Expr) -> tuple[exp.Expr, bool] | None:
    """The query of `ANY (subquery)` / `ALL (subquery)` and whether it is ALL; None for
    anything else."""
    if not isinstance(e, exp.Any | exp.All):
        return None
    inner = e.this
    while isinstance(inner, exp.Paren | exp.Subquery) and not (
        isinstance(inner, exp.Subquery) and inner.args.get("alias")
    ):
        inner = inner.this
    if isinstance(inner, exp.Query):
        return inner, isinstance(e, exp.All)
    return None


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
            self._one_dimensional(e)
            bound = self._bind(e.copy())
        except DsqlError as error:
            if error.position is None:
                error.position = position_of(e)
            raise
        return as_expression(self._blank_padded(self._intervals_checked(bound)))

    def _blank_padded(self, bound: exp.Expr) -> exp.Expr:
        """`bound` with char(n) comparisons made blank-insensitive as PostgreSQL makes
        them: a string literal or a varchar compared with a char(n) value is read as a
        char(n) too, whose trailing blanks are insignificant (`c = 'ab '` holds for
        c = 'ab'). dsql stores char(n) values without them, so the other operands lose
        theirs (a text operand keeps them: PostgreSQL compares char(n) with text as text)."""
        if self._types is None or not (
            any(t.this == types.T.CHAR for t in self._types)
            or any(d.this == types.T.CHAR for d in bound.find_all(exp.DataType))
            or bound.find(Outer) is not None
        ):
            return bound
        for node in list(bound.find_all(*_COMPARED)):
            operands = _compared_operands(node)
            found = [
                None
                if isinstance(o, exp.Literal | exp.RawString)
                else types.infer(self._typed(o), self._types)
                for o in operands
            ]
            if not any(t is not None and t.this == types.T.CHAR for t in found):
                continue
            for o, t in zip(operands, found, strict=True):
                o.replace(_beside_char(o.copy(), t))
        return bound

    def _ambiguous_operator(self, e: exp.Expression) -> str | None:
        """The operator and operand types PostgreSQL cannot resolve an arithmetic operator
        for (`unknown + unknown`, `- unknown`, `date + unknown`: an untyped NULL whose
        type no single operator decides), as its error shows them; None for the rest."""
        if isinstance(e, exp.Neg):
            return "- unknown" if isinstance(_unparenthesized(e.this), exp.Null) else None
        symbol = _ARITHMETIC_SYMBOLS[type(e)]
        sides = [_unparenthesized(e.this), _unparenthesized(e.expression)]
        nulls = [isinstance(side, exp.Null) for side in sides]
        if all(nulls):
            return f"unknown {symbol} unknown"
        if not any(nulls) or not isinstance(e, exp.Add) or self._types is None:
            return None
        other = sides[nulls.index(False)]
        if not types.infer(self._typed(self._bind(other.copy())), self._types).is_type(
            exp.DType.DATE
        ):
            return None  # date + unknown: date + integer, + interval or + time
        return "date + unknown" if nulls[1] else "unknown + date"

    def _text_against_number(self, e: exp.Binary) -> None:
        """PostgreSQL's error for a comparison across type families (text, number, date
        and time, boolean: `s = 1`, `d - NULL <> d`): no such operator exists, where the
        engines would cast one side. An untyped string literal (`a = '1'`) or NULL takes
        the other side's type and passes."""
        sides = (e.this, e.expression)
        if self._types is None or any(
            isinstance(side, exp.Literal | exp.RawString | exp.Null) and not side.is_number
            for side in sides
        ):
            return
        plain = [_unparenthesized(side) for side in sides]
        found = [types.infer(self._typed(side), self._types) for side in plain]
        # sqlglot types date arithmetic loosely (`(d - d) + 1` as a date): a date, time or
        # boolean family is trusted only for a column or a cast.
        families = [
            f
            if f in ("text", "number") or isinstance(side, exp.Column | Outer | exp.Cast)
            else None
            for f, side in zip(map(_family, found), plain, strict=True)
        ]
        if None not in families and families[0] != families[1]:
            left, right = (_PG_TYPE_NAMES.get(t.this, t.sql("postgres").lower()) for t in found)
            raise TypeMismatchError(
                f"operator does not exist: {left} {_COMPARISON_SYMBOLS[type(e)]} {right}",
                hint="cast one side to the other's type, e.g. CAST(x AS integer)",
            )

    def _moment_minus_null(self, e: exp.Sub) -> exp.DataType | None:
        """The type of `e`'s left operand where it is a date or timestamp and the right an
        untyped NULL, which PostgreSQL reads as the same type; else None."""
        if self._types is None or not isinstance(_unparenthesized(e.expression), exp.Null):
            return None
        t = types.infer(self._typed(self._bind(e.this.copy())), self._types)
        return t if t.is_type(exp.DType.DATE, exp.DType.TIMESTAMP, exp.DType.TIMESTAMPTZ) else None

    def _char_padded(self, bound: exp.Expression) -> exp.Expression:
        """A bound char(n) value with its trailing blanks, as PostgreSQL's pattern matches
        (LIKE, SIMILAR TO, regular expressions) see it (`c LIKE 'ab '` holds for c = 'ab'
        in char(3)); dsql stores it without them. Any other value as it is."""
        if self._types is None:
            return bound
        t = types.infer(self._typed(bound), self._types)
        length = _bounded_text(t) if t.this == types.T.CHAR else None
        if length is None:
            return bound
        return exp.Pad(this=bound, expression=length, fill_pattern=exp.Literal.string(" "))

    def _intervals_checked(self, bound: exp.Expr) -> exp.Expr:
        """`bound` with each interval the engine computes by arithmetic checked against
        what dsql stores (`interval_spellings.checked`): past it, Arrow's nanoseconds
        would wrap around."""
        if self._types is None or not (
            any(interval_spellings.is_interval(t) for t in self._types)
            or any(interval_spellings.is_interval(d) for d in bound.find_all(exp.DataType))
        ):
            return bound
        arithmetic = exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Neg

        def check(node: exp.Expression) -> exp.Expression:
            if isinstance(node, arithmetic) and interval_spellings.is_interval(
                types.infer(self._typed(node), self._types or ())
            ):
                return as_expression(interval_spellings.checked(node))
            return node

        return bound.transform(check)

    def _array_and_element(self, e: exp.DPipe) -> exp.Func | None:
        """`||` with an array operand as PostgreSQL picks it by the operands' types:
        `array_append(a, x)`, `array_prepend(x, a)`, or `array_cat(a, b)` (an untyped
        NULL is an array there, and a NULL array counts as empty); None for text `||`."""
        if self._types is None:
            return None
        kinds = [self._concat_kind(side) for side in (e.this, e.expression)]
        if "array" not in kinds:
            return None
        array, other = (e.this, e.expression) if kinds[0] == "array" else (e.expression, e.this)
        if isinstance(other, exp.Literal) and other.is_string:
            # An untyped string beside an array is an array literal of its type
            # (`'{x}' || ARRAY['y']` is {x,y}; `'x' || ARRAY['y']` malformed).
            to = types.infer(self._typed(self._bind(array.copy())), self.input_types())
            other.replace(exp.Cast(this=other.copy(), to=to))
            return exp.func("array_cat", e.this, e.expression, dialect="postgres")
        name = (
            "array_append" if kinds == ["array", "element"]
            else "array_prepend" if kinds == ["element", "array"]
            else "array_cat"
        )  # fmt: skip
        return exp.func(name, e.this, e.expression, dialect="postgres")

    def _text_concat(self, e: exp.DPipe) -> exp.Expression:
        """`a || b` of text; an operand of another type in its text as `x::text` writes
        it (`_to_text`: an interval's, a date's), where the engines would write their
        own. With a bytea operand, bytes are concatenated, a string literal beside it read
        as a bytea, as PostgreSQL resolves `'a' || b`."""
        if self._types is None:
            self._bind_children(e)
            return e
        keys = ("this", "expression")
        kinds = [
            types.infer(self._typed(self._bind(e.args[key].copy())), self.input_types())
            for key in keys
        ]
        if any(k.is_type(exp.DType.BINARY, exp.DType.VARBINARY) for k in kinds):
            for key in keys:
                side = e.args[key]
                if isinstance(side, exp.Literal) and side.is_string:
                    e.set(key, exp.Cast(this=side, to=types.build("bytea")))
            self._bind_children(e)
            return exp.Cast(this=e, to=types.build("bytea"))  # typed for the planner
        for key, kind in zip(keys, kinds, strict=True):
            side = e.args[key]
            if kind.is_type(*exp.DataType.TEXT_TYPES, exp.DType.UNKNOWN, exp.DType.NULL):
                e.set(key, self._bind(side))
            else:
                e.set(key, self._to_text(exp.Cast(this=side, to=types.build("text"))))
        return e

    def _typed_array_literals(self, e: exp.Expression) -> bool:
        """Read each untyped string argument of `e` (COALESCE, GREATEST, LEAST) as an array
        literal where another argument is an array, as PostgreSQL resolves it
        (`coalesce(a, '{}')`); whether any was."""
        strings = [a for a in e.iter_expressions() if isinstance(a, exp.Literal) and a.is_string]
        if not strings or self._types is None:
            return False
        for arg in e.iter_expressions():
            if isinstance(arg, exp.Literal | exp.Null):
                continue
            t = types.infer(self._typed(self._bind(arg.copy())), self.input_types())
            if t.is_type(exp.DataType.Type.ARRAY):
                for literal in strings:
                    literal.replace(exp.Cast(this=literal.copy(), to=t.copy()))
                return True
        return False

    def _concat_kind(self, side: exp.Expression) -> str | None:
        """Whether an operand of `||` is an array, another value, or of no type (NULL)."""
        if isinstance(side, exp.DPipe):
            return "array" if self._array_and_element(side) is not None else "element"
        t = types.infer(self._typed(self._bind(side.copy())), self.input_types())
        if t.is_type(exp.DataType.Type.ARRAY):
            return "array"
        return None if t.is_type(exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL) else "element"

    def _one_dimensional(self, e: exp.Expr) -> None:
        """Refuse an array of arrays the user wrote (`ARRAY[b, b]`, `array_agg` of arrays,
        `array_length(ARRAY[[1, 2]], 2)`): PostgreSQL makes a multidimensional array of
        them, whose functions dsql's one-dimensional arrays do not have. A rectangular
        constructor of literal rows that is only shown (`SELECT ARRAY[[1, 2], [3, 4]]`)
        prints as PostgreSQL prints it, and is kept. Checked before binding, as dsql's
        own rewrites build arrays of arrays."""
        for node in e.find_all(exp.Array, exp.ArrayAgg):
            if _inside_query(node, e) or _shown_as_is(node, e):
                continue
            if isinstance(node, exp.ArrayAgg):
                value = node.this
                while isinstance(value, exp.Order | exp.Distinct):
                    value = value.this if isinstance(value, exp.Order) else value.expressions[0]
                elements = [value]
            else:
                elements = list(node.expressions)
            for element in elements:
                bound = self._bind(element.copy())
                if types.infer(self._typed(bound), self.input_types()).is_type(
                    exp.DataType.Type.ARRAY
                ):
                    error = unsupported(
                        "an array of arrays (a multidimensional array)",
                        "dsql's arrays have one dimension; concatenate them with || or array_cat",
                    )
                    error.position = position_of(node)
                    raise error

    def _bind(self, e: exp.Expr) -> exp.Expr:
        if isinstance(e, exp.AggFunc) and isinstance(e.this, exp.Order):
            _drop_needless_order(e)
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
            case exp.Expression() if row_comparison.is_row_comparison(e):
                return self._bind(row_comparison.expanded(e))
            case exp.EQ() | exp.NEQ() | exp.LT() | exp.LTE() | exp.GT() | exp.GTE() if (
                _quantified_array(e.expression) is not None
            ):
                return self._quantified(e)
            case exp.EQ() | exp.NEQ() | exp.LT() | exp.LTE() | exp.GT() | exp.GTE() if (
                _quantified_query(e.expression) is not None
            ):
                query, every = _quantified_query(e.expression) or (e.expression, False)
                return self._against_rows(e, query, every)
            case exp.EQ() | exp.NEQ() | exp.LT() | exp.LTE() | exp.GT() | exp.GTE() if any(
                temporal.is_mz_now(side) for side in (e.this, e.expression)
            ):
                return self._against_mz_now(e)
            case exp.RegexpLike() | exp.RegexpILike():
                s, pattern = (
                    self._char_padded(as_expression(self._bind(e.this))),
                    as_expression(self._bind(e.expression)),
                )
                flag = e.args.get("flag")
                return regex_spellings.bound_match(
                    s,
                    pattern,
                    isinstance(e, exp.RegexpILike),
                    None if flag is None else as_expression(self._bind(flag)),
                )
            case exp.Like() | exp.ILike() | exp.Escape() if isinstance(
                e, exp.Like | exp.ILike
            ) or isinstance(e.this, exp.Like | exp.ILike):
                matched, escape = (
                    (e, None) if isinstance(e, exp.Like | exp.ILike) else (e.this, e.expression)
                )
                like = text_spellings.like(
                    self._char_padded(as_expression(self._bind(matched.this))),
                    as_expression(self._bind(matched.expression)),
                    None if escape is None else as_expression(self._bind(escape)),
                    isinstance(matched, exp.ILike),
                )
                return exp.Not(this=like) if matched.args.get("negate") else like
            case exp.SimilarTo() | exp.Escape() if isinstance(e, exp.SimilarTo) or isinstance(
                e.this, exp.SimilarTo
            ):
                similar, escape = (
                    (e, None) if isinstance(e, exp.SimilarTo) else (e.this, e.expression)
                )
                s = self._char_padded(as_expression(self._bind(similar.this)))
                pattern = as_expression(self._bind(similar.expression))
                return regex_spellings.bound_similar(s, pattern, escape)
            case exp.Any() | exp.All():
                raise unsupported(
                    "ANY/ALL with a subquery", "use IN, EXISTS or a scalar min/max subquery"
                )
            case exp.Placeholder() | exp.Parameter():
                raise SchemaError("a parameter placeholder reached the planner unbound")
            case exp.Coalesce() | exp.Greatest() | exp.Least() if self._typed_array_literals(e):
                return self._bind(e)
            case exp.DPipe() if (call := self._array_and_element(e)) is not None:
                return self._bind(call)
            case exp.DPipe():
                return self._text_concat(e)
            case exp.Array() if len(e.expressions) == 1 and isinstance(e.expressions[0], exp.Query):
                return self._bind(_array_of_rows(e.expressions[0]))
            case exp.Array() if not e.expressions and not isinstance(e.parent, exp.Cast):
                raise SchemaError(
                    "cannot determine type of empty array",
                    hint="cast it to the array type wanted: ARRAY[]::integer[]",
                )
            case exp.Sum() | exp.Avg() | exp.ArrayAgg() if _of_untyped_null(e):
                name = {exp.Sum: "sum", exp.Avg: "avg", exp.ArrayAgg: "array_agg"}[type(e)]
                raise SchemaError(
                    f"function {name}(unknown) is not unique",
                    hint="cast the NULL to the type meant (NULL::integer)",
                )
            case exp.Add() | exp.Sub() | exp.Mul() | exp.Div() | exp.Mod() | exp.Neg() if (
                shown := self._ambiguous_operator(e)
            ) is not None:
                raise SchemaError(
                    f"operator is not unique: {shown}",
                    hint="cast the NULL to the type meant (NULL::integer)",
                )
            case exp.Div():
                return self._div(e)
            case exp.Mod():
                return self._mod(e)
            case exp.Mul():
                return self._mul(e)
            case exp.Sub() if (moment := self._moment_minus_null(e)) is not None:
                # `date - NULL` is date - date (an integer), `timestamp - NULL` an interval
                e.set("expression", exp.Cast(this=exp.Null(), to=moment))
                return self._bind(e)
            case exp.Add() | exp.Sub():
                self._bind_children(e)
                self._real_as_double(e)
                return self._sum_or_difference(e)
            case exp.EQ() | exp.NEQ() | exp.LT() | exp.LTE() | exp.GT() | (exp.GTE()):
                self._bind_children(e)
                self._text_against_number(e)
                self._real_as_double(e)
                return e
            case exp.Cast() if _float_of_literal(e):
                # PostgreSQL's numeric literal cast to a float: the digits as text, which
                # both engines read as a double however many they are (1e300::float8).
                return exp.Cast(this=exp.Literal.string(_number_text(e.this)), to=e.to)
            case exp.Literal() if numeric.is_overflowing_literal(e):
                raise ExecutionError(
                    NUMERIC_OVERFLOW,
                    position=position_of(e),
                    hint=f"{NUMERIC_LIMIT} ({e.this}::float8)",
                )
            case exp.Neg() if isinstance(e.this, exp.Literal) and e.this.this == _BIGINT_MIN[1:]:
                # PostgreSQL folds the sign into the literal: the least bigint is a bigint.
                return exp.Cast(this=exp.Literal.number(_BIGINT_MIN), to=types.build("bigint"))
            case exp.Neg() if not isinstance(e.this, exp.Literal):
                return self._negation(e)
            case exp.Literal() if numeric.is_wide_integer_literal(e):
                return exp.Cast(this=e, to=numeric.numeric_type(0))
            case exp.Literal() if numeric.is_numeric_literal(e) and "e" in e.this.lower():
                return numeric.exact_literal(e)
            case exp.Avg():
                return self._avg(e)
            case exp.Extract() if isinstance(e.this, exp.Var | exp.Literal):
                return self._extract(e)
            case exp.JustifyDays() | exp.JustifyHours() | exp.JustifyInterval():
                kind = type(e).__name__.removeprefix("Justify").lower()
                return interval_spellings.justify(kind, self._bind(e.this))
            case exp.MakeInterval():
                self._bind_children(e)
                return interval_spellings.make_interval(e)
            case (
                exp.Variance()
                | exp.VariancePop()
                | exp.Stddev()
                | exp.StddevSamp()
                | exp.StddevPop()
            ):
                return self._variance(e)
            case exp.Sum():
                return self._sum(e)
            case exp.Min() | exp.Max() | exp.LogicalAnd() | exp.LogicalOr():
                self._bind_children(e)
                self._check_argument(e, _inner(e.this))
                return e
            case exp.Cast() if _bytea_literal(e) is not None:
                return exp.Cast(this=_bytea_literal(e), to=e.to)
            case exp.Filter() if isinstance(e.this, _AGGREGATES) or _is_every(e.this):
                return self._filter(_every(e.this), e.expression.this)
            case exp.Anonymous() if _is_every(e):
                return self._bind(_every(e))
            case exp.Cast() if isinstance(e.this, exp.IntDiv) and _unbounded_numeric(e.to):
                # PostgreSQL's div(a, b): sqlglot parses it as CAST(a // b AS DECIMAL).
                return self._div_function(e.this)
            case exp.Cast() if _unbounded_numeric(e.to):
                return self._to_numeric(e)
            case exp.Cast() if _era_literal(e):
                raise UnsupportedError(
                    "dates and timestamps before year 1 (BC) are not supported",
                    position=position_of(e.this),
                    hint="dsql's dates run from 0001-01-01 to 9999-12-31",
                )
            case exp.Cast() if _datetime_kind(e) is not None:
                try:
                    iso = datetime_text.read(e.this.this, _datetime_kind(e) or "")
                except DsqlError as error:
                    error.position = position_of(e.this)
                    raise
                return exp.Cast(this=exp.Literal.string(iso), to=e.to)
            case exp.Cast() if _bounded_text(e.to) is not None:
                # PostgreSQL's explicit cast to varchar(n)/char(n) cuts to n characters
                # (char(n)'s padding blanks, which comparisons ignore, are not kept).
                n = _bounded_text(e.to)
                text = exp.Cast(this=self._bind(e.this), to=types.build("text"))
                cut = exp.Substring(this=text, start=exp.Literal.number(1), length=n)
                return cut if e.to.this == types.T.VARCHAR else exp.func("rtrim", cut)
            case exp.Cast() if (
                e.to.this in (types.T.TEXT, types.T.VARCHAR) and not e.to.expressions
            ):
                return self._to_text(e)
            case exp.Cast() if e.to.is_type(exp.DataType.Type.ARRAY) and e.to.expressions:
                return self._to_array(e)
            case exp.GroupConcat() if isinstance(e.args.get("separator"), exp.Null):
                # string_agg(x, NULL): PostgreSQL joins the values with no delimiter.
                e.set("separator", exp.Literal.string(""))
            case exp.List():  # DuckDB's list(x) aggregate; PostgreSQL has no list()
                raise SchemaError(
                    "function list() does not exist",
                    hint="aggregate values into an array with array_agg(...)",
                )
            case exp.Cast() if isinstance(e.args.get("to"), exp.DataType):
                types.check_cast_target(e.args["to"])
                return self._cast(e)
            case exp.If() if isinstance(e.parent, exp.Case):
                pass  # a WHEN branch; a call `if(...)` is DuckDB's and Spark's, not SQL's
            case exp.Window():
                raise unsupported("a window function", "use GROUP BY, or a join with an aggregate")
            case exp.Expression() if "JSON" in type(e).__name__:
                # `->`, `->>`, `#>`, `?`, `@>` of json: DuckDB would read text as its JSON.
                raise unsupported("a json or jsonb operator", types.JSON_HINT)
            case exp.Func() if functions.is_listed_call(e):
                return self._function(e)
        self._bind_children(e)
        if isinstance(e, exp.Coalesce | exp.Greatest | exp.Least | exp.Case):
            return self._numeric_branches(e)
        return e

    def _numeric_branches(self, e: exp.Expr) -> exp.Expr:
        """A bound COALESCE, GREATEST, LEAST or CASE whose values are numerics of
        different scales (or numerics and integers) with each value cast to the largest
        scale: the engines' common type of `decimal(38, 2)` and `decimal(38, 0)` has no
        room for both and drops the digits after the point; PostgreSQL keeps each
        value's."""
        if self._types is None:
            return e
        values = [b for b in numeric.branches(e) if not isinstance(b, exp.Null)]
        kinds = self._kinds(*values)
        if "numeric" not in kinds or not kinds <= {"numeric", "integer"}:
            return e
        scales = self._scales(*values)
        if len(set(scales)) == 1:
            return e
        target = numeric.numeric_type(max(scales))
        for value in values:
            value.replace(exp.Cast(this=value.copy(), to=target.copy()))
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
            arg_types = [types.infer(a.copy(), self.input_types()) for a in arguments(call)]
            spelled = functions.check(call, arg_types)
            if isinstance(spelled, exp.Coalesce | exp.Greatest | exp.Least):
                return self._numeric_branches(spelled)
            return spelled
        except DsqlError as error:
            if error.position is None:
                error.position = position
            raise

    def _subquery(self, query: exp.Expression) -> Plan:
        assert self.bind_query is not None
        return visible_plan(self.bind_query(query, self.env, self.scope))

    def _in_subquery(self, e: exp.In) -> exp.Expression:
        """`x IN (S)`: `x = ANY (S)` (`_against_rows`)."""
        subquery = e.args["query"]
        query = subquery.this if isinstance(subquery, exp.Subquery) else subquery
        return self._against_rows(exp.EQ(this=e.this, expression=query), query, False)

    def _against_rows(self, e: exp.Binary, query: exp.Expr, every: bool) -> exp.Expression:
        """`x op ANY (S)` (`every` False): TRUE if `x op s` holds for some s; else NULL if
        x or some s is NULL (S non-empty); else FALSE. `x op ALL (S)`: FALSE if `x op s`
        fails for some s; else NULL if x or some s is NULL (S non-empty); else TRUE."""
        plan = self._subquery(as_expression(query))
        if plan.arity != 1:
            raise SchemaError("the subquery of IN, ANY or ALL must return exactly one column")
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
        if self._types is not None:  # char(n) against varchar: blanks insignificant
            left, right = types.infer(self._typed(x), self._types), types_of(plan)[0]
            if types.T.CHAR in (left.this, right.this):
                outer_x = _beside_char(outer_x, left)
                if _beside_char(col(0), right) != col(0):
                    plan = Map(plan, (_beside_char(col(0), right),), plan.column_names)
                    plan = Project(plan, (1,))
        holds = type(e)(this=outer_x.copy(), expression=col(0))
        decisive = Filter(plan, (as_expression(exp.Not(this=holds) if every else holds),))
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
                exp.If(
                    this=SubqueryExpr(this=decisive, kind="exists"),
                    true=exp.false() if every else exp.true(),
                ),
                exp.If(this=SubqueryExpr(this=unknown, kind="exists"), true=exp.Null()),
            ],
            default=exp.true() if every else exp.false(),
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

    def _filter(self, call: exp.Expression, condition: exp.Expression) -> exp.Expression:
        """`call FILTER (WHERE condition)` bound (see `filtered`)."""
        bound = as_expression(self._bind(condition.copy()))
        if is_aggregate(bound):
            raise SchemaError("aggregate functions are not allowed in FILTER")
        if isinstance(call, exp.ArrayAgg):
            bound_call = as_expression(self._bind(call))
            t = types.infer(self._typed(bound_call), self.input_types())
            return spellings.array_agg_filtered(bound_call, bound, t)
        return as_expression(self._bind(filtered(call, condition)))

    def _argument(self, e: exp.AggFunc) -> tuple[exp.Expr, bool]:
        """An aggregate's argument bound and checked (`_check_argument`), and whether it
        is DISTINCT."""
        distinct = isinstance(e.this, exp.Distinct)
        arg = self._bind(_inner(e.this))
        self._check_argument(e, arg)
        return arg, distinct

    def _check_argument(self, e: exp.AggFunc, arg: exp.Expr) -> None:
        """Refuse an aggregate over a type PostgreSQL has no such aggregate for: `sum`,
        `avg`, `variance` and `stddev` take numbers, `bool_and` and `bool_or` booleans,
        and `min` and `max` anything but booleans."""
        if self._types is None:
            return
        t = types.infer(self._typed(arg), self._types)
        if types.is_unknown(t):
            return
        if isinstance(e, exp.LogicalAnd | exp.LogicalOr):
            fits, hint = t.this == types.T.BOOLEAN, "compare the value: bool_and(x <> 0)"
        elif isinstance(e, exp.Min | exp.Max):
            fits, hint = t.this != types.T.BOOLEAN, "use bool_and or bool_or for booleans"
        else:
            number = numeric.kind_of_type(t) is not None
            summed = isinstance(e, exp.Sum | exp.Avg) and interval_spellings.is_interval(t)
            fits, hint = number or summed, "cast the argument to a number"
        if not fits:
            name = "bool_and" if isinstance(e, exp.LogicalAnd) else e.sql_name().lower()
            name = "bool_or" if isinstance(e, exp.LogicalOr) else name
            raise SchemaError(
                f"function {name}({t.sql('postgres').lower()}) does not exist", hint=hint
            )

    def _sum(self, e: exp.Sum) -> exp.Expr:
        """`sum(x)` in PostgreSQL's type: over an integer `x` summed in a wider type
        (bigint for smallint and int, numeric for bigint, so a sum of bigints never
        overflows); of reals, real (the engines sum floats as doubles)."""
        arg, distinct = self._argument(e)
        if self._types is None:
            e.set("this", exp.Distinct(expressions=[arg]) if distinct else arg)
            return e
        if interval_spellings.is_interval(types.infer(self._typed(arg), self._types)):
            if distinct:
                raise unsupported("sum(DISTINCT interval)", "sum the intervals without DISTINCT")
            return as_expression(interval_spellings.sum_of(as_expression(arg)))
        widened = self._widened(arg)
        e.set("this", exp.Distinct(expressions=[widened]) if distinct else widened)
        if types.infer(self._typed(arg), self._types).this == types.T.FLOAT:
            return exp.Cast(this=e, to=types.build("real"))
        return e

    def _against_mz_now(self, e: exp.Binary) -> exp.Expr:
        """A comparison with `mz_now()` (milliseconds since the epoch), a timestamp or
        date on the other side read as its milliseconds since the epoch: a temporal
        filter `mz_now() <= ts + interval '1 hour'`."""
        self._bind_children(e)
        if self._types is None:
            return e
        for key in ("this", "expression"):
            side = e.args[key]
            if temporal.is_mz_now(side):
                continue
            t = types.infer(self._typed(side), self._types)
            if t.this in (types.T.TIMESTAMP, types.T.TIMESTAMPTZ, types.T.DATE):
                e.set(key, spellings.epoch_ms(as_expression(side), t))
        return e

    def _extract(self, e: exp.Extract) -> exp.Expr:
        """`extract(field from x)`; of an interval, PostgreSQL's numeric
        (`interval_spellings.extract`); of a date or timestamp, exact where PostgreSQL's
        numeric has a fraction (`spellings.extract`)."""
        arg = self._bind(e.expression)
        e.set("expression", arg)
        if self._types is not None and interval_spellings.is_interval(
            types.infer(self._typed(arg), self._types)
        ):
            return interval_spellings.extract(e)
        if self._types is not None:
            t = types.infer(self._typed(arg), self._types)
            if t.is_type(exp.DType.DATE, exp.DType.TIMESTAMP, exp.DType.TIMESTAMPTZ):
                return spellings.extract(e, t)
        return e

    def _widened(self, arg: exp.Expr) -> exp.Expr:
        """A bound integer `arg` in the type PostgreSQL sums it in (bigint for smallint
        and int, numeric for bigint); a numeric as the decimal(38, s) dsql stores it in,
        written out so that the runtime sums it exactly on every kernel; any other `arg`
        as it is."""
        assert self._types is not None
        t = types.infer(arg.copy(), self._types)
        if numeric.kind_of_type(t) == "numeric":
            return exp.Cast(this=arg, to=numeric.numeric_type(numeric.scale(arg, self._types)))
        if not types.is_integer(t):
            return arg
        wide = "decimal(38, 0)" if t.this == types.T.BIGINT else "bigint"
        return exp.Cast(this=arg, to=types.build(wide))

    def _cast(self, e: exp.Cast) -> exp.Expression:
        """`x::t`; of text, as PostgreSQL reads it (`text_casts.spelled`), a cast of text
        computed per row to an interval refused."""
        self._bind_children(e)
        if self._types is None or not _is_text(types.infer(self._typed(e.this), self._types)):
            return e
        if interval_spellings.is_interval(e.to) and not isinstance(e.this, exp.Literal):
            raise text_casts.interval_refused()
        spelled = text_casts.spelled(as_expression(e.this), e.to)
        return e if spelled is None else as_expression(spelled)

    def _to_numeric(self, e: exp.Cast) -> exp.Expression:
        """`x::numeric` keeps x's digits, as PostgreSQL's unbounded numeric does: the scale
        of a literal as written, of a numeric as typed, 0 of an integer (else the default);
        text is read as PostgreSQL reads it (`text_casts.spelled`)."""
        arg = self._bind(e.this)
        scale = _literal_scale(arg)
        if self._types is not None and _is_text(types.infer(self._typed(arg), self._types)):
            precision, default = types.DEFAULT_DECIMAL
            to = types.build(f"decimal({precision}, {default if scale is None else scale})")
            return as_expression(text_casts.spelled(as_expression(arg), to) or e)
        if scale is None and self._types is not None:
            t = types.infer(arg.copy(), self._types)
            if types.is_integer(t):
                scale = 0
            elif t.this == types.T.DECIMAL and len(t.expressions) == 2:
                scale = int(t.expressions[1].this.this)
            elif t.this in (types.T.DOUBLE, types.T.FLOAT):
                arg = _float_digits(arg, 15 if t.this == types.T.DOUBLE else 6)
        precision, default = types.DEFAULT_DECIMAL
        scale = default if scale is None else min(scale, precision)
        return exp.Cast(this=arg, to=types.build(f"decimal({precision}, {scale})"))

    def _to_text(self, e: exp.Cast) -> exp.Expression:
        """`x::text`; an array's as PostgreSQL writes it (`spellings.array_text`)."""
        arg = self._bind(e.this)
        e.set("this", arg)
        if self._types is not None:
            t = types.infer(self._typed(arg), self._types)
            if t.is_type(exp.DataType.Type.ARRAY):
                return spellings.array_text(as_expression(arg), t)
            if interval_spellings.is_interval(t):
                return as_expression(interval_spellings.text(as_expression(arg)))
            if t.is_type(exp.DType.BINARY, exp.DType.VARBINARY):
                return spellings.per_kernel(_BYTEA_TEXT, _BYTEA_TEXT, [as_expression(arg)])
            if t.is_type(exp.DType.DOUBLE, exp.DType.FLOAT):
                return spellings.float_text(as_expression(arg), t)
            if t.is_type(exp.DType.DATE, exp.DType.TIMESTAMP):
                return spellings.per_kernel(_ERA_TEXT, _ERA_TEXT, [as_expression(e)])
            if t.is_type(exp.DType.TIMESTAMPTZ):  # Spark writes no zone
                spark = f"CONCAT({_ERA_TEXT}, {_SPARK_OFFSET})"
                texts = [as_expression(e), as_expression(arg)]
                return spellings.per_kernel(_ERA_TEXT, spark, texts)
        return e

    def _quantified(self, e: exp.Binary) -> exp.Expression:
        """`x op ANY (array)` / `x op ALL (array)` (`spellings.quantified`)."""
        found = _quantified_array(e.expression)
        assert found is not None
        array, every = found
        if isinstance(array, exp.Literal) and array.is_string and self._types is not None:
            # An untyped literal takes the array type of the other operand's type.
            element = types.infer(self._typed(self._bind(e.this.copy())), self.input_types())
            if element.is_type(exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL):
                element = types.build("text")
            to = exp.DataType(this=exp.DataType.Type.ARRAY, expressions=[element], nested=True)
            array = exp.Cast(this=array, to=to)
        bound_array = as_expression(self._bind(array.copy()))
        comparison = type(e)(this=self._bind(e.this), expression=exp.column("__e"))
        return spellings.quantified(as_expression(comparison), bound_array, every)

    def _to_array(self, e: exp.Cast) -> exp.Expression:
        """`x::t[]`; text (a literal, or a text value) read as PostgreSQL's array text
        (`array_literal`)."""
        types.check_cast_target(e.to)
        e.set("to", types.one_dimensional(e.to))
        if isinstance(e.this, exp.Literal) and e.this.is_string:
            try:
                parsed = array_literal.literal(e.this.this, e.to)
            except DsqlError as error:
                error.position = position_of(e.this)
                raise
            return as_expression(self._bind(parsed))
        arg = self._bind(e.this)
        e.set("this", arg)
        if self._types is not None:
            t = types.infer(self._typed(arg), self._types)
            if t.is_type(*exp.DataType.TEXT_TYPES):
                return array_literal.from_text(as_expression(arg), e.to)
        return e

    def _negation(self, e: exp.Neg) -> exp.Expression:
        """`-x`; of an integer, kept in x's type, so that negating the least value is
        PostgreSQL's "integer out of range" (DuckDB widens a constant's negation to the
        next integer type: `-((-2147483648)::int)` would be 2147483648)."""
        self._bind_children(e)
        if self._types is None:
            return e
        t = types.infer(self._typed(e.this), self._types)
        return exp.Cast(this=e, to=t.copy()) if types.is_integer(t) else e

    def _div_function(self, e: exp.IntDiv) -> exp.Expression:
        """`div(a, b)`: the quotient truncated toward zero, as numeric."""
        left, right = self._bind(e.this), self._bind(e.expression)
        whole = types.build("decimal(38, 0)")
        if self._types is not None and all(
            types.is_integer(types.infer(self._typed(x), self._types)) for x in (left, right)
        ):
            return exp.Cast(this=exp.IntDiv(this=left, expression=right), to=whole)
        quotient = exp.Div(this=left, expression=right)
        truncated = exp.Case(
            ifs=[
                exp.If(
                    this=exp.LT(this=quotient, expression=exp.Literal.number(0)),
                    true=exp.Ceil(this=quotient.copy()),
                )
            ],
            default=exp.Floor(this=quotient.copy()),
        )
        return exp.Cast(this=truncated, to=whole)

    def _real_as_double(self, e: exp.Binary) -> None:
        """A bound operator's `real` operand widened to double precision where the other
        is an integer or a numeric: PostgreSQL resolves `real op numeric` (and `real op
        int`) to the double precision operator (`0.2::real = 0.2` is false, `0.2::real
        + 0.2` a double), where the engines would narrow the other operand to a real."""
        if self._types is None:
            return
        sides = ("this", "expression")
        found = [types.infer(self._typed(e.args[k]), self._types) for k in sides]
        kinds = [numeric.kind_of_type(t) for t in found]
        for key, t, other in ((sides[0], found[0], kinds[1]), (sides[1], found[1], kinds[0])):
            if t.this == types.T.FLOAT and other in ("integer", "numeric"):
                e.set(key, exp.Cast(this=e.args[key], to=types.build("double")))

    def _div(self, e: exp.Div) -> exp.Expr:
        """`a / b` as PostgreSQL divides: integers truncated, numerics exactly to its
        scale (`numeric.divide`), floats as floats; a zero divisor is an error."""
        left = self._bind(e.this)
        right = self._bind(e.expression)
        e.set("this", left)
        e.set("expression", right)
        if self._types is None:
            return e
        self._real_as_double(e)
        left, right = e.this, e.expression
        kinds = self._kinds(left, right)
        if kinds == {"integer"}:  # both engines raise for a zero divisor
            return exp.IntDiv(this=left, expression=right)
        if "float" in kinds or None in kinds:  # DuckDB's float quotient by 0 is infinite
            return numeric.zero_guard(right, left, e)
        return numeric.divide(left, right, *self._scales(left, right))

    def _mod(self, e: exp.Mod) -> exp.Expr:
        """`a % b` (and `mod(a, b)`): of numerics exact (`numeric.remainder`); of integers
        and floats the engines' own (both raise for a zero integer divisor)."""
        self._bind_children(e)
        a, b = e.this, e.expression
        if self._types is None or self._kinds(a, b) not in ({"numeric"}, {"numeric", "integer"}):
            return e
        return numeric.remainder(a, b, *self._scales(a, b))

    def _mul(self, e: exp.Mul) -> exp.Expr:
        """`a * b`: of numerics (or a numeric and an integer) exact on both kernels
        (`numeric.product`); of integers and floats the engines' own."""
        self._bind_children(e)
        self._real_as_double(e)
        a, b = e.this, e.expression
        if self._types is None or self._kinds(a, b) not in ({"numeric"}, {"numeric", "integer"}):
            return e
        sa, sb = self._scales(a, b)
        if sa + sb > numeric.MAX_PRECISION:  # no decimal holds it: the engines' error
            return e
        return numeric.product(a, b, sa, sb)

    def _sum_or_difference(self, e: exp.Add | exp.Sub) -> exp.Expr:
        """A bound `a + b` or `a - b`; of numerics (or a numeric and an integer), exact
        on every kernel (`numeric.sum_or_difference`)."""
        if self._types is None:
            return e
        kinds = self._kinds(e.this, e.expression)
        if "numeric" not in kinds or not kinds <= {"numeric", "integer"}:
            return e
        return numeric.sum_or_difference(e, *self._scales(e.this, e.expression))

    def _avg(self, e: exp.Avg) -> exp.Expr:
        """`avg(x)` of integers or numerics: numeric, `sum(x) / count(x)` divided as
        PostgreSQL divides numerics; of floats: the engines' float average."""
        arg, distinct = self._argument(e)
        if self._types is not None and interval_spellings.is_interval(
            types.infer(self._typed(arg), self._types)
        ):
            if distinct:
                raise unsupported("avg(DISTINCT interval)", "average them without DISTINCT")
            return interval_spellings.avg_of(as_expression(arg))
        e.set("this", exp.Distinct(expressions=[arg]) if distinct else arg)
        if self._types is None or numeric.kind(self._typed(arg), self._types) not in (
            "integer",
            "numeric",
        ):
            return e
        widened = self._widened(arg.copy())
        total = exp.Sum(this=exp.Distinct(expressions=[widened]) if distinct else widened)
        count = exp.Count(this=exp.Distinct(expressions=[arg.copy()]) if distinct else arg.copy())
        return numeric.divide(total, count, *self._scales(total, count))

    def _variance(self, e: _Spread) -> exp.Expr:
        """`var_samp(x)` (`variance`) and `var_pop(x)` of integers or numerics: numeric,
        as PostgreSQL computes it, `(n·Σx² − (Σx)²) / (n·(n − 1))` (or `n·n`) divided
        exactly, 0 where rounding would make it negative, NULL for too few rows;
        `stddev_samp(x)` (`stddev`) and `stddev_pop(x)`: that quotient's square root,
        rounded at the quotient's scale (`numeric.root_of_quotient`)."""
        arg, distinct = self._argument(e)
        e.set("this", exp.Distinct(expressions=[arg]) if distinct else arg)
        if self._types is None:
            return e
        typed = self._typed(arg)
        if numeric.kind(typed, self._types) == "float":
            return _float_spread(e, as_expression(arg))
        if numeric.kind(typed, self._types) not in ("integer", "numeric"):
            return e
        if distinct:  # the sum of squares over distinct values is not a DISTINCT sum
            raise unsupported(
                f"{e.sql_name().lower()}(DISTINCT ...) of an integer or numeric",
                "aggregate over a subquery: SELECT stddev(x) FROM (SELECT DISTINCT x ...) d",
            )
        s = numeric.scale(typed, self._types)
        # Narrow enough that Spark's product keeps every digit (an overflow is an error).
        narrow = exp.DataType.build(f"decimal({19 if s == 0 else 18}, {s})")
        x = exp.Cast(this=arg, to=narrow)
        n = exp.Count(this=arg.copy())
        product: exp.Expr = exp.Mul(this=x, expression=x.copy())
        if s > 0:  # DuckDB multiplies decimals of at most 18 digits in 64 bits: 19 for it
            wide = exp.DataType.build(f"decimal(19, {s})")
            duck = exp.Mul(
                this=exp.Cast(this=x.copy(), to=wide), expression=exp.Cast(this=x.copy(), to=wide)
            )
            product = exp.Cast(
                this=exp.Anonymous(this=spellings.PER_KERNEL, expressions=[duck, product]),
                to=numeric.numeric_type(2 * s),
            )
        squares = exp.Sum(this=product)
        total = exp.Sum(this=exp.Cast(this=arg.copy(), to=numeric.numeric_type(s)))
        # Each step exact on every kernel: Spark rounds a product or difference of
        # 38-digit decimals (`numeric.product`, `numeric.sum_or_difference`).
        spread = numeric.sum_or_difference(
            exp.Sub(
                this=numeric.product(n.copy(), squares, 0, 2 * s),
                expression=numeric.product(total, total.copy(), s, s),
            ),
            2 * s,
            2 * s,
        )
        sample = isinstance(e, exp.Variance | exp.Stddev | exp.StddevSamp)
        other = exp.Sub(this=n.copy(), expression=exp.Literal.number(1)) if sample else n.copy()
        pairs = exp.Mul(this=n.copy(), expression=exp.paren(other))
        if isinstance(e, exp.Variance | exp.VariancePop):
            quotient = numeric.divide(spread.copy(), pairs, 2 * s, 0)
        elif numeric.quotient_scale(2 * s, 0) == numeric.QUOTIENT_SCALE:
            quotient = numeric.root_of_quotient(spread.copy(), pairs, 2 * s, 0)
        else:
            raise unsupported(
                f"{e.sql_name().lower()} of a numeric with more than 10 digits after the point",
                "cast the argument to numeric(p, 10) or to double precision",
            )
        stored = numeric.numeric_type(numeric.quotient_scale(2 * s, 0))
        zero = exp.Cast(this=exp.Literal.number(0), to=stored)
        too_few = exp.LTE(this=n.copy(), expression=exp.Literal.number(1 if sample else 0))
        return exp.Case(
            ifs=[
                exp.If(this=too_few, true=exp.Null()),
                exp.If(this=exp.LTE(this=spread, expression=exp.Literal.number(0)), true=zero),
            ],
            default=quotient,
        )

    def _kinds(self, *operands: exp.Expr) -> set[numeric.Kind | None]:
        assert self._types is not None
        return {numeric.kind(self._typed(o), self._types) for o in operands}

    def _scales(self, *operands: exp.Expr) -> list[int]:
        assert self._types is not None
        return [numeric.scale(self._typed(o), self._types) for o in operands]


def _inner(arg: exp.Expr) -> exp.Expr:
    """An aggregate's argument without its DISTINCT."""
    return arg.expressions[0] if isinstance(arg, exp.Distinct) else arg


def _float_digits(value: exp.Expr, digits: int) -> exp.Expr:
    """A float as the text of its first `digits` significant digits, which PostgreSQL
    casts to numeric (15 for double precision, 6 for real: `7.8::real::numeric` is 7.8,
    not the 7.8000001907 of the binary value)."""
    spec = f"'%.{digits}g'"
    texts = (f"PRINTF({spec}, __0)", f"FORMAT_STRING({spec}, __0)")
    return spellings.per_kernel(*texts, [as_expression(value)])


#: PostgreSQL's text of a bytea `__0`: `\x` and two lowercase hex digits a byte
#: (the engines write bytes as escapes); CHR(92), a backslash, reads alike in both.
_BYTEA_TEXT = "CONCAT(CHR(92), 'x', LOWER(HEX(__0)))"

#: PostgreSQL's text of a date or timestamp before year 1, from the engine's text `__0`:
#: ` BC` at the end, where DuckDB writes ` (BC)` after the date.
_ERA_TEXT = (
    "CASE WHEN __0 LIKE '% (BC)%' THEN CONCAT(REPLACE(__0, ' (BC)', ''), ' BC') ELSE __0 END"
)


#: The session zone's offset at the timestamp `__1` as PostgreSQL writes it after a
#: timestamptz (`+00`, `-03`, `+05:30`), in Spark's SQL (Java's `x` writes `+0530`).
_SPARK_OFFSET = (
    "CASE WHEN LENGTH(DATE_FORMAT(__1, 'x')) = 5 THEN CONCAT(SUBSTR(DATE_FORMAT(__1, 'x'), 1, 3),"
    " ':', SUBSTR(DATE_FORMAT(__1, 'x'), 4, 2)) ELSE DATE_FORMAT(__1, 'x') END"
)

#: The least bigint, as written.
_BIGINT_MIN = str(-numeric.BIGINT_MAX - 1)


def _float_of_literal(e: exp.Cast) -> bool:
    """Whether `e` casts a number literal (or its negation) to a float type
    (`1e400::float8`)."""
    literal = e.this.this if isinstance(e.this, exp.Neg) else e.this
    return (
        isinstance(literal, exp.Literal)
        and not literal.is_string
        and e.to.this in (exp.DType.DOUBLE, exp.DType.FLOAT)
    )


def _number_text(e: exp.Expr) -> str:
    """The text of a number literal or of its negation."""
    return f"-{e.this.this}" if isinstance(e, exp.Neg) else e.this


#: The aggregates of a spread: variance and standard deviation, sample and population.
_Spread = exp.Variance | exp.VariancePop | exp.Stddev | exp.StddevSamp | exp.StddevPop


def _call_position(call: exp.Func) -> tuple[int, int] | None:
    """Where a call's name starts (sqlglot records where it ends)."""
    meta = call.meta
    if {"line", "col", "start", "end"} <= meta.keys():
        return meta["line"], meta["col"] - (meta["end"] - meta["start"])
    return position_of(call)


__all__ = ["ExprBinder", "aggregate_calls", "is_aggregate"]
