"""A session's catalog entries (`Relation`), and what a view's entry keeps.

A table's entry holds its input and arrangement; a materialized view's, its
dataflow's nodes, the switch its result passes (`dsql.heal`) and arrangement; a
view's, only its plan (rendered by each reader). `_view_plan` is the plan a view
keeps of its bound query (ORDER BY dropped unless LIMIT/OFFSET needs it);
`typed_columns` its columns with the types the engine produced.

>>> from dsql.planner.types import build
>>> r = Relation("t", "table", (Column("a", build("int")),))
>>> r.schema.names
['_c0']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dsql.planner import types
from dsql.planner.bind_shape import visible_plan
from dsql.planner.plan import Column, Plan, Query
from dsql.runtime.collection import Arrangement
from dsql.runtime.input import InputSession


@dataclass
class Relation:
    """A catalog entry: a table, a materialized view, or a (non-materialized) view."""

    name: str
    kind: str  # "table" | "materialized view" | "view"
    columns: tuple[Column, ...]
    sql: str = ""
    plan: Plan | None = None
    arrangement: Arrangement | None = None
    input: InputSession | None = None
    not_null: tuple[bool, ...] = ()
    defaults: tuple[exp.Expression | None, ...] = ()
    nodes: list[Any] = field(default_factory=list)
    depends_on: tuple[str, ...] = ()
    #: A materialized view's `SwitchNode` (its result's arrangement reads it) and the
    #: nodes computing its query, which a failure drops and healing builds again
    #: (`nodes` are the rest of its nodes: the switch's and the arrangement's).
    switch: Any = None
    computation: list[Any] = field(default_factory=list)
    #: A table's count of writes (healing retries a view when one of its tables changed).
    version: int = 0

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([(f"_c{i}", types.to_arrow(c.type)) for i, c in enumerate(self.columns)])


def create_table_sql(rel: Relation) -> str:
    """A CREATE TABLE statement that makes a table like `rel` (SHOW CREATE TABLE):
    its columns, types, NOT NULL and defaults.

    >>> from dsql.planner.types import build
    >>> create_table_sql(Relation("t", "table", (Column("a", build("int")),), not_null=(True,)))
    'CREATE TABLE t (a INT NOT NULL)'
    """
    parts = []
    for i, c in enumerate(rel.columns):
        part = f"{exp.to_identifier(c.name).sql('postgres')} {c.type.sql('postgres')}"
        if i < len(rel.not_null) and rel.not_null[i]:
            part += " NOT NULL"
        default = rel.defaults[i] if i < len(rel.defaults) else None
        if default is not None:
            part += f" DEFAULT {default.sql('postgres')}"
        parts.append(part)
    return f"CREATE TABLE {exp.to_identifier(rel.name).sql('postgres')} ({', '.join(parts)})"


def _view_plan(bound: Query) -> Plan:
    if bound.limit is None and not bound.offset:
        bound = Query(bound.plan, bound.visible)
    return visible_plan(bound)


def typed_columns(cols: tuple[Column, ...], schema: pa.Schema) -> tuple[Column, ...]:
    """The view's columns with the types the engine produced (authoritative)."""
    return tuple(Column(c.name, types.from_arrow(schema.field(i).type)) for i, c in enumerate(cols))


__all__ = [
    "Relation",
    "create_table_sql",
    "typed_columns",
]
