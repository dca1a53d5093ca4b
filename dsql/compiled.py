"""The compiler alone: `compile(sql, catalog)` binds a query and plans it, running nothing.

`catalog` may be a connection or session, any object with `columns(name)` and `names()`
(the planner's `Catalog` protocol), or a mapping `{table: {column: sql_type}}`. The
result's `explain(stage)` prints the raw, decorrelated or optimized plan; the physical
plan (runtime operators) needs a session to render into.

>>> people = {"people": {"name": "text", "age": "int"}}
>>> plan = compile("SELECT name FROM people WHERE age > 30", people)
>>> plan.columns
[('name', 'text')]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dsql import errors, grammar
from dsql.execute import too_deep
from dsql.grammar.sql import nesting_room
from dsql.session import Session


@dataclass(frozen=True)
class CompiledQuery:
    """A query bound against a catalog, not run: its columns and its plans (`explain`)."""

    sql: str
    query: Any  # dsql.planner.plan.Query
    catalog: Any

    @property
    def columns(self) -> list[tuple[str, str]]:
        return [(c.name, c.type.sql("postgres").lower()) for c in self.query.columns]

    def explain(self, stage: str = "optimized") -> str:
        """The plan at `stage`: raw, decorrelated, optimized, or (with a session) physical."""
        from dsql.explain import explain

        if stage == "physical" and not isinstance(self.catalog, Session):
            raise errors.UnsupportedError(
                "the physical plan needs a session", hint="compile against a connection"
            )
        return explain(self.catalog, self.query_ast(), stage)

    def query_ast(self) -> Any:
        return query_of(grammar.parse(self.sql)[0])


def compile(sql: str, catalog: Any) -> CompiledQuery:  # noqa: A001 - the issue's name
    """Bind a query (or a CREATE VIEW / SUBSCRIBE's query) against `catalog`, running nothing.

    `catalog` is a connection or session, an object with `columns(name)` and `names()`,
    or a mapping `{table: {column: sql_type}}`.
    """
    statements = grammar.parse(sql)
    if len(statements) != 1:
        raise errors.ProgrammingError(f"compile takes one statement, not {len(statements)}")
    target = _catalog(catalog)
    try:
        with nesting_room():
            bound = target.plan(query_of(statements[0]))
    except RecursionError:
        raise too_deep(sql) from None
    return CompiledQuery(sql, bound, target)


def _catalog(catalog: Any) -> Any:
    """Something with `plan(query)` and `relations` for `explain`, from what the user gave."""
    from dsql.planner.bind import bind
    from dsql.planner.catalog import StaticCatalog
    from dsql.planner.plan import Column
    from dsql.planner.types import build

    if isinstance(getattr(catalog, "session", None), Session):  # a Connection
        return catalog.session
    if isinstance(catalog, Session):
        return catalog
    if isinstance(catalog, Mapping):
        catalog = StaticCatalog(
            {
                name: tuple(Column(c, build(t)) for c, t in dict(cols).items())
                for name, cols in catalog.items()
            }
        )

    class _Static:
        relations: dict[str, Any] = {}

        def plan(self, query: Any) -> Any:
            return bind(query, catalog)

    return _Static()


def query_of(stmt: Any) -> Any:
    match stmt:
        case grammar.Select() | grammar.CreateView():
            return stmt.query
        case grammar.Subscribe(target=str() as name):
            return exp.select("*").from_(exp.to_table(name))
        case grammar.Subscribe():
            return stmt.target
    raise errors.UnsupportedError(
        f"compile takes a query, not {type(stmt).__name__}",
        hint="pass SELECT ... or CREATE VIEW ...",
    )


__all__ = ["CompiledQuery", "compile", "query_of"]
