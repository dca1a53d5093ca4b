"""The general reduce step over few rows, in the driver (`Kernel.reduce_small`).

`reduce`'s general step (grid of interesting times, candidates, accumulations, the
Möbius inversion of the errors) is a dozen relational stages. Sent to DuckDB as one
statement it costs 12-14 ms even over a handful of rows (parse, plan and run each
stage), while a step inside a loop usually moves a few rows: a one-edge change to a
graph wakes a few keys per inner round. When the affected keys' rows are few and of
plain types (`driver.plain`), this module does those stages in Python, over the same
inputs and with the same meaning, and leaves one statement: the logic itself (a callback,
`ReduceLogic.desired`) over the accumulated groups.

Per affected key `k` (one with a new update or a pending time), with `H` its input
rows and `N` its new and pending times:

1. grid: per coordinate, the values of `H`'s and `N`'s times at or beyond the least
   value of `N` in that coordinate; candidates: grid points `>=` some time of `N`;
2. a candidate beyond the frontier stays pending; the others are ready;
3. at a ready candidate `c`: `E(c) = logic(H accumulated at c) - output accumulated at c`;
4. the correction at `c`: `sum over subsets S of coordinates of (-1)^|S| E(c_S)`, where
   `c_S` moves each coordinate in `S` to its predecessor on the grid (no predecessor,
   or no `E` there: zero).

Invariant: the output and pending candidates equal the general step's query
(`reduce._queries`) on the same inputs; the oracle tests run histories that take both.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dsql.runtime.kernel import driver
from dsql.runtime.lattice import DIFF, Antichain, time_columns

#: At most this many input and output rows of the affected keys are handled here.
SMALL_ROWS = 2_000
#: At most this many (candidate, input row) pairs are accumulated here.
SMALL_WORK = 200_000

Time = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReduceShape:
    """What a reduce step is besides its rows: key, value and output columns, time depth,
    the input's schema and the output's data schema (keys, then outputs);
    `present_once`: the logic's (`ReduceLogic.present_once`, each present group once)."""

    keys: tuple[str, ...]
    values: tuple[str, ...]
    outputs: tuple[str, ...]
    depth: int
    source: pa.Schema
    schema: pa.Schema
    present_once: bool = False


@dataclass(frozen=True, slots=True)
class ReduceRows:
    """A general reduce step's rows: `inputs`, the affected keys' input rows (new ones
    included); `delta`, the new input; `pending`, the candidates held back (keys, times);
    `outputs`, the affected keys' rows of the output trace (inputs and outputs may hold
    other keys' rows too); the frontier; the step's `ReduceShape`. Frames of any kernel.
    `uppers`: per time coordinate, the greatest time of the input's history and of the
    output trace, when known without reading them (`Arranged.history_upper`)."""

    inputs: Sequence[Any]
    delta: Any
    pending: Any
    outputs: Sequence[Any]
    frontier: Antichain
    shape: ReduceShape
    uppers: tuple[tuple[int, ...] | None, tuple[int, ...] | None] = (None, None)

    def frames(self) -> list[Any]:
        """Every frame given."""
        extra = [f for f in (self.delta, self.pending) if f is not None]
        return [*self.inputs, *self.outputs, *extra]


def reduce_step(
    rows: ReduceRows, logic: Callable[[pa.Table], pa.Table | None]
) -> tuple[pa.Table, pa.Table] | None:
    """The step's output and pending candidates (module docstring), or None when the
    rows are not few or not of plain types (the general query runs instead). `rows`:
    Arrow tables; `logic`: the desired output (keys, outputs, times, diff) of accumulated
    groups (keys, times, values, diff), None when it is not in the driver."""
    inputs, delta, pending, outputs = rows.inputs, rows.delta, rows.pending, rows.outputs
    frontier, shape = rows.frontier, rows.shape
    if sum(t.num_rows for t in (*inputs, *outputs)) > SMALL_ROWS:
        return None
    keys, vals, outs, d = shape.keys, shape.values, shape.outputs, shape.depth
    source = shape.source
    if not (driver.plain(source, [*keys, *vals]) and driver.plain(shape.schema, outs)):
        return None
    times = time_columns(d)
    new: dict[tuple, set[Time]] = defaultdict(set)
    for t in (delta, pending):
        if t is not None and t.num_rows:
            for row in _rows(t, [*keys, *times]):
                new[row[: len(keys)]].add(row[len(keys) :])
    history = _grouped(inputs, keys, vals, d, new)
    current = _grouped(outputs, keys, outs, d, new)

    ready: dict[tuple, list[Time]] = {}
    waiting: list[tuple] = []
    predecessors: dict[tuple, list[dict[int, int]]] = {}
    work = 0
    for key, stamps in new.items():
        grid, before = _grid(stamps, [s for _, s, _ in history.get(key, ())], d)
        points = [c for c in itertools.product(*grid) if d == 1 or _above_some(c, stamps)]
        ready[key] = [c for c in points if not _beyond(c, frontier)]
        waiting += [(*key, *c) for c in points if _beyond(c, frontier)]
        predecessors[key] = before
        work += len(ready[key]) * (len(history.get(key, ())) + len(current.get(key, ())))
        if work > SMALL_WORK:
            return None

    acc = [
        (*key, *c, *v, total)
        for key, cands in ready.items()
        for c in cands
        for v, total in _accumulate(history.get(key, ()), c).items()
    ]
    fields = [source.field(n) for n in (*keys, *vals)]
    acc_schema = pa.schema(
        [*fields[: len(keys)], *(pa.field(t, pa.int64()) for t in times)]
        + [*fields[len(keys) :], pa.field(DIFF, pa.int64())]
    )
    desired: list[tuple] = []
    if acc:  # the logic is never called on an empty group
        wanted = logic(_table(acc, acc_schema))
        if wanted is None:
            return None
        desired = _rows(wanted, [*keys, *outs, *times, DIFF])

    errors: dict[tuple, dict[tuple, int]] = defaultdict(lambda: defaultdict(int))
    for row in desired:
        key, out, c = row[: len(keys)], row[len(keys) : -d - 1], row[-d - 1 : -1]
        errors[(key, c)][out] += row[-1]
    for key, cands in ready.items():
        for c in cands:
            for out, total in _accumulate(current.get(key, ()), c).items():
                errors[(key, c)][out] -= total
    corrections: dict[tuple, int] = defaultdict(int)
    for key, cands in ready.items():
        before = predecessors[key]
        for c in cands:
            for size in range(d + 1):
                for subset in itertools.combinations(range(d), size):
                    moved = _moved(c, subset, before)
                    if moved is None:
                        continue
                    sign = -1 if size % 2 else 1
                    for out, e in errors.get((key, moved), {}).items():
                        if e:
                            corrections[(*key, *out, *c)] += sign * e
    corrected = [(*r, total) for r, total in corrections.items() if total]
    if not driver.fit_int64(r[-1] for r in corrected):
        return None  # the query reports the overflow
    out_schema = pa.schema(
        [pa.field(f.name, f.type) for f in shape.schema]
        + [pa.field(t, pa.int64()) for t in (*times, DIFF)]
    )
    pend_schema = pa.schema([*fields[: len(keys)], *(pa.field(t, pa.int64()) for t in times)])
    return _table(corrected, out_schema), _table(waiting, pend_schema)


def _table(rows: Sequence[tuple], schema: pa.Schema) -> pa.Table:
    """Row tuples (in `schema`'s column order) as a table, built column by column."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    arrays = [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def _rows(table: pa.Table, names: Sequence[str]) -> list[tuple]:
    return list(zip(*(table.column(n).to_pylist() for n in names), strict=True))


def _grouped(
    tables: Sequence[pa.Table],
    keys: Sequence[str],
    values: Sequence[str],
    d: int,
    wanted: dict[tuple, set[Time]],
) -> dict[tuple, list[tuple[tuple, Time, int]]]:
    """Per wanted key, its rows as (values, time, diff)."""
    times = time_columns(d)
    k, v = len(keys), len(values)
    by_key: dict[tuple, list[tuple[tuple, Time, int]]] = defaultdict(list)
    for table in tables:
        for row in _rows(table, [*keys, *values, *times, DIFF]):
            key = row[:k]
            if key in wanted:
                by_key[key].append((row[k : k + v], row[k + v : -1], row[-1]))
    return by_key


def _grid(
    stamps: set[Time], history: list[Time], d: int
) -> tuple[list[list[int]], list[dict[int, int]]]:
    """Per coordinate, the grid values (at or beyond the least new value) and each
    value's predecessor among them."""
    grid, before = [], []
    for i in range(d):
        low = min(s[i] for s in stamps)
        values = sorted({s[i] for s in (*stamps, *history) if s[i] >= low})
        grid.append(values)
        before.append(dict(zip(values[1:], values[:-1], strict=True)))
    return grid, before


def _above_some(c: Time, stamps: set[Time]) -> bool:
    return any(all(a >= b for a, b in zip(c, s, strict=True)) for s in stamps)


def _beyond(c: Time, frontier: Antichain) -> bool:
    """Whether some element of the frontier is `<=` `c` (the time is not complete)."""
    return any(all(a >= f for a, f in zip(c, e, strict=True)) for e in frontier)


def _accumulate(rows: Sequence[tuple[tuple, Time, int]], c: Time) -> dict[tuple, int]:
    """The rows' values accumulated at time `c` (non-zero totals only)."""
    totals: dict[tuple, int] = defaultdict(int)
    for values, stamp, diff in rows:
        if all(a <= b for a, b in zip(stamp, c, strict=True)):
            totals[values] += diff
    return {v: t for v, t in totals.items() if t}


def _moved(c: Time, subset: tuple[int, ...], before: list[dict[int, int]]) -> Time | None:
    """`c` with each coordinate in `subset` moved to its grid predecessor (None: none)."""
    moved = list(c)
    for i in subset:
        if c[i] not in before[i]:
            return None
        moved[i] = before[i][c[i]]
    return tuple(moved)
