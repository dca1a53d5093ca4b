"""Indexed trace batches (`runtime.kernel.key_index`) against a scan and against the oracle.

A join's delta and a reduce's affected keys read only their keys' rows of the other
traces, through a sorted index per trace batch. The index must pick exactly the rows a
scan picks (`driver.rows_with_keys`: NULL matches NULL, several key columns, integer
types of different widths, dates), and the operators must give the oracle's results
when every batch is indexed (the suite's data is small, so by default only batches of
`INDEX_ROWS` rows or more are).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_iteration import CLOSURE, COMPONENTS, NON_MONOTONIC, REACH
from test_runtime_oracle import (
    COUNT,
    DISTINCT,
    JOIN,
    LOCAL,
    REDUCE,
    SEMI_ANTI,
    History,
    Op,
    Pipeline,
    Step,
    check_history,
    histories,
)

from dsql.runtime import trace as trace_module
from dsql.runtime.kernel import driver, key_index
from dsql.runtime.kernel.key_index import KeyDirectory, KeyIndex
from dsql.runtime.kernel.local import LocalKernel
from dsql.runtime.lattice import Antichain
from dsql.runtime.operators import reduce as reduce_module
from dsql.runtime.operators import reduce_chain
from dsql.runtime.trace import Trace

KEY = st.one_of(st.none(), st.integers(-3, 6))
INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


@st.composite
def _tables(draw: Any) -> tuple[pa.Table, tuple[str, ...], pa.Table, tuple[str, ...]]:
    width = draw(st.integers(1, 2))
    types = [draw(st.sampled_from(INT_TYPES)) for _ in range(width)]
    rows = draw(st.lists(st.tuples(*[KEY] * width, st.integers(0, 9)), max_size=40))
    probe = draw(st.lists(st.tuples(*[KEY] * width), max_size=8))
    keys = tuple(f"k{i}" for i in range(width))
    by = tuple(f"p{i}" for i in range(width))
    columns = {
        k: pa.array([r[i] for r in rows], t)
        for i, (k, t) in enumerate(zip(keys, types, strict=True))
    }
    columns["v"] = pa.array([r[-1] for r in rows], pa.int64())
    probed = {
        b: pa.array([r[i] for r in probe], t)
        for i, (b, t) in enumerate(zip(by, types, strict=True))
    }
    return pa.table(columns), keys, pa.table(probed), by


@settings(max_examples=300, deadline=None)
@given(case=_tables())
def test_index_picks_what_a_scan_picks(case: Any) -> None:
    _check_rows(case)


@settings(max_examples=300, deadline=None)
@given(case=_tables())
def test_index_matches_what_a_scan_picks(case: Any) -> None:
    _check_matches(case)


@settings(max_examples=200, deadline=None)
@given(case=_tables())
def test_slots_find_what_a_search_finds(case: Any) -> None:
    # Every index finds its keys through a slot table where its box allows one.
    with _set(key_index, "SLOT_KEYS", 1):
        _check_rows(case)
        _check_matches(case)


def _check_rows(case: Any) -> None:
    table, keys, probe, by = case
    index = KeyIndex.build(table, keys)
    assert index is not None
    picked = index.rows(probe, by)
    # The meaning, row by row: keys equal as data (NULL equals NULL), in table order.
    wanted = set(zip(*(probe[b].to_pylist() for b in by), strict=True))
    have = zip(*(table[k].to_pylist() for k in keys), strict=True)
    expected = [row for row, key in zip(table.to_pylist(), have, strict=True) if key in wanted]
    if picked is None:  # declined: only where the Arrow scan it falls back on declines
        assert driver.rows_with_keys(table, keys, probe, by) is None
        assert len(keys) > 1 and not KeyIndex.build(table, keys).packing
        return
    assert picked.to_pylist() == expected


def _check_matches(case: Any) -> None:
    table, keys, probe, by = case
    index = KeyIndex.build(table, keys)
    assert index is not None
    found = index.matches(probe, by)
    probed = list(zip(*(probe[b].to_pylist() for b in by), strict=True))
    have = list(zip(*(table[k].to_pylist() for k in keys), strict=True))
    if found is None:  # declined: keys on one column of several, or a NULL probed alone
        assert (len(keys) > 1 and not index.packing) or (
            len(keys) == 1 and None in probe[by[0]].to_pylist()
        )
        return
    positions, rows = found
    # Each row found has the key of the probe row it names; every row with a probed key
    # is found, once.
    assert all(have[p] == probed[r] for p, r in zip(positions, rows, strict=True))
    assert sorted(positions.tolist()) == [i for i, key in enumerate(have) if key in set(probed)]
    values = index.ints("v")
    assert values is not None and values[positions].tolist() == [
        table["v"][int(p)].as_py() for p in positions
    ]


def test_index_compares_integer_widths_and_dates() -> None:
    table = pa.table({"k": pa.array([5, 1, 5, None], pa.int32()), "v": [1, 2, 3, 4]})
    index = KeyIndex.build(table, ("k",))
    assert index is not None
    wide = pa.table({"x": pa.array([5, 2**40], pa.int64())})
    assert index.rows(wide, ("x",)).column("v").to_pylist() == [1, 3]
    day = datetime.date(2026, 1, 2)
    dates = pa.table({"d": pa.array([day, None, day], pa.date32()), "v": [1, 2, 3]})
    by_date = KeyIndex.build(dates, ("d",))
    assert by_date is not None
    assert by_date.rows(pa.table({"d": [day]}), ("d",)).column("v").to_pylist() == [1, 3]
    assert by_date.rows(pa.table({"d": pa.array([1], pa.int32())}), ("d",)) is None
    text = pa.table({"s": ["a", "b"], "v": [1, 2]})
    assert KeyIndex.build(text, ("s",)) is None


def test_trace_size_counts_its_indexes() -> None:
    kernel = LocalKernel()
    n = key_index.INDEX_ROWS
    batch = pa.table(
        {"k": list(range(n)), "__time__": [0] * n, "__diff__": [1] * n},
        schema=pa.schema([("k", pa.int64()), ("__time__", pa.int64()), ("__diff__", pa.int64())]),
    )
    trace = Trace(kernel, ("k",), ("k",), 1)
    trace.insert(batch, n)
    before = trace.nbytes()
    picked = trace.rows_with_keys(pa.table({"k": [3, 3, n + 1]}), ("k",))
    assert picked is not None and [f.column("k").to_pylist() for f in picked] == [[3]]
    # n distinct keys, n + 1 run bounds, n positions: 8 bytes each.
    assert trace.nbytes() == before + 8 * (3 * n + 1)


def test_trace_concatenates_batches_that_share_no_time_and_keeps_their_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace_module, "PENDING_READS", 1)  # each insert merged when read
    kernel, n = LocalKernel(), key_index.INDEX_ROWS
    schema = pa.schema(
        [("k", pa.int64()), ("__time__", pa.int64()), ("__time1__", pa.int64())]
        + [("__diff__", pa.int64())]
    )

    def batch(inner: int, diff: int) -> pa.Table:
        return pa.table(
            {
                "k": list(range(n)),
                "__time__": [0] * n,
                "__time1__": [inner] * n,
                "__diff__": [diff] * n,
            },
            schema=schema,
        )

    trace = Trace(kernel, ("k",), ("k",), 2)
    trace.insert(batch(0, 1), n)
    assert trace.rows_with_keys(pa.table({"k": [5]}), ("k",)) is not None  # indexed
    trace.insert(batch(1, -1), n)  # iteration 1 retracts iteration 0: nothing to sum yet
    assert len(trace.batches) == 1 and trace.rows == 2 * n
    merged = trace.batches[0]
    assert merged.indexed and merged.index is not None
    # The concatenation shares its parts' rows; a take of rows stores it whole first.
    assert not merged.whole and merged.frame.column("k").num_chunks == 2
    picked = trace.rows_with_keys(pa.table({"k": [5]}), ("k",))
    assert picked is not None
    assert sorted(picked[0].column("__diff__").to_pylist()) == [-1, 1]
    assert merged.whole and merged.frame.column("k").num_chunks == 1
    assert merged.index is not None and merged.index.table is merged.frame
    # Once readers have passed both iterations, a merge advances and cancels them.
    trace.advance(Antichain([(0, 2)]))
    trace.insert(batch(2, 1), n)
    assert len(trace.batches) == 1 and trace.rows == n
    assert set(trace.batches[0].frame.column("__time1__").to_pylist()) == {2}


def test_trace_upper_is_the_greatest_time_of_its_batches() -> None:
    kernel = LocalKernel()
    schema = pa.schema(
        [("k", pa.int64()), ("__time__", pa.int64()), ("__time1__", pa.int64())]
        + [("__diff__", pa.int64())]
    )
    trace = Trace(kernel, ("k",), ("k",), 2)
    assert trace.upper() == ()
    trace.insert(
        pa.table(
            {"k": [1, 2], "__time__": [3, 1], "__time1__": [0, 4], "__diff__": [1, 1]},
            schema=schema,
        ),
        2,
    )
    trace.insert(
        pa.table({"k": [3], "__time__": [2], "__time1__": [7], "__diff__": [1]}, schema=schema), 1
    )
    assert trace.upper() == (3, 7)


@contextmanager
def _set(module: Any, name: str, value: int) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def index_everything() -> Any:
    """Every trace batch indexed, however small."""
    return _set(key_index, "INDEX_ROWS", 1)


def slots_always() -> Any:
    """Every index finds keys through a slot table where its box allows one."""
    return _set(key_index, "SLOT_KEYS", 1)


def directory_always() -> Any:
    """Every trace asked for key sums keeps a directory, however few its rows."""
    return _set(trace_module, "DIRECTORY_ROWS", 0)


def _indexed(
    name: str, pipeline: Pipeline, examples: int, setting: Callable[[], Any] = index_everything
) -> Any:
    @settings(LOCAL, max_examples=examples)
    @given(history=histories(pipeline.rows, nonnegative=pipeline.nonnegative))
    def test(history: History) -> None:
        with setting():
            check_history(LocalKernel(), pipeline, history)

    test.__name__ = test.__qualname__ = name
    return test


test_join_indexed = _indexed("test_join_indexed", JOIN, 25)
test_semijoin_antijoin_indexed = _indexed("test_semijoin_antijoin_indexed", SEMI_ANTI, 20)
test_reduce_indexed = _indexed("test_reduce_indexed", REDUCE, 25)
test_count_indexed = _indexed("test_count_indexed", COUNT, 15)
test_distinct_indexed = _indexed("test_distinct_indexed", DISTINCT, 15)
test_reachability_indexed = _indexed("test_reachability_indexed", REACH, 8)
test_closure_indexed = _indexed("test_closure_indexed", CLOSURE, 8)
test_components_indexed = _indexed("test_components_indexed", COMPONENTS, 6)
test_non_monotonic_indexed = _indexed("test_non_monotonic_indexed", NON_MONOTONIC, 6)


def test_one_probe_packed_once_serves_every_batch() -> None:
    # Non-negative keys pack the same way in every batch: the probe is packed once and
    # reused, yet each batch still answers with exactly its own rows, and an index whose
    # key types do not compare with the probe still declines.
    probe = pa.table({"a": pa.array([1, 5, 2], pa.int64()), "b": pa.array([2, 0, 9], pa.int64())})
    batches = [
        pa.table({"x": [1, 1, 5, 3], "y": [2, 3, 0, 2], "v": [10, 11, 12, 13]}),
        pa.table({"x": [2, 5, 1], "y": [9, 0, 2], "v": [20, 21, 22]}),
    ]
    for batch in batches:
        index = KeyIndex.build(batch, ("x", "y"))
        assert index is not None and index.packing
        expected = driver.rows_with_keys(batch, ("x", "y"), probe, ("a", "b"))
        assert index.rows(probe, ("a", "b")).to_pylist() == expected.to_pylist()
    dates = pa.table(
        {"x": pa.array([1, 2], pa.date32()), "y": pa.array([2, 9], pa.int64()), "v": [1, 2]}
    )
    index = KeyIndex.build(dates, ("x", "y"))
    assert index is not None
    assert index.rows(probe, ("a", "b")) is None


@settings(max_examples=200, deadline=None)
@given(case=_tables(), cut=st.floats(0, 1))
def test_a_merged_index_picks_what_a_built_one_picks(case: Any, cut: float) -> None:
    # A trace merge whose batches share no time concatenates them, and their indexes
    # merge (sorted runs) instead of being built again.
    table, keys, probe, by = case
    at = int(cut * table.num_rows)
    parts = [KeyIndex.build(table.slice(0, at), keys), KeyIndex.build(table.slice(at), keys)]
    assert parts[0] is not None and parts[1] is not None
    merged = KeyIndex.merged(table, parts)
    if merged is None:  # only parts packed differently (ranges of negative keys) decline
        assert parts[0].packing != parts[1].packing
        return
    built = KeyIndex.build(table, keys)
    assert built is not None
    got, want = merged.rows(probe, by), built.rows(probe, by)
    assert (got is None) == (want is None)
    if got is not None:
        assert got.to_pylist() == want.to_pylist()


@st.composite
def _summed(draw: Any) -> tuple[pa.Table, tuple[str, ...], pa.Table, tuple[str, ...]]:
    """A batch with diffs (negative too) and a probe without NULL keys, either side the
    bigger (the index searches the smaller in the other)."""
    width = draw(st.integers(1, 2))
    key = st.integers(-3, 6)
    rows = draw(st.lists(st.tuples(*[key] * width, st.integers(-2, 3)), min_size=1, max_size=40))
    probe = draw(st.lists(st.tuples(*[key] * width), max_size=60))
    keys, by = tuple(f"k{i}" for i in range(width)), tuple(f"p{i}" for i in range(width))
    columns = {k: pa.array([r[i] for r in rows], pa.int64()) for i, k in enumerate(keys)}
    columns["__diff__"] = pa.array([r[-1] for r in rows], pa.int64())
    probed = {b: pa.array([r[i] for r in probe], pa.int32()) for i, b in enumerate(by)}
    return pa.table(columns), keys, pa.table(probed, schema=_int32(by)), by


def _int32(names: tuple[str, ...]) -> pa.Schema:
    return pa.schema([(n, pa.int32()) for n in names])


@settings(max_examples=300, deadline=None)
@given(case=_summed())
def test_index_sums_what_a_scan_sums(case: Any) -> None:
    # A settled distinct reads each affected key's sum of diffs from the index, never
    # its rows: per probe row, the sum over the batch's rows with its key.
    table, keys, probe, by = case
    index = KeyIndex.build(table, keys)
    assert index is not None
    sums = index.sums(probe, by)
    assert sums is not None
    totals: dict[tuple, int] = {}
    for *key, diff in zip(*(table[k].to_pylist() for k in (*keys, "__diff__")), strict=True):
        totals[tuple(key)] = totals.get(tuple(key), 0) + diff
    wanted = [totals.get(k, 0) for k in zip(*(probe[b].to_pylist() for b in by), strict=True)]
    assert sums.tolist() == wanted


def test_index_sums_decline_what_they_cannot_say() -> None:
    table = pa.table({"k": [1, 2], "s": ["a", "b"], "__diff__": [1, 1]})
    on_one_column = KeyIndex.build(table, ("k", "s"))
    assert on_one_column is not None and not on_one_column.packing
    assert on_one_column.sums(pa.table({"k": [1], "s": ["a"]}), ("k", "s")) is None
    index = KeyIndex.build(table, ("k",))
    assert index is not None
    assert index.sums(pa.table({"k": pa.array([1, None], pa.int64())}), ("k",)) is None
    huge = pa.table({"k": [1, 1], "__diff__": [2**62, 2**62]})
    assert KeyIndex.build(huge, ("k",)).sums(pa.table({"k": [1]}), ("k",)) is None


def test_trace_sums_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_module, "DIRECTORY_ROWS", 10**9)  # the batches' own indexes
    schema = pa.schema([("k", pa.int64()), ("__time__", pa.int64()), ("__diff__", pa.int64())])
    trace = Trace(LocalKernel(), ("k",), ("k",), 1)
    probe = pa.table({"k": [7, 1, 3]})
    assert trace.key_sums(probe, ("k",)).tolist() == [0, 0, 0]
    # The first batch is indexed and too big to merge with a small one; the second is
    # too small to be indexed.
    n = max(key_index.INDEX_ROWS, trace_module.SMALL_BATCH_ROWS) + 1
    trace.insert(
        pa.table({"k": list(range(n)), "__time__": [0] * n, "__diff__": [2] * n}, schema=schema), n
    )
    trace.insert(pa.table({"k": [1, 3], "__time__": [1, 1], "__diff__": [-2, 5]}, schema=schema), 2)
    assert len(trace.batches) == 2
    assert trace.key_sums(probe, ("k",)).tolist() == [2, 0, 7]


# --- a trace's key directory: each key's sum over every batch, in one array -----------------


def _scan_sums(tables: list[pa.Table], keys: tuple[str, ...], probe: pa.Table, by: tuple) -> list:
    totals: dict[tuple, int] = {}
    for table in tables:
        for *key, diff in zip(*(table[k].to_pylist() for k in (*keys, "__diff__")), strict=True):
            totals[tuple(key)] = totals.get(tuple(key), 0) + diff
    return [totals.get(k, 0) for k in zip(*(probe[b].to_pylist() for b in by), strict=True)]


@settings(max_examples=300, deadline=None)
@given(case=_summed(), cut=st.floats(0, 1))
def test_directory_sums_what_a_scan_sums(case: Any, cut: float) -> None:
    # Built from the first part of the batch, then following the second as a trace's
    # insert adds it (refused when one of its keys falls outside the first part's box).
    table, keys, probe, by = case
    at = int(cut * table.num_rows)
    first, second = table.slice(0, at), table.slice(at)
    directory = KeyDirectory.build([first], keys)
    if not at:
        assert directory is None
        return
    assert directory is not None
    added = directory.add(second)
    sums = directory.lookup(probe, by)
    assert sums is not None
    assert sums.tolist() == _scan_sums([first, second] if added else [first], keys, probe, by)
    if not added:  # a key outside the box: nothing added, and the whole builds anew
        whole = KeyDirectory.build([first, second], keys)
        assert whole is not None
        assert whole.lookup(probe, by).tolist() == _scan_sums([table], keys, probe, by)


def test_directory_declines_what_it_cannot_hold() -> None:
    table = pa.table({"k": [1, 2, 2], "__diff__": [1, 1, 1]})
    directory = KeyDirectory.build([table], ("k",))
    assert directory is not None
    assert directory.lookup(pa.table({"k": pa.array([1, None], pa.int64())}), ("k",)) is None
    dates = pa.table({"k": pa.array([1], pa.date32())})
    assert directory.lookup(dates, ("k",)) is None  # a date compares with no integer
    before = directory.sums.copy()
    outside = pa.table({"k": [2, 9], "__diff__": [1, 1]})
    assert not directory.add(outside)
    assert (directory.sums == before).all()  # refused whole: nothing added
    assert directory.lookup(pa.table({"k": [9, 2]}), ("k",)).tolist() == [0, 2]
    assert KeyDirectory.build([pa.table({"k": [0, 10**9], "__diff__": [1, 1]})], ("k",)) is None
    nulls = pa.table({"k": pa.array([1, None], pa.int64()), "__diff__": [1, 1]})
    assert KeyDirectory.build([nulls], ("k",)) is None
    text = pa.table({"k": ["a"], "__diff__": [1]})
    assert KeyDirectory.build([text], ("k",)) is None
    huge = pa.table({"k": [1, 1], "__diff__": [2**62, 2**62]})
    assert KeyDirectory.build([huge], ("k",)).lookup(pa.table({"k": [1]}), ("k",)) is None
    big = KeyDirectory.build([pa.table({"k": [1, 2], "__diff__": [4, -3]})], ("k",))
    assert big.sums.dtype == "int32"
    assert big.add(pa.table({"k": [1, 2], "__diff__": [2**31, -(2**31)]}))  # widened
    assert big.lookup(pa.table({"k": [1, 2]}), ("k",)).tolist() == [2**31 + 4, -(2**31) - 3]


def test_trace_keeps_its_directory_through_inserts_and_merges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace_module, "DIRECTORY_ROWS", 4)
    schema = pa.schema(
        [("a", pa.int64()), ("b", pa.int32()), ("__time__", pa.int64()), ("__diff__", pa.int64())]
    )
    keys = ("a", "b")
    trace = Trace(LocalKernel(), keys, keys, 1)
    inserted: list[pa.Table] = []
    probe = pa.table({"x": [0, 1, 2, 3, 5, 40], "y": pa.array([0, 1, 2, 3, 1, 1], pa.int32())})

    def insert(rows: list[tuple[int, int, int, int]]) -> None:
        batch = pa.table(
            dict(zip(schema.names, zip(*rows, strict=True), strict=True)), schema=schema
        )
        inserted.append(batch)
        trace.advance(Antichain([(len(inserted),)]))  # merges compact the earlier times
        trace.insert(batch, batch.num_rows)
        assert trace.key_sums(probe, ("x", "y")).tolist() == _scan_sums(
            inserted, keys, probe, ("x", "y")
        )

    insert([(a, a % 4, 0, 1) for a in range(8)])
    directory = trace._directory
    assert directory is not None
    insert([(1, 1, 1, 2), (2, 2, 1, -1), (5, 1, 1, -1)])  # inside its box: followed
    insert([(3, 3, 2, 1)])
    assert trace._directory is directory
    insert([(40, 1, 3, 7)])  # outside: dropped, the batches' indexes answer
    assert trace._directory is None
    insert([(a, 2, 4, 1) for a in range(30)])  # the trace has doubled: built again
    assert trace._directory is not None
    assert trace.nbytes() >= trace._directory.nbytes


test_distinct_directed = _indexed("test_distinct_directed", DISTINCT, 15, directory_always)
test_reachability_directed = _indexed("test_reachability_directed", REACH, 8, directory_always)
test_closure_directed = _indexed("test_closure_directed", CLOSURE, 8, directory_always)
test_non_monotonic_directed = _indexed(
    "test_non_monotonic_directed", NON_MONOTONIC, 6, directory_always
)


@contextmanager
def general_distinct() -> Iterator[None]:
    """A loop's distinct stepped by the general path, not from its rows as numbers
    (`operators.reduce_chain`), every batch indexed."""
    with index_everything(), _set(reduce_module, "chained_distinct", lambda *a: None):
        yield


@contextmanager
def every_pending_probed() -> Iterator[None]:
    """A loop's distinct probing all its pending candidates, due or not."""
    with _set(reduce_chain, "SPLIT_DUE", False):
        yield


test_closure_all_pending = _indexed("test_closure_all_pending", CLOSURE, 8, every_pending_probed)
test_reachability_general = _indexed("test_reachability_general", REACH, 8, general_distinct)
test_closure_general = _indexed("test_closure_general", CLOSURE, 8, general_distinct)
test_closure_slotted = _indexed("test_closure_slotted", CLOSURE, 8, slots_always)
test_non_monotonic_general = _indexed(
    "test_non_monotonic_general", NON_MONOTONIC, 6, general_distinct
)


def test_a_loops_distinct_is_stepped_in_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    # The closure's distinct, inside its loop, takes the numeric path in its later rounds
    # (the first, at one time with nothing pending, is settled from sums).
    taken = []
    real = reduce_chain.distinct_chain
    monkeypatch.setattr(
        reduce_chain,
        "distinct_chain",
        lambda *a: taken.append(1) or real(*a),  # type: ignore
    )
    steps = [
        (Step((Op((0, 1), 0, 1), Op((1, 2), 0, 1), Op((2, 3), 0, 1)), 1),),
        (Step((Op((1, 2), 1, -1), Op((2, 0), 1, 1)), 2),),
        (Step((Op((1, 2), 2, 1),), 3),),
    ]
    check_history(LocalKernel(), CLOSURE, History(tuple(steps)))
    assert len(taken) >= 4
