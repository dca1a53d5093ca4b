"""`dsql run` and `dsql explain`: golden outputs, error format, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_examples import check_golden, run_cli

SCRIPT = """\
CREATE TABLE t (a int, b text);
INSERT INTO t VALUES (1, 'x');
SELECT a,
       b
  FROM t WHERE;
INSERT INTO t VALUES (2, 'y');
SELECT count(*) AS n FROM t;
"""


def write(tmp_path: Path, text: str, name: str = "script.sql") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_first_error_stops_the_script_with_a_caret_and_exit_1(tmp_path, capsys):
    path = write(tmp_path, SCRIPT)
    code, out, err = run_cli(capsys, "run", path)
    assert code == 1
    assert out.splitlines() == ["CREATE TABLE", "INSERT 0 1"]  # the rest did not run
    lines = err.splitlines()
    assert lines[0].startswith("error: ")
    assert lines[1] == "    FROM t WHERE"  # the error's line of the statement, indented
    assert lines[2] == " " * lines[1].index("WHERE") + "^"
    assert lines[3].startswith("hint: ")
    assert lines[4] == f"  at {path}:5"  # the statement starts at line 3; WHERE is on 5
    assert "Traceback" not in err


def test_continue_runs_the_rest_and_still_fails(tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", write(tmp_path, SCRIPT), "--continue")
    assert code == 1
    assert out.splitlines()[-5:] == [" n", "---", " 2", "(1 row)", ""]
    assert err.count("error: ") == 1


def test_bind_and_type_errors_name_the_statement(tmp_path, capsys):
    text = "CREATE TABLE t (a int);\nSELECT nope FROM t;\nINSERT INTO t VALUES ('x');\n"
    code, _, err = run_cli(capsys, "run", write(tmp_path, text), "--continue")
    assert code == 1
    first, second = err.split("error: ")[1:]
    assert first.startswith("column 'nope' does not exist") and ":2" in first
    assert "^" in first.splitlines()[2]
    assert "INSERT INTO t VALUES ('x')" in second and ":3" in second


def test_missing_file_and_bad_conf(tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", "no/such/file.sql")
    assert code == 1 and out == ""
    assert err.startswith("error: no such file: no/such/file.sql\nhint: ")
    code, _, err = run_cli(capsys, "run", write(tmp_path, "SELECT 1;"), "--conf", "novalue")
    assert code == 1 and "is not key=value" in err


def test_subscribe_prints_updates_until_up_to(tmp_path, capsys):
    text = """\
CREATE TABLE t (a int);
SUBSCRIBE t WITH (PROGRESS = false) UP TO 20;
DECLARE c CURSOR FOR SUBSCRIBE (SELECT sum(a) AS s FROM t) WITH (SNAPSHOT = false);
INSERT INTO t VALUES (1);
ADVANCE TO 10;
INSERT INTO t VALUES (2), (2);
ADVANCE TO 20;
INSERT INTO t VALUES (3);
ADVANCE TO 30;
DELETE FROM t WHERE a = 2;
FETCH ALL c;
"""
    code, out, err = run_cli(capsys, "run", write(tmp_path, text), "--echo")
    assert code == 0, err
    check_golden("subscribe_up_to.out", out)


def test_explain_prints_each_plan_without_running_writes(capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    code, out, err = run_cli(capsys, "explain", "examples/quickstart.sql")
    assert code == 0, err
    assert "-- CREATE MATERIALIZED VIEW revenue AS SELECT c.city" in out
    assert "Get orders" in out and "Get customers" in out
    assert "INSERT" not in out and "mz_diff" not in out  # writes and SUBSCRIBE did not run
    code, out, _ = run_cli(capsys, "explain", "examples/quickstart.sql", "--stage", "raw")
    assert code == 0 and "Reduce" in out


def test_version(capsys):
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.startswith("dsql ")


def test_the_console_script_as_a_process(tmp_path):
    """A real process: stdin as the script, exit status, no traceback on errors."""
    text = (
        "CREATE TABLE t (a int);\nINSERT INTO t VALUES (1);\nSELECT a FROM t;\nDROP TABLE nope;\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "dsql.cli", "run", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert proc.stdout == "CREATE TABLE\nINSERT 0 1\n a\n---\n 1\n(1 row)\n\n"
    # A JVM that starts (a suite run with Spark forced) announces its incubator modules.
    jvm = "WARNING: Using incubator modules"
    stderr = "".join(s for s in proc.stderr.splitlines(True) if not s.startswith(jvm))
    assert stderr.startswith("error: unknown table or view 'nope'")
    assert "Traceback" not in stderr


def test_kernel_spark_says_when_spark_starts(spark, tmp_path, capsys):
    text = "CREATE TABLE t (a int);\nINSERT INTO t VALUES (1), (2);\nSELECT sum(a) AS s FROM t;\n"
    code, out, err = run_cli(capsys, "run", write(tmp_path, text), "--kernel", "spark")
    assert code == 0, err
    # The suite's session runs already: the line says it is used, not started.
    assert "dsql: using the running Spark session (local mode, " in err
    assert out.splitlines()[-4:] == ["---", " 3", "(1 row)", ""]


@pytest.mark.parametrize("stage", ["physical"])
def test_explain_physical(tmp_path, capsys, stage):
    text = "CREATE TABLE t (a int);\nSELECT a + 1 FROM t WHERE a > 0;\n"
    code, out, err = run_cli(capsys, "explain", write(tmp_path, text), "--stage", stage)
    assert code == 0, err
    assert "-- SELECT a + 1 FROM t WHERE a > 0" in out
