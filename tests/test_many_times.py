"""Many changes at many logical times in one flush: every time's output is exact.

A flush may carry changes at many distinct times (a load stamped per row, a replay).
The operators take all of a batch's times in one step, so these tests stage each
history as one Arrow batch per table, with a `__time__` per change, advance once, and
read the SUBSCRIBE of each view. The oracle is DuckDB evaluating the view from scratch
on the tables' rows accumulated at every time of the history (`mz_now()` replaced by
that time): the subscription's diffs accumulated to each time must equal it, so each
time's changes are checked, not only the last.

Histories are drawn by hypothesis: inserts, deletes of present rows and updates
(a delete and an insert at one time) at interleaved times, the same key changed at
several times of one flush, and rows inserted and deleted at one time (changes that
cancel). The views cover a join, a reduce per aggregate kind (count, sum, min, max,
count DISTINCT), a join under an aggregate, a temporal filter and a recursive view.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsql
from dsql.clock import TICKS_PER_MS

TABLES = {"a": ("k", "v"), "b": ("k", "w")}
VIEWS = {
    "joined": "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k",
    "per_key": (
        "SELECT k, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi, "
        "count(DISTINCT v) AS nd FROM a GROUP BY k"
    ),
    "by_w": "SELECT b.w, count(*) AS n, sum(a.v) AS s FROM a JOIN b ON a.k = b.k GROUP BY b.w",
    "total": "SELECT count(*) AS n, sum(v) AS s FROM a",
    "live": "SELECT k, v FROM a WHERE mz_now() < v",
    "reach": (
        "WITH RECURSIVE reach(src, dst) AS (SELECT k, w FROM b UNION "
        "SELECT r.src, b.w FROM reach r JOIN b ON r.dst = b.k) SELECT src, dst FROM reach"
    ),
}

Change = tuple[str, tuple[int, int], int, int]  # table, row, time (from 0), diff


@st.composite
def histories(draw: Any, times: int = 12) -> list[Change]:
    """Changes at times `0..times-1`: per time a few inserts, deletes of present rows,
    updates, and rows that come and go at that time; keys and values from small ranges
    so keys repeat and joins match."""
    present: dict[str, list[tuple[int, int]]] = {t: [] for t in TABLES}
    changes: list[Change] = []
    value = st.integers(0, times + 2)
    for t in range(draw(st.integers(1, times))):
        for _ in range(draw(st.integers(0, 4))):
            table = draw(st.sampled_from(sorted(TABLES)))
            row = (draw(st.integers(0, 4)), draw(value))
            rows = present[table]
            kind = draw(st.sampled_from(["insert", "delete", "update", "cancel"]))
            if kind in ("delete", "update") and rows:
                old = rows.pop(draw(st.integers(0, len(rows) - 1)))
                changes.append((table, old, t, -1))
                if kind == "update":
                    changes.append((table, (old[0], row[1]), t, 1))
                    rows.append((old[0], row[1]))
            elif kind == "cancel":
                changes += [(table, row, t, 1), (table, row, t, -1)]
            else:
                changes.append((table, row, t, 1))
                rows.append(row)
    return changes


def run_history(changes: list[Change], kernel: str, **options: Any) -> None:
    """Stage `changes` as one batch per table, advance past them at once, and check
    every view's SUBSCRIBE against DuckDB at each time."""
    con = dsql.connect(kernel=kernel, **options)
    got: dict[str, list[tuple]] = {}
    try:
        for table, columns in TABLES.items():
            con.execute(f"CREATE TABLE {table} ({', '.join(c + ' int' for c in columns)})")
        for name, query in VIEWS.items():
            con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
        for name in VIEWS:  # the snapshot: empty, or a global aggregate's row
            con.execute(f"DECLARE {name}_c CURSOR FOR SUBSCRIBE {name}")
            got[name] = con.execute(f"FETCH ALL {name}_c").fetchall()
        session = con.session
        start = session.clock.now_ms() + 1
        last = max((t for *_, t, _ in changes), default=0)
        for table in TABLES:
            mine = [(row, t, d) for name, row, t, d in changes if name == table]
            staged = pa.table(
                {
                    "_c0": pa.array([r[0] for r, _, _ in mine], pa.int32()),
                    "_c1": pa.array([r[1] for r, _, _ in mine], pa.int32()),
                    "__time__": np.array(
                        [(start + t) * TICKS_PER_MS for _, t, _ in mine], np.int64
                    ),
                    "__diff__": np.array([d for *_, d in mine], np.int64),
                }
            )
            session.relations[table].input.load_arrow(staged)
        con.execute(f"ADVANCE TO {start + last + 1}")
        for name in VIEWS:
            got[name] += con.execute(f"FETCH ALL {name}_c").fetchall()
    finally:
        con.close()
    for t in range(last + 2):  # through the time advanced to
        oracle = _tables_at(changes, t)
        for name, query in VIEWS.items():
            want = Counter(oracle.execute(query.replace("mz_now()", str(start + t))).fetchall())
            have: Counter[tuple] = Counter()
            for ts, diff, *row in got[name]:
                if ts <= start + t:
                    have[tuple(row)] += diff
            have = Counter({row: d for row, d in have.items() if d})
            assert have == want, f"{name} at time {t} ({kernel}): dsql {have} != duckdb {want}"


def _tables_at(changes: list[Change], t: int) -> duckdb.DuckDBPyConnection:
    """DuckDB holding each table's rows accumulated at time `t`."""
    con = duckdb.connect()
    for table, columns in TABLES.items():
        rows: Counter[tuple[int, int]] = Counter()
        for name, row, at, diff in changes:
            if name == table and at <= t:
                rows[row] += diff
        assert all(c >= 0 for c in rows.values()), rows
        flat = [row for row, c in rows.items() for _ in range(c)]
        con.execute(f"CREATE TABLE {table} ({', '.join(c + ' int' for c in columns)})")
        if flat:
            con.executemany(f"INSERT INTO {table} VALUES (?, ?)", flat)
    return con


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_each_time_of_one_flush_is_exact_in_process(changes: list[Change]) -> None:
    run_history(changes, "local")


def test_many_times_on_one_key_in_one_flush() -> None:
    """One key changed at every time: a chain of candidates per key, all in one step."""
    changes: list[Change] = [("b", (1, 2), 0, 1), ("b", (2, 1), 0, 1)]
    for t in range(30):
        changes.append(("a", (1, t % 7), t, 1))
        if t % 3 == 2:
            changes.append(("a", (1, (t - 2) % 7), t, -1))
        if t % 5 == 4:
            changes += [("a", (1, 40), t, 1), ("a", (1, 40), t, -1)]
    run_history(changes, "local")


SMALL: list[Change] = [
    ("a", (1, 3), 0, 1),
    ("b", (1, 5), 0, 1),
    ("a", (1, 4), 1, 1),
    ("a", (1, 3), 2, -1),
    ("a", (1, 7), 2, 1),
    ("b", (5, 1), 3, 1),
    ("a", (2, 9), 3, 1),
    ("a", (2, 9), 3, -1),
    ("b", (1, 5), 4, -1),
    ("b", (1, 6), 4, 1),
]


def test_each_time_of_one_flush_is_exact_on_spark(spark: Any) -> None:
    run_history(SMALL, "spark")


def test_each_time_of_one_flush_is_exact_under_auto_placement(spark: Any) -> None:
    """Placement threshold 2: the tables' arrangements are stored by Spark."""
    run_history(SMALL, "auto", spark=spark, placement_threshold=2)


@pytest.mark.parametrize("spread", [False, True], ids=["contiguous", "spread"])
def test_a_probe_of_many_keys_reads_the_groups_that_admit_them(spark: Any, spread: bool) -> None:
    """A stored batch probed by many keys at once (a flush of many times) reads the row
    groups whose statistics admit a key and matches them in the driver: the rows equal
    the driver's own lookup."""
    from dsql.runtime.kernel import driver
    from dsql.runtime.kernel.auto import AutoKernel

    kernel = AutoKernel(threshold=2)
    kernel.remote.row_group_bytes = 4096  # many groups per file
    n = 20_000
    keys = np.arange(n, dtype=np.int64) // 2
    table = pa.table({"k": keys, "v": np.arange(n, dtype=np.int64)})
    stored = kernel.materialize(kernel.from_arrow(table), ["k"])
    assert kernel.placement(stored.frame) == "spark"
    wanted = np.arange(100, 400) * (31 if spread else 1) % (n // 2 + 50)
    probe = pa.table({"key": pa.array(wanted, pa.int64())})
    got = kernel.rows_with_keys(stored.frame, ["k"], probe, ["key"])
    want = driver.rows_with_keys(table, ["k"], probe, ["key"])
    assert sorted(got.to_pylist(), key=repr) == sorted(want.to_pylist(), key=repr)


def test_a_large_flush_of_many_times() -> None:
    """Hundreds of changes at 150 times over five keys: enough rows that the reduce
    runs its vectorized chain step (`kernel/chain_reduce.py`) rather than Python's."""
    rng = np.random.default_rng(7)
    present: dict[str, list[tuple[int, int]]] = {t: [] for t in TABLES}
    changes: list[Change] = []
    for t in range(150):
        for _ in range(4):
            table = "a" if rng.random() < 0.8 else "b"
            row = (int(rng.integers(5)), int(rng.integers(40)))
            rows = present[table]
            if rows and rng.random() < 0.3:
                changes.append((table, rows.pop(int(rng.integers(len(rows)))), t, -1))
            else:
                changes.append((table, row, t, 1))
                rows.append(row)
    run_history(changes, "local")
