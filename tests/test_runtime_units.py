"""Unit tests of runtime pieces: lattice, traces (compaction, merging), imports, map_batches."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlglot import parse_one

from dsql.runtime import lattice
from dsql.runtime.collection import import_arrangement
from dsql.runtime.dataflow import Worker
from dsql.runtime.kernel.local import LocalKernel
from dsql.runtime.kernel.spark import SparkKernel
from dsql.runtime.lattice import Antichain, advance_by, join, less_equal, meet
from dsql.runtime.operators.join import static_join_schema

times2 = st.tuples(st.integers(0, 5), st.integers(0, 5))


@pytest.mark.parametrize(
    "module",
    [
        "lattice",
        "input",
        "collection",
        "linear",
        "operators.join",
        "kernel.driver",
        "kernel.spark.buckets",
    ],
)
def test_doctests(module: str) -> None:
    mod = importlib.import_module(f"dsql.runtime.{module}")
    failures, _ = doctest.testmod(mod)
    assert failures == 0


def test_error_doctest() -> None:
    import dsql.errors

    assert doctest.testmod(dsql.errors).failed == 0


@given(times2, times2, times2)
def test_lattice_laws(a, b, c) -> None:
    assert join(a, b) == join(b, a) and meet(a, b) == meet(b, a)
    assert less_equal(a, join(a, b)) and less_equal(meet(a, b), a)
    assert join(a, join(b, c)) == join(join(a, b), c)
    assert join(a, meet(a, b)) == a  # absorption


@given(st.lists(times2, max_size=5), times2)
def test_antichain_is_minimal_and_advance_by_preserves_order(elements, t) -> None:
    frontier = Antichain(elements)
    for x in frontier:
        for y in frontier:
            assert x == y or not less_equal(x, y)
    if frontier:
        advanced = advance_by(t, frontier)
        # For every time beyond the frontier, comparisons with t are unchanged.
        for s in [(i, j) for i in range(7) for j in range(7)]:
            if frontier.less_equal(s):
                assert less_equal(t, s) == less_equal(advanced, s)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 3)), max_size=40))
def test_antichain_of_columns_is_the_constructors(rows) -> None:
    # As arrays of one, two or three coordinates: the same minimal elements.
    for depth in (1, 2, 3):
        times = [r[:depth] for r in rows]
        columns = [np.array([t[i] for t in times], np.int64) for i in range(depth)]
        assert Antichain.of_columns(columns) == Antichain(times)


@pytest.fixture(params=["local", "spark"])
def kernel(request, spark):
    return LocalKernel() if request.param == "local" else SparkKernel(spark)


def test_trace_merges_geometrically_and_compacts(kernel) -> None:
    worker = Worker(kernel)
    data = worker.new_input({"k": "int", "v": "int"})
    arranged = data.to_collection().arrange_by_key("k")
    rounds = 12 if isinstance(kernel, LocalKernel) else 6
    for t in range(rounds):
        data.insert((t % 3, t))
        if t:
            data.remove(((t - 1) % 3, t - 1))
        data.advance_to(t + 1)
        data.flush()
        worker.step()
    trace = arranged.trace
    assert len(trace.batches) <= 2 * rounds.bit_length()
    trace.compact_all()
    (only,) = trace.batches
    table = kernel.to_arrow(only.frame)
    # Everything before the frontier collapsed to it: one live row remains.
    assert table.num_rows == 1
    assert table.to_pylist()[0]["__time__"] == rounds
    assert arranged.stats()["rows"] == 1


def test_a_trace_merges_the_inserts_no_reader_saw_at_once(monkeypatch) -> None:
    # A loop's join input is read again only when the other side changes: the batches of
    # the inner steps between (times apart) go in as one concatenation, not a merge each;
    # a batch too big for the merge rule goes in on its own first.
    from dsql.runtime import trace as trace_module

    combined: list[int] = []
    real = trace_module.Trace._combine
    monkeypatch.setattr(
        trace_module.Trace, "_combine", lambda self, bs: combined.append(len(bs)) or real(self, bs)
    )
    trace = trace_module.Trace(LocalKernel(), ("k",), ("k",), 2)
    names = ["k", "__time__", "__time1__", "__diff__"]
    big = 4 * trace_module.SMALL_BATCH_ROWS
    trace.insert(pa.table([list(range(big)), [0] * big, [0] * big, [1] * big], names=names), big)
    for j in range(1, 11):
        trace.insert(pa.table([[j, j + 1], [0, 0], [j, j], [1, -1]], names=names), 2)
    assert combined == []
    assert [b.rows for b in trace.batches] == [big, 20]
    assert combined == [10]
    # A few inserts since are read as they are, unmerged, until `PENDING_READS` wait.
    for j in range(11, 11 + trace_module.PENDING_READS - 1):
        trace.insert(pa.table([[j], [0], [j], [1]], names=names), 1)
    assert [b.rows for b in trace.batches] == [big, 20] + [1] * (trace_module.PENDING_READS - 1)
    assert trace.key_sums(pa.table({"k": [11, 12, 1]}), ("k",)).tolist() == [1, 2, 2]
    trace.insert(pa.table([[0], [0], [99], [1]], names=names), 1)
    assert len(trace.batches) == 2 and combined[1] == trace_module.PENDING_READS
    tail = trace.frames()[1]
    rows = zip(tail["__time1__"].to_pylist(), tail["k"].to_pylist(), strict=True)
    assert sorted(rows)[:2] == [(1, 1), (1, 2)]
    assert trace.rows == big + 20 + trace_module.PENDING_READS


def test_outside_loops_a_big_change_merges_at_once() -> None:
    # Reads of a view's arrangement may be rare: a change of a quarter of the trace or
    # more is merged (and compacted) when inserted; a small one waits for a reader.
    from dsql.runtime import trace as trace_module

    trace = trace_module.Trace(LocalKernel(), ("k",), ("k",), 1)
    names = ["k", "__time__", "__diff__"]
    trace.insert(pa.table([list(range(100)), [0] * 100, [1] * 100], names=names), 100)
    trace.insert(pa.table([[80], [1], [-1]], names=names), 1)
    assert len(trace._pending) == 1
    trace.advance(Antichain([(2,)]))
    trace.insert(pa.table([list(range(60)), [1] * 60, [-1] * 60], names=names), 60)
    assert not trace._pending and trace.rows == 39  # merged, compacted: 39 keys remain


def test_imported_trace_replays_history(kernel) -> None:
    worker = Worker(kernel)
    data = worker.new_input({"k": "int", "v": "int"})
    shared = data.to_collection().arrange_by_key("k")
    for i in range(4):
        data.insert((i, i * 10))
    data.advance_to(1)
    data.flush()
    worker.step()
    handle = shared.trace_handle()
    later = import_arrangement(handle).as_collection().filter("v >= 20").capture()
    data.remove((3, 30))
    data.advance_to(2)
    data.flush()
    worker.step()
    rows = later.poll().to_pylist()
    # The history replays at the frontier the handle was taken at (1), so the later
    # removal may cancel it there: only the accumulation is fixed.
    assert all(r["__time__"] >= 1 for r in rows)
    counts: dict[int, int] = {}
    for r in rows:
        counts[r["k"]] = counts.get(r["k"], 0) + r["__diff__"]
    assert {k: n for k, n in counts.items() if n} == {2: 1}
    handle.release()


@pytest.mark.parametrize("kind", ["inner", "semi"])
def test_static_join_schema_is_the_evaluated_one(kernel, kind: str) -> None:
    worker = Worker(kernel)
    types = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64()]
    types += [pa.bool_(), pa.string(), pa.date32()]
    left = worker.new_input([("k", pa.int32()), *((f"a{i}", t) for i, t in enumerate(types))])
    right = worker.new_input([("j", pa.float64()), *((f"b{i}", t) for i, t in enumerate(types))])
    la = left.to_collection().arrange_by_key("k")
    ra = right.to_collection().arrange_by_key("j")
    joined = (la.join_core(ra) if kind == "inner" else la.semijoin(ra)).node
    static = static_join_schema(la.node.schema, ra.node.schema, joined.right_values)
    evaluated = worker.output_schema(joined.query, {"l": la.node, "r": ra.node})
    assert static is not None and static.equals(evaluated, check_metadata=True)
    assert joined.schema.equals(evaluated, check_metadata=True)


def test_join_of_other_types_is_evaluated() -> None:
    schema = pa.schema([("k", pa.int64()), ("d", pa.decimal128(10, 2))])
    assert static_join_schema(schema, pa.schema([("k", pa.int64())]), []) is None


def test_map_batches_slow_path(kernel) -> None:
    worker = Worker(kernel)
    data = worker.new_input({"x": "int"})
    tenfold = data.to_collection().map_batches(
        lambda t: pa.table({"y": pc.multiply(t["x"], 10)}), {"y": "int"}
    )
    out = tenfold.capture()
    data.insert((1,))
    data.insert((2,))
    data.advance_to(1)
    data.flush()
    worker.step()
    data.remove((1,))
    data.advance_to(2)
    data.flush()
    worker.step()
    got = sorted((r["y"], r["__time__"], r["__diff__"]) for r in out.poll().to_pylist())
    assert got == [(10, 0, 1), (10, 1, -1), (20, 0, 1)]


def test_spark_frames_know_their_time_bounds(spark) -> None:
    # A small frame from the Arrow table it was made from, a stored batch from its
    # Parquet footers, a query's frame not at all: none of it runs a job.
    kernel = SparkKernel(spark, small_rows=4)
    table = pa.table({"k": [3, 1, 2, 5, 4, 6], "__time__": [7, 2, 9, 4, 4, 5], "__diff__": [1] * 6})
    small = kernel.from_arrow(table.slice(0, 2))
    stored = kernel.materialize(kernel.from_arrow(table), ["k"])
    assert stored.rows == 6 and stored.table is None  # written as Parquet
    query = kernel.query(parse_one("SELECT * FROM t WHERE k > 1"), {"t": small})
    spark.sparkContext.setJobGroup("bounds", "time bounds of frames")
    try:
        assert kernel.bounds(small, "__time__") == (2, 7)
        assert kernel.bounds(stored.frame, "__time__") == (2, 9)
        assert kernel.bounds(stored.frame, "k") == (1, 6)
        assert kernel.bounds(query, "__time__") is None
        assert kernel.bounds(kernel.from_arrow(table.slice(0, 0)), "__time__") is None
        assert spark.sparkContext.statusTracker().getJobIdsForGroup("bounds") == []
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        kernel.release(stored.frame)


@pytest.mark.parametrize("buckets", [0, None], ids=["range", "bucketed"])
def test_spark_materializes_frames_of_driver_rows_uncached(spark, monkeypatch, buckets) -> None:  # noqa: ANN001
    # A query over frames made from Arrow is materialized from its head, uncached: held
    # as Arrow when small; when it is not, cached only then, to be written, where the
    # write reads it twice (range bounds, then rows): not so where it goes to buckets.
    kernel = SparkKernel(spark, small_rows=4)
    kernel.bucket_count = buckets
    reads_twice = not kernel.buckets
    table = pa.table({"k": [3, 1, 2, 5, 4, 6], "__time__": [1] * 6, "__diff__": [1] * 6})
    rows = kernel.from_arrow(table)
    cached = []
    persist = type(rows).persist
    monkeypatch.setattr(type(rows), "persist", lambda f, *a: cached.append(f) or persist(f, *a))
    for where, expected in (("k > 3", [4, 5, 6]), ("k > 0", [1, 2, 3, 4, 5, 6])):
        query = kernel.query(parse_one(f"SELECT * FROM t WHERE {where}"), {"t": rows})
        cached.clear()
        stored = kernel.materialize(query, ["k"])
        big = len(expected) > 4
        assert cached == ([query] if big and reads_twice else [])  # not first, whatever its size
        assert (stored.table is None) == big  # big: written as Parquet
        assert sorted(kernel.to_arrow(stored.frame)["k"].to_pylist()) == expected
        kernel.release(stored.frame)


@pytest.mark.parametrize("placed", ["spark", "auto"])
def test_settled_reduce_on_spark_runs_one_pipeline(spark, monkeypatch, placed) -> None:
    # One write a round: each step is settled at its time. On Spark, Spark runs the
    # settled pipeline (the affected keys' rows picked by a join), not the general one.
    # Under automatic placement with a threshold of 2 rows, the input's first batch is
    # stored by Spark: its time bounds come from the Parquet footers.
    from dsql.runtime.kernel.auto import AutoKernel
    from dsql.runtime.operators import reduce_settled

    settled = []
    run = reduce_settled.SettledQueries.run

    def counted(self, node, source, rows):
        settled.append((rows.stamp, rows.whole))
        return run(self, node, source, rows)

    monkeypatch.setattr(reduce_settled.SettledQueries, "run", counted)
    kernel = SparkKernel(spark) if placed == "spark" else AutoKernel(2, spark, notice=None)
    worker = Worker(kernel)
    data = worker.new_input({"k": "int", "v": "int"})
    totals = data.to_collection().reduce(["k"], aggregates=["count(*) AS n", "sum(v) AS s"])
    out = totals.capture()
    for t, (insert, remove) in enumerate(
        [([(1, 10), (2, 20), (None, 5)], []), ([(1, 11)], [(2, 20)]), ([(None, 6)], [(1, 10)])]
    ):
        for row in insert:
            data.insert(row)
        for row in remove:
            data.remove(row)
        data.advance_to(t + 1)
        data.flush()
        worker.step()
        if t == 0:
            batches = [b for n in worker.nodes if hasattr(n, "trace") for b in n.trace.batches]
            assert "spark" in {kernel.placement(b.frame) for b in batches}
    accumulated: dict[tuple, int] = {}
    for r in out.poll().to_pylist():
        row = (r["k"], r["n"], r["s"])
        accumulated[row] = accumulated.get(row, 0) + r["__diff__"]
    assert {row for row, n in accumulated.items() if n} == {(1, 1, 11), (None, 2, 11)}
    # The first step's input is the new batch alone: its rows are not accumulated again.
    assert settled == [((0,), True), ((1,), False), ((2,), False)]


def test_an_import_rearranged_by_a_permutation_is_not_consolidated_again(monkeypatch) -> None:
    # An import replays consolidated batches, and a chain that keeps every column keeps
    # them consolidated: the arrangement stores the chain's rows as they are (on Spark,
    # a 2M-row view's first step saved a GROUP BY over the table).
    from dsql.runtime.collection import import_arrangement

    kernel = LocalKernel()
    worker = Worker(kernel)
    data = worker.new_input({"a": "int", "b": "int"})
    table = data.to_collection().arrange_by_self()
    for row in [(1, 2), (1, 2), (3, 4), (None, 5)]:
        data.insert(row)
    data.advance_to(1)
    data.flush()
    worker.step()
    imported = import_arrangement(table.trace_handle()).as_collection()
    swapped = imported.map("b AS x", "a AS y").arrange_by_key("y")
    consolidated = []
    small = kernel.consolidate_small

    def counted(frames, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        consolidated.append(sum(f.num_rows for f in frames))
        return small(frames, *args, **kwargs)

    monkeypatch.setattr(kernel, "consolidate_small", counted)
    data.advance_to(2)
    data.flush()
    worker.step()
    assert consolidated == []
    rows = kernel.union(swapped.trace.frames()).select(["x", "y", "__diff__"]).to_pylist()
    assert sorted(rows, key=repr) == sorted(
        [
            {"x": 2, "y": 1, "__diff__": 2},
            {"x": 4, "y": 3, "__diff__": 1},
            {"x": 5, "y": None, "__diff__": 1},
        ],
        key=repr,
    )


def test_capture_holds_future_updates_until_frontier_passes() -> None:
    worker = Worker(LocalKernel())
    data = worker.new_input({"x": "int"})
    out = data.to_collection().capture()
    data.update_at((1,), 5, 1)
    data.insert((2,))
    data.advance_to(1)
    data.flush()
    worker.step()
    assert [r["x"] for r in out.poll().to_pylist()] == [2]
    data.advance_to(6)
    data.flush()
    worker.step()
    assert [(r["x"], r["__time__"]) for r in out.poll().to_pylist()] == [(1, 5)]


def test_lattice_time_columns() -> None:
    assert lattice.time_columns(2) == ("__time__", "__time1__")
