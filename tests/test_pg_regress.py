"""PostgreSQL's own regression scripts, each statement run on PostgreSQL and on dsql.

Every script of the corpus (`/work/shared/pg-regress/sql/`, see tests/pg_regress.py)
runs against the session's private PostgreSQL (`pg`) and a fresh in-process dsql
connection, both holding the shared tables. No statement may be `wrong`: dsql answers
as PostgreSQL does, or refuses in its own words, or errors where PostgreSQL errors. The
exceptions are `KNOWN`: statements (by script and line) whose difference is one of
README's "Where dsql differs from PostgreSQL" rows, or where the oracle, PostgreSQL 15,
lacks what the corpus (written for PostgreSQL 18) uses. Each is checked to still differ,
so the table stays true. Each test prints its script's counts (`pytest -s` shows them).
"""

from __future__ import annotations

from typing import Any

import pytest
from pg_regress import SCRIPTS, STATEMENT_TIMEOUT, load_shared, run_script

import dsql

#: (script, line): why dsql's answer differs there, a row of README's differences table.
KNOWN: dict[tuple[str, int], str] = {}


@pytest.mark.parametrize("script", SCRIPTS)
def test_script(script: str, pg: Any) -> None:
    with pg.database(f"regress_{script}") as conn:
        conn.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
        con = dsql.connect(kernel="local")
        con.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
        load_shared(con, conn)
        run = run_script(script, con, conn)
        con.close()
    print("\n" + run.summary())
    wrong = [v for v in run.of("wrong") if (script, v.statement.line) not in KNOWN]
    assert not wrong, f"{len(wrong)} wrong answers:\n" + "\n".join(map(str, wrong))
    lines = {v.statement.line for v in run.of("wrong")}
    stale = [line for (name, line) in KNOWN if name == script and line not in lines]
    assert not stale, f"KNOWN lists lines that no longer differ: {stale}"
