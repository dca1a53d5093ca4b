"""Errors that heal, continued: the statements that say so, views born in error, Ctrl-C,
a hang of DROP TABLE, keyword names, SHOW SUBSCRIPTIONS and the memory budget on Spark.

Each view is checked against its query evaluated from scratch (a one-off SELECT of the
same query over the tables as they are), so "in error" and "healed" are judged by the
same engine that a user would compare with.
"""

from __future__ import annotations

import subprocess
import threading
import warnings
from collections import Counter
from typing import Any

import pytest

import dsql
from dsql.errors import DsqlError, DsqlWarning, ExecutionError

BROKEN = "materialized view 'v' is in error: .*[Dd]ivision by zero"
HEALED = "materialized view 'v' is no longer in error"


def _connect(kernel: str = "local", **kwargs: Any) -> Any:
    con = dsql.connect(kernel=kernel, **kwargs)
    con.execute("CREATE TABLE t (a int, b int)")
    con.execute("INSERT INTO t VALUES (6, 2)")
    return con


def _quiet(con: Any, sql: str, params: Any = None) -> Any:
    """Run `sql`, expecting no notice."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DsqlWarning)
        cur = con.execute(sql, params)
    assert cur.notices == []
    return cur


def _says(con: Any, sql: str, match: str) -> Any:
    """Run `sql`, expecting its own notice matching `match`."""
    with pytest.warns(DsqlWarning, match=match):
        cur = con.execute(sql)
    assert len(cur.notices) == 1, cur.notices
    return cur


def _rows_or_error(con: Any, sql: str) -> Counter[tuple[Any, ...]] | str:
    try:
        return Counter(con.execute(sql).fetchall())
    except ExecutionError as error:
        return "division by zero" if "ivision by zero" in str(error) else str(error)


def _agrees(con: Any, view: str, query: str) -> None:
    """View `view` holds its query's rows now, or is in error exactly when it fails."""
    got = _rows_or_error(con, f"SELECT * FROM {view}")
    want = _rows_or_error(con, query)
    assert got == want, (view, got, want)


# --- 1. the write that breaks a view, and the one that heals it, say so -------------------


def test_insert_update_and_delete_each_say_when_they_break_or_heal_a_view() -> None:
    con = _connect()
    query = "SELECT a / b AS q FROM t"
    _quiet(con, f"CREATE MATERIALIZED VIEW v AS {query}")
    cur = _says(con, "INSERT INTO t VALUES (1, 0)", BROKEN)
    assert cur.rowcount == 1  # the write succeeds: acknowledged data is never lost
    assert sorted(con.execute("SELECT * FROM t").fetchall()) == [(1, 0), (6, 2)]
    _agrees(con, "v", query)
    _quiet(con, "INSERT INTO t VALUES (8, 0)")  # still in error: nothing new to say
    _quiet(con, "DELETE FROM t WHERE a = 1")  # a retry that fails again says nothing
    _agrees(con, "v", query)
    _says(con, "UPDATE t SET b = 4 WHERE b = 0", HEALED)
    _agrees(con, "v", query)
    _says(con, "UPDATE t SET b = 0 WHERE a = 8", BROKEN)
    _agrees(con, "v", query)
    _says(con, "DELETE FROM t WHERE a = 8", HEALED)
    _agrees(con, "v", query)
    _quiet(con, "INSERT INTO t VALUES (10, 5)")
    _agrees(con, "v", query)


def test_a_transaction_says_so_at_commit_and_executemany_once() -> None:
    con = _connect()
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT a / b AS q FROM t")
    _quiet(con, "BEGIN")
    _quiet(con, "INSERT INTO t VALUES (1, 0)")  # the transaction's writes share its time
    _says(con, "COMMIT", BROKEN)
    with pytest.warns(DsqlWarning, match=HEALED):
        cur = con.executemany("DELETE FROM t WHERE a = ?", [(1,), (5,)])
    assert cur.notices == [HEALED]
    _agrees(con, "v", "SELECT a / b AS q FROM t")


def test_only_the_views_a_write_breaks_say_so_and_views_over_them_follow() -> None:
    con = _connect()
    con.execute("CREATE TABLE u (x int)")
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT a / b AS q FROM t")
    con.execute("CREATE MATERIALIZED VIEW w AS SELECT q + 1 AS r FROM v")
    con.execute("CREATE MATERIALIZED VIEW ux AS SELECT 10 / x AS y FROM u")
    with pytest.warns(DsqlWarning) as caught:
        cur = con.execute("INSERT INTO u VALUES (0)")
    assert [str(w.message).split(":")[0] for w in caught] == ["materialized view 'ux' is in error"]
    assert len(cur.notices) == 1
    _quiet(con, "INSERT INTO t VALUES (4, 2)")
    _agrees(con, "w", "SELECT a / b + 1 AS r FROM t")
    _says(con, "INSERT INTO t VALUES (4, 0)", BROKEN)
    with pytest.raises(ExecutionError, match="'v' is in error"):
        con.execute("SELECT * FROM w")
    _says(con, "DELETE FROM t WHERE b = 0", HEALED)
    _agrees(con, "w", "SELECT a / b + 1 AS r FROM t")
    _says(con, "UPDATE u SET x = 5", "'ux' is no longer in error")
    _agrees(con, "ux", "SELECT 10 / x AS y FROM u")


# --- 2. views and indexes created over rows that fail them ----------------------------------


def test_a_materialized_view_over_failing_rows_is_created_in_error_then_heals() -> None:
    con = _connect()
    con.execute("INSERT INTO t VALUES (1, 0)")
    query = "SELECT a / b AS q FROM t"
    cur = _says(con, f"CREATE MATERIALIZED VIEW v AS {query}", BROKEN)
    assert cur.status == "CREATE MATERIALIZED VIEW"
    assert ("v", "materialized view") in con.execute("SHOW VIEWS").fetchall()
    _agrees(con, "v", query)
    sub = con.cursor()
    with pytest.raises(ExecutionError, match="'v' is in error"):
        sub.execute("SUBSCRIBE v")
    _says(con, "DELETE FROM t WHERE b = 0", HEALED)
    _agrees(con, "v", query)
    sub.execute("SUBSCRIBE v")
    assert [row[1:] for row in sub.fetchall()] == [(1, 3)]
    _says(con, "INSERT INTO t VALUES (2, 0)", BROKEN)
    _says(con, "DELETE FROM t WHERE b = 0", HEALED)
    con.execute("INSERT INTO t VALUES (9, 3)")
    seen: Counter[tuple[Any, ...]] = Counter()
    for _, diff, q in sub.fetchall():
        seen[(q,)] += diff
    assert +seen == Counter({(3,): 1})  # the snapshot's 3 was fetched before
    _agrees(con, "v", query)


def test_views_created_in_error_over_a_view_and_an_aggregate_heal_in_order() -> None:
    con = _connect()
    con.execute("INSERT INTO t VALUES (5, 0)")
    con.execute("CREATE VIEW pv AS SELECT a, a / b AS q FROM t")
    with pytest.warns(DsqlWarning, match="'agg' is in error"):
        con.execute("CREATE MATERIALIZED VIEW agg AS SELECT count(*) AS n, sum(q) AS s FROM pv")
    _agrees(con, "agg", "SELECT count(*) AS n, sum(a / b) AS s FROM t")
    with pytest.warns(DsqlWarning, match="'agg' is no longer in error"):
        con.execute("UPDATE t SET b = 1 WHERE b = 0")
    _agrees(con, "agg", "SELECT count(*) AS n, sum(a / b) AS s FROM t")


def test_a_view_that_fails_as_dsql_itself_or_times_out_is_still_refused() -> None:
    """Only data errors create a view in error; a statement past its timeout leaves
    nothing behind, as before."""
    con = _connect()
    con.execute("SET statement_timeout = '200ms'")
    loop = "WITH RECURSIVE r(n) AS (SELECT a FROM t UNION ALL SELECT n + 1 FROM r)"
    with pytest.raises(DsqlError, match="canceling statement"):
        con.execute(f"CREATE MATERIALIZED VIEW slow AS {loop} SELECT max(n) AS m FROM r")
    assert "slow" not in con.session.relations
    assert con.session.healing.periods == {}


def test_an_index_on_a_plain_view_over_failing_rows_is_created_in_error_then_heals() -> None:
    con = _connect()
    con.execute("INSERT INTO t VALUES (1, 0)")
    con.execute("CREATE VIEW pv AS SELECT a, 12 / b AS x FROM t")
    cur = _says(con, "CREATE INDEX pv_idx ON pv (x)", "index 'pv_idx' is in error: .*[Dd]ivision")
    assert cur.status == "CREATE INDEX"
    for sql in ("SELECT * FROM pv", "SELECT a FROM pv WHERE x = 6"):
        with pytest.raises(ExecutionError, match="index 'pv_idx' on 'pv' is in error"):
            con.execute(sql)
    con.execute("CREATE MATERIALIZED VIEW m AS SELECT a FROM t")  # other views go on
    _says(con, "DELETE FROM t WHERE b = 0", "index 'pv_idx' is no longer in error")
    assert con.execute("SELECT a FROM pv WHERE x = 6").fetchall() == [(6,)]
    con.execute("INSERT INTO t VALUES (3, 4)")
    assert sorted(con.execute("SELECT * FROM pv").fetchall()) == [(3, 3), (6, 6)]
    _says(con, "INSERT INTO t VALUES (2, 0)", "index 'pv_idx' is in error")
    _says(con, "UPDATE t SET b = 6 WHERE b = 0", "index 'pv_idx' is no longer in error")
    assert sorted(con.execute("SELECT * FROM pv").fetchall()) == [(2, 2), (3, 3), (6, 6)]
    con.execute("DROP INDEX pv_idx")
    assert sorted(con.execute("SELECT * FROM pv").fetchall()) == [(2, 2), (3, 3), (6, 6)]


# --- 4. DROP TABLE after writes no round has delivered ---------------------------------------


def _within(seconds: float, work: Any) -> None:
    """Run `work` in a thread; fail (rather than hang the suite) if it has not ended."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            work()
            outcome.append(None)
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the statements did not finish: a hang"
    if outcome[0] is not None:
        raise outcome[0]


@pytest.mark.parametrize("open_subscription", [True, False])
def test_drop_table_after_undelivered_writes_does_not_hang(open_subscription: bool) -> None:
    """A write no round delivered yet, then DROP TABLE: the dropped input's last updates
    must not count as work for every later round (which looped forever)."""

    def work() -> None:
        con = dsql.connect(kernel="local")
        con.execute("CREATE TABLE t (a int, b int)")
        con.execute("CREATE TABLE keep (x int)")
        con.execute("INSERT INTO t VALUES (1, 2), (3, 4)")
        con.execute("CREATE VIEW v AS SELECT a, sum(b) AS s FROM t GROUP BY a")
        con.execute("CREATE INDEX v_idx ON v (a)")
        sub = con.cursor()
        sub.execute("SUBSCRIBE v")
        assert sorted(r[1:] for r in sub.fetchall()) == [(1, 1, 2), (1, 3, 4)]
        if not open_subscription:
            sub.close()
        con.execute("DROP VIEW v")
        con.execute("INSERT INTO t VALUES (5, 6)")  # no view reads t: no round runs now
        con.execute("DROP TABLE t")
        con.execute("INSERT INTO keep VALUES (1)")
        assert con.execute("SELECT * FROM keep").fetchall() == [(1,)]
        con.execute("CREATE TABLE t (a int, b int)")
        assert con.execute("SELECT count(*) FROM t").fetchall() == [(0,)]

    _within(60, work)


# --- 5. keywords as names -------------------------------------------------------------------


def _pg_keywords(pg: Any) -> dict[str, str]:
    """PostgreSQL's keywords and their class: R reserved, T type/function name, C column
    name, U unreserved."""
    out = pg.psql("SELECT word, catcode FROM pg_get_keywords()", "-A", "-t", "-F", " ")
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_reserved_words_are_refused_as_names_as_postgresql_refuses_them(pg: Any) -> None:
    from dsql.grammar.keywords import RESERVED

    CONSTRAINT_WORDS = {"check", "constraint", "foreign", "primary", "unique"}
    keywords = _pg_keywords(pg)
    assert RESERVED == {w for w, c in keywords.items() if c in "RT"}
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int)")
    for word in sorted(RESERVED):
        for sql in (
            f"CREATE TABLE {word} (a int)",
            f"CREATE TABLE x ({word} int)",
            f"CREATE MATERIALIZED VIEW {word} AS SELECT 1 AS a",
            f"CREATE VIEW x ({word}) AS SELECT 1",
            f"CREATE INDEX {word} ON t (a)",
        ):
            # `(primary int)` reads as a table constraint, `INDEX on ON` as the keyword:
            # refused all the same, by another message.
            odd = ("x (" in sql and word in CONSTRAINT_WORDS) or sql == "CREATE INDEX on ON t (a)"
            near = "" if odd else f'syntax error at or near "{word}"'
            with pytest.raises(dsql.ProgrammingError, match=near):
                con.execute(sql)
        with pytest.raises(subprocess.CalledProcessError) as refused:
            pg.psql(f"CREATE TABLE {word} (a int)")
        assert f'syntax error at or near "{word}"' in refused.value.stderr
    assert con.execute("SHOW TABLES").fetchall() == [("t",)]


def test_every_other_keyword_names_a_table_its_queries_can_read(pg: Any) -> None:
    """PostgreSQL's unreserved keywords name tables and columns that every statement
    reads back; the few sqlglot cannot read unquoted are refused unquoted instead."""
    from dsql.grammar.keywords import UNREADABLE

    keywords = _pg_keywords(pg)
    assert UNREADABLE <= {w for w, c in keywords.items() if c in "UC"}
    con = dsql.connect(kernel="local")
    for word in sorted(w for w, c in keywords.items() if c in "UC"):
        if word in UNREADABLE:
            with pytest.raises(dsql.ProgrammingError):
                con.execute(f"CREATE TABLE {word} ({word} int)")
            continue
        con.execute(f"CREATE TABLE {word} ({word} int)")
        con.execute(f"INSERT INTO {word} VALUES (1), (2)")
        got = con.execute(f"SELECT {word} FROM {word} WHERE {word} = 2").fetchall()
        assert got == [(2,)], word
        con.execute(f"DROP TABLE {word}")


def test_quoted_keywords_name_everything() -> None:
    con = dsql.connect(kernel="local")
    con.execute('CREATE TABLE "select" ("order" int, "between" int)')
    con.execute('INSERT INTO "select" VALUES (1, 0), (4, 2)')
    with pytest.warns(DsqlWarning, match="'having' is in error"):
        con.execute(
            'CREATE MATERIALIZED VIEW "having" AS SELECT "order" / "between" AS q FROM "select"'
        )
    con.execute('CREATE INDEX "where" ON "select" ("order")')
    sub = con.cursor()
    with pytest.raises(ExecutionError, match="'having' is in error"):
        sub.execute('SUBSCRIBE "having"')
    with pytest.warns(DsqlWarning, match="'having' is no longer in error"):
        con.execute('UPDATE "select" SET "between" = 1 WHERE "between" = 0')
    assert sorted(con.execute('SELECT * FROM "having"').fetchall()) == [(1,), (2,)]
    assert con.execute('SELECT "order" FROM "select" WHERE "order" = 4').fetchall() == [(4,)]
    sub.execute('SUBSCRIBE "having"')
    assert sorted(r[1:] for r in sub.fetchall()) == [(1, 1), (1, 2)]
    con.execute('DELETE FROM "select" WHERE "order" = 4')
    assert [r[1:] for r in sub.fetchall()] == [(-1, 2)]
    assert ("where", "select", "order") in con.execute("SHOW INDEXES").fetchall()
    assert con.execute('SHOW COLUMNS FROM "select"').fetchall()[0][0] == "order"
    con.execute('DROP TABLE "select" CASCADE')
    assert con.execute("SHOW VIEWS").fetchall() == []


# --- 6. every SHOW the docs list ------------------------------------------------------------


def test_show_subscriptions_lists_the_running_ones() -> None:
    con = _connect()
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT a / b AS q FROM t")
    assert con.execute("SHOW SUBSCRIPTIONS").fetchall() == []
    plain = con.cursor()
    plain.execute("SUBSCRIBE v")
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE (SELECT a FROM t) UP TO 5")
    updates = con.subscribe("t")
    cur = con.execute("SHOW SUBSCRIPTIONS")
    assert [d[0] for d in cur.description] == ["id", "cursor", "sql", "as_of", "up_to"]
    assert cur.fetchall() == [
        (1, None, "SUBSCRIBE v", 0, None),
        (2, "c", "SUBSCRIBE (SELECT a FROM t) UP TO 5", 0, 5),
        (3, None, "t", 0, None),
    ]
    con.execute("CLOSE c")
    plain.close()
    updates.close()
    assert con.execute("SHOW SUBSCRIPTIONS").fetchall() == []
    con.execute("DECLARE d CURSOR FOR SUBSCRIBE v UP TO 5")
    con.execute("ADVANCE TO 6")
    con.execute("FETCH ALL d")  # past UP TO: it ends
    assert con.execute("SHOW SUBSCRIPTIONS").fetchall() == []


def test_every_show_the_docs_list_works() -> None:
    con = _connect()
    con.execute("CREATE TABLE u (id int NOT NULL, name text DEFAULT 'x')")
    con.execute("CREATE MATERIALIZED VIEW m AS SELECT a FROM t")
    con.execute("CREATE VIEW pv AS SELECT a FROM t")
    con.execute("CREATE INDEX i ON t (a)")
    show = {
        "SHOW TABLES": [("t",), ("u",)],
        "SHOW VIEWS": [("m", "materialized view"), ("pv", "view")],
        "SHOW MATERIALIZED VIEWS": [("m", "materialized view")],
        "SHOW INDEXES": [("i", "t", "a")],
        "SHOW INDEXES ON t": [("i", "t", "a")],
        "SHOW COLUMNS FROM u": [("id", False, "int"), ("name", True, "text")],
        "SHOW SUBSCRIPTIONS": [],
        "SHOW CREATE VIEW pv": [("pv", "CREATE VIEW pv AS SELECT a FROM t")],
        "SHOW CREATE MATERIALIZED VIEW m": [("m", "CREATE MATERIALIZED VIEW m AS SELECT a FROM t")],
        "SHOW CREATE INDEX i": [("i", "CREATE INDEX i ON t (a)")],
        "SHOW CREATE TABLE u": [("u", "CREATE TABLE u (id INT NOT NULL, name TEXT DEFAULT 'x')")],
    }
    for sql, rows in show.items():
        assert con.execute(sql).fetchall() == rows, sql
    assert {r[0] for r in con.execute("SHOW ARRANGEMENTS").fetchall()} >= {"t", "m", "i"}
    # What SHOW CREATE TABLE prints makes the same table.
    con.execute("DROP TABLE u")
    con.execute(show["SHOW CREATE TABLE u"][0][1])
    assert con.execute("SHOW COLUMNS FROM u").fetchall() == show["SHOW COLUMNS FROM u"]
    for sql in ("SHOW CREATE MATERIALIZED VIEW pv", "SHOW CREATE TABLE m", "SHOW CREATE VIEW t"):
        with pytest.raises(dsql.ProgrammingError, match="is not a"):
            con.execute(sql)


# --- 3. Ctrl-C at any point of a write or a view's creation ----------------------------------

#: The session's views, each with its query (from scratch: the same query over the tables).
CTRL_C_VIEWS = {
    "q": "SELECT a, a / b AS q FROM t",
    "agg": "SELECT b, count(*) AS n, sum(a) AS s FROM t GROUP BY b",
    "j": "SELECT t.a, u.x FROM t JOIN u ON t.b = u.x",
    "reach": (
        "WITH MUTUALLY RECURSIVE r(n int) AS (SELECT a FROM t UNION "
        "SELECT n + 1 FROM r WHERE n < 8) SELECT n FROM r"
    ),
}

#: Statements to interrupt: writes, a transaction's COMMIT, and the creations of views.
CTRL_C_STATEMENTS = {
    "insert": "INSERT INTO t VALUES (3, 1), (4, 2)",
    "update": "UPDATE t SET a = a + 1 WHERE b = 2",
    "delete": "DELETE FROM t WHERE a = 6",
    "view": "CREATE MATERIALIZED VIEW extra AS SELECT b, max(a) AS m FROM t GROUP BY b",
    "index": "CREATE INDEX pv_idx ON pv (b)",
}


def _ctrl_c_session() -> Any:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int, b int)")
    con.execute("CREATE TABLE u (x int)")
    con.execute("INSERT INTO t VALUES (6, 2), (1, 1), (2, 2)")
    con.execute("INSERT INTO u VALUES (1), (2)")
    for name, sql in CTRL_C_VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    con.execute("CREATE VIEW pv AS SELECT b, a * 2 AS d FROM t")
    return con


def _state(con: Any) -> dict[str, Any]:
    """The tables' rows, and each view's rows checked against its query from scratch."""
    state = {name: Counter(con.execute(f"SELECT * FROM {name}").fetchall()) for name in ("t", "u")}
    for name, sql in CTRL_C_VIEWS.items():
        _agrees(con, name, sql)
        state[name] = _rows_or_error(con, f"SELECT * FROM {name}")
    _agrees(con, "pv", "SELECT b, a * 2 AS d FROM t")
    return state


class _Interrupt:
    """`cls.step` raising KeyboardInterrupt at its `n`th call, before or after it runs."""

    def __init__(self, monkeypatch: Any, cls: type, n: int, after: bool) -> None:
        self.calls, self.fired = 0, False
        real = cls.step

        def step(node: Any, rnd: Any) -> Any:
            self.calls += 1
            hit = self.calls == n and not self.fired
            if hit and not after:
                self.fired = True
                raise KeyboardInterrupt
            out = real(node, rnd)
            if hit:
                self.fired = True
                raise KeyboardInterrupt
            return out

        monkeypatch.setattr(cls, "step", step)


def _node_classes() -> dict[str, type]:
    from dsql.runtime.arrangement import ArrangeNode, ImportNode
    from dsql.runtime.capture import CaptureNode
    from dsql.runtime.collection import LinearNode
    from dsql.runtime.input import InputNode
    from dsql.runtime.operators.join import JoinNode
    from dsql.runtime.operators.reduce import ReduceNode
    from dsql.runtime.scope import ScopeNode
    from dsql.runtime.switch import SwitchNode

    classes = [ArrangeNode, ImportNode, CaptureNode, LinearNode, InputNode, JoinNode]
    classes += [ReduceNode, ScopeNode, SwitchNode]
    return {cls.__name__: cls for cls in classes}


#: Where in a statement the interrupt lands: at a step's first, second or third call,
#: before or after its work. Each (statement, node) pair takes one, in turn.
CTRL_C_POINTS = ((1, False), (2, True), (3, False), (1, True), (2, False))
CTRL_C_CASES = [
    (statement, node, *CTRL_C_POINTS[i % len(CTRL_C_POINTS)])
    for i, (statement, node) in enumerate(
        (s, n) for s in sorted(CTRL_C_STATEMENTS) for n in sorted(_node_classes())
    )
]


@pytest.mark.parametrize(("statement", "node", "n", "after"), CTRL_C_CASES)
def test_ctrl_c_inside_any_step_leaves_tables_and_views_as_they_were(
    monkeypatch: Any, statement: str, node: str, n: int, after: bool
) -> None:
    """An interrupt inside a node's step: the statement raises KeyboardInterrupt, tables
    and views are as before it (every view equal to its query from scratch), a
    subscription goes on exactly, and the statement then runs as if nothing happened."""
    sql = CTRL_C_STATEMENTS[statement]
    con = _ctrl_c_session()
    sub = con.cursor()
    sub.execute("SUBSCRIBE agg")
    seen: Counter[tuple[Any, ...]] = Counter()

    def follow() -> None:
        for _, diff, *row in sub.fetchall():
            seen[tuple(row)] += diff

    follow()
    before = _state(con)
    with monkeypatch.context() as patch:
        hook = _Interrupt(patch, _node_classes()[node], n, after)
        try:
            con.execute(sql)
        except KeyboardInterrupt:
            assert hook.fired
    if hook.fired:
        assert _state(con) == before
        assert "extra" not in con.session.relations
        assert "pv_idx" not in con.session.indexes.by_name
        follow()
        assert +seen == before["agg"]
        con.execute(sql)  # and now it runs through
    follow()
    assert +seen == _state(con)["agg"]
    con.execute("INSERT INTO t VALUES (5, 1)")
    follow()
    assert +seen == _state(con)["agg"]


# --- on Spark: the same, for a subset --------------------------------------------------------


@pytest.mark.usefixtures("spark")
def test_on_spark_writes_say_so_and_views_born_in_error_heal() -> None:
    con = _connect("spark")
    con.execute("INSERT INTO t VALUES (1, 0)")
    query = "SELECT a / b AS q FROM t"
    _says(con, f"CREATE MATERIALIZED VIEW v AS {query}", BROKEN)
    _agrees(con, "v", query)
    _says(con, "DELETE FROM t WHERE b = 0", HEALED)
    _agrees(con, "v", query)
    _says(con, "INSERT INTO t VALUES (2, 0)", BROKEN)
    _says(con, "UPDATE t SET b = 1 WHERE b = 0", HEALED)
    _agrees(con, "v", query)
    con.execute("CREATE VIEW pv AS SELECT 12 / b AS x FROM t")
    con.execute("CREATE INDEX pv_idx ON pv (x)")
    with pytest.warns(DsqlWarning) as caught:  # v and the index over t, both
        con.execute("INSERT INTO t VALUES (3, 0)")
    assert sorted(str(w.message).split(":")[0] for w in caught) == [
        "index 'pv_idx' is in error",
        "materialized view 'v' is in error",
    ]
    with pytest.raises(ExecutionError, match="'pv_idx' on 'pv' is in error"):
        con.execute("SELECT * FROM pv")
    with pytest.warns(DsqlWarning, match="no longer in error"):
        con.execute("DELETE FROM t WHERE b = 0")
    assert sorted(con.execute("SELECT * FROM pv").fetchall()) == [(6,), (12,)]


@pytest.mark.usefixtures("spark")
@pytest.mark.parametrize("node", ["ArrangeNode", "SwitchNode", "InputNode"])
def test_on_spark_ctrl_c_in_a_write_leaves_everything_as_it_was(
    monkeypatch: Any, node: str
) -> None:
    con = _connect("spark")
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT b, sum(a) AS s FROM t GROUP BY b")
    before = Counter(con.execute("SELECT * FROM v").fetchall())
    with monkeypatch.context() as patch:
        hook = _Interrupt(patch, _node_classes()[node], 1, True)
        with pytest.raises(KeyboardInterrupt):
            con.execute("INSERT INTO t VALUES (4, 2), (5, 3)")
    assert hook.fired
    assert Counter(con.execute("SELECT * FROM t").fetchall()) == Counter({(6, 2): 1})
    assert Counter(con.execute("SELECT * FROM v").fetchall()) == before
    con.execute("INSERT INTO t VALUES (4, 2), (5, 3)")
    _agrees(con, "v", "SELECT b, sum(a) AS s FROM t GROUP BY b")


# --- 7. the memory budget on Spark ------------------------------------------------------------


@pytest.mark.usefixtures("spark")
def test_on_spark_a_result_past_memory_limit_fails_and_the_session_goes_on() -> None:
    con = dsql.connect(kernel="spark")
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t SELECT g FROM generate_series(1, 120000) g")
    con.execute("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM t")
    con.execute("SET memory_limit = '16MB'")
    wide = "SELECT a, repeat('x', 200) AS s FROM t"
    # A result over `fetch_rows` rows streams from the executors' copy (`dsql.exports`);
    # under it, a read of one relation is collected whole, within memory_limit.
    con.execute("SET fetch_rows = 1000000")
    for sql in (f"{wide} ORDER BY a", f"{wide} WHERE a > 0 ORDER BY a"):
        with pytest.raises(dsql.errors.ResourceLimitError, match="memory_limit"):
            con.execute(sql)
    con.execute("SET fetch_rows = 10000")
    streamed = con.execute(f"{wide} ORDER BY a")
    rows = 0
    while part := streamed.fetchmany(10000):
        assert part[0][0] == rows + 1
        rows += len(part)
    assert rows == 120000
    assert con.execute("SELECT * FROM n").fetchall() == [(120000,)]
    con.execute("INSERT INTO t VALUES (0)")
    assert con.execute("SELECT * FROM n").fetchall() == [(120001,)]
    con.execute("SET memory_limit = '1GB'")
    assert con.execute(f"SELECT count(*) FROM ({wide}) w").fetchall() == [(120001,)]
