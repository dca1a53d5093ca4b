"""The in-process kernel's fast paths against the oracle and against its own queries.

A round of a small view avoids DuckDB statements where it can: small consolidations
and trace merges in Python (`kernel.driver.consolidate`), chains that only rename and
drop NULL keys in Arrow (`Linear.selection`), a reduce step with one new time as the
logic alone (`operators.reduce_settled`), and the first map/filter of many views over
one table as one shared query (`runtime.siblings`). Each must give exactly what the
query it replaces gives: checked here on random histories (deletes, several times per
flush, updates at future times) against the from-scratch oracle, and the driver's
consolidation against DuckDB's on random tables.
"""

from __future__ import annotations

import datetime
from collections import Counter
from typing import Any

import numpy as np
import oracle
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import Multiset
from sqlglot import exp
from test_key_index import directory_always, index_everything
from test_runtime_oracle import LOCAL, History, Op, Pipeline, Step, check_history, histories

from dsql.errors import DsqlError
from dsql.runtime import relational as rel
from dsql.runtime.capture import consolidate_table
from dsql.runtime.collection import Collection
from dsql.runtime.dataflow import Worker
from dsql.runtime.kernel import driver
from dsql.runtime.kernel.local import LocalKernel
from dsql.runtime.lattice import Antichain

KEY = st.integers(-1, 3).map(lambda k: None if k < 0 else k)
NAME = st.sampled_from([None, "a", "b", "B", "é"])
FLAG = st.sampled_from([None, True, False])
VALUE = st.integers(0, 5)

# --- reduce: multi-column keys with NULLs and text, settled and general steps --------------

KSV = {"k": "int", "s": "text", "v": "int"}


def _grouped(a: Collection) -> dict[str, Collection]:
    by_two = a.reduce(["k", "s"], aggregates=["count(*) AS n", "sum(v) AS t"])
    return {
        "by_two": by_two,
        "by_text": a.reduce(["s"], aggregates=["max(v) AS hi", "min(k) AS lo"]),
        # an arrangement by a renamed key with NULLs dropped (no query), then a reduce
        "renamed": a.map("s AS name", "v").filter("name IS NOT NULL").count(),
        "of_reduce": by_two.map("n", "t").reduce(["n"], aggregates=["sum(t) AS total"]),
        # every column of an arrangement's batch kept: its arrangement need not consolidate
        "all_kept": by_two.map("t AS total", "n", "s", "k").count(),
    }


def _grouped_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    (a,) = inputs
    by_two = oracle.reduce(a, [0, 1], [("count", None), ("sum", 2)])
    renamed = oracle.filter(oracle.map(a, lambda r: (r[1], r[2])), lambda r: r[0] is not None)
    return {
        "by_two": by_two,
        "by_text": oracle.reduce(a, [1], [("max", 2), ("min", 0)]),
        "renamed": oracle.count(renamed),
        "of_reduce": oracle.reduce(oracle.map(by_two, lambda r: (r[2], r[3])), [0], [("sum", 1)]),
        "all_kept": oracle.count(oracle.map(by_two, lambda r: (r[3], r[2], r[1], r[0]))),
    }


GROUPED = Pipeline(
    (KSV,), _grouped, _grouped_expected, (st.tuples(KEY, NAME, VALUE),), nonnegative=True
)


@settings(LOCAL, max_examples=40)
@given(history=histories(GROUPED.rows, nonnegative=True, max_rounds=7))
def test_reduce_settled_and_general_steps(history: History) -> None:
    check_history(LocalKernel(), GROUPED, history)


@st.composite
def _one_time_rounds(
    draw: Any, rows: st.SearchStrategy = GROUPED.rows[0], negative: bool = False
) -> History:
    """Rounds that each write at one time (inserts, and deletes of earlier inserts, or
    with `negative` of any row), closed by the round's advance."""
    live: list[tuple] = []
    rounds = []
    for t in range(draw(st.integers(1, 6))):
        ops = []
        for _ in range(draw(st.integers(0, 5))):
            if negative and draw(st.booleans()):
                ops.append(Op(draw(rows), t, -1))
            elif live and draw(st.booleans()):
                ops.append(Op(live.pop(draw(st.integers(0, len(live) - 1))), t, -1))
            else:
                row = draw(rows)
                live.append(row)
                ops.append(Op(row, t, 1))
        rounds.append((Step(tuple(ops), t + 1),))
    return History(tuple(rounds))


@settings(LOCAL, max_examples=25)
@given(history=_one_time_rounds())
def test_reduce_one_time_per_round(history: History) -> None:
    """Histories whose rounds each write at one time, closed by the round: every step of
    a reduce is settled (the fast path alone, round after round)."""
    check_history(LocalKernel(), GROUPED, history)


# --- distinct over whole rows, settled: from the traces' sums of each key --------------------

KV_INTS = {"k": "int", "v": "int"}


def _distincts(a: Collection) -> dict[str, Collection]:
    return {"rows": a.distinct(), "pairs": a.map("v", "k % 2 AS p").distinct()}


def _distincts_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    (a,) = inputs
    pairs = oracle.map(a, lambda r: (r[1], r[0] % 2))
    return {"rows": oracle.distinct(a), "pairs": oracle.distinct(pairs)}


DISTINCTS = Pipeline(
    (KV_INTS,), _distincts, _distincts_expected, (st.tuples(VALUE, st.integers(-2, 3)),)
)


@settings(LOCAL, max_examples=40)
@given(history=_one_time_rounds(DISTINCTS.rows[0], negative=True))
def test_distinct_settled_from_sums(history: History) -> None:
    """Every step writes at one time and is settled: a distinct over whole rows takes
    each key's input and output sums from its traces' indexes (`settled_by_sums`),
    negative multiplicities included."""
    with index_everything():
        check_history(LocalKernel(), DISTINCTS, history)


@settings(LOCAL, max_examples=25)
@given(history=_one_time_rounds(DISTINCTS.rows[0], negative=True))
def test_distinct_settled_from_directories(history: History) -> None:
    """The same, each trace's sums read from its key directory, whatever its size."""
    with directory_always():
        check_history(LocalKernel(), DISTINCTS, history)


def test_distinct_from_sums_is_the_path_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = driver.distinct_from_sums
    monkeypatch.setattr(
        driver,
        "distinct_from_sums",
        lambda *a: calls.append(1) or real(*a),  # type: ignore
    )
    rounds = [[((1, 2), 1), ((3, 4), 1)], [((1, 2), 1), ((3, 4), -1)], [((5, 0), -1)]]
    steps = [(Step(tuple(Op(r, t, d) for r, d in ops), t + 1),) for t, ops in enumerate(rounds)]
    check_history(LocalKernel(), DISTINCTS, History(tuple(steps)))
    assert len(calls) >= 2 * len(rounds)  # both distincts, every round


# --- siblings: many views' first steps over one batch as one query -------------------------

FILTERS = ["k > 1", "v % 2 = 0", "s = 'a' OR k IS NULL", "v > 2 AND s IS NOT NULL"]


def _views(a: Collection) -> dict[str, Collection]:
    shared = a.arrange_by_self()
    views: dict[str, Collection] = {}
    for i, condition in enumerate(FILTERS):
        # each view reads its own import of the shared arrangement, as SQL views do
        imported = shared.trace_handle().import_into().as_collection()
        branch = {"columns": ["k", f"v * {i + 1} AS w"], "where": condition}
        views[f"f{i}"] = imported.join_function([branch])  # one map/filter step
    views["direct"] = shared.as_collection().map("s", "k + v AS kv")
    views["grouped"] = (
        shared.as_collection().map("v % 3 AS g", "v").reduce(["g"], aggregates=["sum(v) AS t"])
    )
    return views


def _views_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    (a,) = inputs
    tests = [
        lambda r: r[0] is not None and r[0] > 1,
        lambda r: r[2] % 2 == 0,
        lambda r: r[1] == "a" or r[0] is None,
        lambda r: r[2] > 2 and r[1] is not None,
    ]
    out = {
        f"f{i}": oracle.map(oracle.filter(a, test), lambda r, i=i: (r[0], r[2] * (i + 1)))
        for i, test in enumerate(tests)
    }
    out["direct"] = oracle.map(a, lambda r: (r[1], None if r[0] is None else r[0] + r[2]))
    grouped = oracle.map(a, lambda r: (r[2] % 3, r[2]))
    out["grouped"] = oracle.reduce(grouped, [0], [("sum", 1)])
    return out


VIEWS = Pipeline((KSV,), _views, _views_expected, (st.tuples(KEY, NAME, VALUE),))


@settings(LOCAL, max_examples=30)
@given(history=histories(VIEWS.rows, max_rounds=6))
def test_sibling_views_share_one_query(history: History) -> None:
    check_history(LocalKernel(), VIEWS, history)


def test_a_failing_sibling_fails_alone() -> None:
    """One view's expression raises: the shared query fails, each view runs its own, and
    only that view fails (the others' rows are still right)."""
    worker = Worker(LocalKernel())
    worker.isolate_failures = True
    table = worker.new_input({"k": "int", "s": "text"})
    shared = table.to_collection().arrange_by_self()
    good = [
        shared.trace_handle().import_into().as_collection().filter(f"k > {i}").capture()
        for i in range(3)
    ]
    bad_view = shared.trace_handle().import_into().as_collection().map("CAST(s AS int) AS n")
    bad = bad_view.capture()
    table.insert((1, "x"))
    table.insert((5, "7"))
    table.advance_to(1)
    table.flush()
    worker.step()
    assert bad_view.node.id in worker.failed
    assert isinstance(worker.failed[bad_view.node.id], DsqlError)
    assert bad.poll().num_rows == 0
    for i, capture in enumerate(good):
        rows = sorted(r["k"] for r in capture.poll().to_pylist())
        assert rows == [k for k in (1, 5) if k > i]


# --- the driver's consolidation against the query it replaces ------------------------------

DATE = st.dates(datetime.date(1999, 12, 30), datetime.date(2000, 1, 2))


@st.composite
def _tables(draw: Any, numbers: bool = False) -> list[pa.Table]:
    """1-3 tables of updates with columns i, s, b, d and two times; with `numbers`, of
    columns i (int32, NULL-free unless drawn otherwise), s (int64), b (int8), d (int16)."""
    types = [pa.int32(), pa.string(), pa.bool_(), pa.date32()]
    values = [st.integers(-1, 2).map(lambda v: None if v < 0 else v), NAME, FLAG]
    values.append(st.one_of(st.none(), DATE))
    if numbers:
        types = [pa.int32(), pa.int64(), pa.int8(), pa.int16()]
        nulls = draw(st.booleans())
        values = [st.integers(-1 if nulls else 0, 2).map(lambda v: None if v < 0 else v)]
        values += [st.integers(-(2**62), 2**62) | st.integers(-2, 2), st.integers(-128, 127)]
        values.append(st.integers(-3, 3))
    schema = pa.schema(
        [
            *zip("isbd", types, strict=True),
            ("__time__", pa.int64()),
            ("__time1__", pa.int64()),
            ("__diff__", pa.int64()),
        ]
    )
    row = st.tuples(
        *values,
        st.integers(0, 4),
        st.integers(0, 4),
        st.sampled_from([-2, -1, 1, 1, 3]),
    )
    tables = []
    for _ in range(draw(st.integers(1, 3))):
        rows = draw(st.lists(row, max_size=12))
        tables.append(pa.table(list(zip(*rows, strict=True)) or [[]] * 7, schema=schema))
    return tables


FRONTIERS = st.sampled_from([None, Antichain([(2, 1)]), Antichain([(3, 0), (1, 2)])])


@settings(LOCAL, max_examples=200)
@given(
    tables=st.booleans().flatmap(_tables),
    frontier=FRONTIERS,
    negate_last=st.booleans(),
    way=st.sampled_from(["python", "codes", "numbers", "bins"]),
)
def test_driver_consolidation_equals_the_query(
    tables: list[pa.Table], frontier: Antichain | None, negate_last: bool, way: str
) -> None:
    """Each of the driver's ways (Python's sums for a few rows, sums per row code
    beyond, numpy alone for NULL-free integer columns, sorted or counted into bins when
    their codes are dense: `way` forces one where it applies) against DuckDB's query."""
    kernel, columns = LocalKernel(), ("i", "s", "b", "d")
    signs = [1] * (len(tables) - 1) + [-1 if negate_last else 1]
    bounds = driver.PYTHON_ROWS, driver.NUMERIC_ROWS, driver.BINS_PER_ROW
    try:
        driver.PYTHON_ROWS = bounds[0] if way == "python" else 0
        driver.NUMERIC_ROWS = bounds[1] if way in ("numbers", "bins") else -1
        driver.BINS_PER_ROW = 1 << 16 if way == "bins" else 0
        fast = driver.consolidate(tables, columns, 2, frontier, signs)
    finally:
        driver.PYTHON_ROWS, driver.NUMERIC_ROWS, driver.BINS_PER_ROW = bounds
    assert fast is not None
    names = {f"b{i}": t for i, t in enumerate(tables)}
    parts = []
    for (name, table), sign in zip(names.items(), signs, strict=True):
        diff = rel.col("__diff__") if sign == 1 else exp.Neg(this=rel.col("__diff__"))
        kept = rel.passthrough(table.column_names[:-1])
        parts.append(rel.select(name, [*kept, ("__diff__", diff)]))
    union = parts[0]
    for p in parts[1:]:
        union = exp.union(union, p, distinct=False)
    query = (
        rel.advance(union, columns, 2, frontier) if frontier else rel.consolidate(union, columns, 2)
    )
    slow = kernel.query(query, names)
    assert fast.schema == slow.schema
    assert sorted(map(str, fast.to_pylist())) == sorted(map(str, slow.to_pylist()))


@settings(LOCAL, max_examples=60)
@given(
    seed=st.integers(0, 2**32 - 1),
    parts=st.lists(
        st.tuples(st.integers(0, 1500), st.sampled_from([1, -1])), min_size=1, max_size=3
    ),
    low=st.integers(-3, 3),
    frontier=st.sampled_from([None, (1, 2), (0, 3)]),
)
def test_driver_consolidation_by_bins_equals_by_sorting(
    seed: int, parts: list[tuple[int, int]], low: int, frontier: tuple[int, int] | None
) -> None:
    """Dense integer rows (a loop's leave: node pairs at a few times) in a few parts,
    some negated, times advanced or not: counted into bins, the same table, row for row
    and in the same order, as sorted. The rows' values are drawn from a small box, so
    that every draw of more than 90 rows takes the bins."""
    rng = np.random.default_rng(seed)
    schema = pa.schema(
        [(c, pa.int32()) for c in "ab"] + [(t, pa.int64()) for t in ("__time__", "__time1__")]
    )
    schema = schema.append(pa.field("__diff__", pa.int64()))

    def part(rows: int) -> pa.Table:
        columns = [rng.integers(low, low + 6, rows), rng.integers(0, 5, rows)]
        columns += [rng.integers(0, 3, rows), rng.integers(0, 4, rows)]
        columns.append(rng.choice([-2, -1, 1, 1, 3], rows))
        return pa.table(columns, schema=schema)

    tables = [part(rows) for rows, _ in parts]
    signs = [sign for _, sign in parts]
    rows = sum(t.num_rows for t in tables)
    binned = []
    counted = driver._by_bins
    kept = driver.BINS_PER_ROW, driver._by_bins
    results = []
    try:
        driver._by_bins = lambda *a: binned.append(1) or counted(*a)
        for bins in (0, kept[0]):
            driver.BINS_PER_ROW = bins
            at = Antichain([frontier]) if frontier else None
            results.append(driver.consolidate(tables, ("a", "b"), 2, at, signs))
    finally:
        driver.BINS_PER_ROW, driver._by_bins = kept
    by_sorting, by_bins = results
    assert by_bins is not None and by_bins.equals(by_sorting)
    # At most 6 x 5 x 3 x 4 = 360 codes, dense from 90 rows (4 a row); Python's sums
    # up to `PYTHON_ROWS` rows.
    if rows >= 360 // driver.BINS_PER_ROW or rows <= driver.PYTHON_ROWS:
        assert len(binned) == (rows > driver.PYTHON_ROWS)


@settings(LOCAL, max_examples=60)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(0, 600),
    span=st.sampled_from([3, 1000, 2**62]),
    depth=st.integers(1, 2),
)
def test_a_capture_consolidates_by_numpy_as_arrow_does(
    seed: int, rows: int, span: int, depth: int
) -> None:
    """A capture's consolidation of NULL-free integers (`driver.consolidate_sorted`:
    counted into bins, sorted by packed codes, or column by column when too wide to
    pack, as `span` makes them) gives Arrow's grouping and sort row for row: the same
    sums, schema and order (by time, then the columns)."""
    rng = np.random.default_rng(seed)
    times = ("__time__", "__time1__")[:depth]
    table = pa.table(
        {
            "a": pa.array(rng.integers(-2, 3, rows), pa.int32()),
            "b": rng.integers(-span, span, rows, dtype=np.int64),
            **{t: rng.integers(0, 3, rows) for t in times},
            "__diff__": rng.choice([-2, -1, 1, 1, 3], rows),
        }
    )
    fast = consolidate_table(table, ("a", "b"), times)
    kept = driver.consolidate_sorted
    try:
        driver.consolidate_sorted = lambda *a: None
        slow = consolidate_table(table, ("a", "b"), times)
    finally:
        driver.consolidate_sorted = kept
    assert fast.equals(slow)
    assert (kept(table, [*times, "a", "b"]) is not None) == (driver.PYTHON_ROWS < rows)


@settings(LOCAL, max_examples=80)
@given(inp=_tables(), outp=_tables())
def test_driver_distinct_step_equals_accumulate_then_subtract(
    inp: list[pa.Table], outp: list[pa.Table]
) -> None:
    """A settled distinct step in one grouping (`driver.distinct_step`, over rows at any
    times up to the step's) against its three steps over the rows at the step's time:
    accumulate the input, keep the present rows once, subtract the output."""
    from dsql.runtime.operators.reduce_logic import Distinct

    columns = ("i", "s", "b", "d")

    def at_one_time(tables: list[pa.Table]) -> pa.Table:
        table = pa.concat_tables(tables)
        for name in ("__time__", "__time1__"):
            at = table.schema.get_field_index(name)
            table = table.set_column(at, name, pa.array([3] * table.num_rows, pa.int64()))
        return table

    fast = driver.distinct_step(inp, outp, columns, (3, 3))
    new, old = at_one_time(inp), at_one_time(outp)
    if new.num_rows == 0:
        assert fast is None
        return
    acc = driver.consolidate([new], columns, 2, None)
    assert fast is not None and acc is not None
    desired = Distinct().in_arrow(acc, columns, (), 2)
    slow = driver.consolidate([desired, old], columns, 2, None, signs=(1, -1))
    assert slow is not None and fast.schema == slow.schema
    assert sorted(map(str, fast.to_pylist())) == sorted(map(str, slow.to_pylist()))


JOIN_KEYS = st.sampled_from([("i",), ("s",), ("i", "s"), ("b", "d"), ()])


def _tilted(table: pa.Table, tilt: str) -> pa.Table:
    """`table` with its times made later than any drawn (`later`: a loop step's delta
    against what entered it), its diffs all 1 (`ones`) or all positive, so that one side
    decides a pair's time or diff (`driver._later`, `driver._product`) or nearly does."""
    if tilt == "later":
        for t in ("__time__", "__time1__"):
            at = table.column_names.index(t)
            table = table.set_column(at, t, pc.add(table[t], 5))
    if tilt == "ones":
        at = table.column_names.index("__diff__")
        table = table.set_column(at, "__diff__", pa.array([1] * table.num_rows, pa.int64()))
    if tilt == "positive":  # the least diff 1, but not every one
        at = table.column_names.index("__diff__")
        table = table.set_column(at, "__diff__", pc.abs(table["__diff__"]))
    return table


TILTS = st.sampled_from(["none", "later", "ones", "positive"])


@settings(LOCAL, max_examples=80)
@given(
    left=_tables(),
    right=_tables(),
    keys=JOIN_KEYS,
    arrays=st.booleans(),
    tilts=st.tuples(TILTS, TILTS),
)
def test_driver_join_equals_the_query(
    left: list[pa.Table],
    right: list[pa.Table],
    keys: tuple[str, ...],
    arrays: bool,
    tilts: tuple[str, str],
) -> None:
    """Both of the driver's joins (Python's dict for a few rows, array operations for
    more: `arrays` forces them) against DuckDB's `relational.join_on_keys`, NULL keys
    matching NULL; a side's times or diffs tilted (`_tilted`) or not."""
    kernel = LocalKernel()
    left = [_tilted(t, tilts[0]) for t in left]
    right = [_tilted(t, tilts[1]) for t in right]
    l_table = pa.concat_tables(left)
    r_table = pa.concat_tables(right).rename_columns(
        ["ri", "rs", "rb", "rd", "__time__", "__time1__", "__diff__"]
    )
    pairs = tuple((k, "r" + k) for k in keys)
    shape = driver.JoinShape(pairs, ("i", "s", "b", "d"), ("ri", "rs"), 2)
    small = driver.SMALL_ROWS
    try:
        driver.SMALL_ROWS = -1 if arrays else small
        fast = driver.join(l_table, r_table, shape)
    finally:
        driver.SMALL_ROWS = small
    assert fast is not None
    query = rel.join_on_keys("l", "r", pairs, ("i", "s", "b", "d"), ("ri", "rs"), 2)
    slow = kernel.query(query, {"l": l_table, "r": r_table})
    assert fast.schema.names == slow.schema.names
    assert sorted(map(str, fast.to_pylist())) == sorted(map(str, slow.to_pylist()))


def test_a_join_checks_each_pairs_diff_product_when_some_pair_may_overflow() -> None:
    """Diffs whose extremes multiply past 2**62 are checked pair by pair: the pairs that
    stay below give their products, a pair beyond declines the join."""
    left, right = np.array([2**61, 1]), np.array([1, 3])
    both = np.array([0, 1])
    product = driver._product(left, both, right, both)
    assert product is not None and product.tolist() == [2**61, 3]
    assert driver._product(left, np.array([0]), right, np.array([1])) is None
    assert driver._later(np.array([4, 9]), both, np.array([7, 2]), both).tolist() == [7, 9]


def test_driver_declines_what_it_cannot_match(monkeypatch: pytest.MonkeyPatch) -> None:
    floats = pa.table({"x": [0.0, -0.0], "__time__": [1, 1], "__diff__": [1, 1]})
    assert driver.consolidate([floats], ("x",), 1, None) is None
    monkeypatch.setattr(driver, "DRIVER_ROWS", 100)
    monkeypatch.setattr(driver, "NUMERIC_ROWS", 200)
    for n, x in ((101, pa.array([str(i) for i in range(101)])), (201, pa.array(range(201)))):
        many = pa.table({"x": x, "__time__": [0] * n, "__diff__": [1] * n})
        assert driver.consolidate([many], ("x",), 1, None) is None  # too many rows
    numbers = pa.table({"x": range(150), "__time__": [0] * 150, "__diff__": [1] * 150})
    assert driver.consolidate([numbers], ("x",), 1, None) == numbers  # numpy's, beyond
    keys = pa.table({"a": [1, None], "b": ["x", "y"]})
    assert driver.rows_with_keys(keys, ("a", "b"), keys) is None  # a NULL in a key pair
    single = driver.rows_with_keys(keys, ("a",), keys.slice(1))
    assert single is not None and single.to_pylist() == [{"a": None, "b": "y"}]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_empty_and_tiny_batches(n: int) -> None:
    table = pa.table(
        {
            "x": pa.array(list(range(n)), pa.int64()),
            "__time__": pa.array([0] * n, pa.int64()),
            "__diff__": pa.array([1] * n, pa.int64()),
        }
    )
    out = driver.consolidate([table, table], ("x",), 1, None, signs=(1, -1))
    assert out is not None and out.num_rows == 0
    assert out.schema.names == ["x", "__time__", "__diff__"]


@settings(LOCAL, max_examples=200)
@given(values=st.lists(st.integers(-(2**62), 2**62), max_size=40), wide=st.booleans())
def test_sort_order_is_a_stable_argsort(values: list[int], wide: bool) -> None:
    # Narrow ranges sort packed with their positions; wide ones fall back to argsort.
    array = np.array(values if wide else [v % 7 - 3 for v in values], np.int64)
    ordered, order = driver.sort_order(array)
    expected = np.argsort(array, kind="stable")
    assert order.tolist() == expected.tolist()
    assert ordered.tolist() == array[expected].tolist()


@settings(LOCAL, max_examples=100)
@given(
    runs=st.lists(st.lists(st.integers(0, 60), max_size=400), min_size=1, max_size=12),
    sort=st.booleans(),
)
def test_sorted_runs_end_to_end_sort_as_any_values_do(runs: list[list[int]], sort: bool) -> None:
    # Runs laid end to end (a trace merge's batches) take numpy's stable sort, values
    # in no order the packed quicksort: either way a stable argsort.
    array = np.array([v for run in runs for v in (sorted(run) if sort else run)], np.int64)
    ordered, order = driver.sort_order(array)
    expected = np.argsort(array, kind="stable")
    assert order.tolist() == expected.tolist()
    assert ordered.tolist() == array[expected].tolist()


@settings(LOCAL, max_examples=100)
@given(
    rows=st.lists(
        st.tuples(*[st.integers(0, 3)] * 3, st.sampled_from([-1, 1])),
        min_size=2,
        max_size=40,
    ),
    spread=st.sampled_from(
        [(2**40, 2**30, 2**20), (2**30, 2**25, 2**40), (2**61, 1, 2**61), (2**20, 2**20, 2**61)]
    ),
    in_time_order=st.booleans(),
)
def test_driver_consolidation_of_rows_too_wide_for_one_code(
    rows: list[tuple[int, int, int, int]], spread: tuple[int, int, int], in_time_order: bool
) -> None:
    """Columns whose spans together exceed one code's 62 bits (`driver._wide_order`: a
    packing prefix and a second code, the second in order or not; or column by column)
    consolidate as a Counter does."""
    if in_time_order:
        rows = sorted(rows, key=lambda r: r[2])
    k, v, t = ([r[i] * spread[i] for r in rows] for i in range(3))
    table = pa.table({"k": k, "v": v, "__time__": t, "__diff__": [r[3] for r in rows]})
    bound = driver.PYTHON_ROWS
    try:
        driver.PYTHON_ROWS = 0  # numpy's way at any size
        got = driver.consolidate([table], ("k", "v"), 1, None)
    finally:
        driver.PYTHON_ROWS = bound
    assert got is not None
    want: Counter[tuple[int, int, int]] = Counter()
    for row in zip(k, v, t, table["__diff__"].to_pylist(), strict=True):
        want[row[:3]] += row[3]
    assert {(r["k"], r["v"], r["__time__"]): r["__diff__"] for r in got.to_pylist()} == {
        key: d for key, d in want.items() if d
    }
    keys = [(r["k"], r["v"], r["__time__"]) for r in got.to_pylist()]
    assert keys == sorted(keys)  # in key order, as a stored batch needs
