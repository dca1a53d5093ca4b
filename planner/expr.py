"""Scalar expressions over positional columns, as the logical plan holds them.

An expression is a sqlglot tree in which column `i` of the input is the column
reference `_c{i}` (`col(i)`; printed `#i` by EXPLAIN). Four expression nodes are the
planner's own: `Outer(i)`, column `i` of an enclosing query's row (printed `^#i`, `^^#i`
two levels out), and
`SubqueryExpr`, a subquery used as a value (both exist only before decorrelation),
`Position(i)`, what `*` expands to while binding, and `RaiseError(message)`, an
error where evaluated (decorrelation's check that a scalar subquery has one row).

Invariant: the planner never mutates an expression a plan node or a linear step
holds, so facts about one (`held_refs`, `held_key`) are remembered by identity.

>>> show_expr(shift(parse_expr("_c0 + _c2"), 1))
'#1 + #3'
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Iterator
from copy import deepcopy
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp

from dsql.errors import SchemaError
from dsql.planner import types

if TYPE_CHECKING:
    from dsql.planner.plan import Plan


def col(i: int) -> exp.Column:
    """A reference to input column `i` (built directly, with no empty qualifiers: `exp.column`
    costs twice as much, and the planner makes many, a wide join thousands a query)."""
    return exp.Column(this=exp.Identifier(this=f"_c{i}", quoted=False))


def held_col(i: int) -> exp.Column:
    """A reference to input column `i` that is never changed: one node per position, shared
    by every holder. Only for holders that never change an expression nor give it to
    anything that would (a segment's outputs, a runtime `join_function`'s outputs); a
    tree being built gets a fresh `col`. A wide join's identity outputs are hundreds of
    references a query, and building each (with its collection as garbage) was a fifth
    of select5.test."""
    shared = _HELD_COLS.get(i)
    if shared is None:
        shared = _HELD_COLS[i] = col(i)
    return shared


_HELD_COLS: dict[int, exp.Column] = {}


def is_col(e: exp.Expression, i: int) -> bool:
    """Whether `e` is an unqualified reference to input column `i` (what `col(i)` builds),
    decided without building one to compare."""
    return type(e) is exp.Column and e.args.get("table") is None and index(e) == i


def index(column: exp.Column) -> int | None:
    """The position a `_c{i}` reference points at (None for other columns)."""
    ident = column.args.get("this")
    name = ident.this if type(ident) is exp.Identifier else column.name
    return int(name[2:]) if name.startswith("_c") and name[2:].isdigit() else None


def parse_expr(text: str) -> exp.Expr:
    """An expression from PostgreSQL text (for tests and doctests)."""
    return sqlglot.parse_one(text, read="postgres")


def as_expression(e: exp.Expr) -> exp.Expression:
    """`e` typed as what plan nodes hold: `exp.Expression`, the base of every node class.

    sqlglot 30 types what its builders return (`exp.and_`, `exp.or_`, `parse_one`) as
    `exp.Expr`, the trait that `exp.Expression` implements; each node they build is one.

    >>> type(as_expression(exp.and_(col(0), col(1)))).__name__
    'And'
    """
    assert isinstance(e, exp.Expression), f"{type(e).__name__} is not a sqlglot node"
    return e


class Outer(exp.Expression):
    """Column `this` of an enclosing query's current row (a correlated reference): `level`
    1 (the default) is the query around this one, 2 the one around that, and so on."""

    arg_types = {"this": True, "level": False}

    @property
    def levels_out(self) -> int:
        return int(self.args.get("level") or 1)


def outer(position: int, levels_out: int = 1) -> Outer:
    """A reference to column `position` of the query `levels_out` levels out."""
    return Outer(this=position, level=levels_out if levels_out > 1 else None)


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


class RaiseError(exp.Expression, exp.Func):
    """An error with message `this`, raised where the expression is evaluated: a runtime
    error of PostgreSQL's that the planner spells out (a scalar subquery's second row).

    Printed `RAISE_ERROR(message)`, which both kernels evaluate: Spark's function, and a
    macro over `error()` in the in-process kernel's DuckDB. Its value is NULL-typed, so
    it takes the type of the CASE arm it replaces when cast.
    """

    arg_types = {"this": True}
    _sql_names = ["RAISE_ERROR"]


def nodes(expression: exp.Expression) -> Iterator[exp.Expression]:
    """Every node of an expression, in no particular order (sqlglot's `walk` visits the
    same nodes at several times the cost)."""
    stack = [expression]
    while stack:
        node = stack.pop()
        yield node
        for value in node.args.values():
            if isinstance(value, exp.Expression):
                stack.append(value)
            elif type(value) is list:
                stack.extend(v for v in value if isinstance(v, exp.Expression))


def refs(expression: exp.Expression) -> set[int]:
    """The input columns an expression reads."""
    found = set()
    for node in nodes(expression):
        if isinstance(node, exp.Column):
            i = index(node)
            if i is not None:
                found.add(i)
    return found


def held_refs(expression: exp.Expression) -> frozenset[int]:
    """`refs` of an expression that no longer changes (one a plan node or a linear step
    holds: the planner never mutates those), remembered by identity."""
    return _held(_HELD_REFS, expression, lambda: frozenset(refs(expression)))


def held_key(expression: exp.Expression) -> Hashable:
    """`text_key` of an expression that no longer changes, remembered by identity."""
    return _held(_HELD_KEYS, expression, lambda: text_key(expression))


def _held(table: dict[int, tuple[weakref.ref, Any]], e: exp.Expression, compute: Any) -> Any:
    entry = table.get(id(e))
    if entry is not None and entry[0]() is e:
        return entry[1]
    value = compute()
    key = id(e)

    def forget(_: weakref.ref) -> None:
        table.pop(key, None)

    # The entry goes when `e` does: holding `e` itself kept thousands of dead plans'
    # trees alive, and each full garbage collection walked them.
    table[key] = (weakref.ref(e, forget), value)
    return value


_HELD_REFS: dict[int, tuple[weakref.ref, Any]] = {}
_HELD_KEYS: dict[int, tuple[weakref.ref, Any]] = {}


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


def show_expr(e: exp.Expression) -> str:
    """An expression as EXPLAIN prints it: positional references `#n`, outer ones `^#n`,
    names unquoted (string literals printed as they are)."""

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, SubqueryExpr):
            return exp.Anonymous(this=f"<{node.args['kind']} subquery>")
        if isinstance(node, Outer):
            return exp.Var(this="^" * node.levels_out + f"#{node.this}")
        if isinstance(node, exp.Column) and not node.table:
            i = index(node)
            if i is not None:
                return exp.Var(this=f"#{i}")
        if isinstance(node, exp.Identifier) and node.quoted:
            return exp.Identifier(this=node.this, quoted=False)
        return node

    return e.copy().transform(replace).sql("postgres")


def check_refs(where: str, expressions: Any, arity: int) -> None:
    """Raise `SchemaError` naming `where` if an expression reads a column at or past `arity`."""
    for e in expressions:
        for i in refs(e):
            if i >= arity:
                raise SchemaError(f"{where}: column #{i} does not exist (arity {arity})")


def arguments(call: exp.Func) -> list[exp.Expression]:
    """A call's arguments in order (sqlglot keeps them under named keys)."""
    found: list[exp.Expression] = []
    for key in call.arg_types:
        value = call.args.get(key)
        if isinstance(value, exp.Expression):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, exp.Expression))
    return found


__all__ = [
    "Outer",
    "Position",
    "RaiseError",
    "SubqueryExpr",
    "arguments",
    "check_refs",
    "col",
    "conjuncts",
    "held_col",
    "held_key",
    "held_refs",
    "index",
    "is_col",
    "infer_type",
    "nodes",
    "outer",
    "parse_expr",
    "refs",
    "remap",
    "shift",
    "show_expr",
    "text_key",
    "typed",
]
