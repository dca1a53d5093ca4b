"""Numerics against a private PostgreSQL: standard deviations, and the 38-digit limit.

`stddev`, `stddev_samp` and `stddev_pop` of integers and numerics are numeric, the
square root of the numeric variance rounded at the variance's scale, digit for digit
as PostgreSQL prints them, for any number of rows, with NULLs, and in views under
inserts and deletes.

dsql's numeric holds 38 digits where PostgreSQL's is unbounded. Every value past them
(a literal, a cast, a sum, a product, a quotient, avg, variance, a value stored into a
numeric column) is the error "numeric field overflow" whose hint names the limit, never
a rounded or wrong value: random numerics near the limit either get PostgreSQL's answer
or that error (`agrees_or_overflows`), and a view is in error while such a row is there.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_oracle import create_both, differs, no_warning
from pg_oracle import in_error as view_in_error

import dsql
from dsql.errors import NUMERIC_LIMIT, DsqlError, DsqlWarning, UnsupportedError

SPREADS = ("stddev", "stddev_samp", "stddev_pop", "variance", "var_pop")

TABLES = {"s": "k int, i int, b bigint, x numeric(10,2), y numeric"}


@pytest.fixture(scope="module")
def pgdb(pg: Any) -> Iterator[Any]:
    """A PostgreSQL database of this module's own."""
    conn = pg.database("numeric_more")
    yield conn
    conn.close()


def _both(pgdb: Any, rows: list[tuple[Any, ...]], kernel: str = "local") -> Any:
    """A dsql connection and PostgreSQL, both holding `rows` in table `s`."""
    con = dsql.connect(kernel=kernel)
    create_both(con, pgdb, TABLES, ())
    if rows:
        marks = ", ".join(["(%s, %s, %s, %s, %s)"] * len(rows))
        flat = [v for row in rows for v in row]
        pgdb.execute(f"INSERT INTO s VALUES {marks}", flat)
        con.execute(f"INSERT INTO s VALUES {marks.replace('%s', '?')}", flat)
    return con


def agrees_or_overflows(
    con: Any, pgdb: Any, sql: str, dsql_sql: str | None = None, digits: bool = False
) -> str | None:
    """None when dsql answers `sql` as PostgreSQL does, or refuses it with its documented
    overflow error (message and hint naming the 38-digit limit); else the difference.
    With `digits`, numerics may also differ as README documents: by less than a unit
    in PostgreSQL's last digit or in dsql's 20th after the point (a quotient below
    0.0001 keeps 20 digits after the point where PostgreSQL keeps 16 significant)."""
    try:
        got = con.execute(dsql_sql or sql).fetchall()
    except DsqlError as error:
        if _documented_overflow(error):
            return None
        got = None
    problem = differs(con, pgdb, sql, dsql_sql)
    if problem is None or not digits or got is None:
        return problem
    want = pgdb.execute(sql).fetchall()
    return None if _close(got, want) else problem


def _close(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> bool:
    """Whether two results hold the same rows but for numerics within the units above."""

    def key(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple((v is None, float(v) if isinstance(v, Decimal) else str(v)) for v in row)

    if len(got) != len(want):
        return False
    for mine_row, their_row in zip(sorted(got, key=key), sorted(want, key=key), strict=True):
        for mine, theirs in zip(mine_row, their_row, strict=True):
            if isinstance(mine, Decimal) and isinstance(theirs, Decimal):
                unit = max(Decimal(1).scaleb(theirs.as_tuple().exponent), Decimal("1e-20"))
                if abs(mine - theirs) > unit:
                    return False
            elif mine != theirs:
                return False
    return True


def _documented_overflow(error: DsqlError) -> bool:
    """Whether `error` is dsql's refusal of a value past its numeric."""
    if "numeric field overflow" in error.message:
        return "38 digits" in (error.hint or "") or "precision 38" in (error.hint or "")
    return "is in error: numeric field overflow" in error.message


def _spreads_of(column: str) -> str:
    return ", ".join(f"{f}({column}) AS {f}_{column}" for f in SPREADS)


# --- stddev ----------------------------------------------------------------------------------

FIXED_ROWS = [
    (1, 1, 10, Decimal("1.00"), Decimal("3")),
    (1, 2, 20, Decimal("4.50"), Decimal("0.7")),
    (2, 4, 3000000000, Decimal("-0.13"), Decimal("123.456")),
    (2, -7, None, Decimal("99999999.99"), Decimal("-3")),
    (2, 5, 9223372036854775807, Decimal("0.01"), Decimal("0.01")),
    (3, 0, 5, Decimal("0.00"), Decimal("0.0001")),
    (4, None, None, None, None),
    (5, 3, 3, Decimal("2.50"), Decimal("2.5")),
    (5, 3, 3, Decimal("2.50"), Decimal("2.5")),
]


@pytest.mark.parametrize("column", ["i", "b", "x"])
def test_spreads_match_postgres_digit_for_digit(pgdb: Any, column: str) -> None:
    """1, 2 and many rows, NULLs, equal rows (a zero spread), bigint's extremes."""
    con = _both(pgdb, FIXED_ROWS)
    for sql in (
        f"SELECT k, {_spreads_of(column)} FROM s GROUP BY k",
        f"SELECT {_spreads_of(column)} FROM s",
        f"SELECT {_spreads_of(column)} FROM s WHERE k = 1",
        f"SELECT {_spreads_of(column)} FROM s WHERE false",
    ):
        problem = agrees_or_overflows(con, pgdb, sql)
        assert problem is None, f"{sql}\n  {problem}"


def test_stddev_has_postgres_digits(pg: Any) -> None:
    con = dsql.connect(kernel="local")
    sql = "SELECT stddev(x) AS a, stddev_pop(x) AS b FROM (VALUES (1), (2), (4)) t(x)"
    got = con.execute(sql).fetchall()[0]
    want = pg.psql(sql, "-A", "-t").strip().split("|")
    # The same digits; dsql's column keeps 20 after the point (README), so trailing zeros.
    assert [v.normalize() for v in got] == [Decimal(w).normalize() for w in want]
    assert [str(v).rstrip("0") for v in got] == [w.rstrip("0") for w in want]


INTS = st.integers(-(2**31), 2**31 - 1)
BIGINTS = st.integers(-(2**63), 2**63 - 1)
NUMERICS = st.decimals(
    min_value=Decimal("-99999999.99"), max_value=Decimal("99999999.99"), places=2
)
ROWS = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.one_of(st.none(), INTS, st.integers(-3, 3)),
        st.one_of(st.none(), BIGINTS, st.integers(-1000, 1000)),
        st.one_of(st.none(), NUMERICS, st.sampled_from([Decimal("0.01"), Decimal("1.00")])),
        st.one_of(
            st.none(),
            st.decimals(min_value=-(10**9), max_value=10**9, places=4),
            st.decimals(min_value=-1, max_value=1, places=10),
        ),
    ),
    max_size=12,
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(rows=ROWS)
def test_spreads_of_random_rows_match_postgres(pgdb: Any, rows: list[tuple[Any, ...]]) -> None:
    con = _both(pgdb, rows)
    columns = ", ".join(_spreads_of(c) for c in ("i", "b", "x"))
    sql = f"SELECT k, {columns} FROM s GROUP BY k"
    problem = agrees_or_overflows(con, pgdb, sql)
    assert problem is None, f"{rows}\n  {problem}"
    _agree_to_postgres_digits(con, pgdb, f"SELECT k, {_spreads_of('y')} FROM s GROUP BY k")


def test_spreads_of_a_numeric_without_precision_have_postgres_digits(pgdb: Any) -> None:
    con = _both(pgdb, FIXED_ROWS)
    _agree_to_postgres_digits(con, pgdb, f"SELECT k, {_spreads_of('y')} FROM s GROUP BY k")


def _agree_to_postgres_digits(con: Any, pgdb: Any, sql: str) -> None:
    """dsql's numerics, rounded to the scale of PostgreSQL's, are PostgreSQL's.

    Over a numeric column without precision, PostgreSQL's result scale follows each
    value's own scale and dsql's the column's 10 digits (README): dsql may keep more
    digits, and agrees with PostgreSQL's to one unit in its last, or in dsql's 20th
    after the point (the first column is the group key)."""
    try:
        got = {row[0]: row[1:] for row in con.execute(sql).fetchall()}
    except DsqlError as error:
        assert _documented_overflow(error), error
        return
    for row in pgdb.execute(sql).fetchall():
        for mine, theirs in zip(got[row[0]], row[1:], strict=True):
            if theirs is None or mine is None:
                assert mine == theirs, (sql, row)
                continue
            # dsql keeps 20 digits after the point where PostgreSQL keeps more (README).
            unit = max(Decimal(1).scaleb(theirs.as_tuple().exponent), Decimal("1e-20"))
            assert abs(mine - theirs) <= unit, (sql, mine, theirs)


def test_a_stddev_view_follows_inserts_and_deletes(pgdb: Any) -> None:
    con = _both(pgdb, FIXED_ROWS)
    query = f"SELECT k, {_spreads_of('i')}, {_spreads_of('x')} FROM s GROUP BY k"
    con.execute(f"CREATE MATERIALIZED VIEW v AS {query}")
    for step in (
        "DELETE FROM s WHERE i = 2",
        "INSERT INTO s VALUES (1, 8, 8, 0.37, 0.5), (3, 1, 1, 1.11, 1)",
        "DELETE FROM s WHERE k = 5 AND i = 3",
        "UPDATE s SET x = x / 3 WHERE k = 2",
        "DELETE FROM s WHERE k = 3",
        "INSERT INTO s VALUES (2, NULL, NULL, NULL, NULL)",
    ):
        con.execute(step)
        pgdb.execute(step)
        problem = agrees_or_overflows(con, pgdb, query, dsql_sql="SELECT * FROM v")
        assert problem is None, f"after {step}: {problem}"


def test_stddev_of_a_numeric_with_more_than_ten_decimals_is_refused() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE w (z numeric(20, 12))")
    with pytest.raises(UnsupportedError, match="more than 10 digits after the point") as e:
        con.execute("SELECT stddev(z) FROM w")
    assert "cast" in (e.value.hint or "")
    # The casts the hint names are answered.
    con.execute("SELECT stddev(z::numeric(30, 10)), stddev(z::float8) FROM w")


@pytest.mark.usefixtures("spark")
def test_spreads_match_postgres_on_spark(pgdb: Any) -> None:
    con = _both(pgdb, FIXED_ROWS, kernel="spark")
    for column in ("i", "b", "x"):
        sql = f"SELECT k, {_spreads_of(column)} FROM s GROUP BY k"
        problem = agrees_or_overflows(con, pgdb, sql)
        assert problem is None, f"{sql}\n  {problem}"


# --- the 38-digit limit ----------------------------------------------------------------------

LIMIT_TABLES = {"big": "k int, a numeric, b numeric(38, 0), c numeric(38, 10), d bigint"}


def _near(digits: int, places: int) -> st.SearchStrategy[Decimal]:
    """Numerics of up to `digits` digits in all, `places` of them after the point, most
    of them near that limit."""
    top = 10**digits - 1
    whole = st.one_of(st.integers(-top, top), st.integers(top - 10**6, top), st.integers(-9, 9))
    return whole.map(lambda n: Decimal(n).scaleb(-places))


BIG_ROWS = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.one_of(st.none(), _near(28, 10), _near(20, 4)),
        st.one_of(st.none(), _near(38, 0), _near(19, 0)),
        st.one_of(st.none(), _near(38, 10), _near(12, 10)),
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    ),
    min_size=1,
    max_size=4,
)
LITERALS = st.one_of(
    _near(38, 0), _near(38, 10), _near(40, 0), _near(39, 20), _near(18, 18), _near(21, 1)
).map(lambda d: f"{d:f}")

#: Expressions over table `big` near the limit, each compared on its own.
BIG_EXPRESSIONS = (
    "a + c",
    "b - c",
    "b * 2",
    "c * c",
    "a * b",
    "b / 3",
    "c / 7",
    "a / c",
    "b % 7",
    "d::numeric * d",
    "a::numeric(38, 20)",
    "b::numeric(38, 2)",
    "(d / 3.0)",
)
BIG_AGGREGATES = (
    "sum(a)",
    "sum(b)",
    "sum(c)",
    "sum(d)",
    "avg(b)",
    "avg(c)",
    "avg(d)",
    "variance(d)",
    "variance(c)",
    "stddev(d)",
    "stddev(a)",
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(rows=BIG_ROWS, x=LITERALS, y=LITERALS)
def test_numerics_near_the_limit_match_postgres_or_overflow(
    pgdb: Any, rows: list[tuple[Any, ...]], x: str, y: str
) -> None:
    con = dsql.connect(kernel="local")
    create_both(con, pgdb, LIMIT_TABLES, ())
    for row in rows:
        try:
            con.execute("INSERT INTO big VALUES (?, ?, ?, ?, ?)", row)
        except DsqlError as error:
            assert _documented_overflow(error), error  # dsql stores nothing PostgreSQL would not
            continue
        pgdb.execute("INSERT INTO big VALUES (%s, %s, %s, %s, %s)", row)
    queries = [f"SELECT {e} AS v FROM big" for e in BIG_EXPRESSIONS]
    queries += [f"SELECT k, {a} AS v FROM big GROUP BY k" for a in BIG_AGGREGATES]
    queries += [
        f"SELECT {x} AS v",
        f"SELECT {x} + {y} AS v",
        f"SELECT {x} * {y} AS v",
        f"SELECT {x} / {y} AS v" if Decimal(y) != 0 else f"SELECT {x} - {y} AS v",
        f"SELECT {x}::numeric(38, 4) AS v",
        f"SELECT '{x}'::numeric AS v",
        f"SELECT {x}::float8 AS v",
    ]
    for sql in queries:
        problem = agrees_or_overflows(con, pgdb, sql, digits=True)
        assert problem is None, f"{sql}\n  {rows}\n  {problem}"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 123456789012345678901234567890123456789.5",
        "SELECT 12345678901234567890123456789012345678901",
        "SELECT 1e40",
        "SELECT '1e40'::numeric",
        "SELECT (10^40)::numeric",
        "SELECT 1e20 * 1e20",
        "SELECT 99999999999999999999999999999999999999 + 1",
        "SELECT 1000000000000000000 / 0.5",
        "SELECT avg(x) FROM (VALUES (9223372036854775807)) t(x)",
    ],
)
def test_past_the_limit_is_numeric_field_overflow(sql: str) -> None:
    con = dsql.connect(kernel="local")
    with pytest.raises(DsqlError, match="numeric field overflow") as error:
        con.execute(sql).fetchall()
    assert error.value.hint is not None and NUMERIC_LIMIT in error.value.hint


def test_integer_literals_past_bigint_are_numeric(pgdb: Any) -> None:
    con = dsql.connect(kernel="local")
    for sql in (
        "SELECT 12345678901234567890 + 1 AS v",
        "SELECT 99999999999999999999 * 3 AS v",
        "SELECT -9223372036854775808 AS v",
        "SELECT 1e300::float8 AS v, 12345678901234567890123456789012345678901::float8 AS w",
    ):
        assert differs(con, pgdb, sql) is None, sql


def test_an_unbounded_numeric_column_refuses_what_it_would_round() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE u (y numeric, z numeric(20, 2))")
    with pytest.raises(DsqlError, match="more than 10 digits after the point") as error:
        con.execute("INSERT INTO u (y) VALUES (0.123456789012345)")
    assert "numeric(38, s)" in (error.value.hint or "")
    with pytest.raises(DsqlError, match="numeric field overflow") as error:
        con.execute("INSERT INTO u (y) VALUES (123456789012345678901234567890)")
    assert NUMERIC_LIMIT in (error.value.hint or "")
    con.execute("INSERT INTO u VALUES (0.1234567890, 1.005)")  # numeric(p, s) rounds
    con.execute("UPDATE u SET y = y / 2")  # 0.0617283945: ten digits
    with pytest.raises(DsqlError, match="more than 10 digits after the point"):
        con.execute("UPDATE u SET y = y / 7")
    assert con.execute("SELECT y, z FROM u").fetchall() == [
        (Decimal("0.0617283945"), Decimal("1.01"))
    ]


def test_a_view_past_the_limit_is_in_error_then_heals(pgdb: Any) -> None:
    con = dsql.connect(kernel="local")
    create_both(con, pgdb, LIMIT_TABLES, ())
    query = "SELECT k, sum(b) AS s, avg(d) AS m FROM big GROUP BY k"
    con.execute(f"CREATE MATERIALIZED VIEW v AS {query}")
    nines = "99999999999999999999999999999999999999"
    for step, in_error in (
        ("INSERT INTO big VALUES (1, 1, -5, 1, 7)", False),
        (f"INSERT INTO big VALUES (1, 1, {nines}, 1, 7)", False),
        ("INSERT INTO big VALUES (1, 2, 10, 2, 8)", True),  # the sum passes 38 digits
        ("INSERT INTO big VALUES (2, 2, 1, 2, 9223372036854775807)", True),
        ("DELETE FROM big WHERE b = 10", True),  # avg(d) of k = 2 has 19 digits
        ("DELETE FROM big WHERE k = 2", False),
    ):
        with pytest.warns(DsqlWarning) if in_error != _in_error(con) else no_warning():
            con.execute(step)
        pgdb.execute(step)
        assert _in_error(con) == in_error, step
        problem = agrees_or_overflows(con, pgdb, query, dsql_sql="SELECT * FROM v")
        assert problem is None, f"after {step}: {problem}"


def _in_error(con: Any) -> bool:
    return view_in_error(con, "numeric field overflow")


@pytest.mark.usefixtures("spark")
def test_past_the_limit_is_numeric_field_overflow_on_spark(pgdb: Any) -> None:
    con = dsql.connect(kernel="spark")
    create_both(con, pgdb, LIMIT_TABLES, ())
    nines = "99999999999999999999999999999999999999"
    con.execute(f"INSERT INTO big VALUES (1, 1, {nines}, 1, 9223372036854775807)")
    pgdb.execute(f"INSERT INTO big VALUES (1, 1, {nines}, 1, 9223372036854775807)")
    for sql in (
        "SELECT b + 1 AS v FROM big",
        "SELECT b * 2 AS v FROM big",
        "SELECT sum(b) + sum(b) AS v FROM big",
        "SELECT avg(d) AS v FROM big",
        "SELECT c * c AS v FROM big",
        "SELECT b / 3 AS v FROM big",
        "SELECT stddev(d) AS v FROM big",
        "SELECT 1e20 * 1e20 AS v",
        "SELECT 7.8::float4::numeric AS a, 123456789.123456789::float8::numeric AS b, "
        "0.00001::float8::numeric AS c, stddev(d) AS d FROM big",
    ):
        problem = agrees_or_overflows(con, pgdb, sql)
        assert problem is None, f"{sql}\n  {problem}"


def test_power_of_a_numeric_past_the_column_is_an_error_and_of_floats_agrees(
    pgdb: Any,
) -> None:
    """A numeric power is PostgreSQL's (`test_pg_numeric_exact.py`); one whose result
    dsql's 38-digit column cannot hold is an error of the row, not a rounded value."""
    con = dsql.connect(kernel="local")
    for sql in ("SELECT 10^40::numeric", "SELECT power(3, 40::numeric)"):
        with pytest.raises(DsqlError, match="power of a numeric") as error:
            con.execute(sql).fetchall()
        assert "double precision" in str(error.value)
    for sql in (
        "SELECT 2^10 AS a, 2.0::float8^0.5 AS b, power(4, 0.5::float8) AS c",
        "SELECT 2.5^2 AS a, power(3, 20::numeric) AS b, 2.5^0.5 AS c",
    ):
        assert differs(con, pgdb, sql) is None, sql


def test_a_float_cast_to_numeric_keeps_postgres_digits(pgdb: Any) -> None:
    """PostgreSQL casts a double through its first 15 significant digits and a real
    through 6, so `7.8::real::numeric` is 7.8 (the binary value is 7.80000019...)."""
    con = dsql.connect(kernel="local")
    sql = (
        "SELECT 0.1::float8::numeric AS a, (0.1::float8 + 0.2::float8)::numeric AS b, "
        "7.8::float4::numeric AS c, 123456789.123456789::float8::numeric AS d, "
        "(-2.5e-5)::float8::numeric AS e, 0::float8::numeric AS f"
    )
    assert differs(con, pgdb, sql) is None
    create_both(
        con,
        pgdb,
        {"aggtest": "a int2, b float4"},
        ["INSERT INTO aggtest VALUES (56, 7.8), (100, 99.097), (0, 0.09561), (42, 324.78)"],
    )
    # pg-regress aggregates.sql: b::numeric has PostgreSQL's digits (its scale is 10 here).
    spreads = ", ".join(f"{f}(b::numeric)" for f in SPREADS)
    _agree_to_postgres_digits(con, pgdb, f"SELECT a, {spreads} FROM aggtest GROUP BY a")
    _agree_to_postgres_digits(con, pgdb, f"SELECT 0, {spreads} FROM aggtest")
