"""Numbers as PostgreSQL computes and prints them, checked against a private PostgreSQL.

Numeric literals (`0.1`, `1e3`) are numeric; numeric quotients are exact to PostgreSQL's
scale for each row (at least 16 significant digits); avg of integers and numerics is
numeric; a zero divisor is "division by zero" for every kind of number, and a view
whose rows divide by zero is in error while they are there; round() rounds a numeric
half away from zero and a float half to even; floats print as psql prints them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pg_oracle import create_both, differs

import dsql
from dsql.printer import plain_table

TABLES = {
    "n": "k int, i int, b bigint, x numeric(10,3), y numeric, f float8",
}

SEED = (
    "INSERT INTO n VALUES (1, 1, 10, 1.000, 3, 1.5), (1, 2, 20, 4.500, 0.7, -2.5), "
    "(2, 4, 300000, -0.125, 123.456, 0.1), (2, -7, NULL, 100000.000, -3, NULL), "
    "(3, 0, 5, 0.000, 0.01, 1e300), (NULL, NULL, 7, NULL, NULL, 2.5)",
)

#: Queries whose answers (values and types) equal PostgreSQL's.
SAME = {
    "literal_sum": "SELECT 0.1 + 0.2 AS v",
    "literal_division": "SELECT 1.0 / 3 AS a, 10 / 4.0 AS b, 2.0 / 3 AS c, 4 / 3.0 AS d",
    "big_quotient": "SELECT 100000 / 3.0 AS a, 123456789.123 / 0.007 AS b",
    "exponent_literals": "SELECT 1e3 AS a, 2.5e-3 AS b, 1E2 + 1 AS c",
    "numeric_times_int": "SELECT 2.5 * 4 AS a, 1.25 * 1.25 AS b",
    "numeric_column_division": "SELECT k, x / 4 AS q, x / 3 AS r FROM n",
    "unbounded_column_division": "SELECT k, y / 7 AS q FROM n",
    "int_by_numeric": "SELECT i / 2.0 AS q, i::numeric / 3 AS r FROM n",
    "numeric_by_numeric": "SELECT x / y AS q FROM n WHERE y <> 0",
    "negative_quotients": "SELECT -7 / 2.0 AS a, 7 / -0.5 AS b, -1 / 3.0 AS c",
    "zero_dividend": "SELECT 0 / 3.0 AS a, 0.000 / 7 AS b",
    "integer_division": "SELECT i / 2 AS q, i % 3 AS m, b / 7 AS bq FROM n",
    "float_division": "SELECT f / 2 AS q, f / 3 AS r FROM n",
    "avg_int": "SELECT k, avg(i) AS m FROM n GROUP BY k",
    "avg_bigint": "SELECT avg(b) AS m FROM n",
    "avg_numeric": "SELECT k, avg(x) AS mx, avg(y) AS my FROM n GROUP BY k",
    "avg_float": "SELECT avg(f) AS m FROM n WHERE f < 100",
    "avg_empty": "SELECT avg(i) AS m FROM n WHERE i > 100",
    "variance_int": (
        "SELECT k, variance(i) AS v, var_pop(i) AS p, var_samp(b) AS s FROM n GROUP BY k"
    ),
    "variance_numeric": "SELECT variance(x) AS vx, var_pop(x) AS px, variance(y) AS vy FROM n",
    "variance_one_row": "SELECT variance(i) AS v, var_pop(i) AS p FROM n WHERE i = 4",
    "sum_numeric": "SELECT sum(x) AS sx, sum(y) AS sy FROM n",
    "avg_arithmetic": "SELECT k, avg(i) * 2 AS twice, sum(x) / count(*) AS mean FROM n GROUP BY k",
    "round_numeric": "SELECT round(2.5) AS a, round(-2.5) AS b, round(0.5::numeric) AS c",
    "round_numeric_places": (
        "SELECT round(2.345, 2) AS a, round(-2.345, 2) AS b, round(x, 1) AS c FROM n"
    ),
    "round_float": (
        "SELECT round(2.5::float8) AS a, round(3.5::float8) AS b, round(-2.5::float8) AS c"
    ),
    "round_float_column": "SELECT round(f) AS r FROM n WHERE f < 100",
    "trunc": (
        "SELECT trunc(2.7) AS a, trunc(-2.7) AS b, trunc(2.777, 2) AS c, trunc(-2.777, 1) AS d"
    ),
    "trunc_column": "SELECT trunc(x, 1) AS a, trunc(x) AS b, trunc(f) AS c FROM n WHERE f < 100",
    "ceil_floor": (
        "SELECT ceil(2.1) AS a, floor(-2.1) AS b, ceil(2.1::float8) AS c, floor(f) AS d FROM n"
    ),
    "numeric_remainder": "SELECT x % 0.7 AS a, y % 2 AS b, mod(x, 3) AS c, -7.5 % 2 AS d FROM n",
    "wide_remainder": "SELECT 1.000::numeric(38,3) % 0.1::numeric(38,1) AS v",
    "bytea_bad_hex": "SELECT '\\xZZ'::bytea AS v",  # refused by both
    "nested_quotients": "SELECT (1.0 / 3) / 2 AS a, avg(i) / 3 AS b, sum(x) / avg(i) AS c FROM n",
    "conditional_operands": (
        "SELECT coalesce(x, 0) / 3 AS a, CASE WHEN i > 1 THEN 1.0 / 3 ELSE x END / 2 AS b, "
        "greatest(x, 1) % 0.7 AS c FROM n"
    ),
    "union_of_scales": "SELECT 1.5 AS v UNION ALL SELECT 2.25 UNION ALL SELECT 3",
    "case_of_scales": "SELECT CASE WHEN k = 1 THEN 1.5 ELSE 2.125 END AS v FROM n",
}

#: Queries PostgreSQL refuses with "division by zero", and so must dsql.
DIVISION_BY_ZERO = (
    "SELECT 1 / 0",
    "SELECT 1.0 / 0",
    "SELECT 1::float8 / 0",
    "SELECT 5 % 0",
    "SELECT 5.5 % 0",
    "SELECT i / 0 FROM n",
    "SELECT x / 0 FROM n",
    "SELECT f / 0.0 FROM n",
    "SELECT b % (k - k) FROM n",
)


@pytest.fixture(scope="module")
def pgdb(pg: Any) -> Iterator[Any]:
    """A PostgreSQL database of this module's own."""
    conn = pg.database("numeric")
    yield conn
    conn.close()


def _fresh(pgdb: Any, kernel: str = "local") -> Any:
    """A dsql connection and the PostgreSQL database, both holding the seeded table."""
    con = dsql.connect(kernel=kernel)
    create_both(con, pgdb, TABLES, SEED)
    return con


@pytest.fixture(scope="module")
def seeded(pgdb: Any) -> Any:
    return _fresh(pgdb)


@pytest.mark.parametrize("case", sorted(SAME))
def test_numbers_match_postgres(seeded: Any, pgdb: Any, case: str) -> None:
    problem = differs(seeded, pgdb, SAME[case])
    assert problem is None, f"{case}: {SAME[case]}\n  {problem}"


def test_a_quotient_keeps_postgres_digits(seeded: Any) -> None:
    # The values PostgreSQL 15 prints, digit for digit.
    got = seeded.execute("SELECT 1.0 / 3, 4::numeric / 3, 100000::numeric / 3").fetchall()
    assert [str(v.normalize()) for v in got[0]] == [
        "0.33333333333333333333",
        "1.3333333333333333",
        "33333.333333333333",
    ]
    assert str(seeded.execute("SELECT avg(x) FROM (VALUES (1), (2)) t(x)").fetchall()[0][0]) in (
        "1.5000000000000000",
        "1.50000000000000000000",
    )


@pytest.mark.parametrize("sql", DIVISION_BY_ZERO)
def test_division_by_zero_is_an_error(seeded: Any, pgdb: Any, sql: str) -> None:
    with pytest.raises(dsql.Error, match="division by zero"):
        seeded.execute(sql).fetchall()
    assert differs(seeded, pgdb, sql) is None


def test_a_null_divided_by_zero_is_null(seeded: Any, pgdb: Any) -> None:
    sql = "SELECT NULL::int / 0 AS a, NULL::numeric / 0 AS b, NULL::float8 / 0 AS c"
    assert differs(seeded, pgdb, sql) is None


@pytest.mark.parametrize(
    "query",
    [
        "SELECT k, x / i AS q FROM n",
        "SELECT k, f / i AS q FROM n",
        "SELECT k, b / i AS q FROM n",
        "SELECT k, avg(x) AS m, sum(y) / count(*) AS mean FROM n GROUP BY k",
    ],
)
def test_views_follow_postgres_through_changes_and_zero_divisors(pgdb: Any, query: str) -> None:
    con = _fresh(pgdb)
    pgdb.execute("DELETE FROM n WHERE i = 0")
    con.execute("DELETE FROM n WHERE i = 0")
    con.execute(f"CREATE MATERIALIZED VIEW v AS {query}")
    steps = (
        "INSERT INTO n VALUES (4, 3, 9, 2.000, 1.5, 0.25)",
        "UPDATE n SET x = x * 2 WHERE k = 1",
        "INSERT INTO n VALUES (5, 0, 1, 1.000, 1, 1)",  # a zero divisor: the view fails
        "DELETE FROM n WHERE k = 5",  # and heals
        "UPDATE n SET y = y + 0.5 WHERE k = 2",
    )
    for step in steps:
        con.execute(step)
        pgdb.execute(step)
        # Where PostgreSQL's query raises, reading the view must raise too (`differs`).
        problem = differs(con, pgdb, query, dsql_sql="SELECT * FROM v")
        assert problem is None, f"after {step}: {problem}"


#: Values psql prints as dsql's plain format prints them.
TEXT = (
    "2::float8 AS v",
    "1e20::float8 AS v",
    "0.1::float8 AS v",
    "1e-7::float8 AS v",
    "123456789012345::float8 AS v",
    "1234567890123456::float8 AS v",
    "0.0001::float8 AS v",
    "-2.5::float8 AS v",
    "'Infinity'::float8 AS a, '-Infinity'::float8 AS b, 'NaN'::float8 AS c",
    "0.1::real AS v",
    "1e6::real AS v",
    "123456::real AS v",
    "3.14159::real AS v",
    "1.0 / 3 AS v",
    "round(2.5) AS a, round(2.5::float8) AS b",
    "1e3 AS v",
    "trunc(2.777, 2) AS v",
    "'\\x0102'::bytea AS a, 'abc'::bytea AS b, '\\xDEADbeef'::bytea AS c",
    "interval '1 day 2 hours' AS a, interval '90 minutes' AS b, interval '30 hours' AS c",
    "interval '-1 mon 2 days 1 second' AS a, interval '-1 year 2 mons -3 days 04:05:06.5' AS b",
    "interval '0 seconds' AS a, interval '-90 minutes' AS b",
)


@pytest.mark.parametrize("expression", TEXT)
def test_text_output_matches_psql(pg: Any, expression: str) -> None:
    con = dsql.connect(kernel="local")
    sql = f"SELECT {expression}"
    got = [line.rstrip() for line in plain_table(con.execute(sql).arrow()).splitlines()]
    want = [line.rstrip() for line in pg.psql(sql, "-P", "null=NULL").strip("\n").splitlines()]
    assert got == want


def test_a_real_reads_as_its_shortest_digits() -> None:
    con = dsql.connect(kernel="local")
    assert con.execute("SELECT 0.1::real, 3.14159::real").fetchall() == [(0.1, 3.14159)]


@pytest.mark.usefixtures("spark")
def test_numbers_match_postgres_on_spark(pgdb: Any) -> None:
    con = _fresh(pgdb, kernel="spark")
    cases = (
        "literal_division",
        "numeric_column_division",
        "unbounded_column_division",
        "avg_int",
        "avg_numeric",
        "round_float",
        "round_numeric_places",
        "trunc_column",
    )
    wrong = [f"{c}: {differs(con, pgdb, SAME[c])}" for c in cases if differs(con, pgdb, SAME[c])]
    assert not wrong, "\n".join(wrong)
    for sql in ("SELECT x / 0 FROM n", "SELECT f / 0.0 FROM n", "SELECT i / 0 FROM n"):
        with pytest.raises(dsql.Error, match="division by zero"):
            con.execute(sql).fetchall()
