"""Fixtures for tests that compare dsql with PostgreSQL over one seeded set of tables.

`fixtures(database, tables, rows)` returns two pytest fixtures: `pgc`, a psycopg
connection to a fresh PostgreSQL database `database` (one per test module), and `con`,
a fresh in-process dsql connection (one per test); both hold `tables` filled with
`rows` (`pg_oracle.seeded`). A test module binds them to those names:

    pgc, con = fixtures("regex", {"t": "id int, s text"}, {"t": "(1, 'a')"})

`assert_same(con, pgc, sql)` fails with the difference where dsql answers `sql`
otherwise than PostgreSQL (ordered when the query has ORDER BY).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from pg_oracle import differs, seeded

import dsql


def fixtures(
    database: str, tables: Mapping[str, str], rows: Mapping[str, str]
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The `pgc` and `con` fixtures over `tables` holding `rows` (module docstring)."""

    @pytest.fixture(scope="module")
    def pgc(pg: Any) -> Iterator[Any]:
        conn = seeded(pg.database(database), tables, rows)
        yield conn
        conn.close()

    @pytest.fixture
    def con() -> Iterator[dsql.Connection]:
        connection = seeded(dsql.connect(kernel="local"), tables, rows)
        yield connection
        connection.close()

    return pgc, con


def assert_same(con: Any, pgc: Any, sql: str, dsql_sql: str | None = None) -> None:
    """dsql answers `dsql_sql` (default `sql`) as PostgreSQL answers `sql`."""
    difference = differs(con, pgc, sql, dsql_sql, ordered="ORDER BY" in sql.upper())
    assert difference is None, f"{sql}\n{difference}"
