"""Common statement shapes of PostgreSQL's corpus, each answered as PostgreSQL answers it.

Each case runs on the session's PostgreSQL (`pg`) and on dsql (local kernel) and must get
the verdict given (tests/pg_regress.py: `same`, `pg_error`, `refused`). The shapes are
those the outside suites use where dsql answered wrongly or crashed: a global aggregate
whose HAVING reads no aggregate (`HAVING false` must keep no row, even of an empty
input), the empty grouping set `GROUP BY ()`, and queries of no output columns
(`SELECT FROM t`: one empty row per row). `test_views_follow_changes` keeps the same
shapes as materialized views through deletes and inserts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pg_regress import Statement, holding, judge

import dsql

TABLES = (
    "CREATE TABLE t (a int, b int, s text)",
    "INSERT INTO t VALUES (1, 2, 'a'), (2, NULL, 'b'), (NULL, 3, NULL), (2, 2, 'a_c')",
    "CREATE TABLE e (a int)",
)

#: Each statement and the verdict it must have.
CASES = (
    # HAVING of a global aggregate: filters its one row, which exists for any input.
    ("SELECT count(*) FROM t HAVING false", "same"),
    ("SELECT count(*) FROM t HAVING 1 > 2", "same"),
    ("SELECT sum(a), count(*) FROM e HAVING true", "same"),
    ("SELECT sum(a) FROM e HAVING false", "same"),
    ("SELECT count(*) FROM t WHERE false HAVING 1 = 1", "same"),
    ("SELECT max(a) FROM t HAVING count(*) > 2 AND false", "same"),
    # HAVING without any aggregate: one group of all rows.
    ("SELECT 1 FROM t HAVING true", "same"),
    ("SELECT 2 AS two FROM t HAVING false", "same"),
    ("SELECT 'x' FROM e HAVING true", "same"),
    ("SELECT (SELECT 1 FROM t HAVING true), (SELECT 1 FROM e HAVING false)", "same"),
    ("SELECT a, (SELECT 1 FROM t u WHERE u.a = t.a HAVING true) FROM t", "same"),
    ("SELECT b FROM t GROUP BY b HAVING true", "same"),
    ("SELECT b FROM t GROUP BY b HAVING false", "same"),
    # GROUP BY (): a global aggregate, one row even of no input.
    ("SELECT 1 FROM t GROUP BY ()", "same"),
    ("SELECT 1 FROM e GROUP BY ()", "same"),
    ("SELECT count(*), sum(a) FROM e GROUP BY ()", "same"),
    ("SELECT count(*) FROM t WHERE false GROUP BY ()", "same"),
    ("SELECT b, count(*) FROM t GROUP BY (), b", "same"),
    ("SELECT 1 FROM t GROUP BY () HAVING count(*) > 10", "same"),
    # No output columns: as many empty rows as rows.
    ("SELECT FROM t", "same"),
    ("SELECT FROM t WHERE a > 1", "same"),
    ("SELECT FROM e", "same"),
    ("SELECT FROM t GROUP BY a", "same"),
    ("SELECT FROM t ORDER BY a LIMIT 2", "same"),
    ("SELECT count(*) FROM (SELECT FROM t UNION ALL SELECT FROM t) s", "same"),
    ("SELECT count(*) FROM (SELECT FROM t UNION SELECT FROM t) s", "same"),
    ("SELECT count(*) FROM (SELECT FROM t EXCEPT ALL SELECT FROM t WHERE a = 2) s", "same"),
    ("SELECT count(*) FROM (SELECT FROM t INTERSECT SELECT FROM e) s", "same"),
    ("SELECT a FROM t WHERE EXISTS (SELECT FROM t u WHERE u.b = t.a)", "same"),
    ("SELECT EXISTS (SELECT FROM e), EXISTS (SELECT FROM t)", "same"),
    # DISTINCT needs a select list.
    ("SELECT DISTINCT FROM t", "pg_error"),
    ("SELECT count(*) FROM (SELECT DISTINCT FROM t) s", "pg_error"),
)  # fmt: skip


@pytest.fixture(scope="module")
def both(pg: Any) -> Iterator[tuple[dsql.Connection, Any]]:
    """dsql and PostgreSQL holding `TABLES`."""
    with holding(pg, "hunt3", TABLES) as pair:
        yield pair


@pytest.mark.parametrize(("sql", "kind"), CASES, ids=[c[0][:60] for c in CASES])
def test_case(sql: str, kind: str, both: tuple[dsql.Connection, Any]) -> None:
    verdict = judge(Statement(sql, 1), *both)
    assert verdict.kind == kind, str(verdict)


#: Shapes kept as materialized views: each must equal its query after every change.
VIEWS = (
    "SELECT count(*) FROM w HAVING false",
    "SELECT 1 FROM w HAVING true",
    "SELECT sum(a) FROM w GROUP BY ()",
    "SELECT FROM w",
    "SELECT FROM w WHERE a > 1",
    "SELECT count(*) FROM (SELECT FROM w UNION ALL SELECT FROM w WHERE a IS NULL) s",
)

CHANGES = (
    "INSERT INTO w VALUES (1), (2), (NULL), (2)",
    "DELETE FROM w WHERE a = 2",
    "DELETE FROM w",
    "INSERT INTO w VALUES (3)",
)


def test_views_follow_changes(pg: Any) -> None:
    with holding(pg, "hunt3_views", ("CREATE TABLE w (a int)",)) as (con, conn):
        for i, sql in enumerate(VIEWS):
            con.execute(f"CREATE MATERIALIZED VIEW v{i} AS {sql}")
        for change in ("", *CHANGES):
            if change:
                conn.execute(change)
                con.execute(change)
            for i, sql in enumerate(VIEWS):
                want = sorted(conn.execute(sql).fetchall(), key=repr)
                got = sorted(con.execute(f"SELECT * FROM v{i}").fetchall(), key=repr)
                assert got == want, f"after {change!r}: view {sql!r}"
