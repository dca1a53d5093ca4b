"""Steps over small Arrow tables done in the driver, without a DuckDB statement.

A DuckDB statement costs 0.3-1 ms even over one row (parse, bind, plan, Arrow in and
out), while a round of a small view moves a few rows through several steps. The steps
that need no SQL expression are done here when their input is small and of plain
types, with exactly the result the kernel's query would give:

- `consolidate`: the union of tables, times advanced to a frontier (when given),
  equal (row, time) pairs summed, zero sums dropped (`relational.consolidate` and
  `relational.advance`): by Python's sums for a few rows, else by sums per row code;
  `consolidate_sorted` likewise for a capture's updates, sorted by time;
- `distinct_step`: a settled distinct step (`operators.reduce_settled`) in one
  grouping;
- `project`: columns selected and renamed, rows with NULL in some columns dropped (a
  linear chain that only does that, `Linear.selection`);
- `rows_with_keys`: the rows whose keys some other rows have (a reduce's affected keys);
- `join`: `relational.join_on_keys` of a small delta with the rows of its keys: in
  Python for a few rows, beyond `SMALL_ROWS` by array operations over both sides' key
  codes (`row_codes` numbered in sorted order, the right's rows ordered by number, runs
  laid end to end), up to `JOIN_ROWS`, where DuckDB's statement becomes the cheaper.

Invariant: each returns None, never an approximation, when it cannot match the query
exactly: too many rows, or a column of a type whose equality or round trip through
the engine Python does not reproduce (floating point: NaN groups with NaN in DuckDB;
nested, decimal and temporal types beyond `date32`).

>>> import pyarrow as pa
>>> t = pa.table({"x": [1, 1, 2], "__time__": [3, 3, 3], "__diff__": [1, -1, 2]})
>>> consolidate([t], ("x",), 1, None).to_pylist()
[{'x': 2, '__time__': 3, '__diff__': 2}]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsql.runtime.lattice import DIFF, Antichain, advance_by, time_columns


def small_pages() -> bool:
    """Stop numpy advising the OS to back its arrays with huge pages (returns its old
    setting).

    Numpy asks for transparent huge pages for every array of 4 MiB or more
    (`madvise(MADV_HUGEPAGE)`). Where the kernel's THP defrag policy is `madvise`, a
    common default and this machine's, each first touch of such a page then compacts
    memory synchronously to find 2 MiB. The driver's steps make many short-lived
    arrays of that size (a trace merge of 1.3M rows: a dozen of 10 MB), so that stall
    was most of their time: the closure benchmark's round with that merge, 470-520 ms
    with 250-320 ms in the kernel, against 240-330 ms with 50-70 in the kernel once
    ordinary pages are used. Numpy's setting is process-wide; the environment variable
    `NUMPY_MADVISE_HUGEPAGE=1` has no effect after this, which runs at import.
    """
    from numpy._core import multiarray  # the setting's home; numpy has no public one

    advise = getattr(multiarray, "_set_madvise_hugepage", None)
    return bool(advise(False)) if advise is not None else False


small_pages()

#: At most this many rows are joined in Python in the driver.
SMALL_ROWS = 256
#: At most this many rows are consolidated by Python's sums; beyond it, by array
#: operations (`_by_codes`). Measured on one integer column and two times: Python's
#: 0.06 ms against 0.08 at 30 rows, 0.09 against 0.08 at 100. The array operations sort
#: (`sort_order`) where Arrow's hash aggregation hashes, and take half its time from
#: 60,000 rows to 2M (3.8 against 8.8 ms at 170k, 98 against 192 ms at 2M; text keys
#: 128 against 254 ms at 2M).
PYTHON_ROWS = 64
#: At most this many rows are consolidated in the driver; beyond it, the query. The
#: bound keeps bigger merges in the engine, which can spill.
DRIVER_ROWS = 2_000_000
#: Beyond `PYTHON_ROWS`, at most this many rows of integer columns without NULLs are
#: consolidated by numpy alone (`_in_numbers`), which spares `_by_codes` its Arrow calls
#: per column: 0.28 against 0.39 ms at 500 rows of two keys and two times. Beyond
#: `DRIVER_ROWS` too: such rows are in the driver already, and numpy's sort leaves them
#: in key order, which a batch stored by Spark needs (`SparkKernel.store_arrow`). The
#: 10M book's batches: 0.25 against 1.1-1.3 s for the 10M loaded rows, 3.4-3.6 against
#: 3.1-4.0 s (DuckDB) for the 20M changes, which then spare their 1.5 s sort into buckets.
NUMERIC_ROWS = 32_000_000

#: At most this many rows on either side, and twice as many pairs out, are joined by
#: array operations (`join` beyond `SMALL_ROWS`); beyond it, the query. Measured on one
#: integer key, two matches a row (`_joined` taking only the kept columns, times in
#: numpy): 4.2 against DuckDB's 8.4 ms at 20,000 rows a side, 16.5 against 22.2 at
#: 70,000, 37 against 62 at 200,000; 44 against 42 at 300,000 rows joined with 2,000
#: (600,000 pairs), DuckDB's parallel hash join well ahead at 2M pairs (227 against 145).
JOIN_ROWS = 200_000

#: Types whose values Python compares exactly as the engines do, and which every kernel
#: passes through a projection unchanged.
PLAIN_TYPES = frozenset(
    (
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.bool_(),
        pa.string(),
        pa.date32(),
    )
)


@dataclass(frozen=True, slots=True)
class Selection:
    """A linear chain that only keeps rows whose `not_null` columns are not NULL and
    outputs `(name, input column)` for each pair of `renames` (`Linear.selection`)."""

    renames: tuple[tuple[str, str], ...]
    not_null: tuple[str, ...] = ()


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def fit_int64(values: Iterable[int]) -> bool:
    """Whether every value fits a BIGINT (else the engine's query reports an overflow)."""
    return all(_INT64_MIN <= v <= _INT64_MAX for v in values)


def plain(schema: pa.Schema, names: Sequence[str]) -> bool:
    """Whether every named column is of a plain type (see `PLAIN_TYPES`)."""
    return all(schema.field(n).type in PLAIN_TYPES for n in names)


def consolidate(
    tables: Sequence[pa.Table],
    columns: Sequence[str],
    depth: int,
    frontier: Antichain | None,
    signs: Sequence[int] | None = None,
) -> pa.Table | None:
    """The consolidated union of `tables` (times advanced to `frontier` when given, the
    diffs of table `i` multiplied by `signs[i]` when given), or None when it is not
    small and plain (see module docstring).

    Output columns: `columns`, the time columns, `__diff__`, all nullable, as the
    kernel's query gives them. The sums are Python's for a few rows, per row code
    beyond (`_by_codes`).
    """
    signed = [(t, sign) for t, sign in zip(tables, signs or [1] * len(tables), strict=True)]
    parts = [(t, sign) for t, sign in signed if t.num_rows]
    rows = sum(t.num_rows for t, _ in parts)
    if rows > max(DRIVER_ROWS, NUMERIC_ROWS) or not tables:
        return None
    times = time_columns(depth)
    names = [*columns, *times, DIFF]
    schema = _output_schema(tables[0].schema, names)
    if schema is None or not plain(schema, columns):
        return None
    first = tables[0].schema
    for t, _ in parts:
        if not t.schema.equals(first) and _output_schema(t.schema, names) != schema:
            return None  # the query would unify the types
    if not parts:
        return schema.empty_table()
    if PYTHON_ROWS < rows <= NUMERIC_ROWS and _integers(parts, schema):
        return _in_numbers(parts, names, len(columns), frontier, schema)
    if rows > DRIVER_ROWS:
        return None
    values = [
        pa.chunked_array([c for t, _ in parts for c in t.column(n).chunks], schema.field(n).type)
        for n in names[:-1]
    ]
    if rows <= PYTHON_ROWS:
        return _in_python(values, parts, columns, depth, frontier, schema)
    signed_diffs = [_signed(t.column(DIFF), sign) for t, sign in parts]
    diffs = np.concatenate([d.to_numpy() for d in signed_diffs])
    return _by_codes(values, diffs, columns, depth, frontier, schema)


def numeric_schema(table: pa.Table, columns: Sequence[str], depth: int) -> pa.Schema | None:
    """The schema `consolidate([part], columns, depth, None)` gives any part of `table`'s
    rows of at most `NUMERIC_ROWS`, when numpy consolidates every such part exactly
    (`_in_numbers`): integer columns without NULLs, and no sum of diffs beyond int64.
    None when not so.

    >>> t = pa.table({"x": [1, None], "__time__": [0, 0], "__diff__": [1, 1]})
    >>> numeric_schema(t, ("x",), 1), numeric_schema(t.slice(0, 1), ("x",), 1).names
    (None, ['x', '__time__', '__diff__'])
    """
    schema = _output_schema(table.schema, [*columns, *time_columns(depth), DIFF])
    if schema is None or not _integers([(table, 1)], schema):
        return None
    if not table.num_rows:
        return schema
    bounds = pc.min_max(table.column(DIFF))  # no copy of the column
    largest = max(abs(bounds["min"].as_py()), abs(bounds["max"].as_py()))
    return None if largest * table.num_rows > _INT64_MAX else schema


def consolidate_sorted(table: pa.Table, names: Sequence[str]) -> pa.Table | None:
    """The rows of `table` summed per equal `names` (the other columns dropped but the
    diff), zero sums dropped, sorted by `names` in order (a capture's updates, sorted
    by time first), by numpy alone (`_in_numbers`): Arrow's hash grouping and sort take
    3 times as long over the 640k pairs of a transitive closure. None unless the named
    columns are integers without NULLs and the rows more than `PYTHON_ROWS` and at most
    `NUMERIC_ROWS`, or when a sum could overflow.

    >>> t = pa.table({"x": [2, 1, 2, 1], "__time__": [5, 5, 4, 5], "__diff__": [1, 1, 1, -1]})
    >>> consolidate_sorted(pa.concat_tables([t] * 20), ["__time__", "x"]).to_pylist()
    [{'__time__': 4, 'x': 2, '__diff__': 20}, {'__time__': 5, 'x': 2, '__diff__': 20}]
    """
    if not PYTHON_ROWS < table.num_rows <= NUMERIC_ROWS:
        return None
    names = [*names, DIFF]
    schema = _output_schema(table.schema, names)
    parts = [(table, 1)]
    if schema is None or not _integers(parts, schema):
        return None
    return _in_numbers(parts, names, len(names) - 1, None, schema)


def _integers(parts: list[tuple[pa.Table, int]], schema: pa.Schema) -> bool:
    """Whether every column of `schema` is of integers that int64 holds exactly, with no
    NULL in any part."""
    if not all(pa.types.is_integer(f.type) and f.type != pa.uint64() for f in schema):
        return False
    return not any(t.column(f.name).null_count for t, _ in parts for f in schema)


def _in_numbers(
    parts: list[tuple[pa.Table, int]],
    names: Sequence[str],
    stamps: int,
    frontier: Antichain | None,
    schema: pa.Schema,
) -> pa.Table | None:
    """`consolidate` of integer columns without NULLs (`_integers`, up to `NUMERIC_ROWS`
    rows; `names` the columns, the times from position `stamps`, the diff) by numpy
    alone: the rows coded and sorted as `_by_codes` does, the diffs summed per run of
    equal rows, in the order `_by_codes` gives; None when a sum could overflow."""

    def column(name: str) -> np.ndarray:
        pieces = [t.column(name).to_numpy() for t, _ in parts]
        whole = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        return whole.astype(np.int64, copy=False)  # a copy only where it must

    def signed(table: pa.Table, sign: int) -> np.ndarray:
        diffs = table.column(DIFF).to_numpy().astype(np.int64, copy=False)
        return diffs if sign == 1 else diffs * sign

    pieces = [signed(t, sign) for t, sign in parts]
    diffs = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
    if may_overflow(diffs):
        return None
    arrays = [column(name) for name in names[:-1]]
    if frontier:
        arrays[stamps:] = [_advanced(raw, k, frontier) for k, raw in enumerate(arrays[stamps:])]
    packing = _packed_codes(arrays)
    code = None if packing is None else packing[0]
    if packing is not None and _dense(packing[1], diffs):
        return _by_bins(packing[0], packing[1], diffs, schema)
    if code is None:  # too wide to pack in one code
        order, starts = _wide_order(arrays)
    else:
        ordered, order = sort_order(code)
        starts = run_starts(ordered)
    first = np.flatnonzero(starts)
    low, high = int(diffs.min()), int(diffs.max())
    if low == high:  # every diff alike (a join's or a distinct's): each run's length
        sums = np.diff(first, append=len(order)) * low
    else:
        sums = np.add.reduceat(diffs[order], first)
    nonzero = sums != 0
    rows = order[first[nonzero]]
    arrays = [pa.array(a[rows], f.type) for a, f in zip(arrays, schema, strict=False)]
    return pa.Table.from_arrays([*arrays, pa.array(sums[nonzero], pa.int64())], schema=schema)


def _wide_order(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows' order column by column, the first the primary, and per position in it
    whether the row differs from the one before (`run_starts`), for columns too wide to
    pack in one code (`_packed_codes`).

    The leading columns that pack are one code and the others a second: a sort of two
    keys, not one per column, and of one where the second is in order already (a batch
    of changes at their own times, in time order: a stable sort by the first keeps it).
    The 10M book's 20M changes (key, value, time): 0.07 against 0.5-0.8 s for the
    sort. Else sorted column by column."""
    head = rest = None
    for cut in range(len(arrays) - 1, 0, -1):
        head = _packed_codes(arrays[:cut])
        if head is not None:
            rest = _packed_codes(arrays[cut:])
            break
    if head is None or rest is None:
        order = np.lexsort(arrays[::-1])
        starts = np.zeros(len(order), bool)
        starts[:1] = True
        for a in arrays:
            ordered = a[order]
            starts[1:] |= ordered[1:] != ordered[:-1]
        return order, starts
    first, second = head[0], rest[0]
    if in_order(second):
        ordered, order = sort_order(first)  # stable: equal firsts keep the second's order
    else:
        order = np.lexsort((second, first))
        ordered = first[order]
    starts = run_starts(ordered)
    then = second[order]
    starts[1:] |= then[1:] != then[:-1]
    return order, starts


def _advanced(raw: np.ndarray, k: int, frontier: Antichain) -> np.ndarray:
    """Time coordinate `k` of each row advanced to the non-empty `frontier`
    (`lattice.advance_by`, per coordinate: the least over its elements of the greater of
    the row's value and the element's)."""
    elements = iter(frontier)
    advanced = np.maximum(raw, next(elements)[k])
    for element in elements:
        np.minimum(advanced, np.maximum(raw, element[k]), out=advanced)
    return advanced


def _packed_codes(
    arrays: list[np.ndarray],
) -> tuple[np.ndarray, list[tuple[int, int]]] | None:
    """One int64 per row, ordered as the rows are column by column (`row_codes` over
    NULL-free integers, with no Arrow call), and per column its least value and span
    (the code's digits); None when the columns' spans together exceed 62 bits."""
    code, bound, digits = np.zeros(len(arrays[0]), np.int64), 1, []
    for a in arrays:
        low = int(a.min())
        span = int(a.max()) - low + 1
        bound *= span
        if bound > 2**62:
            return None
        code *= span
        code += a  # in place: no array of differences
        code -= low
        digits.append((low, span))
    return code, digits


#: Rows whose codes span at most this many values per row are consolidated by counting
#: into one bin per code (`_by_bins`) rather than by sorting: a loop's leave gathers
#: 640k closure pairs among 1M codes (1,000 x 1,000 nodes, one outer time). A join's key
#: codes as dense are used as they are (`_matches_by_codes`: one count per code).
BINS_PER_ROW = 4


def _dense(digits: list[tuple[int, int]], diffs: np.ndarray) -> bool:
    """Whether rows coded with `digits` are consolidated by bins: their codes are dense
    (`BINS_PER_ROW`), and every sum is exact in a float64 (the bins' sums are floats)."""
    size = math.prod(span for _, span in digits)
    return size <= BINS_PER_ROW * len(diffs) and float(np.abs(diffs).sum()) < 2.0**53


def _by_bins(
    code: np.ndarray, digits: list[tuple[int, int]], diffs: np.ndarray, schema: pa.Schema
) -> pa.Table:
    """`_in_numbers`'s result from dense codes: the diffs summed in one bin per code, the
    non-zero bins' codes (in code order, as the sort gives them) read back into columns."""
    size = math.prod(span for _, span in digits)
    sums = np.bincount(code, weights=diffs, minlength=size)
    present = np.flatnonzero(sums)
    columns = _decoded(present, digits)
    arrays = [pa.array(a, f.type) for a, f in zip(columns, schema, strict=False)]
    total = sums[present].astype(np.int64)
    return pa.Table.from_arrays([*arrays, pa.array(total, pa.int64())], schema=schema)


def _decoded(codes: np.ndarray, digits: list[tuple[int, int]]) -> list[np.ndarray]:
    """The column values of rows packed into `codes` by `_packed_codes` (its `digits`),
    first column first; a column of one value costs no division."""
    columns, rest = [], codes
    for low, span in reversed(digits):
        if span == 1:  # one value: no digit in the code
            columns.append(np.full(len(codes), low, np.int64))
            continue
        rest, value = np.divmod(rest, span)
        value += low
        columns.append(value)
    return columns[::-1]


def _in_python(
    values: list[pa.ChunkedArray],
    parts: list[tuple[pa.Table, int]],
    columns: Sequence[str],
    depth: int,
    frontier: Antichain | None,
    schema: pa.Schema,
) -> pa.Table | None:
    """`consolidate` by Python's sums (for up to `PYTHON_ROWS` rows), the first row of
    each non-zero sum kept in input order; None when a sum overflows."""
    diffs = [d * sign for t, sign in parts for d in t.column(DIFF).to_pylist()]
    if len(diffs) == 1 and not frontier:  # one row: it stays unless its diff is zero
        if diffs[0] == 0:
            return schema.empty_table()
        return pa.Table.from_arrays([*values, pa.array(diffs, pa.int64())], schema=schema)
    stamps = list(zip(*(v.to_pylist() for v in values[len(columns) :]), strict=True))
    if frontier:
        stamps = [advance_by(s, frontier) for s in stamps]
    rows = zip(*(v.to_pylist() for v in values[: len(columns)]), stamps, strict=True)
    first: dict[tuple, int] = {}
    sums: dict[tuple, int] = {}
    for i, (row, diff) in enumerate(zip(rows, diffs, strict=True)):
        if row in sums:
            sums[row] += diff
        else:
            first[row] = i
            sums[row] = diff
    keep = [(i, sums[row]) for row, i in first.items() if sums[row] != 0]
    if not fit_int64(d for _, d in keep):
        return None  # the query reports the overflow
    if len(keep) == len(diffs) and not frontier:  # every row kept as it is, in order
        return pa.Table.from_arrays([*values, pa.array(diffs, pa.int64())], schema=schema)
    indices = pa.array([i for i, _ in keep], pa.int64())
    arrays = [v.take(indices) for v in values[: len(columns)]]
    if frontier:
        arrays += [pa.array([stamps[i][k] for i, _ in keep], pa.int64()) for k in range(depth)]
    else:
        arrays += [v.take(indices) for v in values[len(columns) :]]
    arrays.append(pa.array([d for _, d in keep], pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema)


def _by_codes(
    values: list[pa.ChunkedArray],
    diffs: np.ndarray,
    columns: Sequence[str],
    depth: int,
    frontier: Antichain | None,
    schema: pa.Schema,
) -> pa.Table | None:
    """`consolidate` by array operations (beyond `PYTHON_ROWS` rows): one code per
    (row, time) (`row_codes`, NULL equal to NULL), numbered in sorted order
    (`dense_codes`), the diffs summed per number, one row of each non-zero sum kept,
    in the order of the codes (integer columns without NULLs: ordered by their values,
    so an index by them need not sort); None when a sum could overflow."""
    if may_overflow(diffs):
        return None
    data, stamps = values[: len(columns)], values[len(columns) :]
    if frontier:
        raw = [s.to_numpy().astype(np.int64) for s in stamps]
        stamps = [pa.array(_advanced(r, k, frontier), pa.int64()) for k, r in enumerate(raw)]
    group, first = dense_codes(row_codes([*data, *stamps], len(diffs)))
    sums = np.zeros(len(first), np.int64)
    np.add.at(sums, group, diffs)
    keep = sums != 0
    rows = pa.array(first[keep], pa.int64())
    arrays = [c.take(rows) for c in [*data, *stamps]]
    return pa.Table.from_arrays([*arrays, pa.array(sums[keep], pa.int64())], schema=schema)


def distinct_step(
    inp: Sequence[pa.Table],
    outp: Sequence[pa.Table],
    columns: Sequence[str],
    stamp: tuple[int, ...],
) -> pa.Table | None:
    """A settled distinct step in one grouping: per row of `columns` (over all of the
    `inp` and `outp` tables' updates, whatever their times), the row once if its `inp`
    diffs sum above zero, less its `outp` diffs, non-zero corrections only, at time
    `stamp`, in the order `consolidate` gives (the rows' codes); None when it is not
    small and plain, or a sum could overflow."""
    times = time_columns(len(stamp))
    names = [*columns, *times, DIFF]
    tables = [t for t in (*inp, *outp) if t.num_rows]
    rows = sum(t.num_rows for t in tables)
    new = sum(t.num_rows for t in inp)
    if not new or rows > DRIVER_ROWS:
        return None
    schema = _output_schema(tables[0].schema, names)
    if schema is None or not plain(schema, columns):
        return None
    if any(_output_schema(t.schema, names) != schema for t in tables[1:]):
        return None
    diffs = np.concatenate([t.column(DIFF).to_numpy().astype(np.int64) for t in tables])
    if may_overflow(diffs):
        return None
    values = [concat_columns([t[n] for t in tables], schema.field(n).type) for n in columns]
    group, first = dense_codes(row_codes(values, rows))
    count, held = (np.zeros(len(first), np.int64) for _ in range(2))
    np.add.at(count, group[:new], diffs[:new])
    np.add.at(held, group[new:], diffs[new:])
    fix = (count > 0).astype(np.int64) - held
    keep = fix != 0
    at = pa.array(first[keep], pa.int64())
    arrays = [c.take(at) for c in values]
    arrays += [pa.array(np.full(len(at), s, np.int64)) for s in stamp]
    return pa.Table.from_arrays([*arrays, pa.array(fix[keep], pa.int64())], schema=schema)


def distinct_from_sums(
    delta: pa.Table, before: np.ndarray, held: np.ndarray, columns: Sequence[str], depth: int
) -> pa.Table | None:
    """A settled distinct step over whole rows from sums: per row of `delta` (the new
    updates, consolidated, so one row per key, all at the step's time), the row once if
    `before` (its key's earlier input diffs, summed) plus its own diff is above zero,
    less `held` (its key's output diffs, summed); non-zero corrections only, in `delta`'s
    order. None when a sum could overflow.

    >>> delta = pa.table({"k": [1, 2, 3], "__time__": [5, 5, 5], "__diff__": [1, -1, 2]})
    >>> out = distinct_from_sums(delta, np.array([0, 1, -2]), np.array([0, 1, 0]), ["k"], 1)
    >>> out.column("k").to_pylist(), out.column("__diff__").to_pylist()
    ([1, 2], [1, -1])
    """
    diffs = delta[DIFF].to_numpy().astype(np.int64)
    if len(diffs) and float(np.abs(before.astype(np.float64) + diffs).max()) >= 2.0**62:
        return None
    fix = (before + diffs > 0).astype(np.int64) - held
    keep = np.flatnonzero(fix)
    names = [*columns, *time_columns(depth), DIFF]
    schema = _output_schema(delta.schema, names)
    if schema is None:
        return None
    at = pa.array(keep, pa.int64())
    arrays = [delta[n].take(at) for n in names[:-1]]
    return pa.Table.from_arrays([*arrays, pa.array(fix[keep], pa.int64())], schema=schema)


def null_free(table: pa.Table, columns: Sequence[str]) -> bool:
    """Whether no value of `columns` in `table` is NULL.

    >>> null_free(pa.table({"a": [1, None], "b": [1, 2]}), ["b"])
    True
    """
    return all(table[c].null_count == 0 for c in columns)


def bounds(table: pa.Table, column: str) -> tuple[Any, Any] | None:
    """The least and greatest value of a column of `table` (None: it has no rows; a
    bound is None where the column holds only NULLs, as `min_max` says).

    >>> bounds(pa.table({"t": [4, 2, 9]}), "t")
    (2, 9)
    """
    if table.num_rows == 0:
        return None
    values = table[column]
    if values.num_chunks == 1 and values.type == pa.int64() and not values.null_count:
        data = values.chunk(0).to_numpy()  # a tenth of `min_max`'s cost on a few rows
        return int(data.min()), int(data.max())
    extremes = pc.min_max(values)
    return extremes["min"].as_py(), extremes["max"].as_py()


def may_overflow(diffs: np.ndarray) -> bool:
    """Whether a sum of some of the (non-empty) `diffs` could leave the int64 range."""
    return int(np.abs(diffs).max()) * len(diffs) > _INT64_MAX


def _signed(diff: pa.ChunkedArray, sign: int) -> pa.ChunkedArray:
    diff = diff.cast(pa.int64())
    return diff if sign == 1 else pc.multiply(diff, pa.scalar(sign, pa.int64()))


def _output_schema(schema: pa.Schema, names: Sequence[str]) -> pa.Schema | None:
    """The consolidation's output schema over an input of `schema`: the named columns,
    nullable, the diff as int64 (None when the diff is not an integer)."""
    diff = schema.field(names[-1]).type
    if not pa.types.is_integer(diff):
        return None
    fields = [pa.field(n, schema.field(n).type) for n in names[:-1]]
    return pa.schema([*fields, pa.field(names[-1], pa.int64())])


def project(table: pa.Table, selection: Selection) -> pa.Table | None:
    """The rows `selection` keeps, as `SELECT source AS name, ... WHERE c IS NOT NULL ...`
    gives them, or None when a column is not of a plain type (the engine might change
    its type on the way through)."""
    fields = []
    for name, source in selection.renames:
        field = table.schema.field(source)
        if field.type not in PLAIN_TYPES:
            return None
        fields.append(pa.field(name, field.type))
    for name in selection.not_null:
        if table[name].null_count:
            table = table.filter(pc.is_valid(table[name]))
    arrays = [table[source] for _, source in selection.renames]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def rows_with_keys(
    table: pa.Table,
    keys: Sequence[str],
    probe: pa.Table,
    probe_keys: Sequence[str] | None = None,
) -> pa.Table | None:
    """The rows of `table` whose `keys` equal the `probe_keys` (default: `keys`) of some
    row of `probe`, NULL equal to NULL as in the engine's `IS NOT DISTINCT FROM`; None
    for keys not of a plain type or of different types, or several keys with a NULL in
    `probe` (Arrow's join never matches NULLs)."""
    by = list(probe_keys or keys)
    if not (plain(table.schema, keys) and plain(probe.schema, by)):
        return None
    if [table.schema.field(k).type for k in keys] != [probe.schema.field(k).type for k in by]:
        return None
    if len(keys) == 1:
        return table.filter(pc.is_in(table[keys[0]], value_set=pc.unique(probe[by[0]])))
    if any(probe[k].null_count for k in by):
        return None
    distinct = probe.select(by).group_by(by, use_threads=False).aggregate([])
    distinct = distinct.rename_columns(list(keys))
    matched = table.join(distinct, keys=list(keys), join_type="left semi", use_threads=False)
    return matched.select(table.column_names)


@dataclass(frozen=True, slots=True)
class JoinShape:
    """What `relational.join_on_keys` is given besides its inputs: key pairs (left,
    right), the left's data columns, the right's value columns, the time depth."""

    pairs: tuple[tuple[str, str], ...]
    left_columns: tuple[str, ...]
    right_values: tuple[str, ...]
    depth: int


def join(left: pa.Table, right: pa.Table, shape: JoinShape) -> pa.Table | None:
    """`relational.join_on_keys` of `left` and `right` (left columns, then the right's
    values, the later of the two times, the product of the diffs; NULL keys match), or
    None when a side is not small and plain once the other is cut to the small side's
    keys."""
    pairs = shape.pairs
    if not (plain(left.schema, shape.left_columns) and plain(right.schema, shape.right_values)):
        return None
    lkeys, rkeys = [a for a, _ in pairs], [b for _, b in pairs]
    # A big side is cut to a small side's keys (two small sides are matched as they are).
    if pairs and left.num_rows <= SMALL_ROWS < right.num_rows:
        cut = rows_with_keys(right, rkeys, left, lkeys)
        right = right if cut is None else cut
    elif pairs and right.num_rows <= SMALL_ROWS < left.num_rows:
        cut = rows_with_keys(left, lkeys, right, rkeys)
        left = left if cut is None else cut
    if not plain(right.schema, rkeys):
        return None
    matched: tuple[np.ndarray, np.ndarray] | None
    if max(left.num_rows, right.num_rows) <= SMALL_ROWS:
        matched = _matches_in_python(left, right, lkeys, rkeys)
    else:
        matched = _matches_by_codes(left, right, lkeys, rkeys)
    return None if matched is None else _joined(left, right, *matched, shape)


def _matches_in_python(
    left: pa.Table, right: pa.Table, lkeys: Sequence[str], rkeys: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """The matching (left row, right row) pairs, by a dict of the right's keys."""
    index: dict[tuple, list[int]] = {}
    for j, key in enumerate(zip(*(right[k].to_pylist() for k in rkeys), strict=True)):
        index.setdefault(key, []).append(j)
    if not rkeys:
        index[()] = list(range(right.num_rows))
    lefts, rights = [], []
    left_keys = zip(*(left[k].to_pylist() for k in lkeys), strict=True) if lkeys else None
    for i in range(left.num_rows):
        key = next(left_keys) if left_keys is not None else ()
        for j in index.get(key, ()):
            lefts.append(i)
            rights.append(j)
    return np.array(lefts, np.int64), np.array(rights, np.int64)


def _matches_by_codes(
    left: pa.Table, right: pa.Table, lkeys: Sequence[str], rkeys: Sequence[str]
) -> tuple[np.ndarray, np.ndarray] | None:
    """The matching (left row, right row) pairs by array operations: both sides' keys
    coded together (`row_codes`) and numbered (`dense_codes`), the right's rows ordered by
    number, each left row's run of matches read from the runs' starts and laid end to
    end. None beyond `JOIN_ROWS`."""
    if max(left.num_rows, right.num_rows) > JOIN_ROWS:
        return None
    columns = []
    for lk, rk in zip(lkeys, rkeys, strict=True):
        if left.schema.field(lk).type != right.schema.field(rk).type:
            return None
        columns.append(concat_columns([left[lk], right[rk]]))
    rows = left.num_rows + right.num_rows
    group = row_codes(columns, rows) if rows else np.zeros(0, np.int64)
    if rows and int(group.max()) >= BINS_PER_ROW * rows:  # sparse: numbered densely
        group = dense_codes(group)[0]
    lgroup, rgroup = group[: left.num_rows], group[left.num_rows :]
    sizes = np.bincount(rgroup, minlength=int(group.max()) + 1 if rows else 0)
    order = sort_order(rgroup)[1]
    count = sizes[lgroup]
    low = (np.cumsum(sizes) - sizes)[lgroup]
    pairs = int(count.sum())
    if pairs > 2 * JOIN_ROWS:
        return None
    lefts = np.repeat(np.arange(left.num_rows), count)
    # Pair p of left row i is match p - (i's first pair) of i's run, which starts at low.
    at = np.repeat(low - (np.cumsum(count) - count), count)
    at += np.arange(pairs)
    return lefts, order[at]


def _joined(
    left: pa.Table, right: pa.Table, lefts: np.ndarray, rights: np.ndarray, shape: JoinShape
) -> pa.Table | None:
    """The output rows of the matched pairs; None when a diff product could overflow.

    A time or diff column that one side decides for every pair (its times all at least
    the other's, or its diffs all 1, as in a loop's step) is taken from that side alone,
    and without a take when it holds one value."""
    diff = _product(left[DIFF].to_numpy(), lefts, right[DIFF].to_numpy(), rights)
    if diff is None:
        return None  # the query reports the overflow
    times = time_columns(shape.depth)
    data, values = list(shape.left_columns), list(shape.right_values)
    # Only the columns kept are taken; times (int64, never NULL) and diffs in numpy.
    arrays = []
    for side, names, at in ((left, data, lefts), (right, values, rights)):
        if names:
            taken = side.select(names).take(pa.array(at, pa.int64()))
            arrays += [taken[n] for n in names]
    for t in times:
        arrays.append(pa.array(_later(left[t].to_numpy(), lefts, right[t].to_numpy(), rights)))
    arrays.append(pa.array(diff, pa.int64()))
    fields = [left.schema.field(n) for n in data] + [right.schema.field(n) for n in values]
    fields += [pa.field(t, pa.int64()) for t in (*times, DIFF)]
    return pa.Table.from_arrays(arrays, schema=_nullable_schema(pa.schema(fields)))


def _later(
    left: np.ndarray, lefts: np.ndarray, right: np.ndarray, rights: np.ndarray
) -> np.ndarray:
    """Per pair, the later of its left row's time in `left` and its right row's in
    `right` (int64, never NULL)."""
    if not len(lefts):
        return np.zeros(0, np.int64)
    (llow, lhigh), (rlow, rhigh) = _span(left), _span(right)
    if llow >= rhigh:
        return _taken(left, lefts, llow, lhigh)
    if rlow >= lhigh:
        return _taken(right, rights, rlow, rhigh)
    return np.maximum(left[lefts], right[rights])


def _product(
    left: np.ndarray, lefts: np.ndarray, right: np.ndarray, rights: np.ndarray
) -> np.ndarray | None:
    """Per pair, the product of its rows' diffs; None when one could reach 2**62."""
    if not len(lefts):
        return np.zeros(0, np.int64)
    (llow, lhigh), (rlow, rhigh) = _span(left), _span(right)
    if max(-llow, lhigh) * max(-rlow, rhigh) >= 2**62:  # some pair may: each is checked
        ldiff, rdiff = left[lefts], right[rights]
        if float(np.abs(ldiff.astype(np.float64) * rdiff).max()) >= 2.0**62:
            return None
        return ldiff * rdiff
    if llow == lhigh == 1:
        return _taken(right, rights, rlow, rhigh)
    if rlow == rhigh == 1:
        return _taken(left, lefts, llow, lhigh)
    return left[lefts] * right[rights]


def _span(values: np.ndarray) -> tuple[int, int]:
    """The least and greatest of the non-empty `values`."""
    return int(values.min()), int(values.max())


def _taken(values: np.ndarray, at: np.ndarray, low: int, high: int) -> np.ndarray:
    """`values[at]` as int64, without a take when every value is `low` (== `high`)."""
    if low == high:
        return np.full(len(at), low, np.int64)
    return values.astype(np.int64, copy=False)[at]


def concat_columns(
    columns: Sequence[pa.ChunkedArray | pa.Array], type: pa.DataType | None = None
) -> pa.Array:
    """The columns end to end, as one array (cast to `type` when given)."""
    arrays = [
        piece for c in columns for piece in (c.chunks if isinstance(c, pa.ChunkedArray) else [c])
    ]
    if type is not None:
        arrays = [a if a.type == type else a.cast(type) for a in arrays]
    if not arrays:
        return pa.array([], type or pa.null())
    return pa.concat_arrays(arrays)


def row_codes(columns: Sequence[pa.Array], rows: int) -> np.ndarray:
    """One int64 per row, equal exactly when the rows' values in `columns` are (NULL
    equals NULL): an integer column without NULLs gives its value less its least, any
    other column its dictionary index.

    >>> row_codes([pa.array([3, 1, 3]), pa.array(["a", None, "a"])], 3).tolist()
    [4, 1, 4]
    """
    code = np.zeros(rows, np.int64)
    for column in columns:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if pa.types.is_integer(column.type) and len(column) and not column.null_count:
            values = column.to_numpy().astype(np.int64)
            low = int(values.min())
            index, size = values - low, int(values.max()) - low + 1
        else:
            encoded = pc.dictionary_encode(column, null_encoding="encode")
            index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            size = max(len(encoded.dictionary), 1)
        if rows and int(code.max()) >= (2**62) // size:
            code = dense_codes(code)[0]
            if size > 2**62 or int(code.max()) >= (2**62) // size:
                index = dense_codes(index)[0]
                size = int(index.max()) + 1
        code = code * size + index
    return code


def dense_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes renumbered 0..n-1 in sorted order, and the first row of each.

    As `np.unique(codes, return_index=True, return_inverse=True)`, by `sort_order`
    (stable, so each run's first row is its least): numpy's stable argsort, which
    `np.unique` needs for its first rows, is 5 times slower from 10,000 rows.

    >>> [c.tolist() for c in dense_codes(np.array([7, 3, 7, 5]))]
    [[2, 0, 2, 1], [1, 3, 0]]
    """
    ordered, order = sort_order(codes)
    starts = run_starts(ordered)
    inverse = np.empty(len(codes), np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return inverse, order[starts]


def sort_order(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The integer `values` sorted, and the positions they came from (a stable argsort:
    equal values keep their order).

    When the values' range and the positions fit in 63 bits together, each value less
    the least is shifted left and its position put in the low bits, and the packed
    numbers sorted with no argsort: numpy's plain sort of int64 is vectorized, its
    argsort is not (170k values: 0.7 against 1.9 ms, and 10 ms stable). Values sorted
    already (a consolidated batch's keys) are seen so and not sorted again; values that
    look like a few sorted runs end to end (`_runs_likely`: a trace merge's consolidated
    batches, or a trace batch made of a loop's rounds end to end) are merged by numpy's
    stable sort (timsort), which finds the runs: 1.3M values in two runs, 2.7 against
    68 ms.

    >>> [a.tolist() for a in sort_order(np.array([5, -2, 5, 1]))]
    [[-2, 1, 5, 5], [1, 3, 0, 2]]
    """
    n = len(values)
    runs = _runs_likely(values)
    if runs and in_order(values):
        return values.astype(np.int64), np.arange(n, dtype=np.int64)  # sorted already
    low, high = int(values.min()), int(values.max())
    bits = (n - 1).bit_length()
    if (high - low).bit_length() + bits > 63:
        order = np.argsort(values, kind="stable").astype(np.int64, copy=False)
        return values[order].astype(np.int64, copy=False), order
    packed = values.astype(np.int64)  # a copy, worked in place: each array is paid for
    packed -= low
    packed <<= bits
    packed |= np.arange(n, dtype=np.int64)
    packed.sort(kind="stable" if runs else "quicksort")  # the packed values are distinct
    ordered = packed >> bits
    ordered += low
    packed &= (1 << bits) - 1
    return ordered, packed


#: A sample of this many values, evenly spaced, with at most a quarter descents says
#: the values are likely sorted runs end to end (values in no order: about half).
RUN_SAMPLE = 1024


def _runs_likely(values: np.ndarray) -> bool:
    """Whether `values` look like sorted runs of some length laid end to end: a sample's
    descents are few. Numpy's stable sort (timsort) merges such runs, where quicksort
    takes n log n whatever the order: 1M values in 2, 20 or 500 runs, 3.7, 16 and 31 ms
    against 55. On values in no order it is about a fifth slower, the cost of a wrong
    guess.

    >>> _runs_likely(np.concatenate([np.arange(100), np.arange(50)]))
    True
    >>> _runs_likely(np.random.default_rng(0).integers(0, 1000, 1000))
    False
    """
    sample = values[:: max(1, len(values) // RUN_SAMPLE)]
    return 4 * int(np.count_nonzero(sample[1:] < sample[:-1])) <= len(sample)


def in_order(values: np.ndarray) -> bool:
    """Whether `values` never decrease: 64 values across first, which sorted runs laid
    end to end fail without a pass over them all.

    >>> in_order(np.array([1, 1, 3])), in_order(np.array([2, 1]))
    (True, False)
    """
    n = len(values)
    sample = values[:: max(1, n // 64)]
    if not bool(np.all(sample[1:] >= sample[:-1])):
        return False
    return n <= 64 or bool(np.all(values[1:] >= values[:-1]))


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct integer values, sorted (`np.unique(values)`, 10 times faster at
    1,000). Values whose range is under `BINS_PER_ROW` times their number are marked in
    one array of their range, with no sort: a join's 150k probe keys among a thousand
    nodes, 0.3 against 5 ms.

    >>> distinct_sorted(np.array([3, 1, 3])).tolist()
    [1, 3]
    >>> distinct_sorted(np.arange(200) % 7 - 3).tolist()
    [-3, -2, -1, 0, 1, 2, 3]
    """
    if len(values) > PYTHON_ROWS and values.dtype.kind == "i":
        low, high = int(values.min()), int(values.max())
        if high - low < BINS_PER_ROW * len(values):
            seen = np.zeros(high - low + 1, bool)
            seen[values - low] = True
            return (np.flatnonzero(seen) + low).astype(values.dtype, copy=False)
    ordered = np.sort(values)
    return ordered[run_starts(ordered)]


def run_starts(ordered: np.ndarray) -> np.ndarray:
    """Per element of a sorted array, whether it differs from the one before (the first
    element does)."""
    starts = np.ones(len(ordered), bool)
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return starts


def _nullable_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type) for f in schema])
