"""Engine adapters: the narrow surface the sqllogictest runner drives.

An `Engine` executes one SQL statement and returns its rows (or None for a statement
without a result), creates and drops the runner's materialized views, and raises
`EngineError` for every error the engine reports as a user error. Any other exception
escaping an adapter is a crash of the engine under test, and the runner reports it as
a failure even where the record expects an error.

Adapters:
- `duckdb`: in-memory DuckDB. `CREATE MATERIALIZED VIEW` is emulated by a plain view,
  which is enough to test the runner's incremental logic (a view is always current).
  With `sqlite_compat` (the default for files not under a `duckdb/` folder) the session
  uses SQLite's semantics where DuckDB's default differs: `/` on integers is integer
  division, and NULLs sort first ascending and last descending.
- `dsql`: dsql's PEP 249 connection, `dsql.connect(clock="manual", kernel=...)`;
  imported lazily, so the runner works before `dsql.connect` exists.

>>> engine = make_engine("duckdb")
>>> engine.execute("SELECT 7 / 2")
[(3,)]
>>> engine.close()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["Engine", "EngineError", "DuckDBEngine", "DsqlEngine", "ENGINES", "make_engine"]

Rows = list[tuple[Any, ...]]


class EngineError(Exception):
    """An error the engine reported for a statement (what `statement error` expects)."""


class Engine(Protocol):
    """What the runner needs of an engine.

    `names` are the engine names `skipif`/`onlyif` match; `error_dialects` the
    dialects of expected error messages the engine's messages can be held to;
    `sql_dialect` is the sqlglot dialect the runner parses queries with.
    """

    names: frozenset[str]
    error_dialects: frozenset[str]
    sql_dialect: str

    def execute(self, sql: str) -> Rows | None:
        """Run one statement; its rows, or None if it returns none."""
        ...

    def create_materialized_view(self, name: str, sql: str, columns: Sequence[str] = ()) -> None:
        """Create a view named `name` over the query `sql` that stays up to date, its
        columns named `columns` where given (a query's own names may repeat, which a view's
        may not)."""
        ...

    def drop_materialized_view(self, name: str) -> None:
        """Drop a view made by `create_materialized_view`."""
        ...

    def close(self) -> None:
        """Release the engine's resources."""
        ...


class _PEP249Engine:
    """An engine behind a PEP 249 connection; subclasses set `_con`, `_error`, view SQL.

    `_create_view` and `_drop_view` are templates with `{name}` and `{sql}`.
    """

    _con: Any
    _error: type[Exception]
    _create_view = "CREATE MATERIALIZED VIEW {name}{columns} AS {sql}"
    _drop_view = "DROP MATERIALIZED VIEW IF EXISTS {name}"

    def execute(self, sql: str) -> Rows | None:
        cursor = self._con.cursor()
        try:
            cursor.execute(sql)
            if cursor.description is None:
                return None
            return [tuple(row) for row in cursor.fetchall()]
        except self._error as e:
            raise EngineError(str(e)) from e
        finally:
            cursor.close()

    def create_materialized_view(self, name: str, sql: str, columns: Sequence[str] = ()) -> None:
        names = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
        self.execute(
            self._create_view.format(name=name, sql=sql, columns=f" ({names})" * bool(names))
        )

    def drop_materialized_view(self, name: str) -> None:
        self.execute(self._drop_view.format(name=name))

    def close(self) -> None:
        self._con.close()


class DuckDBEngine(_PEP249Engine):
    """In-memory DuckDB; materialized views are plain views."""

    names = frozenset({"duckdb"})
    error_dialects = frozenset({"duckdb"})
    sql_dialect = "duckdb"
    _create_view = "CREATE VIEW {name}{columns} AS {sql}"
    _drop_view = "DROP VIEW IF EXISTS {name}"

    def __init__(self, sqlite_compat: bool = True) -> None:
        import duckdb

        self._error = duckdb.Error
        self._con = duckdb.connect(":memory:")
        if sqlite_compat:
            self._con.execute("SET GLOBAL integer_division = true")
            self._con.execute("SET GLOBAL default_null_order = 'nulls_first_on_asc_last_on_desc'")


class DsqlEngine(_PEP249Engine):
    """dsql through its PEP 249 API, with a manual clock."""

    names = frozenset({"dsql"})
    error_dialects = frozenset({"dsql"})
    sql_dialect = "postgres"

    def __init__(self, kernel: str = "auto") -> None:
        import dsql
        from dsql.errors import DsqlError

        self._error = DsqlError
        self._con = dsql.connect(clock="manual", kernel=kernel)  # type: ignore[attr-defined]
        # The suites compare results, not notices: writes reach the views at the next read,
        # so a file's run of INSERTs costs one round over its many views, not one each.
        self._con.session.deliver_writes = False

    def execute(self, sql: str) -> Rows | None:
        """Run the record's statements one at a time (a record may hold several, as the
        CLI runs a script); the last one's rows."""
        from dsql import grammar

        try:
            statements = grammar.parse(sql)
        except self._error as e:
            raise EngineError(str(e)) from e
        rows = None
        for statement in statements or [None]:
            rows = super().execute(sql if statement is None else statement.text)
        return rows


ENGINES: dict[str, Callable[..., Engine]] = {"duckdb": DuckDBEngine, "dsql": DsqlEngine}


def make_engine(name: str, *, kernel: str = "auto", sqlite_compat: bool = True) -> Engine:
    """A fresh engine by name (`duckdb` or `dsql`); `kernel` only applies to dsql."""
    if name == "dsql":
        return DsqlEngine(kernel=kernel)
    if name == "duckdb":
        return DuckDBEngine(sqlite_compat=sqlite_compat)
    raise ValueError(f"unknown engine {name!r}; choose one of {sorted(ENGINES)}")
