"""Rounds on the Spark kernel: views equal DuckDB's recomputation under random changes,
while the rows the driver already holds are consolidated, joined and probed there.

Under `kernel="spark"` a small round's bookkeeping (consolidating a delta, merging small
trace batches, joining a delta with a small arrangement's batch) runs on the Arrow
tables the driver holds (`SparkKernel.held`), and every expression on Spark. Checked
here: views of several shapes (join + aggregate, NULL join keys, outer join, DISTINCT,
HAVING) against DuckDB after every change of a random history, the change stream of a
SUBSCRIBE against the differences of those recomputations, the kernel's shortcuts
against Spark's own evaluation, and `benchmarks/spark_rounds.py`'s many-times flush
(each time's output against a model of the view).
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

import dsql
from dsql.runtime.kernel.driver import JoinShape, Selection
from dsql.runtime.kernel.spark import SparkKernel

VIEWS = {
    "revenue": "SELECT c.region, count(*) AS n, sum(o.amount) AS total "
    "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region",
    "matched": "SELECT o.id, c.region FROM orders o JOIN customers c ON o.customer = c.id "
    "WHERE o.amount > 20",
    "lefts": "SELECT o.id, c.region FROM orders o LEFT JOIN customers c ON o.customer = c.id",
    "regions": "SELECT DISTINCT c.region FROM customers c JOIN orders o ON o.customer = c.id",
    "big": "SELECT customer, sum(amount) AS s FROM orders GROUP BY customer HAVING count(*) > 1",
}


def _bag(rows: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(rows_) for rows_ in rows)


def _change(rng: random.Random, next_id: int) -> list[str]:
    """One round's statements: inserts (some with a NULL or unknown customer), deletes,
    updates, and customers moving region."""
    out = []
    for _ in range(rng.randrange(1, 4)):
        match rng.randrange(5):
            case 0 | 1:
                customer = rng.choice(["NULL", str(rng.randrange(12)), "99"])
                out.append(
                    f"INSERT INTO orders VALUES ({next_id}, {customer}, {rng.randrange(1, 50)})"
                )
                next_id += 1
            case 2:
                out.append(f"DELETE FROM orders WHERE id % 7 = {rng.randrange(7)}")
            case 3:
                out.append(
                    f"UPDATE orders SET amount = amount + 5 WHERE customer = {rng.randrange(10)}"
                )
            case _:
                region, who = rng.randrange(3), rng.randrange(10)
                out.append(f"UPDATE customers SET region = 'r{region}' WHERE id = {who}")
    return out


def test_views_on_spark_equal_duckdb_under_random_changes(spark) -> None:  # noqa: ANN001
    rng = random.Random(11)
    con = dsql.connect(spark=spark, kernel="spark")
    mirror = duckdb.connect()
    for db in (con, mirror):
        db.execute("CREATE TABLE customers (id int, region text)")
        db.execute("CREATE TABLE orders (id bigint, customer int, amount int)")
        db.execute(
            "INSERT INTO customers VALUES "
            + ", ".join(f"({i}, 'r{i % 3}')" for i in range(10))
            + ", (NULL, 'nowhere')"
        )
        db.execute(
            "INSERT INTO orders VALUES "
            + ", ".join(f"({i}, {i % 11}, {i * 7 % 40})" for i in range(30))
            + ", (30, NULL, 3)"
        )
    for name, query in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE revenue")
    stream: Counter[tuple[Any, ...]] = Counter()
    next_id = 100
    for step in range(8):
        statements = _change(rng, next_id)
        next_id += len(statements)
        for db in (con, mirror):
            for statement in statements:
                db.execute(statement)
        con.execute("ADVANCE BY 1")
        for _, diff, *row in con.execute("FETCH ALL c").fetchall():
            stream[tuple(row)] += diff
        for name, query in VIEWS.items():
            got = _bag(con.execute(f"SELECT * FROM {name}").fetchall())
            want = _bag(mirror.execute(query).fetchall())
            assert got == want, (step, name, statements)
        assert +stream == _bag(mirror.execute(VIEWS["revenue"]).fetchall()), step
        assert not -stream, step
    con.close()


def _held_frames(kernel: SparkKernel) -> tuple[pa.Table, pa.Table]:
    left = pa.table(
        {
            "k": pa.array([1, 1, 2, None, 3], pa.int64()),
            "v": pa.array(["a", "a", "b", "n", None]),
            "__time__": pa.array([1, 1, 2, 2, 3], pa.int64()),
            "__diff__": pa.array([1, 1, -1, 1, 2], pa.int64()),
        }
    )
    right = pa.table(
        {
            "k": pa.array([1, None, 3, 4], pa.int64()),
            "w": pa.array([10, 20, 30, 40], pa.int64()),
            "__time__": pa.array([1, 1, 4, 1], pa.int64()),
            "__diff__": pa.array([1, 1, 1, -1], pa.int64()),
        }
    )
    return left, right


def test_driver_held_shortcuts_equal_spark_queries(spark) -> None:  # noqa: ANN001
    # Each shortcut over frames made from Arrow against the query Spark runs for it.
    kernel = SparkKernel(spark)
    left, right = _held_frames(kernel)
    lf, rf = kernel.from_arrow(left), kernel.from_arrow(right)
    assert kernel.rows(lf) == 5 and kernel.held([lf, rf]) is not None
    stored = kernel.materialize(lf, ("k",))
    assert stored.frame is lf and stored.table is left  # no job: the driver holds it
    merged = kernel.consolidate_small([lf, lf], ("k", "v"), 1, signs=(1, 2))
    assert merged is not None
    want = spark.sql(
        "SELECT k, v, __time__, CAST(SUM(__diff__) * 3 AS BIGINT) AS __diff__ FROM {t} "
        "GROUP BY k, v, __time__ HAVING SUM(__diff__) <> 0",
        t=lf,
    ).collect()
    assert _bag(kernel.to_arrow(merged).to_pylist()) == _bag(r.asDict() for r in want)
    shape = JoinShape((("k", "k"),), ("k", "v"), ("w",), 1)
    joined = kernel.join_small(lf, rf, shape)
    if joined is not None:  # the driver joins it exactly as `relational.join_on_keys`
        got = sorted(map(str, kernel.to_arrow(joined).to_pylist()))
        sql = spark.sql(
            "SELECT l.k, l.v, r.w, greatest(l.__time__, r.__time__) AS __time__, "
            "l.__diff__ * r.__diff__ AS __diff__ FROM {l} l JOIN {r} r ON l.k <=> r.k",
            l=lf,
            r=rf,
        ).collect()
        assert got == sorted(map(str, (r.asDict() for r in sql)))
    picked = kernel.rows_with_keys(lf, ("k",), rf)
    assert picked is not None
    assert _bag(kernel.to_arrow(picked).to_pylist()) == _bag(
        r for r in left.to_pylist() if r["k"] in (1, None, 3, 4)
    )
    renamed = kernel.project_small(
        lf, Selection((("key", "k"), ("__time__", "__time__"), ("__diff__", "__diff__")), ("k",))
    )
    assert renamed is not None and kernel.to_arrow(renamed).column_names == [
        "key",
        "__time__",
        "__diff__",
    ]
    assert kernel.rows(renamed) == 4  # the NULL key dropped
    on_spark = spark.range(3).selectExpr("id AS k")
    assert kernel.held([lf, on_spark]) is None and kernel.rows(on_spark) is None


def test_many_times_in_one_flush_on_spark_are_exact_per_time(spark) -> None:  # noqa: ANN001
    # The benchmark's flush of changes at their own milliseconds: each time's output
    # against a model of the view, the snapshot and final view against DuckDB.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import spark_rounds
    from skip_level import Jobs

    args = spark_rounds.main.__globals__["argparse"].Namespace(
        customers=15, orders=120, threshold=10, rounds=3, warmup=1, changes=40, seed=3
    )
    res = spark_rounds.run_join(spark, Jobs(spark), "spark", args, None)
    assert res["per_time_check"] == "OK" and res["final_check"] == "OK", res
