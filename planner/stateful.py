"""The logical plan's stateful operators: those whose output delta depends on state.

A join pairs a delta with the other side's accumulated rows; a reduce, distinct,
threshold or top-k recomputes the groups a delta touches from their whole contents;
a `LetRec` iterates to a fixpoint. The differential runtime keeps arrangements for
each; the linear operators and the node base are in `plan.py`. Also here:
`expressions_of`, the expressions any node holds.

Invariants, checked by `__post_init__`: join kinds are SQL's; conditions, aggregates
and group columns refer only to existing input columns.

>>> from dsql.planner import types
>>> from dsql.planner.plan import Column, Get
>>> t = Get("t", (Column("a", types.build("int")),))
>>> Join(t, t).column_names
('a', 'a')
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from sqlglot import exp

from dsql.errors import SchemaError
from dsql.planner.expr import SubqueryExpr, check_refs, infer_type, nodes
from dsql.planner.plan import (
    Column,
    Constant,
    Filter,
    FlatMap,
    Map,
    Order,
    Plan,
    _SameColumns,
    walk,
)

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
            check_refs("join condition", (self.on,), self.left.arity + self.right.arity)

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.left, self.right)

    @cached_property
    def arity(self) -> int:  # type: ignore[override]
        # Cached, like `columns`: a chain of n joins would otherwise sum n arities per call.
        return self.left.arity + self.right.arity

    @cached_property
    def column_names(self) -> tuple[str, ...]:  # type: ignore[override]
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
        check_refs("aggregate", self.aggregates, self.input.arity)
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


@dataclass(frozen=True, slots=True)
class Threshold(_SameColumns):
    """Each row with its multiplicity if positive (EXCEPT ALL's clamp)."""

    input: Plan


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


def walk_deep(plan: Plan) -> list[Plan]:
    """Every node of `plan` and of the plans of the subqueries its expressions hold (a
    bound plan keeps `SELECT (SELECT y FROM c)`'s read of `c` inside an expression until
    decorrelation), parents before children, shared nodes once.

    >>> from dsql.planner import types
    >>> from dsql.planner.plan import Column, Get
    >>> c = Get("c", (Column("y", types.build("int")),))
    >>> one = Constant(((),), ())
    >>> view = Map(one, (SubqueryExpr(this=c, kind="scalar"),), ("s",))
    >>> [type(n).__name__ for n in walk(view)], [type(n).__name__ for n in walk_deep(view)]
    (['Map', 'Constant'], ['Map', 'Constant', 'Get'])
    """
    found: dict[int, Plan] = {}
    todo = [plan]
    while todo:
        for node in walk(todo.pop()):
            if id(node) in found:
                continue
            found[id(node)] = node
            todo.extend(
                n.plan
                for e in expressions_of(node)
                for n in nodes(e)
                if isinstance(n, SubqueryExpr)
            )
    return list(found.values())


__all__ = [
    "JOIN_KINDS",
    "Distinct",
    "Join",
    "LetRec",
    "Reduce",
    "Threshold",
    "TopK",
    "expressions_of",
    "walk_deep",
]
