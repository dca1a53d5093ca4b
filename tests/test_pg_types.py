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


# -- numeric


def test_numeric_cast_keeps_the_digits(con: dsql.Connection) -> None:
    assert rows(con, "SELECT 1.23456::numeric, CAST(6.9 AS numeric), '1e3'::numeric") == [
        (Decimal("1.23456"), Decimal("6.9"), Decimal("1000"))
    ]
    assert str(rows(con, "SELECT CAST(6.9 AS numeric)")[0][0]) == "6.9"
    assert rows(con, "SELECT 12.345::numeric(4,1), 7::numeric") == [(Decimal("12.3"), 7)]


def test_numeric_field_overflow(con: dsql.Connection) -> None:
    with pytest.raises(dsql.Error, match="numeric field overflow"):
        con.execute("SELECT 12345.6::numeric(4,1)")
    con.execute("CREATE TABLE n (x numeric(4, 1))")
    with pytest.raises(dsql.Error, match="numeric field overflow"):
        con.execute("INSERT INTO n VALUES (12345.6)")
    con.execute("INSERT INTO n VALUES (12.35), (1), ('-0.05')")
    assert rows(con, "SELECT x FROM n") == [
        (Decimal("12.4"),),
        (Decimal("1.0"),),
        (Decimal("-0.1"),),
    ]


def test_quoted_literals_into_numeric_columns(con: dsql.Connection) -> None:
    con.execute("CREATE TABLE n (x numeric, i int)")
    con.execute("INSERT INTO n VALUES ('1e3', ' 12 '), (1.50, 2), (' 12.5 ', '-3')")
    assert sorted(rows(con, "SELECT x, i FROM n")) == [(1.5, 2), (12.5, -3), (1000, 12)]
    with pytest.raises(dsql.Error, match="no NaN"):
        con.execute("INSERT INTO n (x) VALUES ('NaN')")
    with pytest.raises(dsql.Error, match='invalid input syntax for type numeric: "abc"'):
        con.execute("INSERT INTO n (x) VALUES ('abc')")
    with pytest.raises(dsql.Error, match="integer out of range"):
        con.execute("INSERT INTO n (i) VALUES (2147483648)")


# -- sums: PostgreSQL's result types, never overflowing for bigint


def test_sum_types_and_exact_bigint_sums(con: dsql.Connection) -> None:
    con.execute("CREATE TABLE b (x bigint, i int)")
    big = "(9223372036854775807, 2147483647)"
    con.execute(f"INSERT INTO b VALUES {big}, {big}")  # one row, multiplicity 2
    con.execute("CREATE MATERIALIZED VIEW s AS SELECT sum(x) AS sx, sum(i) AS si FROM b")
    expected = [(Decimal("18446744073709551614"), 4294967294)]
    assert rows(con, "SELECT sum(x), sum(i) FROM b") == expected
    assert rows(con, "SELECT * FROM s") == expected
    con.execute("DELETE FROM b WHERE x > 0")
    con.execute("INSERT INTO b VALUES (1, 1)")
    assert rows(con, "SELECT * FROM s") == [(1, 1)]
    cur = con.execute("SELECT sum(x), sum(i) FROM b")
    assert [d[1] for d in cur.description][1] == "int64"


def test_integer_overflow_is_an_error(con: dsql.Connection) -> None:
    with pytest.raises(dsql.Error, match="^integer out of range"):
        con.execute("SELECT 2147483647 + 1")
    with pytest.raises(dsql.Error, match="^bigint out of range"):
        con.execute("SELECT 9223372036854775807::bigint * 2")
    assert rows(con, "SELECT -7 / 2, -7 % 2, 7 % -2") == [(-3, -1, 1)]


# -- text of bounded length


def test_varchar_length_is_enforced(con: dsql.Connection) -> None:
    con.execute("CREATE TABLE v (s varchar(3), c char(3))")
    with pytest.raises(dsql.Error, match=r"value too long for type character varying\(3\)"):
        con.execute("INSERT INTO v VALUES ('abcd', 'a')")
    with pytest.raises(dsql.Error, match=r"value too long for type character\(3\)"):
        con.execute("INSERT INTO v VALUES ('a', 'abcd')")
    con.execute("INSERT INTO v VALUES ('ab   ', 'a  ')")  # trailing blanks past n are cut
    assert rows(con, "SELECT s, length(c), c = 'a' FROM v") == [("ab ", 1, True)]


def test_varchar_cast_cuts(con: dsql.Connection) -> None:
    assert rows(con, "SELECT 'abcdef'::varchar(3), CAST('ab   ' AS char(4)) || '|'") == [
        ("abc", "ab|")
    ]


# -- aggregates and values as PostgreSQL presents them


def test_string_agg_with_a_null_delimiter_joins_without_one(con: dsql.Connection) -> None:
    con.execute("CREATE TABLE s (k int, x text)")
    con.execute("INSERT INTO s VALUES (1, 'a'), (1, 'a'), (2, 'b')")
    con.execute(
        "CREATE MATERIALIZED VIEW v AS SELECT k, string_agg(x, NULL) AS j FROM s GROUP BY k"
    )
    assert sorted(rows(con, "SELECT * FROM v")) == [(1, "aa"), (2, "b")]


def test_unbounded_numeric_values_lose_trailing_zeros(con: dsql.Connection) -> None:
    con.execute("CREATE TABLE n (x numeric)")
    con.execute("INSERT INTO n VALUES ('1e3'), (1.25)")
    values = [r[0] for r in rows(con, "SELECT x FROM n ORDER BY x")]
    assert [str(v) for v in values] == ["1.25", "1000"]
    assert [str(r[0]) for r in rows(con, "SELECT sum(x) FROM n")] == ["1001.25"]


def test_psql_text_of_values() -> None:
    import datetime as dt

    import pyarrow as pa

    from dsql.printer import format_value, plain_table

    assert format_value([1, 2, None]) == "{1,2,NULL}"
    assert format_value(["a b", "c,d", 'e"f', None, "NULL", ""]) == (
        '{"a b","c,d","e\\"f",NULL,"NULL",""}'
    )
    assert [format_value(v) for v in (True, False, 0.1, float("inf"), float("nan"))] == [
        "t",
        "f",
        "0.1",
        "Infinity",
        "NaN",
    ]
    assert format_value(dt.datetime(2020, 1, 1, 10, 0, 0, 500000)) == "2020-01-01 10:00:00.5"
    utc = dt.datetime(2020, 1, 1, 10, tzinfo=dt.UTC)
    assert format_value(utc) == "2020-01-01 10:00:00+00"
    numbers = pa.table({"x": pa.array([Decimal("1000"), Decimal("1.5")], pa.decimal128(38, 10))})
    assert plain_table(numbers).splitlines()[2:4] == [" 1000", "  1.5"]


# -- the Spark kernel answers alike


def test_spark_kernel_sums_casts_and_overflows(spark) -> None:  # noqa: ANN001
    con = dsql.connect(kernel="spark", spark=spark)
    con.execute("CREATE TABLE b (x bigint, i int, s text)")
    big = "(9223372036854775807, 2147483647, 'a')"
    con.execute(f"INSERT INTO b VALUES {big}, {big}")
    con.execute(
        "CREATE MATERIALIZED VIEW v AS "
        "SELECT s, sum(x) AS sx, sum(i) AS si, string_agg(s, NULL) AS j FROM b GROUP BY s"
    )
    assert rows(con, "SELECT * FROM v") == [
        ("a", Decimal("18446744073709551614"), 4294967294, "aa")
    ]
    assert rows(con, "SELECT 1.23456::numeric, CAST(6.9 AS numeric), 'abcdef'::varchar(3)") == [
        (Decimal("1.23456"), Decimal("6.9"), "abc")
    ]
    with pytest.raises(dsql.Error, match="^integer out of range"):
        con.execute("SELECT i + 1 FROM b")
    with pytest.raises(dsql.Error, match="numeric field overflow"):
        con.execute("SELECT 12345.6::numeric(4,1)")
