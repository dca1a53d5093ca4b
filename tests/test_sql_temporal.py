"""Temporal filters agree with DuckDB at every time, including OR around `mz_now()`.

dsql maintains each view as rows enter and leave on schedule; the oracle is DuckDB
evaluating the same query from scratch on the current rows with `mz_now()`
replaced by the read's time (DESIGN §4). A disjunction compiles to signed
intervals by inclusion–exclusion (`planner.temporal.presence`), so overlapping
alternatives must still count a row once; NULL bounds never admit a row.
"""

from __future__ import annotations

from collections import Counter

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsql
from dsql.errors import UnsupportedError

VIEWS = {
    "t_window": "SELECT id FROM ev WHERE mz_now() >= a AND mz_now() < a + 5",
    "t_either_end": "SELECT id FROM ev WHERE mz_now() < a OR mz_now() >= b",
    "t_or_plain": "SELECT id FROM ev WHERE mz_now() BETWEEN a AND b OR c > 2",
    "t_two_windows": (
        "SELECT id FROM ev WHERE (mz_now() >= a AND mz_now() < a + 3) "
        "OR (mz_now() >= b AND mz_now() < b + 3)"
    ),
    "t_points": "SELECT id, c FROM ev WHERE mz_now() = a OR mz_now() = b OR mz_now() = c",
    "t_counted": "SELECT count(*) AS n FROM ev WHERE c < 3 AND (mz_now() < a OR mz_now() < b)",
    "t_two_ors": ("SELECT id FROM ev WHERE (mz_now() < a OR c = 1) AND (mz_now() >= b OR c = 2)"),
}

value = st.one_of(st.none(), st.integers(0, 12))
row = st.tuples(st.integers(0, 3), value, value, value)
op = st.one_of(
    st.tuples(st.just("insert"), st.lists(row, min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.integers(0, 3)),
    st.tuples(st.just("advance"), st.integers(1, 4)),
)


def _sql(v: int | None) -> str:
    return "NULL" if v is None else str(v)


def _check(
    con: dsql.api.Connection, oracle: duckdb.DuckDBPyConnection, now: int, step: str
) -> None:
    for name, query in VIEWS.items():
        got = Counter(con.execute(f"SELECT * FROM {name}").fetchall())
        want = Counter(oracle.execute(query.replace("mz_now()", f"{now}")).fetchall())
        assert got == want, f"{name} at {now} after {step}: dsql {got} != duckdb {want}"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=12))
def test_temporal_views_agree_with_duckdb_at_every_time(history: list[tuple]) -> None:
    con = dsql.connect(kernel="local")
    oracle = duckdb.connect()
    for c in (con, oracle):
        c.execute("CREATE TABLE ev (id int, a int, b int, c int)")
        c.execute("INSERT INTO ev VALUES (0, 2, 6, 1), (1, 4, 3, NULL), (2, NULL, 5, 2)")
    for name, query in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    now, done = 0, "creation"
    _check(con, oracle, now, done)
    for kind, arg in history:
        if kind == "advance":
            now += arg
            con.execute(f"ADVANCE TO {now}")
            done = f"ADVANCE TO {now}"
        else:
            if kind == "insert":
                sql = "INSERT INTO ev VALUES " + ", ".join(
                    "(" + ", ".join(_sql(v) for v in r) + ")" for r in arg
                )
            else:
                sql = f"DELETE FROM ev WHERE id = {arg}"
            con.execute(sql)
            oracle.execute(sql)
            done = sql
        _check(con, oracle, now, done)


def test_or_of_overlapping_windows_counts_a_row_once() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE ev (id int, a int, b int)")
    con.execute(
        "CREATE MATERIALIZED VIEW w AS SELECT id FROM ev "
        "WHERE mz_now() BETWEEN a AND a + 10 OR mz_now() BETWEEN b AND b + 10"
    )
    con.execute("INSERT INTO ev VALUES (1, 0, 5)")
    seen = {}
    for t in (0, 4, 5, 10, 11, 15, 16):
        con.execute(f"ADVANCE TO {t}")
        seen[t] = con.execute("SELECT * FROM w").fetchall()
    assert seen == {0: [(1,)], 4: [(1,)], 5: [(1,)], 10: [(1,)], 11: [(1,)], 15: [(1,)], 16: []}


def test_case_around_mz_now_is_refused_with_a_hint() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE ev (id int, a int)")
    with pytest.raises(UnsupportedError) as info:
        con.execute(
            "CREATE MATERIALIZED VIEW v AS SELECT id FROM ev "
            "WHERE CASE WHEN a > 1 THEN mz_now() > a ELSE false END"
        )
    assert info.value.hint
    assert con.execute("SELECT count(*) FROM ev").fetchall() == [(0,)]


@pytest.mark.parametrize(
    "sql",
    [
        "SUBSCRIBE (SELECT a, mz_now() FROM ev)",
        "CREATE MATERIALIZED VIEW v AS SELECT a, mz_now() AS t FROM ev",
        "CREATE MATERIALIZED VIEW v AS SELECT a FROM ev WHERE mz_now() + a > 3",
    ],
)
def test_mz_now_outside_a_bound_in_a_view_is_refused(sql: str) -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE ev (id int, a int)")
    con.execute("INSERT INTO ev VALUES (1, 2)")
    with pytest.raises(UnsupportedError, match="mz_now"):
        con.execute(sql)
    assert con.execute("SELECT id, a, mz_now() FROM ev").fetchall() == [(1, 2, 0)]


def test_advance_takes_timestamps_dates_and_intervals() -> None:
    """ADVANCE TO a timestamp or a date, ADVANCE BY an interval: the clock moves there,
    as `mz_now()` in a one-off read shows; going back is refused with a hint."""
    con = dsql.connect(kernel="local")

    def now() -> int:
        return con.execute("SELECT mz_now()").fetchall()[0][0]

    con.execute("ADVANCE TO TIMESTAMP '2024-01-01 00:00:00'")
    assert now() == 1_704_067_200_000
    con.execute("ADVANCE BY INTERVAL '1 second'")
    assert now() == 1_704_067_201_000
    con.execute("ADVANCE TO DATE '2025-01-01'")
    assert now() == 1_735_689_600_000
    with pytest.raises(dsql.errors.DsqlError, match="forward"):
        con.execute("ADVANCE TO TIMESTAMP '2020-01-01 00:00:00'")
    with pytest.raises(dsql.errors.DsqlError, match="not a time"):
        con.execute("ADVANCE BY 'soon'")
    assert now() == 1_735_689_600_000
