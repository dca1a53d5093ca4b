"""The examples run in CI: each script's `dsql run --echo` output is its golden file, and
every SELECT in it agrees with DuckDB running the same statements from scratch.

Regenerate the golden files after an intended change with
`DSQL_UPDATE_GOLDEN=1 python -m pytest tests/test_examples.py tests/test_cli.py`.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import duckdb
import pytest
import sqlglot

import dsql
from dsql.cli import main
from dsql.grammar.source import Source

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
GOLDEN = Path(__file__).resolve().parent / "golden"
SCRIPTS = ["quickstart", "temporal_window", "reachability", "org_chart"]


def check_golden(name: str, text: str) -> None:
    """`text` equals tests/golden/`name` (rewritten instead when DSQL_UPDATE_GOLDEN is set)."""
    path = GOLDEN / name
    if os.environ.get("DSQL_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}: run with DSQL_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_script_output_is_golden(name, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli(capsys, "run", f"examples/{name}.sql", "--echo")
    assert code == 0, err
    assert "error" not in err
    check_golden(f"{name}.out", out)


@pytest.mark.parametrize("name", ["quickstart", "reachability", "org_chart"])
def test_example_reads_agree_with_duckdb(name):
    """Each SELECT of the script, maintained by dsql, equals DuckDB's from-scratch answer."""
    text = (EXAMPLES / f"{name}.sql").read_text()
    con = dsql.connect()
    oracle = duckdb.connect()
    checked = 0
    for fragment in Source(text).statements():
        sql = fragment.text
        ours = con.execute(sql)
        word = sql.split()[0].upper()
        if word in ("ADVANCE", "SUBSCRIBE"):
            continue
        (translated,) = sqlglot.transpile(sql, read="postgres", write="duckdb")
        theirs = oracle.execute(translated)
        if word == "SELECT":
            assert ours.fetchall() == theirs.fetchall(), sql
            checked += 1
    assert checked
    con.close()


def test_embedding_example_with_spark(spark, capsys):
    """examples/embedding.py end to end, Spark interop included (the shared session)."""
    spec = importlib.util.spec_from_file_location("embedding", EXAMPLES / "embedding.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capsys.readouterr()
    module.main(spark=spark)
    out = capsys.readouterr().out.splitlines()
    # The plan lines in between depend on the optimizer; the data lines do not.
    for line in [
        "inserted 3",
        "['sensor', 'total'] ('a', 7) [('b', 5)]",
        "refused: column 'nope' does not exist",
        "cursor snapshot [(0, 1, 3)]",
        "cursor changes [(1000, 1, 2), (1000, -1, 3)]",
        "over the limit [('cellar', 6)]",
        "[('a', 4), ('b', 6), ('c', 11)]",
    ]:
        assert line in out
    changes = next(x for x in out if x.startswith("changes"))
    assert "'mz_timestamp': 1000, 'mz_diff': -1, 'sensor': 'a', 'total': 7" in changes
