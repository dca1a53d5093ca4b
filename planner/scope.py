"""Name resolution: which column of the current relation a SQL name refers to.

A `Scope` lists the FROM items visible at a point of a query, each with its alias,
its column names and their positions in the relation being built. Names resolve
innermost scope first; a name found in an enclosing scope becomes an `Outer`
reference (a correlated subquery). Unqualified names that two columns answer to
are ambiguous.

An item is reachable by its alias (`qualified`: `t.c`, `t.*`), by bare column
names and `*` (`unqualified`), or both, as in PostgreSQL's namespace: a join
without an alias is an unqualified item over its output columns (USING/NATURAL's
merged columns first), while the tables inside it stay reachable by alias only.
`blocked` items exist at this level but may not be referenced from here (the
FROM items left of a JOIN, in its ON clause); a name that only they answer is
an `InvisibleReference`.

>>> s = Scope((Item("t", ("a", "b"), 0), Item("u", ("a",), 2)))
>>> s.resolve("b", None)
(0, 1)
>>> s.resolve("a", "u")
(0, 2)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlglot import exp

from dsql.errors import SchemaError, UnsupportedError


class InvisibleReference(SchemaError):
    """A reference to a FROM item of this query that this part of it may not see."""


@dataclass(frozen=True, slots=True)
class Item:
    """One name of a FROM clause: an alias and the columns it reaches.

    Column `names[i]` sits at `positions[i]`: `offset + i`, unless `at` lists the
    positions (a join's columns, whose merged ones are computed after both sides).
    """

    alias: str
    names: tuple[str, ...]
    offset: int = 0
    at: tuple[int, ...] = ()
    #: Reachable as `alias.column` and `alias.*`.
    qualified: bool = True
    #: Its columns reachable by bare name and expanded by `*`.
    unqualified: bool = True

    def __post_init__(self) -> None:
        if self.at and len(self.at) != len(self.names):
            raise ValueError("an item needs one position per column")

    @property
    def positions(self) -> tuple[int, ...]:
        return self.at or tuple(range(self.offset, self.offset + len(self.names)))

    def shifted(self, by: int) -> Item:
        """The item with its columns `by` positions further right."""
        if self.at:
            return replace(self, at=tuple(p + by for p in self.at))
        return replace(self, offset=self.offset + by)


@dataclass(frozen=True, slots=True)
class Scope:
    """The FROM items of one query level, and the enclosing level's scope.

    `types`, where known, are the level's column types by position: a subquery's outer
    references are typed by them (`outer_type`), as PostgreSQL's integer division needs.
    """

    items: tuple[Item, ...]
    parent: Scope | None = None
    blocked: tuple[Item, ...] = ()
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
        return max((p + 1 for i in self.items for p in i.positions), default=0)

    def with_items(self, items: tuple[Item, ...]) -> Scope:
        return Scope(items, self.parent, self.blocked)

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
        scope = self
        while scope is not None:
            scope._refuse_blocked(name, table)
            scope = scope.parent
        raise _unknown(name, table, self)

    def _find(self, name: str, table: str | None) -> int | None:
        matches: list[int] = []
        for item in self.items:
            if not (item.qualified and item.alias == table if table else item.unqualified):
                continue
            matches.extend(p for n, p in zip(item.names, item.positions, strict=True) if n == name)
        if len(matches) > 1:
            owners = [i.alias for i in self.items if i.qualified and i.alias and name in i.names]
            raise SchemaError(
                f"column reference '{name}' is ambiguous",
                hint=f"qualify it: {' or '.join(f'{o}.{name}' for o in owners)}"
                if len(owners) > 1
                else "give the columns distinct names",
            )
        return matches[0] if matches else None

    def _refuse_blocked(self, name: str, table: str | None) -> None:
        for item in self.blocked:
            if table is not None and item.alias == table:
                raise InvisibleReference(
                    f"invalid reference to FROM-clause entry for table '{table}'",
                    hint=f"there is an entry for table '{table}', "
                    "but it cannot be referenced from this part of the query",
                )
            if table is None and name in item.names:
                raise InvisibleReference(
                    f"column '{name}' does not exist",
                    hint=f"there is a column named '{name}' in table '{item.alias}', "
                    "but it cannot be referenced from this part of the query",
                )

    def item(self, alias: str) -> Item:
        for item in self.items:
            if item.qualified and item.alias == alias:
                return item
        for item in self.blocked:
            if item.alias == alias:
                self._refuse_blocked("", alias)
        raise SchemaError(f"unknown table '{alias}' in this query")


def _unknown(name: str, table: str | None, scope: Scope) -> SchemaError:
    qualified = f"{table}.{name}" if table else name
    known = [
        f"{i.alias}.{n}" if i.alias else n
        for i in scope.items
        if i.qualified or i.unqualified
        for n in i.names
    ]
    known = list(dict.fromkeys(known))
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
    if isinstance(e, exp.Subquery):
        return _query_column_name(e.this)
    if isinstance(e, exp.Func):
        name = e.sql_name() if not isinstance(e, exp.Anonymous) else e.name
        return name.lower()
    return "?column?"


def _query_column_name(query: exp.Expression) -> str:
    """A scalar subquery's name: its (first branch's) one output column's."""
    while isinstance(query, exp.SetOperation | exp.Subquery):
        query = query.this
    if isinstance(query, exp.Select) and len(query.expressions) == 1:
        return column_name(query.expressions[0])
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


__all__ = ["InvisibleReference", "Item", "Scope", "column_name", "position_of", "unsupported"]
