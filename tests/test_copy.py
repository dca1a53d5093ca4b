"""COPY: rows from files and the client into a table, rows of a table or query out, as
PostgreSQL reads and writes them (PostgreSQL is the oracle: the same data sent to it by
COPY FROM STDIN gives the same rows, the same error line, the same text out), one
write at one time, and only inside the directories SQL may reach."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dsql

TABLE = "(i int, n numeric(6,2), f float8, b boolean, d date, ts timestamp, s text, iv interval)"

#: (options, data): each read by PostgreSQL and by dsql into TABLE.
CASES = (
    (
        "",
        "1\t1.5\t2.5\tt\t2024-01-02\t2024-01-02 03:04:05\tx\t1 day\n"
        "\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\n",
    ),
    (
        "",
        " 7 \t-0.005\tNaN\tyes\t2024-02-29\t2024-01-02T03:04:05.5\t"
        "a\\tb\\\\c\\nd\t-1 year +2 mons\n",
    ),
    ("(FORMAT csv)", '3,2,1e3,off,2020-01-01,2020-01-01 00:00:00,"a,""b""\nc",2 hours\n4,,,,,,,\n'),
    (
        "(FORMAT csv, HEADER true)",
        'i,n,f,b,d,ts,s,iv\n5,1,-Infinity,1,2020-01-01,2020-01-01 00:00:00,"",PT1M\n',
    ),
    (
        "(FORMAT csv, DELIMITER ';', NULL 'NA', QUOTE '''')",
        "6;NA;0.1;f;2020-01-01;2020-01-01 00:00:00;'x;y';NA\n",
    ),
    ("(FORMAT csv, ESCAPE '\\')", '8,1,1,t,2020-01-01,2020-01-01 00:00:00,"q\\"\\\\",1 s\n'),
    ("(FORMAT text, DELIMITER '|', NULL '')", "9|1|1|t|2020-01-01|2020-01-01 00:00:00||\n"),
)

#: (options, data, the line PostgreSQL's error context names).
BAD = (
    (
        "(FORMAT csv)",
        "1,1,1,t,2020-01-01,2020-01-01 00:00:00,x,1 s\n"
        "q,1,1,t,2020-01-01,2020-01-01 00:00:00,x,1 s\n",
        "line 2, column i",
    ),
    (
        "(FORMAT csv, HEADER)",
        "h\n1,1,1,t,2020-01-01,2020-01-01 00:00:00,x,1 s\n"
        "2,1,1,maybe,2020-01-01,2020-01-01 00:00:00,x,1 s\n",
        "line 3, column b",
    ),
    ("(FORMAT csv)", "1,1,1,t,2020-01-01,2020-01-01 00:00:00,x\n", "line 1"),
    ("(FORMAT csv)", "1,1,1,t,2020-01-01,2020-01-01 00:00:00,x,1 s,9\n", "line 1"),
    ("", "1\t12345\t1\tt\t2020-01-01\t2020-01-01 00:00:00\tx\t1 s\n", "line 1, column n"),
    ("", "1\t1\t1e400\tt\t2020-01-01\t2020-01-01 00:00:00\tx\t1 s\n", "line 1, column f"),
    (  # every line ends as the first does
        "(FORMAT csv)",
        "1,1,1,t,2020-01-01,2020-01-01 00:00:00,x,1 s\r\n"
        "2,1,1,t,2020-01-01,2020-01-01 00:00:00,x,1 s\n",
        "line 2",
    ),
    (
        "",
        "1\t1\t1\tt\t2020-01-01\t2020-01-01 00:00:00\tx\t1 s\n"
        "2\t1\t1\tt\t2020-01-01\t2020-01-01\rx\n",
        "line 2",
    ),
    ("(FORMAT csv)", '1,1,1,t,2020-01-01,2020-01-01 00:00:00,"x,1 s\n', "line 1"),
)


def _connect(tmp_path: Path) -> Any:
    return dsql.connect(kernel="local", allowed_paths=[tmp_path])


def _rows(cur: Any, sql: str) -> list[tuple[Any, ...]]:
    cur.execute(sql)
    return cur.fetchall()


@pytest.mark.parametrize(("options", "data"), CASES)
def test_copy_from_reads_values_as_postgresql_does(
    pg: Any, tmp_path: Path, options: str, data: str
) -> None:
    select = "SELECT i, n, f, b, d, ts, s, CAST(iv AS text) FROM t ORDER BY i"
    want, got = _both_read(pg, tmp_path, TABLE, options, data, select)
    assert [_nan(r) for r in got] == [_nan(r) for r in want]


def _both_read(
    pg: Any, tmp_path: Path, table: str, options: str, data: str, select: str
) -> tuple[list[Any], list[Any]]:
    """What `select` reads after `data` is copied into a new table t, by PostgreSQL
    (sent FROM STDIN; time zone UTC) and by dsql (from a file); dsql's rowcount checked."""
    with pg.database("copy_from") as pgc:
        pgc.execute("SET TIME ZONE 'UTC'")
        pgc.execute(f"CREATE TABLE t {table}")
        with pgc.cursor().copy(f"COPY t FROM STDIN {options}") as copy:
            copy.write(data)
        want = pgc.execute(select).fetchall()
    (tmp_path / "in.txt").write_text(data)
    cur = _connect(tmp_path).cursor()
    cur.execute(f"CREATE TABLE t {table}")
    cur.execute(f"COPY t FROM '{tmp_path / 'in.txt'}' {options}")
    assert cur.rowcount == len(want)
    return want, _rows(cur, select)


def _nan(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row with NaN as text, so that rows holding one compare equal."""
    return tuple("NaN" if isinstance(v, float) and v != v else v for v in row)


@pytest.mark.parametrize(("options", "data", "where"), BAD)
def test_a_bad_row_fails_the_copy_where_postgresql_says(
    pg: Any, tmp_path: Path, options: str, data: str, where: str
) -> None:
    import psycopg

    with pg.database("copy_bad") as pgc:
        pgc.execute(f"CREATE TABLE t {TABLE}")
        with pytest.raises(psycopg.Error) as refused:
            with pgc.cursor().copy(f"COPY t FROM STDIN {options}") as copy:
                copy.write(data)
        assert f"COPY t, {where}" in str(refused.value.diag.context)
    (tmp_path / "in.txt").write_text(data)
    con = _connect(tmp_path)
    cur = con.cursor()
    cur.execute(f"CREATE TABLE t {TABLE}")
    cur.execute("CREATE MATERIALIZED VIEW v AS SELECT count(*) AS n FROM t")
    with pytest.raises(dsql.DataError) as error:
        cur.execute(f"COPY t FROM '{tmp_path / 'in.txt'}' {options}")
    assert f"COPY t, {where}" in str(error.value) and str(tmp_path / "in.txt") in str(error.value)
    assert _rows(cur, "SELECT n FROM v") == [(0,)]  # nothing written: the COPY is one write


def test_copy_to_writes_what_postgresql_writes(pg: Any, tmp_path: Path) -> None:
    rows = (
        "(1, 1.5, 0.1, true, '2024-01-02', '2024-01-02 03:04:05', 'a,\"b\"\nc\\d', '1 day'), "
        "(NULL, NULL, NULL, NULL, NULL, NULL, '', NULL)"
    )
    for options in ("", "(FORMAT csv, HEADER)", "(FORMAT csv, DELIMITER '|', NULL 'NA')"):
        with pg.database("copy_to") as pgc:
            pgc.execute(f"CREATE TABLE t {TABLE}")
            pgc.execute(f"INSERT INTO t VALUES {rows}")
            with pgc.cursor().copy(
                f"COPY (SELECT * FROM t ORDER BY i) TO STDOUT {options}"
            ) as copy:
                want = b"".join(bytes(b) for b in copy).decode()
        con = _connect(tmp_path)
        cur = con.cursor()
        cur.execute(f"CREATE TABLE t {TABLE}")
        cur.execute(f"INSERT INTO t VALUES {rows}")
        out = tmp_path / "out.txt"
        cur.execute(f"COPY (SELECT * FROM t ORDER BY i) TO '{out}' {options}")
        assert out.read_text() == want
        cur.execute(f"CREATE TABLE back {TABLE}")
        cur.execute(f"COPY back FROM '{out}' {options}")
        assert _rows(cur, "SELECT * FROM back ORDER BY i") == _rows(
            cur, "SELECT * FROM t ORDER BY i"
        )


def test_parquet_and_json_round_trip_by_column_name(tmp_path: Path) -> None:
    cur = _connect(tmp_path).cursor()
    cur.execute("CREATE TABLE t (a int, b text, c numeric(5,1))")
    cur.execute("INSERT INTO t VALUES (1, 'x', 1.5), (2, NULL, NULL)")
    for kind in ("parquet", "json"):
        path = tmp_path / f"t.{kind}"
        cur.execute(f"COPY t TO '{path}' (FORMAT {kind})")
        cur.execute(f"CREATE TABLE {kind}_t (c numeric(5,1), a int, b text)")
        cur.execute(f"COPY {kind}_t FROM '{path}' (FORMAT {kind})")
        assert _rows(cur, f"SELECT a, b, c FROM {kind}_t ORDER BY a") == _rows(
            cur, "SELECT * FROM t ORDER BY a"
        )
    pq.write_table(pa.table({"a": ["1", "x"]}), tmp_path / "bad.parquet")
    cur.execute("CREATE TABLE one (a int)")
    with pytest.raises(dsql.DataError, match="row 2, column a"):
        cur.execute(f"COPY one FROM '{tmp_path / 'bad.parquet'}' (FORMAT parquet)")
    with pytest.raises(dsql.ProgrammingError, match='has no column "b"'):
        cur.execute(f"COPY t FROM '{tmp_path / 'bad.parquet'}' (FORMAT parquet)")


def test_copy_to_stdout_from_python_is_the_cursors_copy_output(tmp_path: Path) -> None:
    cur = _connect(tmp_path).cursor()
    cur.execute("CREATE TABLE t (a int, b text)")
    cur.execute("INSERT INTO t VALUES (1, 'x\ty'), (2, NULL)")
    cur.execute("COPY (SELECT * FROM t ORDER BY a) TO STDOUT")
    assert (cur.copy_output, cur.rowcount) == ("1\tx\\ty\n2\t\\N\n", 2)
    cur.execute("SELECT 1")
    assert cur.copy_output is None


def test_what_is_no_regular_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    cur = _connect(tmp_path).cursor()
    cur.execute("CREATE TABLE t (a int)")
    for statement, error in (
        (f"COPY t FROM '{tmp_path / 'fifo'}'", "not a regular file"),
        (f"COPY t FROM '{tmp_path / 'dir'}' (FORMAT parquet)", "is a directory"),
        (f"COPY t FROM '{tmp_path / 'missing.csv'}'", "No such file or directory"),
        (f"COPY t TO '{tmp_path / 'dir'}'", "is a directory"),
        (f"COPY t TO '{tmp_path / 'nodir' / 'x.csv'}'", "no such directory"),
    ):
        with pytest.raises(dsql.errors.SourceError, match=error):
            cur.execute(statement)


def test_every_type_round_trips_through_every_format(tmp_path: Path) -> None:
    cur = _connect(tmp_path).cursor()
    columns = (
        "(i int, n numeric(6,2), f float8, b boolean, d date, ts timestamp, s text, iv interval)"
    )
    cur.execute(f"CREATE TABLE t {columns}")
    cur.execute(
        "INSERT INTO t VALUES (1, 1.5, 0.25, true, '2024-01-02', '2024-01-02 03:04:05.5', "
        "'a,\"b\"\tc\\d', '1 year 2 days 03:00'), (2, NULL, NULL, NULL, NULL, NULL, '', NULL)"
    )
    for options in ("", "(FORMAT csv, HEADER)", "(FORMAT parquet)", "(FORMAT json)"):
        out = tmp_path / "out"
        cur.execute(f"COPY t TO '{out}' {options}")
        cur.execute("DROP TABLE IF EXISTS back")
        cur.execute(f"CREATE TABLE back {columns}")
        cur.execute(f"COPY back FROM '{out}' {options}")
        assert _rows(cur, "SELECT * FROM back ORDER BY i") == _rows(
            cur, "SELECT * FROM t ORDER BY i"
        ), options


def test_listed_columns_defaults_and_not_null(tmp_path: Path) -> None:
    cur = _connect(tmp_path).cursor()
    cur.execute("CREATE TABLE t (a int NOT NULL, b text DEFAULT 'd', c int)")
    (tmp_path / "in.csv").write_text("1,5\n2,\n")
    cur.execute(f"COPY t (a, c) FROM '{tmp_path / 'in.csv'}' (FORMAT csv)")
    assert _rows(cur, "SELECT * FROM t ORDER BY a") == [(1, "d", 5), (2, "d", None)]
    (tmp_path / "null.csv").write_text("3\n\n")
    with pytest.raises(dsql.DataError, match='null value in column "a"'):
        cur.execute(f"COPY t (a) FROM '{tmp_path / 'null.csv'}' (FORMAT csv)")
    assert _rows(cur, "SELECT count(*) FROM t") == [(2,)]


@pytest.mark.parametrize(
    ("statement", "error"),
    [
        ("COPY v FROM '{p}'", "is a materialized view, not a table"),
        ("COPY w FROM '{p}'", "is a view, not a table"),
        ("COPY t (zz) FROM '{p}'", 'column "zz" of relation "t" does not exist'),
        ("COPY t (a, a) FROM '{p}'", 'column "a" specified more than once'),
        ("COPY nope FROM '{p}'", "nope"),
        ("COPY t FROM '{p}' (FORMAT xml)", 'COPY format "xml" not recognized'),
        ("COPY t FROM '{p}' (FORMAT text, QUOTE '\"')", "COPY quote available only in CSV mode"),
        ("COPY t FROM '{p}' (DELIMITER ',,')", "single one-byte character"),
        ("COPY t FROM '{p}' (FORMAT csv, FORMAT text)", "conflicting or redundant options"),
        ("COPY t FROM '{p}' (BOGUS 1)", 'option "bogus" not recognized'),
        ("COPY t FROM PROGRAM 'cat /etc/passwd'", "dsql runs no commands"),
        ("COPY w TO '{p}'", 'cannot copy from view "w"'),
        ("COPY t FROM STDIN", "needs the client to send the rows"),
    ],
)
def test_copy_refuses_what_postgresql_refuses(tmp_path: Path, statement: str, error: str) -> None:
    cur = _connect(tmp_path).cursor()
    cur.execute("CREATE TABLE t (a int)")
    cur.execute("CREATE MATERIALIZED VIEW v AS SELECT a FROM t")
    cur.execute("CREATE VIEW w AS SELECT a FROM t")
    (tmp_path / "in.txt").write_text("1\n")
    with pytest.raises(dsql.Error, match=error.replace("(", r"\(")):
        cur.execute(statement.format(p=tmp_path / "in.txt"))
    assert _rows(cur, "SELECT count(*) FROM t") == [(0,)]


def test_views_follow_a_copy_at_one_time(tmp_path: Path) -> None:
    con = _connect(tmp_path)
    cur = con.cursor()
    cur.execute("CREATE TABLE t (a int)")
    cur.execute("CREATE MATERIALIZED VIEW v AS SELECT sum(a) AS s FROM t")
    cur.execute("SUBSCRIBE v WITH (SNAPSHOT = false)")
    (tmp_path / "in.txt").write_text("".join(f"{i}\n" for i in range(1, 1001)))
    other = con.cursor()
    other.execute(f"COPY t FROM '{tmp_path / 'in.txt'}'")
    other.execute("ADVANCE BY 1")
    updates = cur.fetchall(timeout=5)
    # The empty sum's NULL retracted and the whole sum added, at one time: one write.
    assert sorted((u[1], u[2]) for u in updates) == [(-1, None), (1, 500500)]
    assert len({u[0] for u in updates}) == 1


# --- the sandbox ---------------------------------------------------------------------------
def _attacks(tmp_path: Path) -> list[str]:
    inside = tmp_path / "allowed"
    inside.mkdir()
    (inside / "link").symlink_to("/etc/passwd")
    (inside / "dirlink").symlink_to("/etc")
    return [
        "COPY t FROM '/etc/passwd'",
        f"COPY t FROM '{inside}/../../../../etc/passwd'",
        f"COPY t FROM '{inside}/link'",
        f"COPY t FROM '{inside}/dirlink/passwd'",
        f"COPY t FROM 'file://{inside}/link'",
        "COPY t FROM 'passwd'",
        f"COPY t TO '{tmp_path}/outside.txt'",
        f"COPY (SELECT 1) TO '{inside}/dirlink/x.txt'",
        f"COPY t FROM '{inside}/../hidden.txt' (FORMAT csv)",
        "COPY t FROM 's3a://bucket/x.csv'",
        f"CREATE SOURCE s (a text) FROM FILES '{inside}/dirlink' WITH (FORMAT = 'csv')",
        "CREATE SOURCE s (a text) FROM FILES '/etc' WITH (FORMAT = 'text')",
    ]


def test_sql_reaches_no_file_outside_the_allowed_paths(tmp_path: Path) -> None:
    attacks = _attacks(tmp_path)
    (tmp_path / "hidden.txt").write_text("secret-content\n")
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path / "allowed"])
    cur = con.cursor()
    cur.execute("CREATE TABLE t (a text)")
    for attack in attacks:
        with pytest.raises(dsql.errors.AccessError) as refused:
            cur.execute(attack)
        assert "root:" not in str(refused.value) and "secret-content" not in str(refused.value)
    assert not (tmp_path / "outside.txt").exists()
    assert _rows(cur, "SELECT count(*) FROM t") == [(0,)]
    with pytest.raises(dsql.errors.ParseError):  # as in PostgreSQL, a path is a literal only
        cur.execute("COPY t FROM ?", ("/etc/passwd",))
    with pytest.raises(dsql.errors.AccessError):  # a query's parameter stays data
        cur.execute("COPY (SELECT ? AS p) TO '/etc/x.csv'", ("/tmp",))


def test_nothing_is_reachable_by_default(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("x\n")
    cur = dsql.connect(kernel="local").cursor()
    cur.execute("CREATE TABLE t (a text)")
    with pytest.raises(dsql.errors.AccessError, match="allowed_paths"):
        cur.execute(f"COPY t FROM '{tmp_path / 'in.txt'}'")
    with pytest.raises(dsql.errors.AccessError):
        cur.execute(f"COPY t TO '{tmp_path / 'out.txt'}'")


# --- the CLI and the shell -----------------------------------------------------------------
COMMAND = [sys.executable, "-m", "dsql.cli"]


def test_a_script_sends_rows_after_copy_from_stdin(tmp_path: Path) -> None:
    script = tmp_path / "s.sql"
    script.write_text(
        "CREATE TABLE t (a int, b text);\n"
        "COPY t FROM STDIN;\n1\tx;y\n2\t\\N\n\\.\n"
        'COPY t (a, b) FROM STDIN WITH (FORMAT csv);\n3,"it\'s"\n\\.\n'
        "COPY (SELECT * FROM t ORDER BY a) TO STDOUT (FORMAT csv);\n"
        f"COPY t TO '{tmp_path / 'out.txt'}';\n"
        "SELECT nope;\n"
    )
    env = dict(os.environ, DSQL_KERNEL="local")
    done = subprocess.run(
        [*COMMAND, "run", str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert "COPY 2\nCOPY 1\n1,x;y\n2,\n3,it's\n" in done.stdout
    assert "outside the paths SQL may reach" in done.stderr and f"{script}:10" in done.stderr
    allowed = subprocess.run(
        [*COMMAND, "--allow-path", str(tmp_path), "run", str(script)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert f"{script}:11" in allowed.stderr  # the COPY TO ran; SELECT nope failed
    assert sorted((tmp_path / "out.txt").read_text().splitlines()) == [
        "1\tx;y",
        "2\t\\N",
        "3\tit's",
    ]


def test_the_shell_reads_rows_after_copy_from_stdin(tmp_path: Path) -> None:
    from test_repl import Terminal

    env = dict(os.environ, DSQL_HISTORY=str(tmp_path / "h"), TERM="dumb", NO_COLOR="1")
    env["DSQL_KERNEL"] = "local"
    t = Terminal(env)
    try:
        t.expect(r"dsql> ")
        t.send("CREATE TABLE t (a int);\n")
        t.expect(r"CREATE TABLE")
        t.send("COPY t FROM STDIN;\n")
        t.expect(r"End with a backslash and a period")
        t.send("1\n2\n\\.\n")
        t.expect(r"COPY 2")
        t.send("SELECT sum(a) AS s FROM t;\n")
        t.expect(r"\b3\b")
        t.send("\\q\n")
        assert t.wait() == 0
    finally:
        os.close(t.fd)


def test_copy_on_spark_equals_copy_in_process(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "in.csv").write_text('a,b\n1,x\n2,\n3,"y,z"\n')
    results = []
    for con in (
        dsql.connect(kernel="local", allowed_paths=[tmp_path]),
        dsql.connect(spark=spark, allowed_paths=[tmp_path]),
    ):
        cur = con.cursor()
        cur.execute("CREATE TABLE t (a int, b text)")
        cur.execute("CREATE MATERIALIZED VIEW v AS SELECT count(b) AS n, sum(a) AS s FROM t")
        cur.execute(f"COPY t FROM '{tmp_path / 'in.csv'}' (FORMAT csv, HEADER)")
        out = tmp_path / f"out-{len(results)}.csv"
        cur.execute(f"COPY (SELECT * FROM t ORDER BY a) TO '{out}' (FORMAT csv)")
        results.append((_rows(cur, "SELECT * FROM v"), out.read_text()))
        con.close()
    assert results[0] == results[1] == ([(2, 6)], '1,x\n2,\n3,"y,z"\n')


#: Types whose input PostgreSQL reads by rules of their own, and data for them.
EXOTIC = "(k int, b boolean, r real, bt bytea, arr int[], tz timestamptz, c varchar(3))"
EXOTIC_DATA = (
    "1\ttr\t1.5\t\\\\x4142\t{1,NULL,3}\t2024-01-02 03:04:05+02\tab \r\n"
    "2\tOF\t-Infinity\tab\\\\\\\\c\t{}\t2024-01-02 03:04:05\t\\N\r\n"
    "3\t y \t1e-3\t\\N\t\\N\t2024-01-02T03:04:05.25-01:30\tabc\r\n"
)


def test_types_with_input_rules_of_their_own_read_as_postgresql_reads_them(
    pg: Any, tmp_path: Path
) -> None:
    want, got = _both_read(pg, tmp_path, EXOTIC, "", EXOTIC_DATA, "SELECT * FROM t ORDER BY k")
    assert [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in want] == got
