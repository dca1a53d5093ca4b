"""The logical plan: immutable relational operators over positional columns.

Every node has `columns` (name and SQL type per output column). Expressions are
sqlglot trees in which column `i` of the node's input is `_c{i}` (`expr.py`); a
join's expressions see the left columns and then the right ones. This module holds
the node base, the sources and the linear operators (each output delta a function of
the input delta alone: Map, Filter, Project, FlatMap, Linear, Union, Negate), plus
`Query`; `stateful.py` holds the operators that keep state (Join, Reduce, Distinct,
Threshold, TopK, LetRec).

Invariants, checked by `__post_init__`: expressions refer only to existing input
columns; union inputs have equal arity; reduce groups are input columns.

>>> from dsql.planner.expr import parse_expr
>>> t = Get("t", (Column("a", types.build("int")),))
>>> Filter(t, (parse_expr("_c0 > 1"),)).columns[0].name
'a'
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

from sqlglot import exp

from dsql.errors import SchemaError
from dsql.planner import types
from dsql.planner.expr import check_refs, infer_type

if TYPE_CHECKING:
    from dsql.planner.linear import JoinFunction


@dataclass(frozen=True, slots=True)
class Column:
    """One output column: its user-facing name, SQL type and nullability."""

    name: str
    type: exp.DataType
    nullable: bool = True


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
        check_refs("map", self.exprs, self.input.arity)

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
        check_refs("filter", self.predicates, self.input.arity)


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
        check_refs("table function", (self.function,), self.input.arity)

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
class Order:
    """One ORDER BY key: a column, direction, and where NULLs go."""

    column: int
    desc: bool = False
    nulls_first: bool = False


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
    "Filter",
    "FlatMap",
    "Get",
    "Linear",
    "LocalGet",
    "Map",
    "Negate",
    "Order",
    "Plan",
    "Project",
    "Query",
    "Union",
    "walk",
]
