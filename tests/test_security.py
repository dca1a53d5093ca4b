"""The sandbox: SQL reaches no file, environment variable, network address or engine
setting the user did not name through a documented feature.

Each attack is tried through every SQL entry point (one-off queries, WHERE clauses, view
definitions, writes, column defaults, SUBSCRIBE, EXPLAIN, ADVANCE/AS OF times, query
parameters, `dsql run` scripts) on both kernels; each gives a `DsqlError`, nothing of the
file or environment shows, and the session goes on working. The engines are locked
underneath as well: every DuckDB connection dsql opens has external access off and its
configuration locked.
"""

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
from dsql.runtime.kernel import duckdb_sandbox

#: Expressions that would read a file, the environment, a setting or the network, or
#: change a setting, if they reached an engine.
ATTACKS = (
    "(SELECT content FROM read_text('/etc/passwd'))",
    "(SELECT count(*) FROM read_csv('/etc/passwd'))",
    "(SELECT count(*) FROM read_parquet('/etc/passwd'))",
    "(SELECT count(*) FROM read_json('/etc/passwd'))",
    "(SELECT count(*) FROM read_blob('/etc/passwd'))",
    "(SELECT count(*) FROM glob('/etc/*'))",
    "(SELECT count(*) FROM read_csv('https://example.com/x.csv'))",
    "(SELECT count(*) FROM 'https://example.com/x.csv')",
    "(SELECT count(*) FROM '/etc/passwd')",
    "json_serialize_plan('SELECT * FROM read_csv(''/etc/passwd'')')",
    "getenv('HOME')",
    "current_setting('threads')",
    "version()",
    "'/etc/passwd'::regclass",
    "sleep_ms(1)",
    "(SELECT count(*) FROM duckdb_settings())",
    "(SELECT count(*) FROM pg_catalog.pg_settings)",
    "reflect('java.lang.System', 'getenv', 'HOME')",
    "java_method('java.lang.System', 'getProperty', 'user.home')",
    "input_file_name()",
)

#: Every SQL entry point, with `{e}` where an expression goes.
ENTRY_POINTS = (
    "SELECT {e} AS x",
    "SELECT a FROM t WHERE CAST({e} AS text) IS NOT NULL",
    "SELECT a, CAST({e} AS text) FROM t GROUP BY a",
    "CREATE MATERIALIZED VIEW v AS SELECT a, CAST({e} AS text) AS x FROM t",
    "CREATE VIEW w AS SELECT a FROM t WHERE CAST({e} AS text) <> ''",
    "INSERT INTO t SELECT 1, CAST({e} AS text)",
    "INSERT INTO t VALUES (1, CAST({e} AS text))",
    "UPDATE t SET s = CAST({e} AS text)",
    "DELETE FROM t WHERE s = CAST({e} AS text)",
    "CREATE TABLE u (a int, s text DEFAULT CAST({e} AS text))",
    "SUBSCRIBE (SELECT CAST({e} AS text) AS x)",
    "EXPLAIN SELECT {e} AS x",
    "ADVANCE TO (SELECT 10 + length(CAST({e} AS text)))",
    "ADVANCE BY (SELECT length(CAST({e} AS text)))",
    "SELECT a FROM t AS OF (SELECT length(CAST({e} AS text)))",
    "SUBSCRIBE t AS OF (SELECT length(CAST({e} AS text)))",
    "SELECT * FROM generate_series(1, length(CAST({e} AS text)))",
)

#: Statements that would reach the engine's files, extensions or settings.
STATEMENTS = (
    "COPY t TO '/tmp/dsql-leak.csv'",
    "COPY (SELECT 1) TO '/tmp/dsql-leak.csv'",
    "ATTACH '/tmp/dsql-leak.db' AS leak",
    "INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA database_list",
    "CALL pragma_version()",
    "SET threads = 4",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET ALL",
    "SHOW threads",
    "SHOW ALL",
    "EXPORT DATABASE '/tmp/dsql-leak'",
    "IMPORT DATABASE '/tmp/dsql-leak'",
    "CREATE SECRET s (TYPE s3)",
    "SELECT * FROM information_schema.tables",
)

_SECRETS = ("root:", os.environ.get("HOME", "/root"))


def _connect(kernel: str, spark: Any = None) -> Any:
    con = dsql.connect(kernel=kernel, spark=spark) if spark else dsql.connect(kernel=kernel)
    cur = con.cursor()
    cur.execute("CREATE TABLE t (a int, s text)")
    cur.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y')")
    return cur


def _refused(cur: Any, sql: str) -> dsql.Error:
    """`sql` gives a DsqlError showing nothing of the file or environment."""
    with pytest.raises(dsql.Error) as caught:
        cur.execute(sql)
        if cur.description:
            cur.fetchall()
    text = str(caught.value)
    assert not any(secret in text.replace(sql, "") for secret in _SECRETS), text
    return caught.value


def _usable(cur: Any) -> None:
    cur.execute("SELECT sum(a) AS n FROM t")
    assert cur.fetchall() == [(3,)]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_attack_through_every_entry_point_is_refused(entry: str) -> None:
    cur = _connect("local")
    for attack in ATTACKS:
        _refused(cur, entry.format(e=attack))
    _usable(cur)
    cur.execute("SHOW VIEWS")
    assert cur.fetchall() == []


@pytest.mark.parametrize("statement", STATEMENTS)
def test_engine_statements_are_refused(statement: str) -> None:
    cur = _connect("local")
    _refused(cur, statement)
    _usable(cur)
    assert not Path("/tmp/dsql-leak.csv").exists()


def test_set_takes_only_dsqls_setting_and_harmless_client_ones() -> None:
    cur = _connect("local")
    cur.execute("SET statement_timeout = '5s'")
    cur.execute("SET application_name = 'psql'")
    error = _refused(cur, "SET search_path = 'x'")
    assert error.message == 'unrecognized configuration parameter "search_path"'
    _usable(cur)


def test_everything_is_refused_on_spark(spark: Any) -> None:
    cur = _connect("spark", spark)
    for entry in ENTRY_POINTS:
        for attack in ATTACKS:
            _refused(cur, entry.format(e=attack))
    for statement in STATEMENTS:
        _refused(cur, statement)
    _usable(cur)


def test_advance_to_reads_no_file_byte_by_byte() -> None:
    cur = _connect("local")
    error = _refused(cur, "ADVANCE TO (SELECT ascii(content[1]) FROM read_text('/etc/passwd'))")
    assert error.message == "function read_text() does not exist"
    assert error.position is not None


@pytest.mark.parametrize(
    ("time", "message"),
    [
        ("(SELECT a FROM t)", "returns 2 rows"),
        ("(SELECT a, a FROM t)", "returns 2 columns"),
        ("(SELECT s FROM t WHERE a = 1)", "is of type"),
        ("(SELECT a FROM t WHERE a > 5)", "returns 0 rows"),
        ("(SELECT NULL::int)", "NULL"),
        ("'soon'", "is of type"),
    ],
)
def test_a_time_query_must_give_one_time(time: str, message: str) -> None:
    cur = _connect("local")
    for sql in (f"ADVANCE TO {time}", f"SELECT a FROM t AS OF {time}"):
        assert message in _refused(cur, sql).message
    _usable(cur)


def test_a_time_query_reads_the_catalog_through_the_binder() -> None:
    cur = _connect("local")
    cur.execute("ADVANCE TO (SELECT max(a) * 1000 FROM t)")
    cur.execute("ADVANCE BY (SELECT INTERVAL '2 seconds')")
    cur.execute("SELECT a FROM t AS OF (SELECT 2000)")
    assert sorted(cur.fetchall()) == [(1,), (2,)]
    cur.execute("ADVANCE TO TIMESTAMP '1970-01-01 00:00:05'")
    with pytest.raises(dsql.Error, match="future"):
        cur.execute("SELECT a FROM t AS OF (SELECT 6000)")


@pytest.mark.parametrize(
    "value",
    [
        "/etc/passwd",
        "x') UNION SELECT content FROM read_text('/etc/passwd') --",
        "' || getenv('HOME') || '",
    ],
)
def test_a_parameter_is_data_never_sql(value: str) -> None:
    cur = _connect("local")
    cur.execute("SELECT ? AS v", [value])
    assert cur.fetchall() == [(value,)]
    cur.execute("SELECT a FROM t WHERE s = ?", [value])
    assert cur.fetchall() == []
    _usable(cur)


def test_a_script_run_by_the_cli_is_refused_and_shows_no_secret(tmp_path: Path) -> None:
    script = tmp_path / "attack.sql"
    lines = ["CREATE TABLE t (a int, s text);", "INSERT INTO t VALUES (1, 'x');"]
    lines += [entry.format(e=attack) + ";" for entry in ENTRY_POINTS[:4] for attack in ATTACKS]
    lines += [f"{statement};" for statement in STATEMENTS]
    lines.append("SELECT sum(a) AS n FROM t;")
    script.write_text("\n".join(lines) + "\n")
    run = subprocess.run(
        [sys.executable, "-m", "dsql.cli", "run", "--continue", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DSQL_KERNEL": "local"},
    )
    assert "Traceback" not in run.stderr
    assert run.stderr.count("error: ") == len(lines) - 3
    assert "root:" not in run.stdout + run.stderr
    assert run.stdout.rstrip().endswith("(1 row)")


def test_every_duckdb_connection_is_locked() -> None:
    con = duckdb_sandbox.connect()
    for sql in (
        "SELECT * FROM read_text('/etc/passwd')",
        "SET enable_external_access = true",
        "SET threads = 4",
        "INSTALL httpfs",
        "LOAD httpfs",
        "ATTACH '/tmp/dsql-leak.db'",
    ):
        with pytest.raises(Exception):  # noqa: B017 - DuckDB's own error classes
            con.execute(sql)
    settings = dict(con.execute("SELECT name, value FROM duckdb_settings()").fetchall())
    assert settings["enable_external_access"] == "false"
    assert settings["lock_configuration"] == "true"
    assert settings["autoload_known_extensions"] == "false"
    assert settings["autoinstall_known_extensions"] == "false"


def test_the_kernels_connection_is_the_locked_one() -> None:
    from dsql.runtime.kernel.local import LocalKernel

    kernel = LocalKernel()
    value = kernel._con.execute("SELECT current_setting('enable_external_access')").fetchone()
    assert value == (False,)


def test_tables_from_files_are_read_by_dsql_not_by_the_engine(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3]}), path)
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b\n1,x\n2,y\n")
    con = dsql.connect(kernel="local")
    con.create_table("p", str(path))
    con.create_table("c", str(csv))
    cur = con.cursor()
    cur.execute("SELECT sum(a) FROM p")
    assert cur.fetchall() == [(6,)]
    cur.execute("SELECT b FROM c ORDER BY a")
    assert cur.fetchall() == [("x",), ("y",)]


#: Literals and quoted names holding every internal name the kernels substitute or
#: print: positional columns, time and diff columns, input placeholders, Spark's format
#: placeholders and braces, EXPLAIN's `#n`.
_INTERNAL = (
    "x_c0y",
    "_c0",
    "_c1 _c0",
    "__time__",
    "__diff__",
    '"__dsql_input_src__"',
    "__dsql_input_h__",
    "__dsql_input_f__",
    "__in_src",
    "`__in_h`",
    "{__in_src}",
    "{x}",
    "}{",
    "{{",
    "#0",
    "^#0",
    "__outer0",
    "'quoted'",
    "back\\slash \\n",
)


def _literals_survive(cur: Any) -> None:
    quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in _INTERNAL)
    cur.execute(f"SELECT {quoted} FROM t WHERE a = 1")
    assert cur.fetchall() == [_INTERNAL]
    names = ", ".join(f'a AS "{v.replace(chr(34), chr(34) * 2)}"' for v in _INTERNAL)
    cur.execute(f"SELECT {names} FROM t WHERE a = 1")
    assert [d[0] for d in cur.description] == list(_INTERNAL)
    cur.execute(
        "CREATE MATERIALIZED VIEW lit AS SELECT a, s || '_c0' || '{__in_src}' AS x, "
        "'__time__' AS y FROM t"
    )
    cur.execute("INSERT INTO t VALUES (3, '__diff__')")
    cur.execute("SELECT a, x, y FROM lit ORDER BY a")
    assert cur.fetchall() == [
        (1, "x_c0{__in_src}", "__time__"),
        (2, "y_c0{__in_src}", "__time__"),
        (3, "__diff___c0{__in_src}", "__time__"),
    ]
    cur.execute("SELECT a FROM t WHERE s = '__diff__'")
    assert cur.fetchall() == [(3,)]
    cur.execute(
        'CREATE TABLE x ("__time__" int, "_c0" text, "__diff__" int, '
        '"__dsql_input_src__" int, "{__in_src}" int)'
    )
    cur.execute("INSERT INTO x VALUES (5, 'a', 7, 8, 9), (6, 'b', -1, 2, 3)")
    cur.execute(
        'CREATE MATERIALIZED VIEW xv AS SELECT "__time__" + "__diff__" AS "__diff__", "_c0", '
        '"{__in_src}" FROM x WHERE "__dsql_input_src__" > 1'
    )
    cur.execute('SELECT * FROM xv ORDER BY "_c0"')
    assert cur.fetchall() == [(12, "a", 9), (5, "b", 3)]
    cur.execute('SELECT "_c0", sum("__diff__") FROM x GROUP BY "_c0" ORDER BY 1')
    assert cur.fetchall() == [("a", 7), ("b", -1)]


def test_string_literals_holding_internal_names_are_not_rewritten() -> None:
    _literals_survive(_connect("local"))


def test_string_literals_holding_internal_names_are_not_rewritten_on_spark(spark: Any) -> None:
    _literals_survive(_connect("spark", spark))


def test_explain_prints_literals_as_they_are() -> None:
    cur = _connect("local")
    cur.execute("EXPLAIN SELECT a, 'x _c0 \"q\"' AS s FROM t WHERE s <> '_c1'")
    (plan,) = cur.fetchall()[0]
    assert "'x _c0 \"q\"'" in plan
    assert "'_c1'" in plan
