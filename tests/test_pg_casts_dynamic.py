"""Casts of text computed per row against a private PostgreSQL: `s::int`, `s::numeric`,
`s::boolean` read the text as PostgreSQL's input functions do (`planner/text_casts.py`),
with PostgreSQL's error for text that is none; `s::interval` is refused.

Each input is one row of a table, cast by a one-off read and by a view under inserts
and deletes (a row PostgreSQL refuses puts the view in error only while present).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pg_oracle import create_both, differs, follow_steps

import dsql
from dsql.errors import DsqlError, UnsupportedError


@pytest.fixture(scope="module")
def pgdb(pg: Any) -> Iterator[Any]:
    """A PostgreSQL database of this module's own."""
    conn = pg.database("casts_dynamic")
    yield conn
    conn.close()


INPUTS = {
    "boolean": [
        "yes", "on", "t", "1", "TRUE", " true ", "y", "Tr", "no", "off", "of", "f", "0",
        "n", "FALSE\t", "2", "o", "maybe", "", "yess",
    ],
    "integer": [
        "+1", " 1 ", "\t-7\n", "-0", "00012", "1.5", "1e3", "0x1F", "1_000", " ", "",
        "+", "1 2", "2147483647",
    ],
    "bigint": ["-9223372036854775808", " +42 ", "4.0", "0b101"],
    "smallint": [" -32768", "12", "1.", "1_0"],
    "numeric": [
        "  1.5  ", "+1.5", "-.5", "1e3", "1.", "2.5E-3", " ", "1,5", "0x10", "1_000.5",
        ".", "e5", "--1", "12345678901234567890.1234567890",
    ],
    "numeric(10, 2)": [" 3.14159 ", "-0.005", "1e2", "1_0", "abc"],
}  # fmt: skip


def _cases() -> list[tuple[str, str]]:
    return [(target, text) for target, texts in INPUTS.items() for text in texts]


@pytest.mark.parametrize(("target", "text"), _cases())
def test_text_casts_read_as_postgres(pgdb: Any, target: str, text: str) -> None:
    con = dsql.connect(kernel="local")
    create_both(con, pgdb, {"c": "s text"}, ())
    con.execute("INSERT INTO c VALUES (?)", (text,))
    pgdb.execute("INSERT INTO c VALUES (%s)", (text,))
    sql = f"SELECT s::{target} AS v FROM c"
    try:
        (want,) = pgdb.execute(sql).fetchone()
    except psycopg.DataError as refused:
        with pytest.raises(DsqlError) as error:
            con.execute(sql).fetchall()
        # PostgreSQL's words where it says the text is no value of the type.
        if "invalid input syntax" in str(refused):
            assert str(error.value).splitlines()[0] == str(refused).splitlines()[0]
        return
    assert con.execute(sql).fetchall() == [(want,)], (target, text)


def test_a_view_of_casts_follows_inserts_and_deletes(pgdb: Any) -> None:
    con = dsql.connect(kernel="local")
    create_both(con, pgdb, {"c": "k int, s text, b text"}, ())
    query = (
        "SELECT k, sum(s::int) AS n, max(s::numeric) AS m, bool_and(b::boolean) AS a"
        " FROM c GROUP BY k"
    )
    con.execute(f"CREATE MATERIALIZED VIEW v AS {query}")
    bad = "invalid input syntax for type integer"
    steps = (
        ("INSERT INTO c VALUES (1, ' +3 ', 'on'), (1, '-4', 'Yes'), (2, '7', 'off')", False),
        ("INSERT INTO c VALUES (2, '1.5', 't')", True),
        ("INSERT INTO c VALUES (3, '0012', ' f ')", True),
        ("DELETE FROM c WHERE s = '1.5'", False),
        ("UPDATE c SET b = 'no' WHERE k = 1", False),
        ("DELETE FROM c WHERE k = 2", False),
    )
    follow_steps(con, pgdb, query, steps, bad)


def test_a_cast_of_text_per_row_to_interval_is_refused() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE c (s text)")
    with pytest.raises(UnsupportedError, match="text computed per row to interval") as error:
        con.execute("SELECT s::interval FROM c")
    assert "make_interval" in (error.value.hint or "")
    # A literal is read by PostgreSQL's grammar at plan time.
    (value,) = con.execute("SELECT '1 day -5 seconds'::interval::text").fetchone()
    assert value == "1 day -00:00:05"


@pytest.mark.parametrize(("target", "text"), _cases())
def test_literal_text_casts_read_as_postgres(pgdb: Any, target: str, text: str) -> None:
    """A literal is checked while the statement is planned: a plain cast where PostgreSQL
    reads it, PostgreSQL's error where it does not."""
    con = dsql.connect(kernel="local")
    literal = "'" + text.replace("'", "''") + "'"
    sql = f"SELECT {literal}::{target} AS v"
    try:
        (want,) = pgdb.execute(sql).fetchone()
    except psycopg.DataError:
        with pytest.raises(DsqlError):
            con.execute(sql).fetchall()
        return
    assert con.execute(sql).fetchall() == [(want,)], (target, text)


def test_spark_reads_text_as_postgres(pgdb: Any) -> None:
    con = dsql.connect(kernel="spark")
    create_both(con, pgdb, {"c": "k int, s text, b text"}, ())
    for row in ((1, " +3 ", "on"), (2, "-0012", " F "), (3, "7", "yes")):
        con.execute("INSERT INTO c VALUES (?, ?, ?)", row)
        pgdb.execute("INSERT INTO c VALUES (%s, %s, %s)", row)
    sql = "SELECT k, s::int AS i, s::numeric(10, 2) AS n, b::boolean AS v FROM c"
    assert differs(con, pgdb, sql) is None
    con.execute("INSERT INTO c VALUES (4, '1_000', 'of')")
    with pytest.raises(DsqlError, match=r'^invalid input syntax for type integer: "1_000"'):
        con.execute("SELECT s::int FROM c").fetchall()


DATES = {
    "date": [
        "2024-01-02", "  2024-1-2 ", "2024-01-02 10:00", "0001-01-01", "1/2/24", "02/01/2024",
        "2024.01.02", "99999-01-01", "infinity", "-infinity", "2024-13-01", "2024-01-02 junk",
        "J2451187", "2024-01-02BC",
    ],
    "timestamp": [
        "2024-01-02 03:04:05", "2024-01-02T03:04", "2024-01-02", "2024-01-02 03:04:05.123456",
        "2024-01-02 03:04:05.1234567", "2024-01-02 03:04:05 +05:30", "2024-01-02 03:04:05.5Z",
        "infinity", "2024-01-02 25:00", "Jan 2 2024 3:04", "20240102 030405",
    ],
}  # fmt: skip


#: The text dsql reads (its ISO forms).
ISO = {
    "2024-01-02", "  2024-1-2 ", "2024-01-02 10:00", "0001-01-01", "2024-01-02 03:04:05",
    "2024-01-02T03:04", "2024-01-02 03:04:05.123456", "2024-01-02 03:04:05 +05:30",
}  # fmt: skip


@pytest.mark.parametrize(
    ("target", "text"), [(t, text) for t, texts in DATES.items() for text in texts]
)
def test_date_text_is_postgres_or_refused(pgdb: Any, target: str, text: str) -> None:
    """Text computed per row becomes PostgreSQL's date or timestamp, or an error: never
    another value (DuckDB reads '1/2/24' as 0001-02-24, truncates a 7th digit of a second
    PostgreSQL rounds, and has infinite dates that do not convert)."""
    con = dsql.connect(kernel="local")
    create_both(con, pgdb, {"c": "s text"}, ())
    con.execute("INSERT INTO c VALUES (?)", (text,))
    pgdb.execute("INSERT INTO c VALUES (%s)", (text,))
    try:
        want = pgdb.execute(
            f"SELECT CASE WHEN isfinite(s::{target}) THEN s::{target} END FROM c"
        ).fetchone()[0]
    except psycopg.DataError:
        want = None  # PostgreSQL refuses the text: so must dsql
    try:
        (got,) = con.execute(f"SELECT s::{target} FROM c").fetchone()
    except DsqlError as error:
        assert (
            "invalid input" in str(error)
            or "out of range" in str(error)
            or ("reads only in ISO form" in str(error))
        ), error
        return
    assert want is not None and got == want, (text, got, want)
