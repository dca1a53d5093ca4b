"""Reads AS OF a past time: exact within RETAIN HISTORY, refused (never wrong) outside it.

SUBSCRIBE ... AS OF a past time is checked the same way: its snapshot and every later
change, accumulated to any time since, equal DuckDB over the contents at that time.

The oracle is DuckDB over the tables' contents at each past millisecond, recorded as
the history runs; a read `AS OF t` must equal the query over the contents at `t`, or,
for an input that keeps no history back to `t`, raise a TimeError naming it.
"""

from __future__ import annotations

from collections import Counter

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sql import _statement as statement
from test_sql import op

import dsql
from dsql.errors import ParseError, TimeError, TypeMismatchError, UnsupportedError

TABLES = {"r": "a int, b int", "s": "a int, c int"}
RETAINED = "WITH (RETAIN HISTORY FOR '1 hour')"

VIEWS = {  # kept in the session (materialized or indexed, with history), read AS OF
    "m": "SELECT a, count(*) AS n, sum(b) AS total FROM r GROUP BY a",
    "w": "SELECT a, b FROM r WHERE b > 1",
    "pv": "SELECT r.b, s.c FROM r LEFT JOIN s ON r.a = s.a",
}
QUERIES = [
    "SELECT * FROM r",
    "SELECT a, count(*), sum(b) FROM r GROUP BY a",
    "SELECT r.a, r.b, s.c FROM r JOIN s ON r.a = s.a",
    "SELECT DISTINCT a FROM s",
    "SELECT * FROM m",
    "SELECT * FROM w",
    "SELECT * FROM pv",
    "SELECT w.a, m.n FROM w JOIN m ON w.a = m.a",
]


class Recorder:
    """The tables' contents at each millisecond, and DuckDB's answer over them."""

    def __init__(self) -> None:
        self.current = duckdb.connect()
        for name, cols in TABLES.items():
            self.current.execute(f"CREATE TABLE {name} ({cols})")
        self.snapshots: dict[int, dict[str, list[tuple]]] = {}

    def record(self, ms: int) -> None:
        """The contents now are the contents at `ms` (no later write at `ms` follows)."""
        self.snapshots[ms] = {
            name: self.current.execute(f"SELECT * FROM {name}").fetchall() for name in TABLES
        }

    def run(self, con: dsql.api.Connection, history: list) -> int:
        """Run a history in `con` and here, recording each millisecond; returns the last."""
        now = 0
        for kind, table, arg in history:
            sql = statement(kind, table, arg)
            if sql is None:
                self.record(now)
                now += int(arg)
                con.execute(f"ADVANCE TO {now}")
                continue
            con.execute(sql)
            self.current.execute(sql)
        self.record(now)
        return now

    def answer(self, query: str, ms: int) -> Counter:
        """`query` over the contents at `ms`, with the views defined as in the session."""
        at = max(t for t in self.snapshots if t <= ms)
        con = duckdb.connect()
        for name, cols in TABLES.items():
            con.execute(f"CREATE TABLE {name} ({cols})")
            if self.snapshots[at][name]:
                con.executemany(f"INSERT INTO {name} VALUES (?, ?)", self.snapshots[at][name])
        for name, view in VIEWS.items():
            con.execute(f"CREATE VIEW {name} AS {view}")
        return Counter(con.execute(query).fetchall())


def retained_session() -> dsql.api.Connection:
    con = dsql.connect(kernel="local")
    for name, cols in TABLES.items():
        con.execute(f"CREATE TABLE {name} ({cols}) {RETAINED}")
    con.execute(f"CREATE MATERIALIZED VIEW m {RETAINED} AS {VIEWS['m']}")
    con.execute(f"CREATE VIEW w AS {VIEWS['w']}")
    con.execute(f"CREATE INDEX w_by_a ON w (a) {RETAINED}")
    con.execute(f"CREATE VIEW pv AS {VIEWS['pv']}")
    return con


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=12), st.data())
def test_reads_as_of_past_times_equal_duckdb_within_retention(history: list, data) -> None:  # noqa: ANN001
    con, oracle = retained_session(), Recorder()
    now = oracle.run(con, history)
    times = sorted(set(data.draw(st.lists(st.integers(0, now), min_size=1, max_size=4))))
    for t in times:
        for query in QUERIES:
            got = Counter(con.execute(f"{query} AS OF {t}").fetchall())
            assert got == oracle.answer(query, t), f"{query} AS OF {t} (now {now})"


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=12), st.data())
def test_subscribe_as_of_a_past_time_replays_every_change_since(history: list, data) -> None:  # noqa: ANN001
    con, oracle = retained_session(), Recorder()
    now = oracle.run(con, history)
    start = data.draw(st.integers(0, now))
    query = data.draw(st.sampled_from(QUERIES))
    cur = con.execute(f"SUBSCRIBE ({query}) AS OF {start}")
    changes = cur.fetchall()
    assert all(start <= row[0] <= now for row in changes)
    for t in sorted({start, now, *data.draw(st.lists(st.integers(start, now), max_size=3))}):
        held: Counter = Counter()
        for ms, diff, *row in changes:
            if ms <= t:
                held[tuple(row)] += diff
        held = Counter({row: n for row, n in held.items() if n})
        assert held == oracle.answer(query, t), f"SUBSCRIBE ({query}) AS OF {start} at {t}"


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=12), st.data())
def test_without_retention_a_past_read_is_exact_or_refused(history: list, data) -> None:  # noqa: ANN001
    con, oracle = dsql.connect(kernel="local"), Recorder()
    for name, cols in TABLES.items():
        con.execute(f"CREATE TABLE {name} ({cols})")
    con.execute(f"CREATE MATERIALIZED VIEW m AS {VIEWS['m']}")
    con.execute(f"CREATE VIEW pv AS {VIEWS['pv']}")
    now = oracle.run(con, history)
    for t in sorted(set(data.draw(st.lists(st.integers(0, now), min_size=1, max_size=4)))):
        for query in ("SELECT * FROM r", "SELECT * FROM m", "SELECT * FROM pv"):
            try:
                got = Counter(con.execute(f"{query} AS OF {t}").fetchall())
            except TimeError as error:
                assert "is not valid for all inputs" in str(error) and error.hint
                continue
            assert got == oracle.answer(query, t), f"{query} AS OF {t} (now {now})"


def test_a_time_behind_an_input_since_is_refused_with_the_earliest_valid_time() -> None:
    con = dsql.connect(kernel="local")
    con.execute(f"CREATE TABLE kept (a int) {RETAINED}")
    con.execute("CREATE TABLE t (a int)")
    for ms in (10, 20):
        con.execute("INSERT INTO t VALUES (1)")
        con.execute("INSERT INTO kept VALUES (1)")
        con.execute(f"ADVANCE TO {ms}")
    with pytest.raises(TimeError) as info:
        con.execute("SELECT * FROM t AS OF 5")
    message = str(info.value)
    assert "Timestamp (5) is not valid for all inputs: 't' can be read AS OF 20" in message
    assert "RETAIN HISTORY" in info.value.hint and info.value.statement
    with pytest.raises(TimeError, match="'t'"):  # a join names the input that lacks history
        con.execute("SELECT * FROM kept, t AS OF 12")
    assert con.execute("SELECT count(*) FROM kept AS OF 5").fetchall() == [(1,)]
    assert con.execute("SELECT count(*) FROM t AS OF 20").fetchall() == [(2,)]
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(2,)]  # still usable


def test_an_index_with_history_keeps_its_relation_readable() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int, b int)")
    con.execute(f"CREATE INDEX t_a ON t (a) {RETAINED}")
    for ms in (10, 20, 30):
        con.execute(f"INSERT INTO t VALUES ({ms}, {ms})")
        con.execute(f"ADVANCE TO {ms}")
    assert sorted(con.execute("SELECT a FROM t AS OF 15").fetchall()) == [(10,), (20,)]
    con.execute("DROP INDEX t_a")  # its history goes with it
    with pytest.raises(TimeError, match="'t' can be read AS OF 20"):
        con.execute("SELECT a FROM t AS OF 15")


def test_before_creation_is_not_a_valid_time() -> None:
    con = dsql.connect(kernel="local")
    con.execute("ADVANCE TO 50")
    con.execute(f"CREATE TABLE t (a int) {RETAINED}")
    con.execute("ADVANCE TO 60")
    with pytest.raises(TimeError, match="AS OF 50 or later"):
        con.execute("SELECT * FROM t AS OF 40")
    assert con.execute("SELECT * FROM t AS OF 50").fetchall() == []


def test_the_window_lags_the_clock() -> None:
    con, oracle = dsql.connect(kernel="local"), Recorder()
    con.execute("CREATE TABLE r (a int, b int) WITH (RETAIN HISTORY FOR '10ms')")
    for ms in range(0, 101, 5):
        con.execute(f"ADVANCE TO {ms}")
        sql = f"INSERT INTO r VALUES ({ms % 3}, {ms})"
        con.execute(sql)
        oracle.current.execute(sql)
        oracle.record(ms)
        if ms % 20 == 0:
            con.execute(f"DELETE FROM r WHERE a = {ms % 3}")
            oracle.current.execute(f"DELETE FROM r WHERE a = {ms % 3}")
            oracle.record(ms)
    con.execute("ADVANCE TO 101")
    for t in (91, 95, 100):  # within the window: exact
        assert Counter(con.execute(f"SELECT * FROM r AS OF {t}").fetchall()) == oracle.answer(
            "SELECT * FROM r", t
        )
    with pytest.raises(TimeError, match="not valid for all inputs"):  # long compacted
        con.execute("SELECT * FROM r AS OF 50")


def test_subscribe_as_of_needs_history_and_no_loop() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int)")
    con.execute(f"CREATE TABLE kept (a int) {RETAINED}")
    for ms in (10, 20):
        con.execute("INSERT INTO t VALUES (1)")
        con.execute("INSERT INTO kept VALUES (1)")
        con.execute(f"ADVANCE TO {ms}")
    with pytest.raises(TimeError, match="'t' can be read AS OF 20"):
        con.execute("SUBSCRIBE t AS OF 5")
    loop = "WITH RECURSIVE r(n) AS (SELECT a FROM kept UNION SELECT n + 1 FROM r WHERE n < 3)"
    with pytest.raises(UnsupportedError, match="recursive"):
        con.execute(f"SUBSCRIBE ({loop} SELECT * FROM r) AS OF 5")
    rows = con.execute("SUBSCRIBE kept WITH (SNAPSHOT = false) AS OF 5").fetchall()
    assert rows == [(10, 1, 1)]
    assert con.execute(f"SUBSCRIBE ({loop} SELECT * FROM r) AS OF 20").fetchall() == [
        (20, 1, 1),
        (20, 1, 2),
        (20, 1, 3),
    ]


def test_mz_now_in_a_read_as_of_is_that_time() -> None:
    con = dsql.connect(kernel="local")
    con.execute(f"CREATE TABLE ev (id int, until bigint) {RETAINED}")
    con.execute("INSERT INTO ev VALUES (1, 15), (2, 30)")
    con.execute("CREATE VIEW live AS SELECT id FROM ev WHERE mz_now() < until")
    con.execute("ADVANCE TO 40")
    assert con.execute("SELECT mz_now(), count(*) FROM ev AS OF 10").fetchall() == [(10, 2)]
    assert sorted(con.execute("SELECT * FROM live AS OF 10").fetchall()) == [(1,), (2,)]
    assert con.execute("SELECT * FROM live AS OF 20").fetchall() == [(2,)]
    assert con.execute("SELECT id FROM ev WHERE mz_now() < until AS OF 20").fetchall() == [(2,)]
    assert con.execute("SELECT * FROM live").fetchall() == []


@pytest.mark.parametrize(
    ("sql", "error", "text"),
    [
        ("CREATE TABLE x (a int) WITH (RETAIN HISTORY FOR 'soon')", TypeMismatchError, "soon"),
        ("CREATE TABLE x (a int) WITH (KEEP = 1)", ParseError, "unknown CREATE TABLE option"),
        ("CREATE VIEW x WITH (RETAIN HISTORY FOR '1h') AS SELECT 1", ParseError, "materialized"),
        ("SELECT 1 AS OF 99", Exception, "future"),
        ("SELECT 1 AS OF NOT NOT 0", TypeMismatchError, "is not a time"),  # a boolean
        ("SELECT 1 AS OF 0 - 5", TypeMismatchError, "negative"),
    ],
)
def test_retention_errors(sql: str, error: type, text: str) -> None:
    con = dsql.connect(kernel="local")
    with pytest.raises(error) as info:
        con.execute(sql)
    assert text in str(info.value) and info.value.hint  # type: ignore[attr-defined]
    assert con.execute("SHOW TABLES").fetchall() == []
