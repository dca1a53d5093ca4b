"""Scalar values against PostgreSQL: each expression's value as text (`(e)::text`, the
rendering `||`, string_agg and COPY share) must be PostgreSQL's exactly, in a one-off
query and through a materialized view over a table; where PostgreSQL raises an error
dsql raises a `DsqlError`. Text assigned by INSERT and UPDATE is read by PostgreSQL's
input functions.

The oracle is the test run's PostgreSQL (the `pg` fixture).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import dsql
from dsql.errors import DsqlError

#: Expressions whose text dsql must give as PostgreSQL does, by family.
EXPRESSIONS = {
    "negation": [
        "-((-2147483648)::int)",
        "-((-9223372036854775808)::int8)",
        "-((-32768)::int2)",
        "-(5::int2)",
        "-(-(7::int8))",
        "-(1.5)",
        "-(2.5::float8)",
    ],
    "boolean input": [
        "'on'::bool",
        "'off'::bool",
        "' true '::bool",
        "'OF'::bool",
        "'o'::bool",
        "'ye'::bool",
        "'1'::bool",
        "'maybe'::bool",
        "''::bool",
        "CAST('t' AS boolean)",
    ],
    "bytea text": [
        "'\\xdeadbeef'::bytea",
        "'abc'::bytea",
        "''::bytea",
        "'a\\\\b'::bytea",
        "'x' || '\\x00ff'::bytea::text",
        "'a' || '\\x01ff'::bytea",
        "'\\x01'::bytea || '\\x02'::bytea",
    ],
    "dates before year 1": [
        "date '0001-01-01' - 1",
        "timestamp '0001-01-01 00:00:00' - interval '1 second'",
        "timestamptz '0001-01-01 00:00:00+00' - interval '1 second'",
        "'on ' || (date '0001-01-01' - 366)",
    ],
    "float text": [
        "float8 'NaN'",
        "float8 'Infinity'",
        "float8 '-Infinity'",
        "real 'NaN'",
        "real '-Infinity'",
        "1e20::float8",
        "1e15::float8",
        "-1.5e15::float8",
        "1000000000000000.125::float8",
        "9999999999999998::float8",
        "1e16::float8",
        "1e-5::float8",
        "0.0001::float8",
        "0.1::float8 + 0.2::float8",
        "-0.0::float8",
        "2::float8",
        "-100::float8",
        "1.7976931348623157e308::float8",
        "5e-324::float8",
        "123456789::real",
        "1234567.0::real",
        "123456.0::real",
        "0.1::real",
        "-3.4028235e38::real",
        "1e-5::real",
        "sign(-3)",
        "round(2.5::float8)",
        "'x' || 1e15::float8",
    ],
    "text to integer": [
        "' 12 '::int",
        "'-3'::int8",
        "'+4'::int2",
        "'1.5'::int",
        "'0x1F'::int",
        "'1_000'::bigint",
        "''::int",
        "'99999999999'::int",
        "' 7'::int8 + 1",
    ],
    "chr": ["chr(65)", "chr(233)", "chr(0)", "chr(-1)"],
    "text concatenation": [
        "'a' || interval '1 day 2 hours' || 'b'",
        "1 || 'a' || true",
        "'a' || NULL || 1",
        "'d' || date '2020-02-29'",
        "'t' || timestamp '2020-01-01 10:00:00.25'",
    ],
}


@pytest.fixture(scope="module")
def pgc(pg: Any) -> Any:
    """A psycopg connection to this module's database."""
    conn = pg.database("scalar_hunt")
    yield conn
    conn.close()


@pytest.fixture
def con() -> Iterator[dsql.Connection]:
    connection = dsql.connect(kernel="local")
    connection.execute("CREATE TABLE one (x int)")
    connection.execute("INSERT INTO one VALUES (1)")
    yield connection
    connection.close()


def _postgres(pgc: Any, sql: str) -> str | None:
    """PostgreSQL's one value of `sql`; None where it raises an error."""
    try:
        return pgc.execute(sql).fetchall()[0][0]
    except psycopg.Error:
        pgc.rollback()
        return None


def _dsql(con: dsql.Connection, sql: str) -> str | None:
    """dsql's one value of `sql`; None where it raises a DsqlError."""
    try:
        return con.execute(sql).fetchall()[0][0]
    except DsqlError:
        return None


@pytest.mark.parametrize(
    "expression", [e for family in EXPRESSIONS.values() for e in family], ids=str
)
def test_text_of_expression(con: dsql.Connection, pgc: Any, expression: str) -> None:
    want = _postgres(pgc, f"SELECT ({expression})::text")
    assert _dsql(con, f"SELECT ({expression})::text") == want
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a view in error warns; its read is refused
        con.execute(f"CREATE MATERIALIZED VIEW v AS SELECT ({expression})::text AS c FROM one")
    assert _dsql(con, "SELECT c FROM v") == want


def test_negation_of_least_integer_column(con: dsql.Connection) -> None:
    con.execute("CREATE TABLE n (i int, b bigint, s smallint)")
    con.execute("INSERT INTO n VALUES (-2147483648, -9223372036854775808, -32768)")
    for column in "ibs":
        with pytest.raises(DsqlError):
            con.execute(f"SELECT -{column} FROM n").fetchall()


ASSIGNED = [
    ("bool", ["yes", "on", " t ", "OFF", "0", "n"]),
    ("bytea", ["\\x0102", "a\\\\b", "\\001x"]),
    ("timestamptz", ["2020-01-01 12:00+02", "2020-06-30 23:59:59.5"]),
    ("interval", ["1 day 2 hours", "-3 mons"]),
]


@pytest.mark.parametrize(("column_type", "texts"), ASSIGNED, ids=[a[0] for a in ASSIGNED])
def test_insert_reads_text_as_postgresql(
    con: dsql.Connection, pgc: Any, column_type: str, texts: list[str]
) -> None:
    values = ", ".join(f"({i}, '{t}')" for i, t in enumerate(texts))
    pgc.execute(f"CREATE TEMP TABLE a (i int, v {column_type})")
    try:
        pgc.execute(f"INSERT INTO a VALUES {values}")
        want = pgc.execute("SELECT i, v::text FROM a ORDER BY i").fetchall()
    finally:
        pgc.execute("DROP TABLE a")
    con.execute(f"CREATE TABLE a (i int, v {column_type})")
    con.execute(f"INSERT INTO a VALUES {values}")
    assert con.execute("SELECT i, v::text FROM a ORDER BY i").fetchall() == want


@pytest.mark.parametrize("text", ["maybe", "\\xZZ"], ids=str)
def test_insert_refuses_what_postgresql_refuses(con: dsql.Connection, text: str) -> None:
    column_type = "bool" if text == "maybe" else "bytea"
    con.execute(f"CREATE TABLE a (v {column_type})")
    with pytest.raises(DsqlError):
        con.execute(f"INSERT INTO a VALUES ('{text}')")


@pytest.mark.parametrize(
    "literal",
    ["timestamp '0001-01-01 00:00:00 BC'", "'0044-03-15 BC'::date", "date '2020-01-01 AD'"],
)
def test_era_literal_is_refused(con: dsql.Connection, literal: str) -> None:
    """dsql's dates start at year 1: a literal naming an era is refused, never read as
    a year of our era."""
    with pytest.raises(DsqlError, match="before year 1"):
        con.execute(f"SELECT {literal}").fetchall()


FLOATS = ["'NaN'", "'Infinity'", "'-Infinity'", "1e15", "-2", "0.1", "1e-7", "123456789", "-0.0"]


def test_float_columns_as_text(con: dsql.Connection, pgc: Any) -> None:
    """Float columns' text, in a one-off query and maintained by a view, as inserts and
    deletes change the table."""
    rows = ", ".join(f"({i}, {v}, {v})" for i, v in enumerate(FLOATS))
    query = "SELECT i, x::text, r::text, 'x=' || x FROM f"
    pgc.execute("CREATE TEMP TABLE f (i int, x float8, r real)")
    try:
        pgc.execute(f"INSERT INTO f VALUES {rows}")
        want = sorted(pgc.execute(query).fetchall())
    finally:
        pgc.execute("DROP TABLE f")
    con.execute("CREATE TABLE f (i int, x float8, r real)")
    con.execute(f"CREATE MATERIALIZED VIEW ft AS {query}")
    con.execute(f"INSERT INTO f VALUES {rows}")
    assert sorted(con.execute(query).fetchall()) == want
    assert sorted(con.execute("SELECT * FROM ft").fetchall()) == want
    con.execute("DELETE FROM f WHERE i < 3")
    assert sorted(con.execute("SELECT * FROM ft").fetchall()) == want[3:]
