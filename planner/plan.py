"""The logical plan: immutable relational operators over positional columns.

Every node has `columns` (name and SQL type per output column). Expressions are
sqlglot trees in which column `i` of the node's input is the column reference
`_c{i}` (printed `#i` by EXPLAIN); a join's expressions see the left columns and
then the right ones. Two expression nodes exist only before decorrelation:
`Outer(i)`, column `i` of the enclosing query's row, and `SubqueryExpr`, a
subquery used as a value (`exists`, `scalar`).

Invariants, checked by `__post_init__`: expressions refer only to existing input
columns; union inputs have equal arity; reduce groups are input columns.

>>> t = Get("t", (Column("a", types.build("int")),))
>>> Filter(t, (parse_expr("_c0 > 1"),)).columns[0].name
'a'
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from copy import deepcopy
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp

from dsql.errors import SchemaError
from dsql.planner import types

if TYPE_CHECKING:
    from dsql.planner.linear import JoinFunction


@dataclass(frozen=True, slots=True)
class Column:
    """One output column: its user-facing name, SQL type and nullability."""

    name: str
    type: exp.DataType
    nullable: bool = True


def col(i: int) -> exp.Column:
    """A reference to input column `i` (built directly: `exp.column` costs more, and
    the planner makes many)."""
    ident = exp.Identifier(this=f"_c{i}", quoted=False)
    return exp.Column(this=ident, table=None, db=None, catalog=None)


def index(column: exp.Column) -> int | None:
    """The position a `_c{i}` reference points at (None for other columns)."""
    ident = column.args.get("this")
    name = ident.this if type(ident) is exp.Identifier else column.name
    return int(name[2:]) if name.startswith("_c") and name[2:].isdigit() else None


def parse_expr(text: str) -> exp.Expression:
    """An expression from PostgreSQL text (for tests and doctests)."""
    return sqlglot.parse_one(text, read="postgres")


class Outer(exp.Expression):
    """Column `this` of the enclosing query's current row (a correlated reference)."""

    arg_types = {"this": True}


class Position(exp.Expression):
    """Column `this` of the current query level, by position: what `*` expands to, so that
    columns sharing a name (two `?column?`) stay distinct."""

    arg_types = {"this": True}


class SubqueryExpr(exp.Expression):
    """A subquery used as a value: `kind` is "exists" or "scalar"; `this` holds the plan."""

    arg_types = {"this": True, "kind": True}

    @property
    def plan(self) -> Plan:
        return self.args["this"]


def refs(expression: exp.Expression) -> set[int]:
    """The input columns an expression reads."""
    found = set()
    stack = [expression]
    while stack:  # sqlglot's `find_all` walks the same nodes, at several times the cost
        node = stack.pop()
        if isinstance(node, exp.Column):
            i = index(node)
            if i is not None:
                found.add(i)
        for value in node.args.values():
            if isinstance(value, exp.Expression):
                stack.append(value)
            elif type(value) is list:
                stack.extend(v for v in value if isinstance(v, exp.Expression))
    return found


def held_refs(expression: exp.Expression) -> frozenset[int]:
    """`refs` of an expression that no longer changes (one a plan node or a linear step
    holds: the planner never mutates those), remembered by identity."""
    return _held(_HELD_REFS, expression, lambda: frozenset(refs(expression)))


def held_key(expression: exp.Expression) -> Hashable:
    """`text_key` of an expression that no longer changes, remembered by identity."""
    return _held(_HELD_KEYS, expression, lambda: text_key(expression))


def _held(table: dict[int, tuple[exp.Expression, Any]], e: exp.Expression, compute: Any) -> Any:
    entry = table.get(id(e))
    if entry is not None and entry[0] is e:  # the entry holds `e`: its id is not reused
        return entry[1]
    value = compute()
    if len(table) >= _HELD_ENTRIES:
        table.clear()
    table[id(e)] = (e, value)
    return value


_HELD_REFS: dict[int, tuple[exp.Expression, Any]] = {}
_HELD_KEYS: dict[int, tuple[exp.Expression, Any]] = {}
_HELD_ENTRIES = 16384


def remap(expression: exp.Expression, mapping: dict[int, int | exp.Expression]) -> exp.Expression:
    """A copy with each `_c{i}` replaced by `_c{mapping[i]}` (or by an expression).

    One pass that copies and substitutes (sqlglot's copy, then `transform`, walks and
    rebuilds twice); deep trees are copied without recursion.
    """

    def substitute(node: exp.Expression) -> exp.Expression | None:
        if not isinstance(node, exp.Column):
            return None
        i = index(node)
        if i is None or i not in mapping:
            return None
        target = mapping[i]
        if isinstance(target, int):
            return col(target)
        # The tree keeps the grouping, but SQL text is generated without adding
        # parentheses: `#2 * #0` with `#2 = #0 + 0` must not print as `#0 + 0 * #0`.
        atomic = isinstance(target, exp.Column | exp.Literal | exp.Paren | exp.Func)
        return target.copy() if atomic else exp.paren(target.copy())

    def child(
        value: exp.Expression, parent: exp.Expression, key: str, at: int | None
    ) -> exp.Expression:
        new = substitute(value)
        if new is None:
            new = value.__class__()
            stack.append((value, new))
        new.parent, new.arg_key, new.index = parent, key, at
        return new

    root = substitute(expression)
    if root is not None:
        return root
    root = expression.__class__()
    stack = [(expression, root)]
    while stack:
        node, copy = stack.pop()
        if node.comments is not None:
            copy.comments = list(node.comments)
        if node._type is not None:
            copy._type = node._type.copy()
        if node._meta is not None:
            copy._meta = deepcopy(node._meta)
        args = copy.args
        for key, value in node.args.items():
            if isinstance(value, exp.Expression):
                args[key] = child(value, copy, key, None)
            elif type(value) is list:
                args[key] = [
                    child(v, copy, key, i) if isinstance(v, exp.Expression) else v
                    for i, v in enumerate(value)
                ]
            else:
                args[key] = value
    return root


def text_key(e: exp.Expression) -> Hashable:
    """A key for exact equality of expressions: the tree's node kinds and arguments.

    sqlglot's own `==` ignores the case of names and strings, so this compares the
    arguments exactly; unset arguments (None, False, empty) are left out, as the SQL
    text leaves them out. Equal keys: the same SQL text, at a fraction of its cost.

    >>> text_key(parse_expr("a + 'X'")) == text_key(parse_expr("a + 'x'"))
    False
    """
    return _key(e)


def _key(value: Any) -> Hashable:
    if isinstance(value, exp.Expression):
        return (
            type(value),
            *(
                (k, _key(v))
                for k, v in value.args.items()
                if v is not None and v is not False and v != []
            ),
        )
    if isinstance(value, list):
        return tuple(_key(v) for v in value)
    return value


def shift(expression: exp.Expression, by: int) -> exp.Expression:
    """A copy with every column reference moved `by` positions."""
    return remap(expression, {i: i + by for i in refs(expression)})


def typed(e: exp.Expression) -> exp.Expression:
    """A copy in which subqueries are typed NULLs, so sqlglot can infer the type."""

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, SubqueryExpr):
            if node.args["kind"] == "exists":
                return exp.true()
            return exp.Cast(this=exp.Null(), to=node.plan.columns[0].type.copy())
        if isinstance(node, Outer):
            return exp.Null()
        return node

    return e.copy().transform(replace)


def infer_type(e: exp.Expression, inputs: list[exp.DataType]) -> exp.DataType:
    """`types.infer` of `typed(e)`, remembered by the expression and the types of the
    columns it reads (passes rebuild nodes over the same columns: each is typed once)."""
    if e.find(SubqueryExpr, Outer) is not None:
        return types.infer(typed(e), inputs)
    key = (text_key(e), tuple((i, text_key(inputs[i])) for i in sorted(refs(e))))
    found = _TYPES.get(key)
    if found is None:
        if len(_TYPES) >= 4096:
            _TYPES.clear()
        found = _TYPES[key] = types.infer(typed(e), inputs)
    return found.copy()


_TYPES: dict[Hashable, exp.DataType] = {}


def conjuncts(e: exp.Expression) -> list[exp.Expression]:
    """The operands of a conjunction, flattened (`[e]` if it is not one)."""
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    if isinstance(e, exp.Paren) and isinstance(e.this, exp.And):
        return conjuncts(e.this)
    return [e]


_REF = re.compile(r"\b_c(\d+)\b")


def show_expr(e: exp.Expression) -> str:
    """An expression as EXPLAIN prints it: positional references `#n`, outer ones `^#n`."""

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, SubqueryExpr):
            return exp.Anonymous(this=f"<{node.args['kind']} subquery>")
        if isinstance(node, Outer):
            return exp.column(f"__outer{node.this}")
        return node

    text = e.copy().transform(replace).sql("postgres")
    text = re.sub(r"\b__outer(\d+)\b", r"^#\1", text)
    return _REF.sub(r"#\1", text).replace('"', "")


def _check(where: str, expressions: Any, arity: int) -> None:
    for e in expressions:
        for i in refs(e):
            if i >= arity:
                raise SchemaError(f"{where}: column #{i} does not exist (arity {arity})")


class Plan:
    """Base of plan nodes: the inputs and the output columns."""

    __slots__ = ()

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return ()

    @property
    def columns(self) -> tuple[Column, ...]:
        raise NotImplementedError

    @property
    def arity(self) -> int:
        return len(self.columns)

    @property
    def column_names(self) -> tuple[str, ...]:
        """The output columns' names (without inferring their types)."""
        return tuple(c.name for c in self.columns)

    def with_inputs(self, inputs: tuple[Plan, ...]) -> Plan:
        """The same node over other inputs (same arities)."""
        raise NotImplementedError


class _Unary(Plan):
    """A node over one input, held in its field `input`."""

    __slots__ = ()
    input: Plan

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.input,)

    def with_inputs(self, inputs: tuple[Plan, ...]) -> Plan:
        return replace(self, input=inputs[0])  # type: ignore[type-var]


class _SameColumns(_Unary):
    """A unary node whose output columns are its input's."""

    __slots__ = ()

    @property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        return self.input.columns

    @property
    def arity(self) -> int:
        return self.input.arity

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.input.column_names


@dataclass(frozen=True, slots=True)
class Get(Plan):
    """A table or view of the catalog, by name."""

    name: str
    columns: tuple[Column, ...]  # type: ignore[assignment]

    def with_inputs(self, inputs: tuple[Plan, ...]) -> Plan:
        return self


@dataclass(frozen=True, slots=True)
class LocalGet(Plan):
    """A binding of an enclosing `LetRec` (a recursive CTE), by name."""

    name: str
    columns: tuple[Column, ...]  # type: ignore[assignment]

    def with_inputs(self, inputs: tuple[Plan, ...]) -> Plan:
        return self


@dataclass(frozen=True, slots=True)
class Constant(Plan):
    """Literal rows (VALUES); each row a tuple of constant expressions."""

    rows: tuple[tuple[exp.Expression, ...], ...]
    columns: tuple[Column, ...]  # type: ignore[assignment]

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise SchemaError("VALUES rows must all have the same number of columns")

    def with_inputs(self, inputs: tuple[Plan, ...]) -> Plan:
        return self


@dataclass(frozen=True)  # not slotted: `columns` is cached
class Map(_Unary):
    """The input's columns followed by one new column per expression."""

    input: Plan
    exprs: tuple[exp.Expression, ...]
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        _check("map", self.exprs, self.input.arity)

    @property
    def arity(self) -> int:  # without inferring the new columns' types
        return self.input.arity + len(self.exprs)

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.input.column_names + self.names

    @cached_property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        in_types = [c.type for c in self.input.columns]
        new = tuple(
            Column(n, infer_type(e, in_types)) for n, e in zip(self.names, self.exprs, strict=False)
        )
        return self.input.columns + new


@dataclass(frozen=True, slots=True)
class Filter(_SameColumns):
    """The input's rows for which every predicate is true."""

    input: Plan
    predicates: tuple[exp.Expression, ...]

    def __post_init__(self) -> None:
        _check("filter", self.predicates, self.input.arity)


@dataclass(frozen=True, slots=True)
class Project(_Unary):
    """The input's columns at the given positions (repeats and reorderings allowed)."""

    input: Plan
    outputs: tuple[int, ...]

    def __post_init__(self) -> None:
        if any(i >= self.input.arity for i in self.outputs):
            raise SchemaError(f"project: {self.outputs} out of range for {self.input.arity}")

    @property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        cols = self.input.columns
        return tuple(cols[i] for i in self.outputs)

    @property
    def arity(self) -> int:
        return len(self.outputs)

    @property
    def column_names(self) -> tuple[str, ...]:
        names = self.input.column_names
        return tuple(names[i] for i in self.outputs)


@dataclass(frozen=True, slots=True)
class FlatMap(_Unary):
    """The input's columns followed by the rows of a table function called per row.

    `function` is `generate_series(a, b[, step])`, `unnest(array)` or
    `repeat_row(n)`; it produces one column (none for repeat_row).
    """

    input: Plan
    function: exp.Expression
    names: tuple[str, ...]
    types: tuple[exp.DataType, ...]

    def __post_init__(self) -> None:
        _check("table function", (self.function,), self.input.arity)

    @property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        return self.input.columns + tuple(
            Column(n, t) for n, t in zip(self.names, self.types, strict=False)
        )

    @property
    def arity(self) -> int:
        return self.input.arity + len(self.names)

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.input.column_names + self.names


@dataclass(frozen=True)  # not slotted: `columns` is cached
class Linear(_Unary):
    """The input transformed by a fused chain of linear steps (a `JoinFunction`).

    Made by the optimizer from runs of Map/Filter/Project/FlatMap/Negate; the
    function's input arity is the input's.
    """

    input: Plan
    function: JoinFunction

    def __post_init__(self) -> None:
        if self.function.input_arity != self.input.arity:
            raise SchemaError(
                f"linear: the function reads {self.function.input_arity} columns, "
                f"the input has {self.input.arity}"
            )

    @property
    def arity(self) -> int:
        return self.function.arity

    @cached_property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        return self.function.columns(self.input.columns)


JOIN_KINDS = ("inner", "left", "right", "full")


@dataclass(frozen=True)  # not slotted: `columns` is cached
class Join(Plan):
    """Pairs of left and right rows satisfying `on` (None: every pair), SQL outer kinds too.

    `on` sees the left columns then the right ones, as does the output. `lateral`: the
    right side's `Outer` references read the left row (a LATERAL subquery), not the
    enclosing query's row (a derived table inside a correlated subquery).
    """

    left: Plan
    right: Plan
    kind: str = "inner"
    on: exp.Expression | None = None
    lateral: bool = False

    def __post_init__(self) -> None:
        if self.kind not in JOIN_KINDS:
            raise SchemaError(f"join kind {self.kind!r} is not one of {JOIN_KINDS}")
        if self.on is not None:
            _check("join condition", (self.on,), self.left.arity + self.right.arity)

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.left, self.right)

    @property
    def arity(self) -> int:
        return self.left.arity + self.right.arity

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.left.column_names + self.right.column_names

    @cached_property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        return self.left.columns + self.right.columns

    def with_inputs(self, inputs: tuple[Plan, ...]) -> Plan:
        return Join(inputs[0], inputs[1], self.kind, self.on, self.lateral)


@dataclass(frozen=True)  # not slotted: `columns` is cached
class Reduce(Plan):
    """Group by input columns `group`; output the group columns then one per aggregate.

    With no group columns the result has exactly one row, even over no input
    (SQL's empty-group rule). `domain`, set by decorrelation, is a relation of
    group keys that must each have a row even when their group is empty.
    """

    input: Plan
    group: tuple[int, ...]
    aggregates: tuple[exp.Expression, ...]
    names: tuple[str, ...]
    domain: Plan | None = None

    def __post_init__(self) -> None:
        _check("aggregate", self.aggregates, self.input.arity)
        if any(i >= self.input.arity for i in self.group):
            raise SchemaError("group by a column that does not exist")

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.input,) + ((self.domain,) if self.domain is not None else ())

    @property
    def arity(self) -> int:
        return len(self.group) + len(self.aggregates)

    @property
    def column_names(self) -> tuple[str, ...]:
        names = self.input.column_names
        return tuple(names[i] for i in self.group) + self.names

    @cached_property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        cols = self.input.columns
        in_types = [c.type for c in cols]
        aggs = tuple(
            Column(n, infer_type(e, in_types))
            for n, e in zip(self.names, self.aggregates, strict=False)
        )
        return tuple(cols[i] for i in self.group) + aggs

    def with_inputs(self, inputs: tuple[Plan, ...]) -> Plan:
        domain = inputs[1] if len(inputs) > 1 else None
        return Reduce(inputs[0], self.group, self.aggregates, self.names, domain)


@dataclass(frozen=True, slots=True)
class Distinct(_SameColumns):
    """Each row of the input once."""

    input: Plan


@dataclass(frozen=True)  # not slotted: `columns` is cached
class Union(Plan):
    """The multiset sum of the inputs (UNION ALL); columns named after the first."""

    parts: tuple[Plan, ...]

    def __post_init__(self) -> None:
        arities = {p.arity for p in self.parts}
        if len(arities) != 1:
            raise SchemaError(
                "each UNION/EXCEPT/INTERSECT query must have the same number of columns"
            )

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return self.parts

    @property
    def arity(self) -> int:
        return self.parts[0].arity

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.parts[0].column_names

    @cached_property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        first = self.parts[0].columns
        out = []
        for i, c in enumerate(first):
            t = c.type
            for p in self.parts[1:]:
                t = types.common_type(t, p.columns[i].type, "UNION")
            out.append(Column(c.name, t))
        return tuple(out)

    def with_inputs(self, inputs: tuple[Plan, ...]) -> Plan:
        return Union(inputs)


@dataclass(frozen=True, slots=True)
class Negate(_SameColumns):
    """The input with every multiplicity negated."""

    input: Plan


@dataclass(frozen=True, slots=True)
class Threshold(_SameColumns):
    """Each row with its multiplicity if positive (EXCEPT ALL's clamp)."""

    input: Plan


@dataclass(frozen=True, slots=True)
class Order:
    """One ORDER BY key: a column, direction, and where NULLs go."""

    column: int
    desc: bool = False
    nulls_first: bool = False


@dataclass(frozen=True, slots=True)
class TopK(_SameColumns):
    """Per group of `group` columns, the rows ranked `offset < rank <= offset + limit`."""

    input: Plan
    group: tuple[int, ...]
    order: tuple[Order, ...]
    limit: int | None
    offset: int = 0


@dataclass(frozen=True, slots=True)
class LetRec(Plan):
    """Mutually recursive bindings (fixpoint), then a body that reads them by `LocalGet`.

    `limit`/`on_limit` bound the rounds (Materialize's RETURN/ERROR AT RECURSION LIMIT).
    """

    names: tuple[str, ...]
    values: tuple[Plan, ...]
    body: Plan
    limit: int | None = None
    on_limit: str = "error"

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (*self.values, self.body)

    @property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        return self.body.columns

    @property
    def arity(self) -> int:
        return self.body.arity

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.body.column_names

    def with_inputs(self, inputs: tuple[Plan, ...]) -> Plan:
        return LetRec(self.names, inputs[:-1], inputs[-1], self.limit, self.on_limit)


def expressions_of(plan: Plan) -> tuple[exp.Expression, ...]:
    """The scalar expressions a node holds (for passes that walk them)."""
    match plan:
        case Map(exprs=e):
            return e
        case Filter(predicates=e):
            return e
        case FlatMap(function=f):
            return (f,)
        case Join(on=on):
            return (on,) if on is not None else ()
        case Reduce(aggregates=e):
            return e
        case Constant(rows=rows):
            return tuple(v for r in rows for v in r)
    return ()


def walk(plan: Plan) -> list[Plan]:
    """Every node of the plan, parents before children (shared nodes once)."""
    seen: dict[int, Plan] = {}
    stack = [plan]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        stack.extend(reversed(node.inputs))
    return list(seen.values())


@dataclass(frozen=True, slots=True)
class Query:
    """A bound query: its plan plus the presentation of a top-level read.

    The first `visible` columns are the result; ORDER BY keys may be hidden
    columns after them. A view keeps only `plan` (and `TopK` for LIMIT).
    """

    plan: Plan
    visible: int
    order: tuple[Order, ...] = ()
    limit: int | None = None
    offset: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.plan.columns[: self.visible]

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.plan.column_names[: self.visible]


__all__ = [
    "Column",
    "Constant",
    "Distinct",
    "Filter",
    "FlatMap",
    "Get",
    "Join",
    "LetRec",
    "Linear",
    "LocalGet",
    "Map",
    "Negate",
    "Order",
    "Outer",
    "Plan",
    "Project",
    "Query",
    "Reduce",
    "SubqueryExpr",
    "Threshold",
    "TopK",
    "Union",
    "col",
    "conjuncts",
    "expressions_of",
    "index",
    "infer_type",
    "parse_expr",
    "refs",
    "remap",
    "shift",
    "show_expr",
    "text_key",
    "walk",
]
