"""Indexes: named arrangements shared by later views, checked against DuckDB.

Views that join, group or deduplicate an indexed relation by the index's keys import
the index's trace (EXPLAIN PHYSICAL names it, SHOW ARRANGEMENTS has no second trace
for those keys); under random histories they agree with DuckDB at every time, and
keep agreeing after the index is dropped.
"""

from __future__ import annotations

from collections import Counter

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sql import _statement as statement
from test_sql import op as sql_op

import dsql
from dsql.errors import DsqlError, SchemaError, UnsupportedError

TABLES = {"r": "a int, b int", "s": "a int, c int"}
INDEXES = ("CREATE INDEX r_by_a ON r (a)", "CREATE INDEX ON s (a)", "CREATE DEFAULT INDEX ON r")

VIEWS = {
    "v_join": "SELECT r.a, r.b, s.c FROM r JOIN s ON r.a = s.a",
    "v_join_swapped": "SELECT s.c, r.b FROM s JOIN r ON s.a = r.a WHERE r.b > 0",
    "v_left": "SELECT r.a, r.b, s.c FROM r LEFT JOIN s ON r.a = s.a",
    "v_grouped": "SELECT a, count(*) AS n, sum(b) AS total, max(b) AS hi FROM r GROUP BY a",
    "v_distinct": "SELECT DISTINCT b, a FROM r",
    "v_keys": "SELECT a, count(DISTINCT c) AS n FROM s GROUP BY a",
}

#: A history step of test_sql, or dropping an index the views read.
op = st.one_of(sql_op, st.tuples(st.just("drop index"), st.just(""), st.just(0)))


def rows(result: list[tuple]) -> Counter:
    return Counter(result)


def check(con: dsql.api.Connection, oracle: duckdb.DuckDBPyConnection, step: str) -> None:
    for name, query in VIEWS.items():
        got = rows(con.execute(f"SELECT * FROM {name}").fetchall())
        want = rows(oracle.execute(query).fetchall())
        assert got == want, f"{name} after {step}: dsql {got} != duckdb {want}"


def session(with_indexes: bool = True) -> tuple[dsql.api.Connection, duckdb.DuckDBPyConnection]:
    con, oracle = dsql.connect(kernel="local"), duckdb.connect()
    for name, cols in TABLES.items():
        con.execute(f"CREATE TABLE {name} ({cols})")
        oracle.execute(f"CREATE TABLE {name} ({cols})")
    first = "INSERT INTO r VALUES (1, 1), (2, NULL), (3, 3), (NULL, 4)"
    con.execute(first)
    oracle.execute(first)
    for sql in INDEXES if with_indexes else ():
        con.execute(sql)
    return con, oracle


def plan(con: dsql.api.Connection, query: str) -> str:
    return con.execute(f"EXPLAIN PHYSICAL {query}").fetchall()[0][0]


def arrangements(con: dsql.api.Connection) -> list[dict]:
    cur = con.execute("SHOW ARRANGEMENTS")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=10))
def test_views_over_indexes_agree_with_duckdb_at_every_time(history: list[tuple]) -> None:
    con, oracle = session()
    for name, query in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    check(con, oracle, "creation")
    now = 0
    for kind, table, arg in history:
        if kind == "drop index":  # the views hold their own handles: they keep following
            con.execute("DROP INDEX IF EXISTS r_by_a")
            continue
        sql = statement(kind, table, arg)
        if sql is None:
            now += int(arg)  # type: ignore[call-overload]
            con.execute(f"ADVANCE TO {now}")
            continue
        con.execute(sql)
        oracle.execute(sql)
        check(con, oracle, sql)
    for query in VIEWS.values():  # one-off reads share the indexes too
        assert rows(con.execute(query).fetchall()) == rows(oracle.execute(query).fetchall())


@pytest.mark.parametrize(
    ("query", "index"),
    [
        ("SELECT r.b, s.c FROM r JOIN s ON r.a = s.a", "r_by_a"),
        ("SELECT r.b, s.c FROM s JOIN r ON s.a = r.a", "s_a_idx"),
        ("SELECT a, sum(b) FROM r GROUP BY a", "r_by_a"),
        ("SELECT DISTINCT a, b FROM r", "r_primary_idx"),
        ("SELECT DISTINCT b, a FROM r", "r_primary_idx"),
        ("SELECT a, b, count(*) FROM r GROUP BY a, b", "r_primary_idx"),
    ],
)
def test_explain_physical_names_the_index_it_imports(query: str, index: str) -> None:
    con, _ = session()
    assert f"Import(index={index}," in plan(con, query)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT r.b, s.c FROM r JOIN s ON r.b = s.c",  # keys not indexed
        "SELECT b, count(*) FROM r GROUP BY b",  # no index by b alone
        "SELECT r.b, s.c FROM r JOIN s ON r.a + 1 = s.a AND r.b = s.c",  # an expression key
        "SELECT DISTINCT a FROM r",  # the index by a has values: not a distinct of a
        "SELECT a, count(*) FROM r WHERE b > 1 GROUP BY a",  # filtered first
    ],
)
def test_no_index_for_other_keys(query: str) -> None:
    con, _ = session()
    assert "Import(index=" not in plan(con, query)


def test_a_view_reading_an_index_adds_a_reader_not_an_arrangement() -> None:
    query = "SELECT r.b, s.c FROM r JOIN s ON r.a = s.a"
    plain, _ = session(with_indexes=False)
    plain.execute(f"CREATE MATERIALIZED VIEW j AS {query}")
    internal = [a for a in arrangements(plain) if a["kind"] == "internal"]
    assert len(internal) == 2  # each side arranged by the join key
    con, _ = session()
    con.execute(f"CREATE MATERIALIZED VIEW j AS {query}")
    found = {a["name"]: a for a in arrangements(con)}
    internal = [a for a in found.values() if a["kind"] == "internal"]
    assert len(internal) == 1  # only s's side: r's side is the index
    assert found["r_by_a"]["kind"] == "index" and found["r_by_a"]["readers"] == 1
    assert found["r_by_a"]["keys"] == "a" and found["r_by_a"]["rows"] == 4
    assert "r_primary_idx" not in found  # the table's own arrangement: no second trace
    assert found["r"]["keys"] == "a, b"


def test_drop_index_keeps_its_readers_and_releases_the_trace_after_them() -> None:
    con, _ = session()
    con.execute("CREATE MATERIALIZED VIEW g AS SELECT a, count(*) AS n FROM r GROUP BY a")
    con.execute("DROP INDEX r_by_a")
    assert "r_by_a" not in [r[0] for r in con.execute("SHOW INDEXES").fetchall()]
    kept = {a["name"]: a["kind"] for a in arrangements(con)}
    assert kept["r_by_a"] == "dropped index"
    con.execute("INSERT INTO r VALUES (1, 7), (5, 5)")
    con.execute("ADVANCE TO 1")
    got = sorted(con.execute("SELECT * FROM g").fetchall(), key=repr)
    assert got == sorted([(1, 2), (2, 1), (3, 1), (None, 1), (5, 1)], key=repr)
    con.execute("DROP MATERIALIZED VIEW g")
    assert "r_by_a" not in {a["name"] for a in arrangements(con)}
    # a later view builds its own arrangement again
    assert "Import(index=" not in plan(con, "SELECT a, count(*) FROM r GROUP BY a")


def test_show_indexes_and_default_names() -> None:
    con, _ = session()
    con.execute("CREATE INDEX ON s (a)")  # the same default name again gets a number
    con.execute("CREATE INDEX IF NOT EXISTS r_by_a ON s (c)")  # taken: nothing happens
    assert con.execute("SHOW INDEXES").fetchall() == [
        ("r_by_a", "r", "a"),
        ("r_primary_idx", "r", "a, b"),
        ("s_a_idx", "s", "a"),
        ("s_a_idx1", "s", "a"),
    ]
    assert con.execute("SHOW INDEXES ON s").fetchall() == [
        ("s_a_idx", "s", "a"),
        ("s_a_idx1", "s", "a"),
    ]
    (create,) = con.execute("SHOW CREATE INDEX r_by_a").fetchall()
    assert create == ("r_by_a", "CREATE INDEX r_by_a ON r (a)")


def test_index_keys_name_columns_quoted_or_not_and_ignore_order() -> None:
    con = dsql.connect(kernel="local")
    con.execute('CREATE TABLE t ("Mixed" int, low int)')
    con.execute('CREATE INDEX ON t ("Mixed", LOW DESC)')
    assert con.execute("SHOW INDEXES").fetchall() == [("t_Mixed_low_idx", "t", "Mixed, low")]


def test_dropping_a_relation_drops_its_indexes() -> None:
    con, _ = session()
    con.execute("CREATE MATERIALIZED VIEW j AS SELECT r.b, s.c FROM r JOIN s ON r.a = s.a")
    with pytest.raises(SchemaError, match="depend"):
        con.execute("DROP TABLE r")
    assert len(con.execute("SHOW INDEXES ON r").fetchall()) == 2
    con.execute("DROP TABLE r CASCADE")
    assert con.execute("SHOW INDEXES").fetchall() == [("s_a_idx", "s", "a")]
    assert {a["name"] for a in arrangements(con)} == {"s", "s_a_idx"}


def test_an_index_on_a_view_maintains_it_and_is_shared() -> None:
    con, oracle = session(with_indexes=False)
    view = "SELECT a, b + 1 AS b1 FROM r WHERE b IS NOT NULL"
    con.execute(f"CREATE VIEW w AS {view}")
    con.execute("CREATE INDEX w_a ON w (a)")
    assert con.execute("SHOW VIEWS").fetchall() == [("w", "view")]
    found = {a["name"]: a for a in arrangements(con)}
    assert found["w_a"]["rows"] == 3 and found["w_a"]["keys"] == "a"
    query = "SELECT w.b1, s.c FROM w JOIN s ON w.a = s.a"
    assert "Import(index=w_a," in plan(con, query)
    con.execute(f"CREATE MATERIALIZED VIEW j AS {query}")
    for sql in ("INSERT INTO s VALUES (1, 10), (3, 30)", "UPDATE r SET b = 9 WHERE a = 3"):
        con.execute(sql)
        oracle.execute(sql)
        con.execute("ADVANCE BY 1")
        for name, text in (("w", view), ("j", query.replace("w.", "x.").replace(" w ", " x "))):
            want = oracle.execute(text.replace("FROM x", f"FROM ({view}) x")).fetchall()
            assert rows(con.execute(f"SELECT * FROM {name}").fetchall()) == rows(want), name


def test_an_index_on_a_materialized_view() -> None:
    con, _ = session(with_indexes=False)
    con.execute("CREATE MATERIALIZED VIEW m AS SELECT a, count(*) AS n FROM r GROUP BY a")
    con.execute("CREATE INDEX m_a ON m (a)")
    query = "SELECT m.n, s.c FROM m JOIN s ON m.a = s.a"
    assert "Import(index=m_a," in plan(con, query)
    con.execute("INSERT INTO s VALUES (1, 10), (1, 11)")
    assert sorted(con.execute(query).fetchall()) == [(1, 10), (1, 11)]


@pytest.mark.parametrize(
    ("sql", "error", "text"),
    [
        ("CREATE INDEX ON r (nope)", SchemaError, "column 'nope' does not exist"),
        ("CREATE INDEX ON r (a + 1)", UnsupportedError, "is an expression"),
        ("CREATE INDEX ON r (a, a)", SchemaError, "appears twice"),
        ("CREATE INDEX r_by_a ON s (a)", SchemaError, "index 'r_by_a' already exists"),
        ("CREATE INDEX s ON r (a)", SchemaError, "relation 's' already exists"),
        ("CREATE INDEX ON nowhere (a)", SchemaError, "nowhere"),
        ("CREATE TABLE r_by_a (x int)", SchemaError, "index 'r_by_a' already exists"),
        ("DROP INDEX nope", SchemaError, "unknown index 'nope'"),
        ("DROP INDEX r", SchemaError, "is a table, not an index"),
        ("DROP TABLE r_by_a", SchemaError, "'r_by_a' is an index, not a table"),
        ("SHOW INDEXES ON nowhere", SchemaError, "nowhere"),
        ("SHOW CREATE INDEX nope", SchemaError, "unknown index"),
        ("CREATE INDEX ON r (a) WITH (SIZE = 1)", DsqlError, "unknown CREATE INDEX option"),
    ],
)
def test_index_errors_leave_the_session_usable(sql: str, error: type, text: str) -> None:
    con, _ = session()
    con.execute("CREATE MATERIALIZED VIEW g AS SELECT a, count(*) AS n FROM r GROUP BY a")
    with pytest.raises(error) as info:
        con.execute(sql)
    assert text in str(info.value)
    assert info.value.hint  # every error says what to do
    assert info.value.statement is not None
    con.execute("INSERT INTO r VALUES (1, 5)")
    assert (1, 2) in con.execute("SELECT * FROM g").fetchall()
    con.execute("DROP INDEX IF EXISTS nope")  # IF EXISTS: no error
    assert len(con.execute("SHOW INDEXES").fetchall()) == 3
