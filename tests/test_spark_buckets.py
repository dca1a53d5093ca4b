"""Stored batches as bucketed tables (a local master): the driver's bucket of a row is
Spark's, batches written by either are joined and merged without an exchange, and the
results are those of unbucketed batches."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsql.runtime import relational as rel
from dsql.runtime.kernel import driver
from dsql.runtime.kernel.auto import AutoKernel
from dsql.runtime.kernel.spark import BUCKETS_PER_PARTITION, SparkKernel
from dsql.runtime.kernel.spark.buckets import bucket_ids
from dsql.runtime.lattice import Antichain

pytestmark = pytest.mark.skipif(
    os.environ.get("DSQL_TEST_KERNEL") == "spark", reason="runs its own kernels"
)

_TYPES = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64()}
_RANGES = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}


@st.composite
def _keyed(draw: st.DrawFn) -> tuple[pa.Table, list[str]]:
    names = draw(st.lists(st.sampled_from(sorted(_TYPES)), min_size=1, max_size=3))
    rows = draw(st.integers(1, 12))
    columns = {}
    for i, kind in enumerate(names):
        bound = 2 ** _RANGES[kind]
        values = st.one_of(st.none(), st.integers(-bound, bound - 1))
        columns[f"c{i}"] = pa.array(
            draw(st.lists(values, min_size=rows, max_size=rows)), _TYPES[kind]
        )
    return pa.table(columns), list(columns)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_keyed(), st.sampled_from([1, 2, 7, 200]))
def test_a_rows_bucket_in_the_driver_is_the_one_spark_gives_it(spark, keyed, buckets) -> None:  # noqa: ANN001
    table, keys = keyed
    frame = spark.createDataFrame(table)
    expression = f"pmod(hash({', '.join(keys)}), {buckets}) AS b"
    want = frame.selectExpr(expression).toArrow()["b"].to_numpy()
    assert bucket_ids(table, keys, buckets).tolist() == want.tolist()


def test_bucket_ids_decline_types_spark_hashes_otherwise() -> None:
    table = pa.table({"s": ["a"], "x": [1.5], "k": [1]})
    assert bucket_ids(table, ["s"], 2) is None and bucket_ids(table, ["k", "x"], 2) is None
    assert bucket_ids(table, [], 2) is None


def _rows(table: pa.Table) -> Counter:
    return Counter(zip(*(table[c].to_pylist() for c in table.column_names), strict=True))


def _plan(frame) -> str:  # noqa: ANN001 - a Spark DataFrame
    return frame._jdf.queryExecution().executedPlan().toString()  # noqa: SLF001


def _batch(n: int, seed: int, depth: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.integers(-50, 50, n)
    return pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "v": pa.array(rng.integers(0, 3, n), pa.int64()),
            "__time__": pa.array(rng.integers(0, 4, n), pa.int64()),
            "__diff__": pa.array(rng.choice([-1, 1, 2], n), pa.int64()),
        }
    )


def test_batches_written_by_the_driver_and_by_spark_share_their_buckets(spark) -> None:  # noqa: ANN001
    auto = AutoKernel(threshold=10)
    kernel = auto.remote
    kernel.small_rows = 10
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert kernel.buckets == partitions * BUCKETS_PER_PARTITION
    by_driver = auto.materialize(_batch(300, 1), ["k"])
    by_spark = kernel.materialize(kernel.from_arrow(_batch(300, 2)), ["k"], 300)
    for stored in (by_driver, by_spark):
        assert kernel._bucketed[stored.frame] == ("k",)  # noqa: SLF001
        path = kernel.state.local(kernel._paths[id(stored.frame)])[1]  # noqa: SLF001
        for name in os.listdir(path):
            if name.endswith(".parquet"):  # a file's rows are in the bucket its name gives
                part = pq.read_table(os.path.join(path, name))
                bucket = int(name.split("_")[-1].split(".")[0])
                assert set(bucket_ids(part, ["k"], kernel.buckets).tolist()) <= {bucket}
                keys = part["k"].to_pylist()
                assert keys == sorted(keys)  # each file in key order, for probes
    # Joined with `=` (the keys are NULL-free, from the footers), batch with batch: no
    # exchange, and the rows of the join of the same batches unbucketed.
    assert kernel.null_free(by_driver.frame, ["k"]) and kernel.null_free(by_spark.frame, ["k"])
    query = kernel.prepare(
        rel.join_on_keys("l", "r", [("k", "k")], ["k", "v"], [], 1, "semi", False)
    )
    joined = kernel.run(query, {"l": by_driver.frame, "r": by_spark.frame})
    assert "Exchange hashpartitioning" not in _plan(joined)
    plain = SparkKernel(spark, small_rows=10)
    plain.bucket_count = 0
    a = plain.materialize(plain.from_arrow(_batch(300, 1)), ["k"], 300)
    b = plain.materialize(plain.from_arrow(_batch(300, 2)), ["k"], 300)
    assert a.frame not in plain._bucketed  # noqa: SLF001
    want = plain.run(
        plain.prepare(rel.join_on_keys("l", "r", [("k", "k")], ["k", "v"], [], 1, "semi")),
        {"l": a.frame, "r": b.frame},
    )
    assert _rows(kernel.to_arrow(joined)) == _rows(plain.to_arrow(want))
    # Merged: the union of bucketed batches is not shuffled; the result is bucketed too.
    shipped = kernel.from_arrow(_batch(40, 3))  # not stored: shuffled alone into buckets
    frontier = Antichain([(2,)])
    merged = kernel.merge(
        [by_driver.frame, by_spark.frame, shipped], ["k", "v"], ["k"], 1, frontier, 640
    )
    assert merged is not None and kernel._bucketed[merged.frame] == ("k",)  # noqa: SLF001
    expected = plain.merge(
        [a.frame, b.frame, plain.from_arrow(_batch(40, 3))], ["k", "v"], ["k"], 1, frontier, 640
    )
    assert _rows(kernel.to_arrow(merged.frame)) == _rows(plain.to_arrow(expected.frame))
    union = kernel.union([by_driver.frame, by_spark.frame])
    consolidated = kernel.run(kernel.prepare(rel.consolidate("u", ["k", "v"], 1)), {"u": union})
    assert "Exchange" not in _plan(consolidated)
    # Released: the table goes with the files.
    name = kernel._tables[id(merged.frame)]  # noqa: SLF001
    assert spark.catalog.tableExists(name)
    kernel.release(merged.frame)
    assert not spark.catalog.tableExists(name)


def test_a_key_column_with_a_null_is_not_null_free(spark) -> None:  # noqa: ANN001
    kernel = SparkKernel(spark, small_rows=2)
    table = pa.table({"k": pa.array([1, None, 2, None], pa.int64()), "v": [1, 2, 3, 4]})
    stored = kernel.materialize(kernel.from_arrow(table), ["k"], 4)
    assert kernel._bucketed[stored.frame] == ("k",)  # noqa: SLF001
    assert not kernel.null_free(stored.frame, ["k"]) and kernel.null_free(stored.frame, ["v"])
    assert not kernel.null_free(
        kernel.run(kernel.prepare(rel.select("t", ["k"])), {"t": stored.frame}), ["k"]
    )


def test_a_probe_reads_only_its_keys_buckets(spark) -> None:  # noqa: ANN001
    auto = AutoKernel(threshold=10)
    kernel = auto.remote
    table = pa.table({"k": pa.array([*range(-40, 40), None], pa.int64()), "v": list(range(81))})
    stored = auto.materialize(table, ["k"])
    path = kernel._paths[id(stored.frame)]  # noqa: SLF001
    for probe in ([3], [3, -7, 12], [None, 5], [99]):
        keys = pa.array(probe, pa.int64())
        got = kernel.rows_with_key(stored.frame, "k", keys)
        assert got is not None
        want = table.filter(pc.is_in(table["k"], value_set=keys, skip_nulls=False))
        assert _rows(got) == _rows(want), probe
        dataset = kernel._datasets[path][0]  # noqa: SLF001
        picked = kernel._buckets_of(path, stored.frame, "k", keys, dataset)  # noqa: SLF001
        buckets = set(bucket_ids(pa.table({"k": keys}), ["k"], kernel.buckets).tolist())
        names = [os.path.basename(f) for f in picked.files]
        assert {int(n.split("_")[-1].split(".")[0]) for n in names} <= buckets


def test_a_big_batch_is_consolidated_bucket_by_bucket_as_it_is_written(spark) -> None:  # noqa: ANN001
    # An arrangement's batch bound for Spark is consolidated per bucket (equal rows share
    # one), each bucket's file in key order: the rows of consolidating it whole.
    auto = AutoKernel(threshold=10)
    kernel = auto.remote
    table = pa.concat_tables([_batch(300, 4), _batch(300, 4)])  # every row twice
    stored = auto.store_consolidated(table, ["k", "v"], 1, ["k"])
    assert stored is not None and auto.placement(stored.frame) == "spark"
    want = driver.consolidate([table], ["k", "v"], 1, None)
    assert want is not None and stored.rows == want.num_rows
    assert _rows(kernel.to_arrow(stored.frame)) == _rows(want)
    path = kernel.state.local(kernel._paths[id(stored.frame)])[1]  # noqa: SLF001
    for name in os.listdir(path):
        if name.endswith(".parquet"):  # in its bucket, sorted by the key
            part = pq.read_table(os.path.join(path, name))
            bucket = int(name.split("_")[-1].split(".")[0])
            assert set(bucket_ids(part, ["k"], kernel.buckets).tolist()) == {bucket}
            assert part["k"].to_pylist() == sorted(part["k"].to_pylist())
    # Its updates cancelled down to the threshold, a batch comes back to the driver.
    flipped = table.set_column(3, "__diff__", pc.negate(table["__diff__"]))
    few = pa.concat_tables([table, flipped, _batch(5, 5)])
    back = auto.store_consolidated(few, ["k", "v"], 1, ["k"])
    assert back is not None and auto.placement(back.frame) == "local"
    assert _rows(back.frame) == _rows(driver.consolidate([_batch(5, 5)], ["k", "v"], 1, None))
    # Declined (consolidated first, then stored): a NULL, a first column that is not the
    # first key, a small batch, and diffs whose sums could overflow.
    with_null = table.set_column(1, "v", pa.array([None] * table.num_rows, pa.int64()))
    huge = table.set_column(3, "__diff__", pa.array([2**62] * table.num_rows, pa.int64()))
    assert auto.store_consolidated(with_null, ["k", "v"], 1, ["k"]) is None
    assert auto.store_consolidated(table, ["k", "v"], 1, ["v"]) is None
    assert auto.store_consolidated(_batch(5, 6), ["k", "v"], 1, ["k"]) is None
    assert auto.store_consolidated(huge, ["k", "v"], 1, ["k"]) is None


@pytest.mark.parametrize("placed", ["spark", "duckdb"])
def test_a_merge_whose_times_all_advance_to_the_frontier_groups_by_the_columns(
    spark, placed: str
) -> None:  # noqa: ANN001
    # Every time at most the frontier's one element: grouped by the data columns, the
    # times that element; the rows of the general query.
    auto = AutoKernel(threshold=10)
    kernel = auto.remote if placed == "spark" else auto.local
    frames = [kernel.from_arrow(_batch(200, s)) for s in (7, 8)]
    frontier = Antichain([(5,)])
    query = lambda uniform: rel.advance("u", ["k", "v"], 1, frontier, uniform)  # noqa: E731
    union = kernel.union(frames)
    got = kernel.to_arrow(kernel.query(query(True), {"u": union}))
    want = kernel.to_arrow(kernel.query(query(False), {"u": union}))
    assert _rows(got) == _rows(want) and set(got["__time__"].to_pylist()) == {5}
    assert got.schema.field("__time__").type == pa.int64()
