"""Name resolution: which column of the current relation a SQL name refers to.

A `Scope` lists the FROM items visible at a point of a query, each with its
alias, its column names and its offset in the relation being built. Names
resolve innermost scope first; a name found in an enclosing scope becomes an
`Outer` reference (a correlated subquery). Unqualified names that two items
share are ambiguous.

>>> s = Scope((Item("t", ("a", "b"), 0), Item("u", ("a",), 2)))
>>> s.resolve("b", None)
(0, 1)
>>> s.resolve("a", "u")
(0, 2)
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dsql.errors import SchemaError, UnsupportedError


@dataclass(frozen=True, slots=True)
class Item:
    """One FROM item: alias, column names, and the position of its first column."""

    alias: str
    names: tuple[str, ...]
    offset: int
    #: Columns a USING/NATURAL join merged away (resolve unqualified to the left side).
    hidden: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Scope:
    """The FROM items of one query level, and the enclosing level's scope.

    `types`, where known, are the level's column types by position: a subquery's outer
    references are typed by them (`outer_type`), as PostgreSQL's integer division needs.
    """

    items: tuple[Item, ...]
    parent: Scope | None = None
    types: tuple[exp.DataType, ...] | None = None

    def outer_type(self, levels_out: int, position: int) -> exp.DataType | None:
        """The type of column `position` of the scope `levels_out` levels out, if known."""
        scope: Scope | None = self
        for _ in range(levels_out):
            scope = scope.parent if scope is not None else None
        if scope is None or scope.types is None or position >= len(scope.types):
            return None
        return scope.types[position]

    @property
    def arity(self) -> int:
        return max((i.offset + len(i.names) for i in self.items), default=0)

    def with_items(self, items: tuple[Item, ...]) -> Scope:
        return Scope(items, self.parent)

    def resolve(self, name: str, table: str | None) -> tuple[int, int]:
        """(level, position): level 0 is this scope, 1 the enclosing one."""
        scope: Scope | None = self
        level = 0
        while scope is not None:
            found = scope._find(name, table)
            if found is not None:
                return level, found
            scope = scope.parent
            level += 1
        raise _unknown(name, table, self)

    def _find(self, name: str, table: str | None) -> int | None:
        matches: list[int] = []
        for item in self.items:
            if table is not None and item.alias != table:
                continue
            if table is None and name in item.hidden:
                continue
            matches.extend(item.offset + i for i, n in enumerate(item.names) if n == name)
        if len(matches) > 1:
            owners = [i.alias for i in self.items if name in i.names]
            raise SchemaError(
                f"column reference '{name}' is ambiguous",
                hint=f"qualify it: {' or '.join(f'{o}.{name}' for o in owners)}",
            )
        if not matches and table is not None and not any(i.alias == table for i in self.items):
            return None
        return matches[0] if matches else None

    def item(self, alias: str) -> Item:
        for item in self.items:
            if item.alias == alias:
                return item
        raise SchemaError(f"unknown table '{alias}' in this query")


def _unknown(name: str, table: str | None, scope: Scope) -> SchemaError:
    qualified = f"{table}.{name}" if table else name
    known = [f"{i.alias}.{n}" if i.alias else n for i in scope.items for n in i.names]
    hint = f"columns here: {', '.join(known[:20])}" if known else "this query reads no table"
    return SchemaError(f"column '{qualified}' does not exist", hint=hint)


def column_name(e: exp.Expression) -> str:
    """The output name PostgreSQL gives a select item without an alias."""
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Cast):
        return (
            column_name(e.this) if isinstance(e.this, exp.Column) else e.to.sql("postgres").lower()
        )
    if isinstance(e, exp.Func):
        name = e.sql_name() if not isinstance(e, exp.Anonymous) else e.name
        return name.lower()
    return "?column?"


def position_of(e: exp.Expr) -> tuple[int, int] | None:
    """The (line, col) sqlglot recorded for an expression's first identifier."""
    for node in e.walk():
        meta = getattr(node, "_meta", None) or {}
        if "line" in meta and "col" in meta:
            start = max(meta["col"] - len(node.name if hasattr(node, "name") else ""), 0) + 1
            return meta["line"], start
    return None


def unsupported(what: str, hint: str) -> UnsupportedError:
    return UnsupportedError(f"{what} is not supported", hint=hint)


__all__ = ["Item", "Scope", "column_name", "position_of", "unsupported"]
