"""The embedding API: PEP 249, SUBSCRIBE through cursors and iterators, compile, interop,
and every error path leaving the session usable with its tables intact."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import dsql
from dsql import errors


@pytest.fixture
def con():
    connection = dsql.connect()  # in-process kernel, manual clock
    connection.execute("CREATE TABLE t (a int, b text)")
    connection.executemany("INSERT INTO t VALUES (?, ?)", [(1, "x"), (2, "y"), (3, None)])
    yield connection
    connection.close()


def rows(con, sql="SELECT a, b FROM t ORDER BY a"):
    return con.execute(sql).fetchall()


# --- PEP 249 ----------------------------------------------------------------------------


def test_module_globals_and_exception_hierarchy():
    assert (dsql.apilevel, dsql.threadsafety, dsql.paramstyle) == ("2.0", 2, "qmark")
    assert issubclass(dsql.Error, Exception) and issubclass(dsql.Warning, Exception)
    for name in ("InterfaceError", "DatabaseError"):
        assert issubclass(getattr(dsql, name), dsql.Error)
    for name in ("DataError", "OperationalError", "IntegrityError", "InternalError",
                 "ProgrammingError", "NotSupportedError"):  # fmt: skip
        assert issubclass(getattr(dsql, name), dsql.DatabaseError)
    assert issubclass(errors.ParseError, dsql.ProgrammingError)
    assert issubclass(errors.SchemaError, dsql.ProgrammingError)
    assert issubclass(errors.UnsupportedError, dsql.NotSupportedError)
    assert issubclass(errors.SourceError, dsql.OperationalError)
    assert dsql.Error is dsql.DsqlError


def test_cursor_fetch_methods_and_description(con):
    cur = con.cursor()
    assert cur.executemany("INSERT INTO t VALUES (?, ?)", [(4, "it's"), (5, "?")]).rowcount == 2
    cur.execute("SELECT a, b FROM t WHERE a >= ? ORDER BY a", (2,))
    assert [d[0] for d in cur.description] == ["a", "b"]
    assert cur.rowcount == 4
    assert cur.fetchone() == (2, "y")
    assert cur.fetchmany(2) == [(3, None), (4, "it's")]
    assert cur.fetchall() == [(5, "?")]
    assert cur.fetchone() is None
    table = con.execute("SELECT a FROM t ORDER BY a").fetch_arrow_table()
    assert table.column("a").to_pylist() == [1, 2, 3, 4, 5]
    assert con.execute("SELECT count(*) AS n FROM t").df()["n"].tolist() == [5]
    assert list(con.execute("SELECT a FROM t WHERE a < 3 ORDER BY a")) == [(1,), (2,)]


def test_parameter_count_mismatch_is_an_interface_error(con):
    with pytest.raises(dsql.InterfaceError):
        con.execute("SELECT ? + ?", (1,))
    with pytest.raises(dsql.InterfaceError):
        con.execute("SELECT ?", (1, 2))


# --- SUBSCRIBE --------------------------------------------------------------------------


def test_subscribe_through_a_cursor_returns_updates_so_far(con):
    con.execute("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM t")
    cur = con.execute("SUBSCRIBE n")
    assert [d[0] for d in cur.description] == ["mz_timestamp", "mz_diff", "n"]
    assert cur.fetchall() == [(0, 1, 3)]
    assert cur.fetchall(timeout=0.1) == []  # nothing new: returns, never blocks
    con.execute("ADVANCE TO 10")
    con.execute("INSERT INTO t VALUES (9, 'z')")
    con.execute("ADVANCE TO 20")
    assert cur.fetchmany(1) == [(10, -1, 3)]
    assert cur.fetchone() == (10, 1, 4)
    cur.close()
    with pytest.raises(dsql.InterfaceError):
        cur.fetchall()


def test_subscribe_cursor_under_the_wall_clock_waits_at_most_the_timeout():
    con = dsql.connect(clock="wall")
    con.execute("CREATE TABLE w (a int)")
    cur = con.execute("SUBSCRIBE w")
    assert cur.fetchall(timeout=0.2) == []
    con.execute("INSERT INTO w VALUES (1)")
    got = cur.fetchall(timeout=5)
    assert [(diff, a) for _, diff, a in got] == [(1, 1)]
    con.close()


def test_subscribe_iterator_with_progress_and_up_to(con):
    updates = con.subscribe("SELECT b FROM t WHERE a > 1", progress=True, up_to=10)
    first = next(updates)
    assert first.column_names == ["mz_timestamp", "mz_progressed", "mz_diff", "b"]
    assert sorted(first.filter(pa.compute.invert(first["mz_progressed"]))["b"].to_pylist(),
                  key=str) == [None, "y"]  # fmt: skip
    con.execute("ADVANCE TO 5")
    con.execute("DELETE FROM t WHERE a = 2")
    con.execute("ADVANCE TO 10")
    batch = next(updates)
    data = batch.filter(pa.compute.invert(batch["mz_progressed"]))
    assert data.select(["mz_timestamp", "mz_diff", "b"]).to_pylist() == [
        {"mz_timestamp": 5, "mz_diff": -1, "b": "y"}
    ]
    assert list(updates) == []  # past UP TO: the iterator ends


# --- compile ----------------------------------------------------------------------------


def test_compile_against_a_mapping_runs_nothing():
    plan = dsql.compile(
        "SELECT city, count(*) AS n FROM people GROUP BY city",
        {"people": {"name": "text", "city": "text"}},
    )
    assert plan.columns == [("city", "text"), ("n", "bigint")]
    assert "Reduce" in plan.explain() and "Get people" in plan.explain("raw")
    with pytest.raises(errors.UnsupportedError):
        plan.explain("physical")
    with pytest.raises(errors.SchemaError):
        dsql.compile("SELECT * FROM nowhere", {"people": {"name": "text"}})


def test_compile_against_a_connection_gives_the_physical_plan(con):
    plan = dsql.compile("CREATE VIEW v AS SELECT a FROM t WHERE a > 1", con)
    assert plan.explain("physical").strip()
    assert "v" not in con.session.relations  # compiled, not created


# --- interop (no Spark) -----------------------------------------------------------------


def test_create_table_from_arrow_parquet_csv_and_pandas(con, tmp_path):
    con.create_table("arrow_t", pa.table({"k": [1, 2], "v": ["p", "q"]}))
    pq.write_table(pa.table({"k": [3], "v": ["r"]}), tmp_path / "x.parquet")
    con.create_table("pq_t", str(tmp_path / "x.parquet"))
    pcsv.write_csv(pa.table({"k": [4, 5], "v": ["s", "t"]}), tmp_path / "x.csv")
    con.create_table("csv_t", tmp_path / "x.csv")
    con.create_table("pd_t", pa.table({"k": [6]}).to_pandas())
    sql = (
        "SELECT k FROM arrow_t UNION ALL SELECT k FROM pq_t"
        " UNION ALL SELECT k FROM csv_t ORDER BY k"
    )
    assert rows(con, sql) == [(1,), (2,), (3,), (4,), (5,)]
    assert con.table("pd_t").fetchall() == [(6,)]
    con.execute("INSERT INTO csv_t VALUES (7, 'u')")  # an ordinary table afterwards
    assert con.table("csv_t").arrow().num_rows == 3
    assert con.table("csv_t").columns == ["k", "v"]


def test_interop_errors(con, tmp_path):
    with pytest.raises(errors.SourceError, match="no such file"):
        con.create_table("missing", str(tmp_path / "missing.parquet"))
    (tmp_path / "x.unknown").write_text("1")
    with pytest.raises(errors.SourceError, match="format"):
        con.create_table("odd", tmp_path / "x.unknown")
    with pytest.raises(errors.TypeMismatchError):
        con.create_table("nulls", pa.table({"n": pa.nulls(2)}))
    with pytest.raises(errors.TypeMismatchError):
        con.create_table("num", 42)
    with pytest.raises(errors.SchemaError):
        con.create_table("t", pa.table({"a": [1]}))  # exists already
    assert set(con.session.relations) == {"t"}
    assert rows(con) == [(1, "x"), (2, "y"), (3, None)]


def test_spark_interop(con, spark):
    """A table from a Spark DataFrame; a view back out as a Spark DataFrame."""
    frame = spark.createDataFrame([(10, "s"), (11, "s")], "a int, b string")
    con.create_table("from_spark", frame)
    con.execute("CREATE MATERIALIZED VIEW m AS SELECT b, sum(a) AS s FROM from_spark GROUP BY b")
    assert con.table("m").to_spark(spark).collect()[0].asDict() == {"b": "s", "s": 21}
    out = con.execute("SELECT a FROM t WHERE a > 5").to_spark(spark)  # no rows: still typed
    assert out.count() == 0 and out.columns == ["a"]


def test_to_spark_under_auto_starts_spark_with_the_connection_settings(spark):
    """A DataFrame asked of an auto connection comes from the session its steps would use,
    configured with the settings given to `connect`."""
    con = dsql.connect(kernel="auto", **{"spark.sql.repl.eagerEval.maxNumRows": "21"})
    con.execute("CREATE TABLE small (a int)")
    con.execute("INSERT INTO small VALUES (1), (2)")
    frame = con.table("small").to_spark()
    assert sorted(r.a for r in frame.collect()) == [1, 2]
    assert frame.sparkSession.conf.get("spark.sql.repl.eagerEval.maxNumRows") == "21"


# --- error paths ------------------------------------------------------------------------

ERRORS = [
    ("SELEC 1", errors.ParseError),
    ("SELECT nope FROM t", errors.SchemaError),
    ("SELECT * FROM nowhere", errors.SchemaError),
    ("INSERT INTO t VALUES ('not a number', 'x')", errors.TypeMismatchError),
    ("SELECT a + b FROM t", errors.DsqlError),
    ("DROP TABLE t", errors.SchemaError),  # the view below depends on it
    ("SUBSCRIBE nowhere", errors.SchemaError),
    ("FETCH ALL nocursor", errors.SchemaError),
    ("INSERT INTO v VALUES (1)", errors.SchemaError),
    ("CREATE TABLE t (a int)", errors.SchemaError),
]


@pytest.mark.parametrize(("sql", "kind"), ERRORS, ids=[e[0] for e in ERRORS])
def test_error_paths_leave_the_session_usable(con, sql, kind):
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT a FROM t")
    before = rows(con)
    with pytest.raises(kind) as info:
        con.execute(sql)
    assert isinstance(info.value, errors.DsqlError) and str(info.value)
    assert rows(con) == before
    con.execute("INSERT INTO t VALUES (4, 'w')")
    assert rows(con, "SELECT count(*) FROM v") == [(4,)]


def test_closed_cursor_and_connection(con):
    cur = con.cursor()
    cur.close()
    with pytest.raises(dsql.InterfaceError, match="cursor is closed"):
        cur.execute("SELECT 1")
    other = con.cursor()
    con.close()
    with pytest.raises(dsql.InterfaceError, match="connection is closed"):
        other.execute("SELECT 1")
    with pytest.raises(dsql.InterfaceError):
        con.cursor()


def test_caret_lands_under_the_position_in_a_later_statement(con):
    with pytest.raises(errors.ParseError) as info:
        con.execute("SELECT 1;\n  SELECT a FROM t WHERE")
    text = str(info.value).splitlines()
    assert text[1] == "  SELECT a FROM t WHERE"
    assert text[2].index("^") == text[1].index("WHERE")


UNKNOWN_FUNCTIONS = [
    ("SELECT a, nosuchfn(b) FROM t", "function nosuchfn() does not exist", 11),
    ("SELECT first(a) FROM t", "the aggregate function first() is not supported", None),
    ("SELECT list(a) FROM t", "function list() does not exist", None),
]


@pytest.mark.parametrize(("sql", "message", "column"), UNKNOWN_FUNCTIONS)
def test_unknown_functions_are_refused_when_planned(con, sql, message, column):
    """A function neither dsql nor its engines know is a planning error with a position,
    not an engine's error at run time; so is an aggregate dsql does not implement."""
    before = rows(con)
    with pytest.raises(errors.DsqlError, match=re.escape(message)) as info:
        con.execute(sql)
    assert info.value.position is not None
    if column is not None:
        assert info.value.position[1] == column
    assert rows(con) == before
