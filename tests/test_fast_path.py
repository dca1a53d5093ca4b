"""Fast-path reads (`dsql.fast_path`) give exactly the rows of the dataflow path.

Random histories of inserts, deletes, updates and clock advances run against a
table, materialized views (one with a temporal filter, whose rows leave on
schedule, one aggregating, so retractions reach it), an indexed plain view and a
table kept with RETAIN HISTORY; after each step, several times per millisecond
and after compaction, every query below is read both ways in the same session:
by `fast_path.peek` (which must take it) and by the dataflow path
(`Session.fast_path` off). The two must agree row for row (ORDER BY included),
or fail with the same error.
"""

from __future__ import annotations

import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sql import _statement as statement
from test_sql import op

import dsql
from dsql import fast_path
from dsql.errors import DsqlError
from dsql.timeout import statement_deadline

SETUP = [
    "CREATE TABLE r (a int, b int)",
    "CREATE TABLE s (a int, c int) WITH (RETAIN HISTORY FOR '1 hour')",
    "CREATE MATERIALIZED VIEW agg AS SELECT a, count(*) AS n, sum(b) AS total FROM r GROUP BY a",
    "CREATE MATERIALIZED VIEW recent AS SELECT a, b FROM r WHERE mz_now() < (b + 2) * 1000",
    "CREATE VIEW pos AS SELECT a, c FROM s WHERE c > 0",
    "CREATE INDEX ON pos (a)",
]

#: Reads that take the fast path: a relation with an arrangement, under map/filter/project.
FAST = [
    "SELECT * FROM r",
    "SELECT a, b * 2 AS b2 FROM r WHERE b > 1 ORDER BY a DESC, b2 LIMIT 3",
    "SELECT a FROM r WHERE a IS NULL OR b < 2",
    "SELECT 1 AS one FROM r",
    "SELECT 10 / (a - 1) AS q FROM r",
    "SELECT * FROM s ORDER BY c NULLS FIRST, a NULLS FIRST OFFSET 1",
    "SELECT * FROM agg",
    "SELECT total * n AS x, a FROM agg WHERE n > 1",
    "SELECT * FROM recent",
    "SELECT * FROM pos",
    "SELECT c FROM pos WHERE a = 1",
    # compared integers are parameters of one shared query: each read must see its own
    "SELECT b FROM r WHERE a = 2",
    "SELECT b FROM r WHERE a = 3",
    "SELECT a, 7 AS seven FROM r WHERE b >= 3 AND a <> 1",
    "SELECT a FROM r WHERE b < 3000000000 AND a > -1",
    "SELECT a + 1 AS a1 FROM r WHERE 2 = a",
    # a value of the first key pinned: only the rows with it are read (`_pinned_keys`)
    "SELECT * FROM r WHERE a IN (1, 3, -2)",
    "SELECT * FROM r WHERE a IN (2, NULL) AND b > 0",
    "SELECT b FROM r WHERE a = 3000000000",
    "SELECT b FROM r WHERE a = NULL",
    "SELECT b FROM r WHERE a = CAST(1 AS bigint) OR b = 2",
    "SELECT n, total FROM agg WHERE a = 1",
    "SELECT c FROM pos WHERE a IN (1, 2) AND c < 4",
]


def _read(con: dsql.api.Connection, sql: str, fast: bool) -> tuple[str, object]:
    """("rows", the rows in order) or ("error", its class and message)."""
    session = con.session
    bound = session.plan(sqlglot.parse_one(sql, read="postgres"))
    try:  # as the executor runs a statement: errors in its own nodes are raised
        with statement_deadline(session.worker, None):
            if fast:
                table = fast_path.peek(session, bound)
                assert table is not None, f"{sql} did not take the fast path"
            else:
                session.fast_path = False
                try:
                    table = session.read(bound)
                finally:
                    session.fast_path = True
    except DsqlError as error:
        return "error", (type(error).__name__, error.message)
    ordered = "ORDER BY" in sql
    rows = [tuple(r.values()) for r in table.to_pylist()]
    return "rows", (rows if ordered else sorted(rows, key=repr), table.schema.names)


def _agree(con: dsql.api.Connection, when: str) -> None:
    for sql in FAST:
        fast, slow = _read(con, sql, True), _read(con, sql, False)
        assert fast == slow, f"{sql} {when}: fast path {fast} != dataflow {slow}"


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(op, min_size=1, max_size=8), st.integers(1, 2))
def test_fast_path_agrees_with_dataflow(history: list, reads: int) -> None:
    con = dsql.connect(kernel="local")
    for sql in SETUP:
        con.execute(sql)
    _agree(con, "at the start")
    for kind, table, arg in history:
        if kind == "advance":
            con.execute(f"ADVANCE BY {arg * 700}")
        else:
            sql = statement(kind, table, arg)
            assert sql is not None
            con.execute(sql)
        for k in range(reads):  # several reads, each closing a tick of the same millisecond
            _agree(con, f"after {kind} {table} {arg} (read {k + 1})")
    con.close()


def test_fast_path_on_spark(spark) -> None:  # noqa: ANN001 - the session fixture
    """The fast path also reads arrangements held on Spark (a `spark` kernel session)."""
    con = dsql.connect(kernel="spark", spark=spark)
    for sql in SETUP:
        con.execute(sql)
    con.execute("INSERT INTO r VALUES (1, 2), (1, 3), (2, NULL), (NULL, 5)")
    con.execute("INSERT INTO s VALUES (1, 4), (2, -1)")
    con.execute("ADVANCE BY 1000")
    con.execute("DELETE FROM r WHERE b = 3")
    _agree(con, "on spark")
    con.close()


def test_a_point_read_of_a_table_stored_by_spark_runs_no_job(spark) -> None:  # noqa: ANN001
    """A read (or a DELETE) pinning the first column's value reads only the row groups
    that can hold it, in the driver: no Spark job, where a job read the whole table."""
    con = dsql.connect(kernel="auto", placement_threshold=2)
    con.execute("CREATE TABLE t (k int, v text)")
    con.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (2, 'c'), (NULL, 'd'), (3, NULL)")
    con.execute("CREATE TABLE u (s text, n int)")
    con.execute("INSERT INTO u VALUES ('x', 1), ('y', 2), ('y', 3), (NULL, 4)")
    con.execute("SELECT count(*) FROM t").fetchall()  # the tables' batches stored
    assert con.session.worker.kernel.started
    jobs = spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs()  # noqa: SLF001
    reads = {
        "SELECT v FROM t WHERE k = 2": [("b",), ("c",)],
        "SELECT * FROM t WHERE k IN (3, 7)": [(3, None)],
        "SELECT v FROM t WHERE k IN (NULL, 1, CAST(NULL AS int))": [("a",)],
        "SELECT n FROM u WHERE s = 'y'": [(2,), (3,)],
        "SELECT n FROM u WHERE s IN ('x', 'zz') AND n > 0": [(1,)],
    }
    for sql, rows in reads.items():
        assert sorted(con.execute(sql).fetchall(), key=repr) == rows, sql
    con.execute("DELETE FROM t WHERE k = 2 AND v = 'b'")
    assert spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs() == jobs  # noqa: SLF001
    assert sorted(con.execute("SELECT * FROM t").fetchall(), key=repr) == sorted(
        [(1, "a"), (2, "c"), (None, "d"), (3, None)], key=repr
    )
    con.close()


def test_fast_path_is_not_taken_where_it_cannot_answer() -> None:
    """Joins, aggregates, plain views and `mz_now()` keep the dataflow path."""
    con = dsql.connect(kernel="local")
    for sql in SETUP + ["CREATE VIEW plain AS SELECT a FROM r"]:
        con.execute(sql)
    session = con.session
    for sql in [
        "SELECT r.a FROM r JOIN s ON r.a = s.a",
        "SELECT a, count(*) FROM r GROUP BY a",
        "SELECT * FROM plain",
        "SELECT a FROM r WHERE mz_now() > b",
        "SELECT a FROM r WHERE a IN (SELECT a FROM s)",
    ]:
        bound = session.plan(sqlglot.parse_one(sql, read="postgres"))
        assert fast_path.peek(session, bound) is None, sql
    con.close()


#: Column types of the INSERT target, and literals of every kind `literal_rows` takes
#: (and some it leaves to the dataflow path: floats, overflowing and mistyped values).
COLUMN_TYPES = ["int", "bigint", "smallint", "text", "boolean", "double precision"]
literal = st.one_of(
    st.sampled_from(["NULL", "TRUE", "FALSE", "''", "'x'", "'it''s'", "'12'", "1.5", "-0"]),
    st.integers(-(2**40), 2**40).map(str),
    st.integers(-40000, 40000).map(str),
    st.sampled_from(["2147483648", "-2147483648", "9223372036854775808", "32768"]),
)


def _insert(con: dsql.api.Connection, sql: str, fast: bool) -> tuple[str, object]:
    con.session.fast_path = fast
    try:
        con.execute(sql)
        return "ok", sorted(con.execute("SELECT * FROM t").fetchall(), key=repr)
    except DsqlError as error:
        return "error", (type(error).__name__, error.message)
    finally:
        con.session.fast_path = True


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.sampled_from(COLUMN_TYPES), min_size=1, max_size=3),
    st.lists(st.lists(literal, min_size=3, max_size=3), min_size=1, max_size=3),
    st.booleans(),
)
def test_insert_of_literals_agrees_with_dataflow(
    columns: list[str], rows: list[list[str]], not_null: bool
) -> None:
    """`INSERT ... VALUES` of literals: the same rows, or the same error, both ways."""
    width = len(columns)
    values = ", ".join("(" + ", ".join(r[:width]) + ")" for r in rows)
    sql = f"INSERT INTO t VALUES {values}"
    outcomes = []
    for fast in (True, False):
        con = dsql.connect(kernel="local")
        spec = ", ".join(
            f"c{i} {t}" + (" NOT NULL" if not_null and i == 0 else "")
            for i, t in enumerate(columns)
        )
        con.execute(f"CREATE TABLE t ({spec})")
        outcomes.append(_insert(con, sql, fast))
        con.close()
    assert outcomes[0] == outcomes[1], f"{sql} into ({columns}): {outcomes}"
