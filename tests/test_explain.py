"""EXPLAIN goldens: each stage and each optimizer pass over representative queries.

The fixtures in `tests/golden/explain/` hold, per EXPLAIN stage
(`stage-<stage>.txt`) and per optimizer pass (`pass-<n>-<name>.txt`, the plan
after that pass in the first round), every query of `QUERIES`. A change in
planning shows up as a diff of these files. Regenerate after an intended
change with `DSQL_REGEN_GOLDEN=1 python -m pytest tests/test_explain.py` and
review the diff. Every query is also read once and compared with DuckDB, so a
golden plan is a correct one.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import duckdb
import pytest
import sqlglot

import dsql
from dsql.explain import stage_text
from dsql.planner.decorrelate import decorrelate
from dsql.planner.optimize import PASSES, stages
from dsql.planner.show import tree

GOLDEN = Path(__file__).parent / "golden" / "explain"
REGEN = os.environ.get("DSQL_REGEN_GOLDEN") == "1"

TABLES = {"r": "a int, b int", "s": "a int, c int"}
ROWS = {
    "r": [(1, 2), (2, 3), (2, None), (None, 1), (3, 5)],
    "s": [(1, 1), (2, -1), (2, 4), (4, 2), (None, 0)],
}

QUERIES = {
    "map_filter_folded": "SELECT a, b * 2 AS b2 FROM r WHERE b > 1 AND 1 = 1",
    "join_pushdown": "SELECT r.a, s.c FROM r JOIN s ON r.a = s.a WHERE s.c > 0 AND r.b + s.c > 3",
    "cross_join_to_keys": "SELECT r.b, s.c FROM r, s WHERE r.a = s.a AND r.b < 4",
    "left_join": "SELECT r.a, s.c FROM r LEFT JOIN s ON r.a = s.a AND s.c > 0 WHERE r.b > 1",
    "scalar_subquery": "SELECT a, (SELECT count(*) FROM s WHERE s.a = r.a) AS n FROM r",
    "group_having": "SELECT a, count(*) AS n FROM r GROUP BY a HAVING a > 1 AND count(*) > 0",
    "union_filtered": (
        "SELECT x FROM (SELECT a AS x FROM r UNION ALL SELECT c FROM s) AS u WHERE x > 1"
    ),
    "series": "SELECT r.a, g.i FROM r, generate_series(1, r.b) AS g(i) WHERE r.b < 4 AND g.i > 1",
    "temporal": "SELECT a FROM r WHERE mz_now() >= b AND mz_now() < b + 1000",
}

#: DuckDB has no mz_now(): the reads happen at time 0.
ORACLE = {**QUERIES, "temporal": QUERIES["temporal"].replace("mz_now()", "0")}


@pytest.fixture(scope="module")
def con():  # noqa: ANN201
    c = dsql.connect()
    for name, cols in TABLES.items():
        c.execute(f"CREATE TABLE {name} ({cols})")
        values = ", ".join(
            "(" + ", ".join("NULL" if v is None else str(v) for v in row) + ")"
            for row in ROWS[name]
        )
        c.execute(f"INSERT INTO {name} VALUES {values}")
    return c


def _check(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if REGEN:
        path.write_text(text)
        return
    assert path.exists(), f"missing golden {path}: run with DSQL_REGEN_GOLDEN=1"
    assert text == path.read_text(), f"{path} differs (DSQL_REGEN_GOLDEN=1 regenerates)"


def _document(render) -> str:  # noqa: ANN001
    parts = [f"-- {name}: {sql}\n{render(sql)}\n" for name, sql in QUERIES.items()]
    return "\n".join(parts)


@pytest.mark.parametrize("stage", ["raw", "decorrelated", "optimized", "physical"])
def test_explain_stage_goldens(con, stage: str) -> None:  # noqa: ANN001
    def render(sql: str) -> str:
        table = con.execute(f"EXPLAIN {stage.upper()} PLAN FOR {sql}").fetchall()
        return table[0][0]

    _check(f"stage-{stage}", _document(render))


@pytest.mark.parametrize("number", range(len(PASSES)))
def test_optimizer_pass_goldens(con, number: int) -> None:  # noqa: ANN001
    name = PASSES[number][0]

    def render(sql: str) -> str:
        plan = decorrelate(con.session.plan(sqlglot.parse_one(sql, read="postgres")).plan)
        return "\n".join(tree(stages(plan)[number][1]))

    _check(f"pass-{number + 1}-{name}", _document(render))


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_golden_queries_match_duckdb(con, name: str) -> None:  # noqa: ANN001
    oracle = duckdb.connect()
    for table, cols in TABLES.items():
        oracle.execute(f"CREATE TABLE {table} ({cols})")
        oracle.executemany(f"INSERT INTO {table} VALUES (?, ?)", ROWS[table])
    got = Counter(con.execute(QUERIES[name]).fetchall())
    want = Counter(oracle.execute(ORACLE[name]).fetchall())
    assert got == want


def test_optimized_stage_is_the_optimizer_output(con) -> None:  # noqa: ANN001
    plan = con.session.plan(sqlglot.parse_one(QUERIES["join_pushdown"], read="postgres")).plan
    assert "Linear" in stage_text(plan, "optimized")
    assert "Linear" not in stage_text(plan, "decorrelated")
