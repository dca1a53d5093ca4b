"""Types, names and value output as PostgreSQL 15 has them.

Each expected value here was read from PostgreSQL 15 (`psql -Atc`); where DuckDB or
Spark answer differently, dsql must still answer as PostgreSQL does.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

import dsql


@pytest.fixture
def con() -> dsql.Connection:
    return dsql.connect(kernel="local")


def rows(con: dsql.Connection, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def names(con: dsql.Connection, sql: str) -> list[str]:
    return [d[0] for d in con.execute(sql).description]


# -- names: unquoted fold to lower case, quoted keep their case


def test_unquoted_names_fold_to_lower_case(con: dsql.Connection) -> None:
    con.execute('CREATE TABLE Foo (Bar int, "Baz" int)')
    con.execute('INSERT INTO FOO (BAR, "Baz") VALUES (1, 2)')
    assert rows(con, 'SELECT bar, "Baz" FROM foo') == [(1, 2)]
    assert names(con, "SELECT BAR AS Qux, F.Bar FROM Foo F") == ["qux", "bar"]
    assert rows(con, "WITH C AS (SELECT Bar FROM Foo) SELECT c.BAR FROM c") == [(1,)]
    with pytest.raises(dsql.Error, match="column 'baz' does not exist"):
        con.execute("SELECT baz FROM foo")


def test_quoted_names_are_other_objects(con: dsql.Connection) -> None:
    con.execute("CREATE TABLE foo (x int)")
    con.execute('CREATE TABLE "Foo" (x int)')
    con.execute("INSERT INTO FOO VALUES (1)")
    con.execute('INSERT INTO "Foo" VALUES (5)')
    assert rows(con, 'SELECT * FROM "Foo"') == [(5,)]
    assert rows(con, "SELECT * FROM Foo") == [(1,)]


def test_names_fold_in_views_indexes_and_dml(con: dsql.Connection) -> None:
    con.execute("CREATE TABLE T (A int)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    con.execute("CREATE MATERIALIZED VIEW MV AS SELECT A FROM T WHERE A > 0")
    con.execute("CREATE INDEX Idx ON T (A)")
    assert rows(con, "SHOW INDEXES ON t") == [("idx", "t", "a")]
    con.execute("DROP INDEX IDX")
    con.execute("UPDATE T SET A = 3 WHERE A = 1")
    con.execute("DELETE FROM t WHERE a = 2")
    assert rows(con, "SELECT * FROM mv") == [(3,)]
    assert rows(con, "SUBSCRIBE Mv")[0][-1] == 3
