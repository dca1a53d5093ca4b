"""The SQL suites on Spark: the same answers whether steps run in-process or on Spark.

A tier of the SQL suites run on the forced Spark kernel (`kernel="spark"`: every step a
Spark query) and under automatic placement with a threshold of 2 rows (`auto-2`: any
relation over two rows on Spark, steps mixing Arrow and Spark inputs), each against its
suite's oracle:

- `tests/test_sql.py`'s views under a fixed history, against DuckDB;
- `tests/test_pg_differential.py`'s join, subquery and relational views under its
  placement history, against PostgreSQL;
- dsql's own sqllogictest file of views (`tests/slt/dsql/views.slt`).

Select the tier with `-m spark_tier` (`.ci/spark-tier` runs it with
`tests/test_placement_differential.py`). The views are a representative subset: one per
kind of operator and of data movement; forced Spark pays a few jobs per operator and
step, so its subset is the smaller one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
import test_pg_differential as pgd
import test_sql
from slt.runner import run_suite

import dsql

pytestmark = pytest.mark.spark_tier

#: The auto kernel's placement threshold in this tier: relations over 2 rows on Spark.
THRESHOLD = 2
KERNELS = ["spark", "auto-2"]


def _connect(kernel: str, spark: Any) -> dsql.api.Connection:  # noqa: ANN401
    if kernel == "spark":
        return dsql.connect(kernel="spark", spark=spark)
    return dsql.connect(kernel="auto", placement_threshold=THRESHOLD)


#: test_sql.py's views: joins of every kind, reductions, set operations, subqueries,
#: top-k, table functions, VALUES, LATERAL; the forced Spark kernel runs the first part.
SQL_VIEWS = {
    "spark": [
        "v_left_joined",
        "v_global",
        "v_grp_having",
        "v_intersected",
        "v_not_exists",
        "v_scalar",
        "v_top2",
    ],
}
SQL_VIEWS["auto-2"] = [
    *SQL_VIEWS["spark"],
    "v_full_joined",
    "v_except_all",
    "v_exists",
    "v_not_in",
    "v_series",
    "v_strings",
    "v_lateral",
    "v_cte",
]
SQL_HISTORY = [
    "INSERT INTO s VALUES (1, 5), (3, NULL), (4, 1), (1, 2)",
    "DELETE FROM r WHERE a = 1",
    "UPDATE r SET b = 7 WHERE a = 3",
    "INSERT INTO r VALUES (4, 1), (4, 2), (NULL, 3)",
]


@pytest.mark.parametrize("kernel", KERNELS)
def test_sql_views_agree_with_duckdb(spark, kernel: str) -> None:  # noqa: ANN001
    con = _connect(kernel, spark)
    oracle = duckdb.connect()
    names = SQL_VIEWS[kernel]
    for c in (con, oracle):
        for name, columns in test_sql.TABLES.items():
            c.execute(f"CREATE TABLE {name} ({columns})")
        c.execute("INSERT INTO r VALUES (1, 1), (1, 2), (2, NULL), (3, 3)")
    for name in names:
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {test_sql.VIEWS[name]}")
    for now, step in enumerate(SQL_HISTORY, start=1):
        con.execute(step)
        oracle.execute(step)
        con.execute(f"ADVANCE TO {now}")
        for name in names:
            got = test_sql._norm(con.execute(f"SELECT * FROM {name}").fetchall())
            want = test_sql._norm(oracle.execute(test_sql.ORACLE[name]).fetchall())
            assert got == want, f"{kernel}: view {name} after {step}: {got} != {want}"


#: test_pg_differential.py's views, per group: outer joins with USING and comma joins,
#: correlated and uncorrelated subqueries and CTEs, set operations and aggregates.
PG_VIEWS = {
    "spark": ["left_using", "full_on", "join_numeric"],
    "auto-2": ["left_using", "full_on", "comma_left", "natural_grouped"],
}
#: How many of the subquery views (from the first), and every how many of the relational.
PG_SUBQUERIES = {"spark": 2, "auto-2": 6}
PG_RELATIONAL_EVERY = {"spark": 20, "auto-2": 6}


def _pg_views(kernel: str) -> dict[str, str]:
    """The PostgreSQL-checked views of `kernel`'s subset."""
    views = {name: pgd.JOIN_VIEWS[name] for name in PG_VIEWS[kernel]}
    views.update(list(pgd.SUBQUERY_VIEWS.items())[: PG_SUBQUERIES[kernel]])
    views.update(list(pgd.RELATIONAL_VIEWS.items())[:: PG_RELATIONAL_EVERY[kernel]])
    return views


@pytest.fixture
def pgdb(pg: Any) -> Any:  # noqa: ANN401
    conn = pg.database("spark_tier")
    yield conn
    conn.close()


@pytest.mark.parametrize("kernel", KERNELS)
def test_pg_views_agree_with_postgres(spark, pgdb: Any, kernel: str) -> None:  # noqa: ANN001, ANN401
    if kernel == "spark":
        con = pgd._fresh(pgdb, kernel="spark", spark=spark)
    else:
        con = pgd._fresh(pgdb, kernel="auto", placement_threshold=THRESHOLD)
    pgd._run_history(con, pgdb, _pg_views(kernel), pgd.PLACEMENT_HISTORY)


VIEWS_SLT = Path(__file__).resolve().parent / "slt" / "dsql" / "views.slt"


@pytest.mark.parametrize("kernel", KERNELS)
def test_views_slt_passes(spark, kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("DSQL_PLACEMENT_THRESHOLD", str(THRESHOLD))
    name = "spark" if kernel == "spark" else "auto"
    report = run_suite([VIEWS_SLT], engine="dsql", mode="incremental", kernel=name)
    assert report.failures() == []
    assert report.count("pass") >= 20
