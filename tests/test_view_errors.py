"""Errors that heal: a materialized view is in error exactly while its query fails.

Random histories of inserts and deletes, some of whose rows make a view's query fail
(division by zero, integer overflow), are checked step by step against the queries
evaluated from scratch in Python with PostgreSQL's rules: where the from-scratch query
fails, reading the view fails; elsewhere the view holds exactly its rows, and a
subscription's updates accumulate to them.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsql
from dsql.errors import (
    DsqlError,
    DsqlWarning,
    ExecutionError,
    QueryCanceledError,
    RecursionLimitError,
    SchemaError,
)
from dsql.heal import is_data_error, view_error

INT4 = (-(2**31), 2**31 - 1)
ROW = st.tuples(st.sampled_from([-3, -1, 0, 2, 7, INT4[1]]), st.sampled_from([0, 1, 2, -1, 5]))
#: A step: insert a row, or delete every copy of a row drawn among those inserted so far.
STEP = st.tuples(st.sampled_from(["insert", "insert", "delete"]), ROW, st.integers(0, 20))

VIEWS = {
    "q": "SELECT a, a / b AS q FROM t",
    "r": "SELECT a + b AS r FROM t WHERE a > 0",
    "agg": "SELECT count(*) AS n, sum(q) AS s FROM q",
}


class Fails(Exception):
    """The from-scratch query fails (PostgreSQL raises an error)."""


def _div(a: int, b: int) -> int:
    if b == 0:
        raise Fails("division by zero")
    q = abs(a) // abs(b)  # PostgreSQL truncates toward zero
    return q if (a >= 0) == (b > 0) else -q


def _int4(v: int) -> int:
    if not INT4[0] <= v <= INT4[1]:
        raise Fails("integer out of range")
    return v


def expected(rows: Counter[tuple[int, int]]) -> dict[str, Counter[tuple[Any, ...]] | None]:
    """Each view's rows from scratch, None where its query fails."""
    out: dict[str, Counter[tuple[Any, ...]] | None] = {}
    try:
        q = Counter()
        for (a, b), n in rows.items():  # rows of one quotient add up: not a dict of them
            q[(a, _div(a, b))] += n
    except Fails:
        q = None
    out["q"] = q
    try:
        r: Counter[tuple[Any, ...]] = Counter()
        for (a, b), n in rows.items():
            if a > 0:
                r[(_int4(a + b),)] += n
        out["r"] = r
    except Fails:
        out["r"] = None
    if q is None:
        out["agg"] = None
    else:
        total = sum(q.values())
        s = sum(v * n for (_, v), n in q.items()) if total else None
        out["agg"] = Counter({(total, s): 1})
    return out


def read(con: Any, sql: str) -> Counter[tuple[Any, ...]] | None:
    """The rows of a read, None when it raises the view's error."""
    try:
        return Counter(con.execute(sql).fetchall())
    except ExecutionError as error:
        causes = ("is in error", "failed", "out of range", "division by zero")
        assert any(cause in str(error) for cause in causes), error
        return None


def run_history(kernel: str, steps: list[tuple[str, tuple[int, int], int]]) -> None:
    con = dsql.connect(kernel=kernel)
    con.execute("CREATE TABLE t (a int, b int)")
    con.execute("INSERT INTO t VALUES (1, 1)")
    rows: Counter[tuple[int, int]] = Counter({(1, 1): 1})
    for name, sql in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    subs = {name: con.execute(f"SUBSCRIBE {name}") for name in ("q", "agg")}
    seen: dict[str, Counter[tuple[Any, ...]]] = {name: Counter() for name in subs}
    inserted = [(1, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DsqlWarning)
        for kind, row, pick in steps:
            before = expected(rows)
            if kind == "insert":
                con.execute("INSERT INTO t VALUES (?, ?)", row)
                rows[row] += 1
                inserted.append(row)
            else:
                row = inserted[pick % len(inserted)]
                con.execute("DELETE FROM t WHERE a = ? AND b = ?", row)
                rows.pop(row, None)
            now = expected(rows)
            for name, sql in VIEWS.items():
                want = now[name]
                assert read(con, f"SELECT * FROM {name}") == want, (name, rows)
                assert read(con, sql) == want, (name, "from scratch", rows)
            for name, cur in subs.items():
                try:
                    for update in cur.fetchall():
                        diff, values = update[1], update[2:]
                        seen[name][values] += diff
                except ExecutionError:
                    assert now[name] is None
                    continue
                assert now[name] is not None
                assert +seen[name] == now[name], (name, before[name], now[name])
                assert all(n > 0 for n in seen[name].values() if n)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=1, max_size=8))
def test_views_follow_their_queries_errors_included(steps: list[Any]) -> None:
    run_history("local", steps)


@pytest.mark.usefixtures("spark")
def test_views_heal_on_spark() -> None:
    """Spark (ANSI mode: division by zero and overflow raise) in error and healed alike."""
    run_history(
        "spark",
        [
            ("insert", (7, 0), 0),
            ("insert", (2, 2), 0),
            ("insert", (INT4[1], 5), 0),
            ("delete", (0, 0), 1),
            ("delete", (0, 0), 3),
            ("insert", (-3, -1), 0),
        ],
    )


# --- the statement's notice -------------------------------------------------------------------


def _session() -> Any:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int, b int)")
    con.execute("INSERT INTO t VALUES (6, 2)")
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT a / b AS q FROM t")
    return con


def _round(con: Any, sql: str, match: str = "'v' is in error") -> Any:
    """Run `sql`, a write whose round puts a view in error (or heals it): it says so."""
    with pytest.warns(DsqlWarning, match=match):
        return con.execute(sql)


def test_the_write_succeeds_and_has_the_notice_as_has_the_write_that_heals() -> None:
    con = _session()
    match = "materialized view 'v' is in error: .*[Dd]ivision"
    cur = _round(con, "INSERT INTO t VALUES (1, 0)", match=match)
    assert cur.rowcount == 1 and len(cur.notices) == 1
    cur = con.execute("SELECT * FROM t")
    assert sorted(cur.fetchall()) == [(1, 0), (6, 2)] and cur.notices == []  # durable
    with pytest.raises(ExecutionError, match="materialized view 'v' is in error") as error:
        con.execute("SELECT * FROM v")
    assert "recovers" in (error.value.hint or "")
    cur = _round(con, "DELETE FROM t WHERE b = 0", match="'v' is no longer in error")
    assert cur.notices == ["materialized view 'v' is no longer in error"]
    assert con.execute("SELECT * FROM v").fetchall() == [(3,)]


def test_executemany_delivers_its_writes_once_and_has_the_notice() -> None:
    con = _session()
    with pytest.warns(DsqlWarning, match="'v' is in error"):
        cur = con.executemany("INSERT INTO t VALUES (?, ?)", [(1, 0), (2, 1)])
    assert cur.rowcount == 2
    assert [n.split(":")[0] for n in cur.notices] == ["materialized view 'v' is in error"]
    con.execute("UPDATE t SET b = 1 WHERE b = 0")
    assert sorted(con.execute("SELECT * FROM v").fetchall()) == [(1,), (2,), (3,)]


def test_the_cli_prints_the_notices(tmp_path: Any, capsys: Any) -> None:
    from tests.test_examples import run_cli

    path = tmp_path / "s.sql"
    path.write_text(
        "CREATE TABLE t (a int, b int);\n"
        "CREATE MATERIALIZED VIEW v AS SELECT a / b AS q FROM t;\n"
        "INSERT INTO t VALUES (1, 0);\n"
        "DELETE FROM t;\n"
        "INSERT INTO t VALUES (4, 2);\n"
        "SELECT * FROM v;\n"
    )
    code, out, err = run_cli(capsys, "run", str(path))
    assert code == 0
    notices = [line for line in err.splitlines() if line.startswith("NOTICE:")]
    assert [n.split(":")[1].strip() for n in notices] == [
        "materialized view 'v' is in error",
        "materialized view 'v' is no longer in error",
    ]
    assert out.rstrip().splitlines()[-4:] == [" q", "---", " 2", "(1 row)"]


# --- what reads a view in error ---------------------------------------------------------------


def test_views_and_indexes_over_a_view_in_error_follow_it() -> None:
    con = _session()
    con.execute("CREATE MATERIALIZED VIEW w AS SELECT q * 10 AS p FROM v")
    con.execute("CREATE VIEW pv AS SELECT q + 1 AS r FROM v")
    con.execute("CREATE INDEX v_idx ON v (q)")
    con.execute("CREATE INDEX pv_idx ON pv (r)")
    _round(con, "INSERT INTO t VALUES (5, 0), (8, 4)")
    for sql in ("SELECT * FROM w", "SELECT * FROM pv", "SELECT * FROM v WHERE q = 3"):
        with pytest.raises(ExecutionError, match="'v' is in error"):
            con.execute(sql)
    with pytest.raises(ExecutionError, match="'v' is in error"):
        con.execute("CREATE MATERIALIZED VIEW x AS SELECT * FROM v")
    con.execute("DELETE FROM t WHERE a = 5")
    assert sorted(con.execute("SELECT * FROM w").fetchall()) == [(20,), (30,)]
    assert sorted(con.execute("SELECT * FROM pv").fetchall()) == [(3,), (4,)]
    assert con.execute("SELECT * FROM v WHERE q = 3").fetchall() == [(3,)]
    con.execute("INSERT INTO t VALUES (10, 2)")
    assert sorted(con.execute("SELECT * FROM w").fetchall()) == [(20,), (30,), (50,)]


def test_subscribe_reports_the_error_then_continues_with_exact_diffs() -> None:
    con = _session()
    cur = con.execute("SUBSCRIBE v")
    assert cur.fetchall() == [(0, 1, 3)]
    con.execute("ADVANCE TO 10")
    _round(con, "INSERT INTO t VALUES (1, 0), (9, 3)")
    con.execute("ADVANCE TO 20")
    with pytest.raises(ExecutionError, match="'v' is in error"):
        cur.fetchall()
    con.execute("DELETE FROM t WHERE b = 0")
    con.execute("ADVANCE TO 30")
    # The change across the error period arrives once, at the healing time.
    assert cur.fetchall() == [(20, 1, 3)]
    con.execute("DELETE FROM t WHERE a = 6")
    con.execute("ADVANCE TO 40")
    assert cur.fetchall() == [(30, -1, 3)]


def test_as_of_reads_across_the_error_period() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int, b int)")
    con.execute("INSERT INTO t VALUES (6, 2)")
    con.execute(
        "CREATE MATERIALIZED VIEW v WITH (RETAIN HISTORY FOR '1h') AS SELECT a / b AS q FROM t"
    )
    con.execute("ADVANCE TO 10")
    _round(con, "INSERT INTO t VALUES (1, 0)")
    con.execute("ADVANCE TO 20")
    con.execute("DELETE FROM t WHERE b = 0")
    con.execute("INSERT INTO t VALUES (8, 2)")
    con.execute("ADVANCE TO 30")
    assert con.execute("SELECT * FROM v AS OF 5").fetchall() == [(3,)]
    for ms in (10, 15):
        with pytest.raises(ExecutionError, match="'v' is in error"):
            con.execute(f"SELECT * FROM v AS OF {ms}")
    assert sorted(con.execute("SELECT * FROM v AS OF 25").fetchall()) == [(3,), (4,)]
    assert sorted(con.execute("SELECT * FROM v").fetchall()) == [(3,), (4,)]


def test_drop_of_a_view_in_error_and_a_failing_select_leave_nothing() -> None:
    con = _session()
    session = con.session
    _round(con, "INSERT INTO t VALUES (1, 0)")
    con.execute("DROP MATERIALIZED VIEW v")
    assert session.healing.periods == {}
    live = sum(n is not None for n in session.worker.nodes)
    with pytest.raises(DsqlError, match="[Dd]ivision by zero"):
        con.execute("SELECT a / b FROM t")
    assert sum(n is not None for n in session.worker.nodes) == live
    assert not session.worker.failed
    con.execute("DELETE FROM t WHERE b = 0")
    assert con.execute("SELECT a / b AS q FROM t").fetchall() == [(3,)]


def test_ctrl_c_in_a_round_is_no_error_of_the_view() -> None:
    con = _session()
    session = con.session
    worker = session.worker

    def interrupt(node: Any) -> None:
        worker.on_step = None
        raise KeyboardInterrupt

    con.execute("BEGIN")
    con.execute("INSERT INTO t VALUES (8, 2)")  # its round runs at the next read
    worker.on_step = interrupt
    with pytest.raises(KeyboardInterrupt):
        con.execute("SELECT * FROM v")
    con.execute("COMMIT")
    assert session.healing.error("v") is None
    assert not worker.failed


def test_a_subscription_whose_own_query_fails_ends_with_the_error() -> None:
    con = _session()
    cur = con.execute("SUBSCRIBE (SELECT b / a AS p FROM t)")
    assert cur.fetchall() == [(0, 1, 0)]
    con.execute("INSERT INTO t VALUES (0, 1)")
    with pytest.raises(ExecutionError, match="SUBSCRIBE failed: .*[Dd]ivision by zero"):
        cur.fetchall()
    assert cur._subscription.closed


def test_a_canceled_statement_is_no_error_of_the_views_its_round_ran() -> None:
    con = _session()
    con.execute("BEGIN")
    con.execute("INSERT INTO t VALUES (8, 2)")  # its round runs in the statement timing out
    con.execute("SET statement_timeout = '200ms'")
    loop = "WITH RECURSIVE r(n) AS (SELECT a FROM t UNION ALL SELECT n + 1 FROM r)"
    with pytest.raises(QueryCanceledError):
        con.execute(f"{loop} SELECT max(n) FROM r")
    con.execute("SET statement_timeout = 0")
    con.execute("COMMIT")
    assert con.session.healing.error("v") is None
    assert sorted(con.execute("SELECT * FROM v").fetchall()) == [(3,), (4,)]


def test_only_data_errors_heal() -> None:
    """An engine's refusal of a value heals once the value is gone; any other failure of
    a kept view is dsql's own, and the view stays in error until it is dropped."""
    assert is_data_error(ExecutionError("DuckDB failed: Division by zero"))
    assert is_data_error(RecursionLimitError("loop 'r' did not converge"))
    assert not is_data_error(SchemaError("unknown column: _c9"))
    assert "recovers" in (view_error("v", ExecutionError("x")).hint or "")
    assert "bug" in (view_error("v", SchemaError("x")).hint or "")


def test_an_index_on_a_plain_view_whose_query_fails_refuses_reads_then_heals() -> None:
    """The index maintains its view: while the view's query fails its reads are refused
    (not answered from rows that stopped following the view); once the rows go it heals."""
    con = _session()
    con.execute("CREATE VIEW pv AS SELECT 12 / b AS x FROM t")
    con.execute("CREATE INDEX pv_idx ON pv (x)")
    _round(con, "INSERT INTO t VALUES (1, 0)", match="index 'pv_idx' is in error: .*[Dd]ivision")
    for sql in ("SELECT * FROM pv", "SELECT * FROM pv WHERE x = 6"):
        with pytest.raises(ExecutionError, match="index 'pv_idx' on 'pv' is in error"):
            con.execute(sql)
    _round(con, "DELETE FROM t WHERE b = 0", match="index 'pv_idx' is no longer in error")
    assert con.execute("SELECT * FROM pv WHERE x = 6").fetchall() == [(6,)]
    con.execute("DROP INDEX pv_idx")
    assert con.execute("SELECT * FROM pv").fetchall() == [(6,)]


def test_a_loop_past_its_recursion_limit_heals_too() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE e (s int, d int)")
    con.execute("INSERT INTO e VALUES (1, 2)")
    con.execute(
        "CREATE MATERIALIZED VIEW lim AS WITH MUTUALLY RECURSIVE (ERROR AT RECURSION LIMIT 5) "
        "c(n int) AS (SELECT s FROM e UNION SELECT n + 1 FROM c WHERE n < (SELECT max(d) "
        "FROM e)) SELECT * FROM c"
    )
    _round(
        con, "INSERT INTO e VALUES (50, 60)", match="'lim' is in error: loop 'c' did not converge"
    )
    with pytest.raises(ExecutionError, match="'lim' is in error"):
        con.execute("SELECT * FROM lim")
    con.execute("DELETE FROM e WHERE s = 50")
    assert sorted(con.execute("SELECT * FROM lim").fetchall()) == [(1,), (2,)]
