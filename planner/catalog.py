"""What the binder needs of a catalog: the columns of a named relation.

The session's catalog (tables, views, indexes, their dataflows) lives in `dsql/`;
the planner sees it only through this protocol, so it can be tested with a dict.

>>> from dsql.planner.plan import Column
>>> from dsql.planner.types import build
>>> cat = StaticCatalog({"t": (Column("a", build("int")),)})
>>> [c.name for c in cat.columns("t")]
['a']
"""

from __future__ import annotations

from typing import Protocol

from dsql.errors import SchemaError
from dsql.planner.plan import Column


class Catalog(Protocol):
    """Named relations the binder may read."""

    def columns(self, name: str) -> tuple[Column, ...]:
        """The columns of relation `name`; a SchemaError if there is none."""
        ...

    def names(self) -> tuple[str, ...]:
        """Every relation name (for hints)."""
        ...


class StaticCatalog:
    """A catalog over a fixed mapping of names to columns."""

    def __init__(self, relations: dict[str, tuple[Column, ...]]) -> None:
        self.relations = dict(relations)

    def columns(self, name: str) -> tuple[Column, ...]:
        if name not in self.relations:
            raise unknown_relation(name, self.names())
        return self.relations[name]

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.relations))


def unknown_relation(name: str, known: tuple[str, ...]) -> SchemaError:
    """The error for a name no relation has, with the known names as a hint."""
    hint = (
        f"known relations: {', '.join(known)}"
        if known
        else "no tables exist yet: CREATE TABLE first"
    )
    return SchemaError(f"unknown table or view '{name}'", hint=hint)


__all__ = ["Catalog", "StaticCatalog", "unknown_relation"]
