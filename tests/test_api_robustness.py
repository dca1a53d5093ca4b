"""The API under hostile input: parameters of every type, several statements in one call,
deeply nested expressions, Ctrl-C in the middle of a statement. Each refusal is a
`dsql.Error` with a hint, and the session stays usable with its tables and views intact."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import subprocess
import sys
import textwrap

import pytest

import dsql


@pytest.fixture
def con():
    connection = dsql.connect(kernel="local")
    yield connection
    connection.close()


# --- parameters -------------------------------------------------------------------------

TRICKY_TEXT = [
    "it's",
    "a -- not a comment",
    "/* nor this */",
    "$$ dollar $$",
    "$tag$ x $tag$",
    "? and ?",
    "back\\slash\\",
    "\\x41",
    "E'\\n'",
    "\n\t\r",
    "ünïcødé ✓",
    "",
    "'; DROP TABLE t; --",
]

VALUES_BY_TYPE = {
    "double precision": [math.inf, -math.inf, math.nan, 0.1, -2.5e-300, 1e308, -0.0],
    "text": TRICKY_TEXT,
    "bytea": [b"\x00\x01\xff", b"it's -- /* */ $$ ?", b"", bytearray(b"\\x")],
    "date": [dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.date(9999, 12, 31)],
    "timestamp": [dt.datetime(2024, 1, 2, 3, 4, 5, 123456), dt.datetime(1970, 1, 1)],
    "numeric(20,5)": [decimal.Decimal("12345.67891"), decimal.Decimal("-0.00001")],
    "boolean": [True, False],
    "bigint": [-(2**63), 2**63 - 1, 0, -1],
}


def _same(a, b) -> bool:
    if isinstance(b, float) and math.isnan(b):
        return isinstance(a, float) and math.isnan(a)
    if isinstance(b, bytearray):
        b = bytes(b)
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("sql_type", sorted(VALUES_BY_TYPE))
def test_parameters_round_trip_exactly_through_insert_and_where(con, sql_type):
    values = VALUES_BY_TYPE[sql_type]
    con.execute(f"CREATE TABLE t (k int, v {sql_type})")
    rows = [(k, v) for k, v in enumerate(values)] + [(len(values), None)]
    assert con.executemany("INSERT INTO t VALUES (?, ?)", rows).rowcount == len(rows)
    got = [v for (v,) in con.execute("SELECT v FROM t ORDER BY k").fetchall()]
    assert all(_same(a, b) for a, b in zip(got, [*values, None], strict=True)), got
    for k, v in enumerate(values):
        if isinstance(v, float) and math.isnan(v):
            continue  # NaN = NaN is true in PostgreSQL, but a float key is no use here
        assert con.execute("SELECT k FROM t WHERE v = ?", (v,)).fetchall() == [(k,)]
        (echo,) = con.execute("SELECT ? AS v", (v,)).fetchone()
        assert _same(echo, v)
    assert con.execute("SELECT k FROM t WHERE v IS NOT DISTINCT FROM ?", (None,)).fetchall() == [
        (len(values),)
    ]


def test_parameters_bind_in_the_order_written_across_clauses(con):
    con.execute("CREATE TABLE t (a int, b text)")
    con.execute("INSERT INTO t VALUES (?, ?), (?, ?)", (1, "?", 2, "--"))
    con.execute("UPDATE t SET b = ? WHERE a = ?", ("it's", 2))
    assert con.execute(
        "SELECT a, b, ? AS c FROM t /* ? */ WHERE a >= ? AND b <> '??' ORDER BY a LIMIT ?",
        ("x", 1, 5),
    ).fetchall() == [(1, "?", "x"), (2, "it's", "x")]
    con.execute("DELETE FROM t WHERE b = ?", ("?",))
    assert con.execute("SELECT a FROM t").fetchall() == [(2,)]


def test_parameters_in_queries_of_cursors_and_tables_but_not_in_definitions(con):
    con.execute("CREATE TABLE t (a int, b text DEFAULT 'x')")
    con.execute("INSERT INTO t (a) VALUES (?), (?)", (1, 5))
    con.execute("CREATE TABLE u AS SELECT a FROM t WHERE a > ?", (2,))
    assert con.execute("SELECT a FROM u").fetchall() == [(5,)]
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE (SELECT a FROM t WHERE a < ?)", (3,))
    assert [r[2:] for r in con.execute("FETCH ALL c").fetchall()] == [(1,)]
    for sql in (
        "CREATE MATERIALIZED VIEW v AS SELECT a FROM t WHERE a > ?",
        "CREATE VIEW v AS SELECT ? AS a",
        "CREATE INDEX i ON t (a + ?)",
    ):
        with pytest.raises(dsql.ProgrammingError, match="parameters are not allowed") as info:
            con.execute(sql, (1,))
        assert info.value.hint
    assert con.execute("SHOW VIEWS").fetchall() == []
    with pytest.raises(dsql.InterfaceError, match="takes no expression"):
        con.execute("SET statement_timeout = ?", ("1s",))


def test_a_parameter_is_a_value_never_sql(con):
    con.execute("CREATE TABLE t (a text)")
    evil = "x'); DROP TABLE t; --"
    con.execute("INSERT INTO t VALUES (?)", (evil,))
    assert con.execute("SELECT a FROM t").fetchall() == [(evil,)]


@pytest.mark.parametrize(
    ("sql", "params", "message"),
    [
        ("SELECT ? + ?", (1,), "2 ? placeholders but 1 parameters"),
        ("SELECT ?", (1, 2), "1 ? placeholders but 2 parameters"),
        ("SELECT ?", None, "1 ? placeholders but 0 parameters"),
        ("SELECT ?", (), "1 ? placeholders but 0 parameters"),
        ("SELECT 1", (1,), "0 ? placeholders but 1 parameters"),
        ("SELECT ?", {"a": 1}, "must be a sequence"),
        ("SELECT ?", "ab", "must be a sequence"),
        ("SELECT ?", (object(),), "cannot bind a parameter of type object"),
        ("-- nothing", (1,), "empty but 1 parameters"),
    ],
)
def test_parameter_mismatches_are_pep249_errors(con, sql, params, message):
    with pytest.raises(dsql.InterfaceError, match=re.escape(message)) as info:
        con.execute(sql, params)
    assert isinstance(info.value, dsql.ProgrammingError)
    assert info.value.hint
    assert con.execute("SELECT 1").fetchall() == [(1,)]


def test_executemany_checks_every_parameter_row(con):
    con.execute("CREATE TABLE t (a int)")
    with pytest.raises(dsql.InterfaceError):
        con.executemany("INSERT INTO t VALUES (?)", [(1,), (2, 3)])
    assert con.execute("SELECT a FROM t").fetchall() == [(1,)]  # rows before it applied
    assert con.executemany("INSERT INTO t VALUES (?)", []).rowcount == 0


# --- one statement per call -----------------------------------------------------------


def test_execute_refuses_several_statements(con):
    con.execute("CREATE TABLE t (a int)")
    with pytest.raises(dsql.ProgrammingError, match="one statement") as info:
        con.execute("INSERT INTO t VALUES (1); DROP TABLE t")
    assert "dsql run" in info.value.hint
    assert info.value.position == (1, 27)
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(0,)]  # nothing ran


@pytest.mark.parametrize(
    "sql",
    ["SELECT 1;", "SELECT 1 ; ", "-- c\nSELECT 1 /* ; */ ; -- d", "SELECT ';' = ';'"],
)
def test_a_trailing_semicolon_and_comments_are_one_statement(con, sql):
    assert len(con.execute(sql).fetchall()) == 1


def test_a_nul_character_is_refused_not_a_separator(con):
    con.execute("CREATE TABLE t (a int)")
    for sql in ("INSERT INTO t VALUES (1)\x00; DROP TABLE t", "SELECT 1\x00", "\x00"):
        with pytest.raises(dsql.ProgrammingError, match="NUL") as info:
            con.execute(sql)
        assert info.value.hint
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(0,)]


def test_the_cli_still_runs_scripts(tmp_path):
    script = tmp_path / "s.sql"
    script.write_text(
        "CREATE TABLE t (a int);\nINSERT INTO t VALUES (1), (2);\nSELECT sum(a) FROM t;\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "dsql.cli", "run", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "3" in out.stdout


# --- deep nesting -----------------------------------------------------------------------

DEEP = {
    "5000 ANDs": "SELECT 1 WHERE " + " AND ".join(["true"] * 5000),
    "5000 ORs": "SELECT count(*) FROM t WHERE " + " OR ".join(f"a = {i}" for i in range(5000)),
    "3000 parentheses": "SELECT " + "(" * 3000 + "1" + ")" * 3000,
    "2000 additions": "SELECT " + " + ".join(["a"] * 2000) + " FROM t",
    "1000 nested functions": "SELECT " + "abs(" * 1000 + "a" + ")" * 1000 + " FROM t",
    "300 nested subqueries": "SELECT " + "(SELECT " * 300 + "1" + ")" * 300,
    "1000 nested CASEs": "SELECT " + "CASE WHEN a > 0 THEN " * 1000 + "1" + " END" * 1000,
    "1000 UNION ALLs": "SELECT a FROM t" + " UNION ALL SELECT a FROM t" * 1000,
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deep_nesting_is_refused_or_answered_never_a_crash(con, name):
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT sum(a) AS s FROM t")
    try:
        rows = con.execute(DEEP[name]).fetchall()
    except dsql.Error as error:
        assert "too deeply nested" in error.message
        assert error.hint
    else:
        assert rows
    con.execute("INSERT INTO t VALUES (3)")
    assert con.execute("SELECT s FROM v").fetchall() == [(6,)]


@pytest.mark.parametrize("name", ["5000 ANDs", "5000 ORs"])
def test_long_flat_lists_are_answered(con, name):
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    assert con.execute(DEEP[name]).fetchall()


def test_deep_expressions_in_a_view_are_refused_or_maintained(con):
    con.execute("CREATE TABLE t (a int)")
    with pytest.raises(dsql.Error, match="too deeply nested"):
        con.execute("CREATE MATERIALIZED VIEW v AS " + DEEP["2000 additions"])
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT " + " + ".join(["a"] * 300) + " AS s FROM t")
    con.execute("INSERT INTO t VALUES (1)")
    assert con.execute("SELECT s FROM v").fetchall() == [(300,)]


def test_reasonable_large_expressions_still_work(con):
    con.execute("CREATE TABLE t (a int)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    in_list = ", ".join(str(i) for i in range(0, 2000, 2))
    assert con.execute(f"SELECT count(*) FROM t WHERE a IN ({in_list})").fetchall() == [(5,)]
    conjunction = " AND ".join(f"a <> {i}" for i in range(100, 300))
    assert con.execute(f"SELECT count(*) FROM t WHERE {conjunction}").fetchall() == [(10,)]
    nested = "SELECT " + "(SELECT " * 100 + "max(a) FROM t" + ")" * 100
    assert con.execute(nested).fetchall() == [(9,)]
    parens = "SELECT " + "(" * 300 + "a" + ")" * 300 + " FROM t WHERE a = 3"
    assert con.execute(parens).fetchall() == [(3,)]
    union = "SELECT count(*) FROM (SELECT a FROM t" + " UNION ALL SELECT a FROM t" * 199 + ") u"
    assert con.execute(union).fetchall() == [(2000,)]


def test_compile_refuses_deep_nesting_too():
    with pytest.raises(dsql.Error, match="too deeply nested"):
        dsql.compile(DEEP["2000 additions"], {"t": {"a": "int"}})
    sql = "SELECT " + " + ".join(["a"] * 350) + " AS s FROM t"
    assert dsql.compile(sql, {"t": {"a": "int"}}).columns == [("s", "int")]


# --- Ctrl-C -----------------------------------------------------------------------------

CTRL_C = textwrap.dedent(
    """
    import os, signal, threading, dsql

    con = dsql.connect(kernel="local")
    con.session.deliver_writes = False  # writes reach the view in the next statement's round
    con.execute("CREATE TABLE t (a int)")
    con.execute(
        "CREATE MATERIALIZED VIEW v AS SELECT a % 7 AS k, count(*) AS n, sum(g) AS s "
        "FROM t, generate_series(1, 300000) AS g GROUP BY a % 7"
    )

    def expected(values):
        out = {}
        for a in values:
            n, s = out.get(a % 7, (0, 0))
            out[a % 7] = (n + 300000, s + 300000 * 300001 // 2)
        return sorted((k, n, s) for k, (n, s) in out.items())

    def check(values):
        assert sorted(con.execute("SELECT a FROM t").fetchall()) == [(a,) for a in sorted(values)]
        assert con.execute("SELECT k, n, s FROM v ORDER BY k").fetchall() == expected(values)

    def interrupted(sql):
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            con.execute(sql)
        except KeyboardInterrupt:
            print("interrupted")
        timer.join()

    values = list(range(1, 41))
    con.execute("INSERT INTO t SELECT * FROM generate_series(1, 40)")
    # The view's maintenance of those rows runs inside the next statement that reads: an
    # INSERT ... SELECT, interrupted in the middle of that round.
    interrupted("INSERT INTO t SELECT a + 100 FROM t")
    check(values)  # the INSERT did not apply; the view equals its query
    con.execute("INSERT INTO t VALUES (1000)")
    check(values + [1000])
    # Interrupting a read of the view while it maintains new rows: the read stops, the
    # view stays maintained.
    con.execute("INSERT INTO t SELECT * FROM generate_series(2001, 2040)")
    interrupted("SELECT * FROM v")
    check(values + [1000] + list(range(2001, 2041)))
    # Ctrl-C outside dsql is still Python's KeyboardInterrupt.
    try:
        os.kill(os.getpid(), signal.SIGINT)
        signal.sigtimedwait([], 0.1) if hasattr(signal, "sigtimedwait") else None
        import time; time.sleep(0.2)
    except KeyboardInterrupt:
        print("plain interrupt")
    print("ok")
    """
)


def test_ctrl_c_cancels_at_a_safe_point_and_leaves_views_consistent(tmp_path):
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["interrupted", "interrupted", "plain", "interrupt", "ok"]


# --- memory budget ----------------------------------------------------------------------

CROSS = "SELECT a.x, b.x AS y FROM generate_series(1, 100000) a(x), generate_series(1, 100000) b(x)"


def test_a_query_past_the_memory_budget_stops_and_the_session_goes_on(con):
    con.execute("SET memory_limit = '200MB'")
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("CREATE MATERIALIZED VIEW s AS SELECT sum(a) AS s FROM t")
    for sql in (
        f"CREATE MATERIALIZED VIEW v AS {CROSS}",
        CROSS,
        f"SELECT count(*) FROM ({CROSS}) c",
        f"CREATE TABLE big AS {CROSS}",
        f"INSERT INTO t SELECT a.x FROM ({CROSS}) a",
    ):
        with pytest.raises(dsql.OperationalError, match="memory_limit") as info:
            con.execute(sql)
        assert "SET memory_limit" in info.value.hint
    assert con.execute("SHOW VIEWS").fetchall() == [("s", "materialized view")]
    assert con.execute("SHOW TABLES").fetchall() == [("t",)]
    con.execute("INSERT INTO t VALUES (2)")
    assert con.execute("SELECT s FROM s").fetchall() == [(3,)]
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(2,)]
    # A bigger budget lets a big (but not absurd) query through.
    con.execute("SET memory_limit = '1GB'")
    small = "SELECT count(*) FROM generate_series(1, 1000) a(x), generate_series(1, 1000) b(x)"
    assert con.execute(small).fetchall() == [(1_000_000,)]


def test_memory_limit_settings():
    from dsql.runtime.memory import default_budget, machine_bytes

    assert dsql.connect(kernel="local").session.memory_limit == default_budget()
    total = machine_bytes()
    assert total is None or default_budget() == total // 2
    con = dsql.connect(kernel="local", memory_limit="256MB")
    assert con.session.memory_limit == 256 << 20
    con.execute("SET memory_limit = '2GB'")
    assert con.session.memory_limit == 2 << 30
    assert dsql.connect(kernel="local", memory_limit=64 << 20).session.memory_limit == 64 << 20
    for bad in ("lots", "2 parsecs", "1kB", "-1GB"):
        with pytest.raises(dsql.ProgrammingError, match='parameter "memory_limit"') as info:
            con.execute(f"SET memory_limit = '{bad}'")
        assert info.value.hint
    assert con.session.memory_limit == 2 << 30
    con.execute("SET memory_limit = DEFAULT")
    assert con.session.memory_limit == default_budget()


# --- negative multiplicities ------------------------------------------------------------


def test_a_result_with_a_negative_multiplicity_is_an_error_not_rows(con):
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    with pytest.raises(dsql.DataError, match="negative multiplicity") as info:
        con.execute("SELECT a FROM t, repeat_row(-1)")
    assert "repeat_row" in info.value.hint and "bug" not in info.value.hint
    # A view whose contents hold a negative count refuses to be read while they do.
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT a FROM t, repeat_row(a - 2)")
    with pytest.raises(dsql.DataError, match="negative multiplicity"):
        con.execute("SELECT a FROM v")  # a = 1 has count -1
    live = sum(n is not None for n in con.session.worker.nodes)
    with pytest.raises(dsql.DataError, match="negative multiplicity"):
        con.execute("SUBSCRIBE v")  # its snapshot would print a row with count -1
    assert sum(n is not None for n in con.session.worker.nodes) == live  # nothing left
    con.execute("DELETE FROM t WHERE a = 1")
    assert con.execute("SELECT a FROM v").fetchall() == []
    con.execute("INSERT INTO t VALUES (4)")
    assert con.execute("SELECT a FROM v").fetchall() == [(4,), (4,)]
    # Rows whose counts cancel are fine: the result holds no negative count.
    assert (
        con.execute(
            "SELECT a FROM t UNION ALL SELECT a FROM t, repeat_row(-1) ORDER BY a"
        ).fetchall()
        == []
    )
    assert con.execute(
        "SELECT a FROM t, repeat_row(2) EXCEPT ALL SELECT a FROM t ORDER BY a"
    ).fetchall() == [(2,), (4,)]
