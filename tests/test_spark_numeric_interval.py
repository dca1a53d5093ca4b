"""Numerics and intervals on Spark: a view's answer does not depend on where it ran.

Spark rounds a decimal result whose exact type needs more than 38 digits to 6 digits
after the point (`decimal(38, 20) * bigint`, a reduce's `sum(x * __diff__)`, a product
or sum of 38-digit decimals), where PostgreSQL and the in-process kernel keep every
digit. Checked here: views over numeric(38, 20), numeric(20, 10) and numeric columns
(sums of quotients, avg, sum of square roots, variance, min/max/count, and the linear
operator's sums, differences, products and quotients) under a random history of
inserts, deletes and updates, on `kernel="spark"`, on `kernel="local"` and in
PostgreSQL after every step: Spark's rows equal the in-process kernel's digit for digit
(scale included) and both equal PostgreSQL's values.

Intervals have no representation on Spark: on `kernel="spark"` a table or view with
interval values is refused when it is created, and under `kernel="auto"` a relation
holding intervals stays in process whatever its size, so its answers equal the
in-process kernel's.
"""

from __future__ import annotations

import random
from decimal import Decimal, localcontext
from typing import Any

import pytest
from pg_oracle import differs

import dsql

TABLE = "k int, a numeric(38, 20), b numeric(20, 10), c numeric"

VIEWS = {
    "aggregates": "SELECT k, sum(a / b) AS q, avg(a) AS aa, avg(c) AS ac, sum(a) AS sa, "
    "min(a) AS lo, max(b) AS hi, count(a) AS n, sum(sqrt(c)) AS rt, var_samp(b) AS vs, "
    "stddev(b) AS sd, sum(a + b) AS s, sum(b * b) AS p, sum(DISTINCT a) AS u FROM t GROUP BY k",
    "rows": "SELECT k, a + b AS s, a - 1 AS m, a * b AS p, a / b AS q, b * c AS bc, "
    "a % b AS r, -a AS n FROM t WHERE b <> 0",
}


def _number(rng: random.Random, whole: int, scale: int) -> str:
    """A random decimal literal of at most `whole` digits before the point and `scale`
    after it, of either sign."""
    digits = "".join(rng.choice("0123456789") for _ in range(scale))
    sign = rng.choice(["", "-"])
    return f"{sign}{rng.randrange(10**whole)}.{digits}"


def _changes(rng: random.Random) -> list[str]:
    """One step's statements: inserts (duplicates too, so counts exceed 1), a delete or
    an update."""
    out = []
    for _ in range(rng.randrange(2, 5)):
        a, b = _number(rng, 4, 20), _number(rng, 3, 10)
        c = f"{rng.randrange(1000)}.{rng.randrange(10**6):06d}"
        row = f"({rng.randrange(3)}, {a}, {b}, {c})"
        out.append(f"INSERT INTO t VALUES {row}" + (f", {row}" if rng.random() < 0.3 else ""))
    match rng.randrange(3):
        case 0:
            out.append(f"DELETE FROM t WHERE k = {rng.randrange(3)} AND b < 0")
        case 1:
            out.append(f"UPDATE t SET a = a + 0.00000000000000000001 WHERE k = {rng.randrange(3)}")
        case _:
            pass
    return out


def _rows(con: Any, view: str) -> list[tuple[str, ...]]:
    """The view's rows, each value as its text (a decimal's scale included)."""
    return sorted(tuple(map(str, row)) for row in con.execute(f"SELECT * FROM {view}").fetchall())


def test_numeric_views_equal_on_spark_in_process_and_in_postgres(spark: Any, pg: Any) -> None:
    rng = random.Random(37)
    on_spark = dsql.connect(spark=spark, kernel="spark")
    in_process = dsql.connect(kernel="local")
    oracle = pg.database("spk37_numeric")
    for db in (on_spark, in_process, oracle):
        db.execute(f"CREATE TABLE t ({TABLE})")
    for con in (on_spark, in_process):
        for name, query in VIEWS.items():
            con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    for _ in range(1):  # one step of several statements: each costs Spark ~10 s here
        for sql in _changes(rng):
            for db in (on_spark, in_process, oracle):
                db.execute(sql)
        for name, query in VIEWS.items():
            assert _rows(on_spark, name) == _rows(in_process, name), name
            assert differs(in_process, oracle, query, f"SELECT * FROM {name}") is None, name


def test_spark_keeps_every_digit_of_a_count_weighted_sum(spark: Any) -> None:
    """A row held many times (a large count) of a 38-digit decimal: Spark's sum is exact
    and of the in-process kernel's type."""
    rows = ", ".join(
        ["(1, 0.12345678901234567891)"] * 7 + ["(1, 99999999999999.99999999999999999999)"]
    )
    answers = []
    for con in (dsql.connect(spark=spark, kernel="spark"), dsql.connect(kernel="local")):
        con.execute("CREATE TABLE w (k int, x numeric(38, 20))")
        con.execute("CREATE MATERIALIZED VIEW s AS SELECT k, sum(x) AS s FROM w GROUP BY k")
        con.execute(f"INSERT INTO w VALUES {rows}")
        answers.append(con.execute("SELECT * FROM s").fetchall())
    with localcontext() as exact:
        exact.prec = 60
        want = Decimal("0.12345678901234567891") * 7 + Decimal(
            "99999999999999.99999999999999999999"
        )
    assert answers[0] == answers[1]
    assert answers[0][0][1] == want and str(answers[0][0][1]) == str(answers[1][0][1])


def test_spark_refuses_intervals_when_a_table_or_view_is_created(spark: Any) -> None:
    con = dsql.connect(spark=spark, kernel="spark")
    with pytest.raises(dsql.NotSupportedError, match="interval values are not supported"):
        con.execute("CREATE TABLE iv (i interval)")
    con.execute("CREATE TABLE e (id int, ts timestamp)")
    with pytest.raises(dsql.NotSupportedError, match="interval values are not supported"):
        con.execute("CREATE MATERIALIZED VIEW later AS SELECT ts + interval '1 day' AS t FROM e")
    con.execute("INSERT INTO e VALUES (1, '2030-01-01 00:00')")
    assert con.execute("SELECT count(*) FROM e").fetchall() == [(1,)]


INTERVAL_VIEWS = {
    "scaled": "SELECT id, d * 2 AS d2, d / 3 AS d3, -d AS n, ts + d AS later, ts - d AS sooner, "
    "justify_hours(d) AS jh, justify_days(d) AS jd, extract(epoch FROM d) AS secs, "
    "date_trunc('day', d) AS day FROM e",
    "totals": "SELECT sum(d) AS s, avg(d) AS a, min(d) AS lo, max(d) AS hi, count(*) AS n FROM e",
    "groups": "SELECT d, count(*) AS n FROM e GROUP BY d",
    "ordered": "SELECT id FROM e WHERE d > interval '1 day' AND d <= interval '2 months'",
    "joined": "SELECT n.id, e.ts + interval '1 hour' * n.x AS t, e.d + interval '1 day' AS d "
    "FROM n JOIN e ON n.id = e.id",
}


def _interval_changes(rng: random.Random, step: int) -> list[str]:
    """Rows of intervals in every unit, equal ones in different spellings (1 mon and
    30 days), and deletes."""
    spellings = [
        "1 day",
        "30 days",
        "1 mon",
        "25 hours",
        "1 mon 2 days 03:04:05.678901",
        "-2 hours",
        "36:00:00",
        "2 mons -1 days",
    ]
    out = []
    for i in range(4):
        key = step * 4 + i
        d = rng.choice(spellings)
        ts = f"timestamp '2030-01-31 12:00' + {key} * interval '7 hours'"
        out.append(f"INSERT INTO e VALUES ({key}, {ts}, interval '{d}')")
        out.append(f"INSERT INTO n VALUES ({key}, {rng.randrange(5)}), ({key}, {rng.randrange(5)})")
    out.append(f"DELETE FROM e WHERE id % 5 = {rng.randrange(5)}")
    return out


def test_views_over_intervals_under_auto_equal_the_in_process_kernel(spark: Any) -> None:
    """Under `kernel="auto"` with a placement threshold of 3 rows, the table without
    intervals moves to Spark; the relations holding intervals stay in process, and a
    step over intervals reading a Spark relation runs in process: every view equals the
    in-process kernel's after each step."""
    rng = random.Random(370)
    auto = dsql.connect(spark=spark, kernel="auto", placement_threshold=3)
    local = dsql.connect(kernel="local")
    for con in (auto, local):
        con.execute("CREATE TABLE e (id int, ts timestamp, d interval)")
        con.execute("CREATE TABLE n (id int, x int)")
        for name, query in INTERVAL_VIEWS.items():
            con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    for step in range(3):
        for sql in _interval_changes(rng, step):
            auto.execute(sql)
            local.execute(sql)
        for name in INTERVAL_VIEWS:
            assert _rows(auto, name) == _rows(local, name), name
    assert auto.session.worker.kernel.started  # the table `n` went to Spark
