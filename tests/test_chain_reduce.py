"""The vectorized chain step (`kernel.chain_reduce`) against the driver's reduce step.

Both compute a general reduce step from the same rows; the driver's (`driver_reduce`)
walks the grid of interesting times in Python, the chain step uses running sums along
each key's chain. Random rows (keys with NULLs, several values per key, deletes, times
of depth 1 and 2, pending candidates, frontiers) must give the same output and pending
candidates whenever the chain step accepts them, and it must accept every step whose
new times share their outer coordinates with nothing later in the history.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from dsql.runtime.kernel.chain_reduce import chain_step, distinct_chain, shared_prefix
from dsql.runtime.kernel.driver_reduce import ReduceRows, ReduceShape, reduce_step
from dsql.runtime.lattice import DIFF, Antichain, time_columns

SOURCE = pa.schema([("k", pa.int64()), ("v", pa.string())])


def _count(acc: pa.Table) -> pa.Table:
    """Per (key, time): the count of the group, as one row of diff 1."""
    times = [n for n in acc.column_names if n.startswith("__time")]
    grouped = acc.group_by(["k", *times], use_threads=False).aggregate([(DIFF, "sum")])
    total = grouped[f"{DIFF}_sum"]
    keep = pc.not_equal(total, 0)
    grouped = grouped.filter(keep)
    return pa.table(
        {
            "k": grouped["k"],
            "n": grouped[f"{DIFF}_sum"],
            **{t: grouped[t] for t in times},
            DIFF: pa.array([1] * grouped.num_rows, pa.int64()),
        }
    )


def _values(acc: pa.Table) -> pa.Table:
    """Each value present (positive count) once: a distinct over (key, value)."""
    kept = acc.filter(pc.greater(acc[DIFF], 0))
    times = [n for n in acc.column_names if n.startswith("__time")]
    return pa.table(
        {
            "k": kept["k"],
            "v": kept["v"],
            **{t: kept[t] for t in times},
            DIFF: pa.array([1] * kept.num_rows, pa.int64()),
        }
    )


def _present(acc: pa.Table) -> pa.Table:
    """Distinct over whole rows (keys `k` and `v`, no values): each present row once."""
    kept = acc.filter(pc.greater(acc[DIFF], 0))
    return kept.set_column(
        kept.schema.get_field_index(DIFF), DIFF, pa.array([1] * kept.num_rows, pa.int64())
    )


LOGICS = {
    "count": (_count, pa.schema([("k", pa.int64()), ("n", pa.int64())]), ("n",)),
    "values": (_values, pa.schema([("k", pa.int64()), ("v", pa.string())]), ("v",)),
    # The chain step's own path for `Distinct` (`ReduceShape.present_once`): keys k and v.
    "distinct": (_present, SOURCE, ()),
}

KEYS = st.one_of(st.none(), st.integers(0, 4))
VALUES = st.sampled_from(["a", "b", "c", None])
DIFFS = st.sampled_from([1, 1, 2, -1, -2])


@st.composite
def steps(draw: st.DrawFn) -> tuple[ReduceRows, str, bool]:
    depth = draw(st.sampled_from([1, 2]))
    outer = draw(st.integers(0, 3))
    inner = st.integers(0, 5)

    def stamp(now: bool) -> tuple[int, ...]:
        if depth == 1:
            return (draw(inner),)
        # History times at or before the outer time (sometimes after: not a chain).
        o = outer if now else draw(st.integers(0, outer + (1 if draw(st.booleans()) else 0)))
        return (o, draw(inner))

    times = time_columns(depth)

    def table(schema: pa.Schema, names: tuple[str, ...], rows: list[tuple]) -> pa.Table:
        fields = [*(schema.field(n) for n in names), *(pa.field(t, pa.int64()) for t in times)]
        fields.append(pa.field(DIFF, pa.int64()))
        columns = list(zip(*rows, strict=True)) if rows else [()] * len(fields)
        return pa.Table.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, fields, strict=True)],
            schema=pa.schema(fields),
        )

    name = draw(st.sampled_from(sorted(LOGICS)))
    _, out_schema, outs = LOGICS[name]
    n_delta = draw(st.integers(0, 6))
    delta_rows = [(draw(KEYS), draw(VALUES), *stamp(True), draw(DIFFS)) for _ in range(n_delta)]
    history = [
        (draw(KEYS), draw(VALUES), *stamp(False), draw(DIFFS))
        for _ in range(draw(st.integers(0, 15)))
    ]
    out_value = st.integers(-2, 3) if name == "count" else VALUES
    outputs = [
        (draw(KEYS), draw(out_value), *stamp(False), draw(DIFFS))
        for _ in range(draw(st.integers(0, 10)))
    ]
    distinct = name == "distinct"
    keys, vals = (("k", "v"), ()) if distinct else (("k",), ("v",))
    pend = [
        (draw(KEYS), *([draw(VALUES)] if distinct else []), *stamp(True))
        for _ in range(draw(st.integers(0, 2)))
    ]
    delta = table(SOURCE, ("k", "v"), delta_rows)
    pending_fields = [*(SOURCE.field(k) for k in keys), *(pa.field(t, pa.int64()) for t in times)]
    pending = pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(zip(*pend, strict=True), pending_fields, strict=True)]
        if pend
        else [pa.array([], f.type) for f in pending_fields],
        schema=pa.schema(pending_fields),
    )
    frontier = Antichain(
        [stamp(True) for _ in range(draw(st.integers(0, 2)))] if draw(st.booleans()) else []
    )
    shape = ReduceShape(keys, vals, outs, depth, SOURCE, out_schema, distinct)
    rows = ReduceRows(
        [table(SOURCE, ("k", "v"), history), delta],
        delta if n_delta else None,
        pending if pend else None,
        [table(out_schema, (*keys, *outs), outputs)],
        frontier,
        shape,
    )
    chain = depth == 1 or all(r[2] <= outer for r in history + outputs)
    return rows, name, chain and bool(n_delta or pend)


def _bag(table: pa.Table) -> dict:
    names = [n for n in table.column_names if n != DIFF]
    diffs = table.column(DIFF).to_pylist() if DIFF in table.column_names else [1] * len(table)
    bag: Counter = Counter()
    for row, d in zip(
        zip(*(table.column(n).to_pylist() for n in names), strict=True), diffs, strict=True
    ):
        bag[row] += d
    return {row: d for row, d in bag.items() if d}


@settings(max_examples=400, deadline=None)
@given(step=steps())
def test_chain_step_equals_driver_step(step: tuple[ReduceRows, str, bool]) -> None:
    rows, name, chain = step
    logic = LOGICS[name][0]
    expected = reduce_step(rows, logic)
    assert expected is not None
    got = chain_step(rows, logic)
    if chain:
        assert got is not None
    if got is None:
        return
    assert _bag(got[0]) == _bag(expected[0])
    assert _bag(got[1]) == _bag(expected[1])
    assert got[0].schema.names == expected[0].schema.names
    assert got[1].schema.names == expected[1].schema.names


@settings(max_examples=300, deadline=None)
@given(step=steps())
def test_distinct_from_numbers_equals_driver_step(step: tuple[ReduceRows, str, bool]) -> None:
    # A loop's distinct stepped from its rows as numbers (`distinct_chain`, what
    # `operators.reduce_chain` gives it): each history and output row as the probe row
    # with its key, its last time coordinate and its diff.
    rows, name, chain = step
    if name != "distinct" or not chain:
        return
    keys, times = rows.shape.keys, time_columns(rows.shape.depth)
    new = [t for t in (rows.delta, rows.pending) if t is not None]
    probe = pa.concat_tables([t.select(list(keys)) for t in new])
    first: dict[tuple, int] = {}
    for i, key in enumerate(zip(*(probe[k].to_pylist() for k in keys), strict=True)):
        first.setdefault(key, i)

    def matches(table: pa.Table) -> tuple[np.ndarray, ...]:
        columns = [table[n].to_pylist() for n in (*keys, times[-1], DIFF)]
        found = [(first[r[:-2]], *r[-2:]) for r in zip(*columns, strict=True) if r[:-2] in first]
        return tuple(np.array([f[i] for f in found], np.int64) for i in range(3))

    new_j = np.concatenate([t[times[-1]].to_numpy() for t in new]).astype(np.int64)
    delta = rows.delta
    diffs = np.empty(0, np.int64) if delta is None else delta[DIFF].to_numpy().astype(np.int64)
    prefix = shared_prefix(new, times[:-1])
    assert prefix is not None
    got = distinct_chain(
        probe,
        new_j,
        diffs,
        matches(rows.inputs[0]),
        matches(rows.outputs[0]),
        rows.frontier,
        prefix,
        rows.shape,
    )
    expected = reduce_step(rows, LOGICS[name][0])
    assert got is not None and expected is not None
    assert _bag(got[0]) == _bag(expected[0])
    assert _bag(got[1]) == _bag(expected[1])
