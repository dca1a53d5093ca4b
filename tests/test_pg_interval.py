"""The interval type against PostgreSQL: literals, text, arithmetic, aggregates, views.

Intervals are compared as PostgreSQL's text (`::text`), which shows the three parts
apart: psycopg reads an interval as a `timedelta` with a month as 30 days, which would
hide a month spelled as 30 days. Random intervals are drawn part by part, with the
values where PostgreSQL's rules turn (zero, one, signs that differ between parts).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pg_oracle import create_both, differs

import dsql

#: Interval literals in the forms PostgreSQL reads (postgres style, SQL standard, ISO
#: 8601), with the qualifiers dsql supports.
LITERALS = (
    "interval '1 day 02:03:04'",
    "interval '-1 year +2 mons'",
    "interval 'P1Y2M3DT4H5M6S'",
    "interval 'P0001-02-03T04:05:06'",
    "interval 'P1.5Y'",
    "INTERVAL '30' MINUTE",
    "INTERVAL '1-2' YEAR TO MONTH",
    "interval '1 day 02:03:04' hour to minute",
    "interval '2' day to second",
    "interval '1:30'",
    "interval '1:30' minute to second",
    "interval '@ 1 day 2 hours ago'",
    "interval '1.5 years'",
    "interval '1.25 mon'",
    "interval '1 day 1.5 hours'",
    "interval '-1 day -02:03'",
    "interval '10 days -02:03'",
    "interval '1 week'",
    "interval '1 millennium 2 centuries 3 decades'",
    "interval '1 2:03:04'",
    "interval '5'",
    "interval '1.5'",
    "interval '0.000001 sec'",
    "interval '-0.5 mons'",
    "interval '1 day -12 hours'",
    "'3 days 04:05:06.789'::interval",
    "cast('-14 mons -3 days 1 hour' as interval)",
    "3 * interval '1 hour'",
)


@pytest.fixture(scope="module")
def pgdb(pg: Any) -> Iterator[Any]:
    """A PostgreSQL database of this module's own."""
    conn = pg.database("interval")
    yield conn
    conn.close()


@pytest.fixture
def con() -> dsql.Connection:
    return dsql.connect(kernel="local")


def _agree(con: Any, pgdb: Any, sql: str, ordered: bool = False) -> None:
    problem = differs(con, pgdb, sql, ordered=ordered)
    assert problem is None, f"{sql}\n  {problem}"


@pytest.mark.parametrize("literal", LITERALS)
def test_literal_reads_as_postgres_reads_it(con: Any, pgdb: Any, literal: str) -> None:
    _agree(con, pgdb, f"SELECT ({literal})::text")


def test_text_that_is_no_interval_is_refused(con: Any) -> None:
    for text in ("bogus", "1 fortnight", "P1X", "1:99"):
        with pytest.raises(dsql.DataError, match="invalid input syntax for type interval"):
            con.execute(f"SELECT interval '{text}'")


# -- what Python sees


def test_fetchall_gives_timedelta_without_months_and_text_with_them(con: Any) -> None:
    con.execute("CREATE TABLE iv (k int, i interval)")
    con.execute("INSERT INTO iv VALUES (1, '1 day 02:03:04'), (2, '1 year 2 mons'), (3, NULL)")
    con.execute("INSERT INTO iv VALUES (4, '-1 mons +2 days 00:00:01')")
    want = [
        (1, dt.timedelta(days=1, seconds=7384)),
        (2, "1 year 2 mons"),
        (3, None),
        (4, "-1 mons +2 days 00:00:01"),
    ]
    assert con.execute("SELECT k, i FROM iv ORDER BY k").fetchall() == want
    assert con.execute("SELECT i FROM iv ORDER BY k").arrow().schema.types == [
        pa.month_day_nano_interval()
    ]
    assert list(con.execute("SELECT i FROM iv ORDER BY k").df()["i"]) == [v for _, v in want]
    cursor = con.cursor()
    cursor.execute("SUBSCRIBE iv")
    assert sorted((row[-2], row[-1]) for row in cursor.fetchall(timeout=5)) == [
        (k, v) for k, v in want
    ]


def test_parameters_and_timedelta_round_trip(con: Any) -> None:
    con.execute("CREATE TABLE iv (i interval)")
    value = dt.timedelta(days=3, seconds=5, microseconds=7)
    con.execute("INSERT INTO iv VALUES (?)", [value])
    assert con.execute("SELECT i FROM iv").fetchall() == [(value,)]


# -- random intervals against PostgreSQL

_PART_MONTHS = st.one_of(st.sampled_from([0, 1, -1, 12, -14]), st.integers(-600, 600))
_PART_DAYS = st.one_of(st.sampled_from([0, 1, -1, 30, -31]), st.integers(-800, 800))
_PART_MICROS = st.one_of(
    st.sampled_from([0, 1, -1, 86_400_000_000, -3_600_000_000]),
    st.integers(-(10**12), 10**12),
)
INTERVALS = st.one_of(st.none(), st.tuples(_PART_MONTHS, _PART_DAYS, _PART_MICROS))
TIMESTAMPS = st.one_of(
    st.none(),
    st.datetimes(dt.datetime(1990, 1, 1), dt.datetime(2060, 12, 31)).map(
        lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)
    ),
)
ROWS = st.lists(st.tuples(st.integers(0, 3), INTERVALS, INTERVALS, TIMESTAMPS), max_size=12)

TABLES = {"t": "k int, a interval, b interval, ts timestamp"}


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, tuple):
        months, days, micros = value
        return f"'{months} months {days} days {micros} microseconds'"
    return f"'{value}'"


def _fill(con: Any, pgdb: Any, rows: list[tuple[Any, ...]]) -> None:
    create_both(con, pgdb, TABLES, ())
    _insert(con, pgdb, rows)


def _insert(con: Any, pgdb: Any, rows: list[tuple[Any, ...]]) -> None:
    if not rows:
        return
    values = ", ".join(f"({k}, {', '.join(_literal(v) for v in rest)})" for k, *rest in rows)
    con.execute(f"INSERT INTO t VALUES {values}")
    pgdb.execute(f"INSERT INTO t VALUES {values}")


#: One query per family of interval operations, each interval shown as its text.
QUERIES = (
    # arithmetic between intervals and with numbers
    "SELECT k, (a + b)::text, (a - b)::text, (-a)::text, (a * 3)::text, (a * 1.5)::text,"
    " (a / 4)::text, (a * -0.25)::text FROM t",
    # timestamps and dates with intervals, and timestamp differences
    "SELECT k, (ts + a)::text, (ts - b)::text, (ts - timestamp '2000-02-29 12:00')::text,"
    " (ts::date + a)::text, (date '2020-01-31' - a)::text FROM t",
    # comparison (a month counts as 30 days, a day as 24 hours)
    "SELECT k, a < b, a = b, a >= b, a <> b FROM t",
    # fields
    "SELECT k, extract(epoch from a), extract(second from a), extract(minute from a),"
    " extract(hour from a), extract(day from a), extract(month from a),"
    " extract(year from a), extract(millisecond from a), extract(microsecond from a) FROM t",
    # truncation and justification
    "SELECT k, date_trunc('hour', a)::text, date_trunc('day', a)::text,"
    " date_trunc('month', a)::text, justify_days(a)::text, justify_hours(a)::text,"
    " justify_interval(a)::text FROM t",
    # aggregates
    "SELECT k, sum(a)::text, avg(a)::text, min(a) IS NULL, count(a) FROM t GROUP BY k",
    # grouping and distinct: equal intervals (under comparison) are one group
    "SELECT justify_interval(a)::text, count(*) FROM t GROUP BY a",
    "SELECT count(DISTINCT a), count(DISTINCT b) FROM t",
    # a join on interval keys
    "SELECT x.k, y.k FROM t x JOIN t y ON x.a = y.b",
)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ROWS)
def test_operations_agree_with_postgres(pgdb: Any, rows: list[tuple[Any, ...]]) -> None:
    con = dsql.connect(kernel="local")
    _fill(con, pgdb, rows)
    for sql in QUERIES:
        _agree(con, pgdb, sql)
    _agree(con, pgdb, "SELECT a::text FROM t ORDER BY a, k, b, ts", ordered=True)
    _agree(con, pgdb, "SELECT min(a)::text = min(a)::text, max(b) >= min(b) FROM t")


@settings(
    max_examples=2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # each example costs seconds
)
@given(rows=ROWS, more=ROWS, gone=st.integers(0, 3))
def test_views_stay_equal_to_their_queries(
    pgdb: Any, rows: list[tuple[Any, ...]], more: list[tuple[Any, ...]], gone: int
) -> None:
    """Materialized views over interval columns, after inserts, deletes and updates,
    equal their queries evaluated by PostgreSQL from scratch."""
    con = dsql.connect(kernel="local")
    _fill(con, pgdb, rows)
    for i, sql in enumerate(QUERIES):
        names = ", ".join(f"c{j}" for j in range(len(con.execute(sql).description)))
        con.execute(f"CREATE MATERIALIZED VIEW v{i} ({names}) AS {sql}")
    _insert(con, pgdb, more)
    for statement in (
        f"DELETE FROM t WHERE k = {gone}",
        "UPDATE t SET a = a + interval '1 mon -1 day' WHERE k = 1",
        "UPDATE t SET b = b * 2 WHERE k = 2",
    ):
        con.execute(statement)
        pgdb.execute(statement)
        for i, sql in enumerate(QUERIES):
            problem = differs(con, pgdb, sql, dsql_sql=f"SELECT * FROM v{i}")
            assert problem is None, f"after {statement}: {sql}\n  {problem}"


def test_group_by_keeps_one_spelling_of_equal_intervals(con: Any) -> None:
    """'1 mon' and '30 days' compare equal and make one group (which spelling the
    group shows is not defined, in PostgreSQL either)."""
    con.execute("CREATE TABLE iv (i interval)")
    con.execute("INSERT INTO iv VALUES ('1 mon'), ('30 days'), ('720 hours'), ('1 day')")
    got = con.execute("SELECT count(*) FROM iv GROUP BY i ORDER BY 1").fetchall()
    assert got == [(1,), (3,)]
    assert con.execute("SELECT count(DISTINCT i) FROM iv").fetchall() == [(2,)]


def test_make_interval_by_position_and_name(con: Any, pgdb: Any) -> None:
    _agree(con, pgdb, "SELECT make_interval(1, 2, 3, 4, 5, 6, 7.5)::text")
    _agree(con, pgdb, "SELECT make_interval(days => 10, secs => 1.25)::text")
    _agree(con, pgdb, "SELECT make_interval(0, -1, 0, 31)::text")


def test_temporal_filter_against_timestamp_plus_interval() -> None:
    """`mz_now() <= ts + interval '1 hour'`: a row is in the view for the hour after
    `ts`, and leaves it when the clock passes."""
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE ev (id int, ts timestamp, ttl interval)")
    con.execute(
        "CREATE MATERIALIZED VIEW live AS SELECT id FROM ev "
        "WHERE mz_now() <= ts + interval '1 hour' AND mz_now() >= ts"
    )
    con.execute("CREATE MATERIALIZED VIEW kept AS SELECT id FROM ev WHERE mz_now() < ts + ttl")
    con.execute(
        "INSERT INTO ev VALUES (1, '2030-01-01 00:00', '30 minutes'), "
        "(2, '2030-01-01 00:30', '1 day'), (3, '2030-01-01 00:10', '1 mon')"
    )
    con.execute("ADVANCE TO timestamp '2030-01-01 00:20'")
    assert sorted(con.execute("SELECT * FROM live").fetchall()) == [(1,), (3,)]
    assert sorted(con.execute("SELECT * FROM kept").fetchall()) == [(1,), (2,), (3,)]
    con.execute("ADVANCE TO timestamp '2030-01-01 01:15'")
    assert sorted(con.execute("SELECT * FROM live").fetchall()) == [(2,)]
    assert sorted(con.execute("SELECT * FROM kept").fetchall()) == [(2,), (3,)]
    con.execute("ADVANCE TO timestamp '2030-01-25 00:00'")
    assert con.execute("SELECT * FROM kept").fetchall() == [(3,)]


@pytest.mark.usefixtures("spark")
def test_spark_refuses_intervals() -> None:
    """Spark has no interval it can store in Parquet: a clear refusal, never a wrong value."""
    con = dsql.connect(kernel="spark")
    with pytest.raises(dsql.NotSupportedError, match="interval values are not supported"):
        con.execute("SELECT interval '1 day' + interval '1 hour'")
    with pytest.raises(dsql.NotSupportedError, match="interval values are not supported"):
        con.execute("CREATE TABLE iv (i interval)")
