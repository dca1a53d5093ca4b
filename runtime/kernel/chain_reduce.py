"""The general reduce step when every key's interesting times form one chain, in numpy.

Inside a loop, a round of one outer time `t` gives every new update and pending
candidate a time `(t, i)`: only the last coordinate differs. When, besides, every
time in the affected keys' input and output histories is `<= t` in the other
coordinates, the grid of interesting times (`reduce`'s module docstring) has one value
in each coordinate but the last, so per key it is a chain: `(t, j)` for the key's
last-coordinate values `j` at or beyond its least new one. On a chain the general
step is, per key `k`:

1. candidates: the chain's points; those the frontier has not passed stay pending;
2. at a ready candidate `c`: `E(c) = logic(input accumulated at c) - output
   accumulated at c`, where an accumulation at `c` is a running sum along the chain;
3. the correction at `c`: `E(c) - E(predecessor of c on the chain)` (the Möbius
   inversion over one coordinate).

The same holds with one time coordinate (no loop) and several times per batch. Here
every step is a vectorized array operation over the rows (dense key, value and time
codes, sorts, running sums, binary searches), so a step's cost grows with its rows,
without the dozen statements of the relational pipeline or the per-row Python of
`driver_reduce.reduce_step`; one statement remains, the logic over the accumulated
groups.

Invariant: when `chain_step` returns a result, it equals `driver_reduce.reduce_step`'s
(and the general pipeline's) on the same rows; it returns None, never an
approximation, when the times do not form chains, a type is not plain, or a sum could
overflow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsql.runtime.kernel import driver
from dsql.runtime.kernel.driver import concat_columns, dense_codes, distinct_sorted, row_codes
from dsql.runtime.kernel.driver_reduce import ReduceRows, ReduceShape, reduce_step
from dsql.runtime.lattice import DIFF, Antichain, bounded, time_columns

#: Steps over more input and output rows than this run here rather than in Python
#: (`driver_reduce`): measured on distinct steps, the two cost the same (0.6 ms) at
#: about 250 rows; at 500 the Python step takes 1.3 ms and this one 0.7 ms.
MIN_ROWS = 250
#: At most this many input and output rows are handled here (beyond: the pipeline).
MAX_ROWS = 4_000_000
#: At most this many (accumulated group, candidate) pairs are formed here.
MAX_PAIRS = 4_000_000

#: Per-row arrays: candidate positions, output value codes, diffs.
_Sums = tuple[np.ndarray, np.ndarray, np.ndarray]
#: A trace's rows of probed keys (`Trace.key_matches`): the probe row with each one's
#: key, the last time coordinate, the diff.
Matches = tuple[np.ndarray, ...]

#: Diffs whose absolute values sum below this cannot overflow an int64 running sum.
_SAFE_TOTAL = float(2**61)


def small_step(
    rows: ReduceRows, logic: Callable[[pa.Table], pa.Table | None]
) -> tuple[pa.Table, pa.Table] | None:
    """A general reduce step over Arrow rows in the driver: `chain_step` where its rows
    are many enough to pay for its arrays and the times form chains, else
    `driver_reduce.reduce_step`; None where neither takes the step (the pipeline runs).
    `logic` as for both: the one statement, the logic over the accumulated groups."""
    total = sum(t.num_rows for t in (*rows.inputs, *rows.outputs))
    if MIN_ROWS < total <= MAX_ROWS:
        result = chain_step(rows, logic)
        if result is not None:
            return result
    return reduce_step(rows, logic)


def chain_step(
    rows: ReduceRows, logic: Callable[[pa.Table], pa.Table | None]
) -> tuple[pa.Table, pa.Table] | None:
    """The step's output and pending candidates (module docstring), or None when the
    times do not form one chain per key, or the rows are not of plain types. `rows`:
    Arrow tables; `logic`: the desired output (keys, outputs, times, diff) of
    accumulated groups (keys, times, values, diff), None when it is not in the driver."""
    shape = rows.shape
    keys, vals, outs, d = shape.keys, shape.values, shape.outputs, shape.depth
    if not (driver.plain(shape.source, [*keys, *vals]) and driver.plain(shape.schema, outs)):
        return None
    times = time_columns(d)
    new = [t for t in (rows.delta, rows.pending) if t is not None and t.num_rows]
    history = [t for t in rows.inputs if t.num_rows]
    current = [t for t in rows.outputs if t.num_rows]
    if not new or not _same_types([*new, *history], keys) or not _same_types(current, keys):
        return None
    prefix = shared_prefix(new, times[:-1])
    if prefix is None:
        return None
    for tables, upper in ((history, rows.uppers[0]), (current, rows.uppers[1])):
        # Known bounds of the traces spare reading each table's (the delta is at `prefix`).
        if not bounded(upper, prefix) and not all(_at_most(t, times[:-1], prefix) for t in tables):
            return None
    held_total = _magnitude(current)
    if _magnitude(history) + held_total >= _SAFE_TOTAL:
        return None
    last = times[-1]

    # Dense key codes over the new, history and output rows together.
    parts = (new, history, current)
    key_columns = [concat_columns([t.column(k) for p in parts for t in p]) for k in keys]
    kid, first = dense_codes(row_codes(key_columns, sum(t.num_rows for p in parts for t in p)))
    key_values = [c.take(first) for c in key_columns]
    sizes = [sum(t.num_rows for t in p) for p in parts]
    new_kid, hist_kid, out_kid = np.split(kid, np.cumsum(sizes)[:-1])
    nkeys = len(first)
    affected = np.zeros(nkeys, bool)
    affected[new_kid] = True

    new_j = _ints(new, last)
    hist_j, hist_diff = _ints(history, last), _ints(history, DIFF)
    out_j, out_diff = _ints(current, last), _ints(current, DIFF)
    hist_keep, out_keep = affected[hist_kid], affected[out_kid]
    hist_kid, hist_j, hist_diff = hist_kid[hist_keep], hist_j[hist_keep], hist_diff[hist_keep]
    out_kid, out_j, out_diff = out_kid[out_keep], out_j[out_keep], out_diff[out_keep]

    chain, waits = _Chain.of(
        nkeys, new_kid, new_j, hist_kid, hist_j, out_j, first_unready(rows.frontier, prefix)
    )
    cand_kid, cand_j = chain.cand_kid, chain.cand_j
    stamp_of = _stamps(times, prefix)
    waiting = _build(
        [
            *_fields(shape.source, keys, [c.take(pa.array(waits[0])) for c in key_values]),
            *stamp_of(waits[1]),
        ]
    )

    # The input accumulated at every ready candidate, per (key, value).
    if vals:
        hist_rows = _filter(history, hist_keep)
        value_columns = [concat_columns([t.column(v) for t in hist_rows]) for v in vals]
        vid, vfirst = dense_codes(row_codes(value_columns, len(hist_kid)))
    else:  # one value: the empty row
        value_columns, vid, vfirst = [], np.zeros(len(hist_kid), np.int64), np.zeros(1, np.int64)
    groups = chain.accumulate(hist_kid, vid, hist_j, hist_diff)
    if groups is None:
        return None
    acc_kid, acc_vid, acc_c, acc = groups
    if shape.present_once and not vals and not outs:
        # Distinct over whole rows: each candidate where a row is present wants it once;
        # there is one output value, no logic to call and no codes to look up.
        want_c = acc_c[acc > 0]
        want_oid, want_diff = np.zeros(len(want_c), np.int64), np.ones(len(want_c), np.int64)
        out_oid, ofirst, out_columns = np.zeros(len(out_kid), np.int64), np.zeros(1, np.int64), []
        if len(want_c) + held_total >= _SAFE_TOTAL:
            return None
    else:
        acc_table = _build(
            [
                *_fields(shape.source, keys, [c.take(pa.array(acc_kid)) for c in key_values]),
                *stamp_of(cand_j[acc_c]),
                *_fields(
                    shape.source, vals, [c.take(pa.array(vfirst[acc_vid])) for c in value_columns]
                ),
                (pa.field(DIFF, pa.int64()), pa.array(acc, pa.int64())),
            ]
        )
        if acc_table.num_rows == 0:  # the logic is never called on an empty group
            desired = _empty_desired(shape, times)
        else:
            desired = logic(acc_table)
            if desired is None:
                return None

        # Output codes over the output trace's rows and the desired rows together.
        out_rows = _filter(current, out_keep)
        want_kid = _lookup(key_values, [desired.column(k) for k in keys], nkeys)
        out_columns = [
            concat_columns(
                [*(t.column(o) for t in out_rows), desired.column(o)], shape.schema.field(o).type
            )
            for o in outs
        ]
        oid, ofirst = dense_codes(row_codes(out_columns, len(out_kid) + desired.num_rows))
        out_oid, want_oid = oid[: len(out_kid)], oid[len(out_kid) :]
        want_diff = desired.column(DIFF).to_numpy().astype(np.int64)
        if want_kid is None or _magnitude([desired]) + held_total >= _SAFE_TOTAL:
            return None
        position = chain.position(want_kid, desired.column(last).to_numpy())
        if position is None:
            return None
        want_c = position
    held = chain.accumulate(out_kid, out_oid, out_j, out_diff)
    if held is None:
        return None
    held_kid, held_oid, held_c, held_acc = held

    fix_c, fix_o, fix = chain.corrections(
        (want_c, want_oid, want_diff), (held_c, held_oid, held_acc), max(len(ofirst), 1)
    )
    output = _build(
        [
            *_fields(shape.schema, keys, [c.take(pa.array(cand_kid[fix_c])) for c in key_values]),
            *_fields(shape.schema, outs, [c.take(pa.array(ofirst[fix_o])) for c in out_columns]),
            *stamp_of(cand_j[fix_c]),
            (pa.field(DIFF, pa.int64()), pa.array(fix, pa.int64())),
        ]
    )
    return output, waiting


def distinct_chain(
    probe: pa.Table,
    new_j: np.ndarray,
    delta_diff: np.ndarray,
    history: Matches,
    held: Matches,
    frontier: Antichain,
    prefix: tuple[int, ...],
    shape: ReduceShape,
) -> tuple[pa.Table, pa.Table] | None:
    """`chain_step` for a distinct over whole rows (`present_once`, no values), from the
    affected keys' rows as numbers, or None when a sum could overflow.

    `probe`: the keys of the new rows, the delta's first (its diffs `delta_diff`) then
    the pending candidates'; `new_j`: their last time coordinate (the others are
    `prefix`). `history` and `held`: the rows of those keys in the input history and in
    the output trace (`Trace.key_matches`), each as the probe row with its key, the
    last time coordinate and the diff. No key column is read but the probe's: rows are
    told apart by the probe row they match.

    With one value per key, the chain needs no pairs of groups and candidates: every
    (key, last coordinate) is one code, the candidates are the distinct codes of the
    new rows and of the history's rows at or beyond their key's least new one, and the
    accumulations at them are running sums over each side's rows sorted by code, read
    at the candidates by binary search. `E(c)` is whether the row is present less the
    output held, and the correction `E(c) - E(c')` for `c'` the key's candidate before
    `c` (none: 0, as `_Chain.corrections`)."""
    kid, first = dense_codes(row_codes(list(probe.columns), probe.num_rows))
    rows = len(delta_diff)
    hist_kid = np.concatenate((kid[:rows], kid[history[0]]))
    hist_j = np.concatenate((new_j[:rows], history[1]))
    hist_diff = np.concatenate((delta_diff, history[2]))
    out_kid, out_j, out_diff = kid[held[0]], held[1], held[2]
    total = float(np.abs(hist_diff).sum(dtype=np.float64))
    if total + float(np.abs(out_diff).sum(dtype=np.float64)) + len(kid) >= _SAFE_TOTAL:
        return None
    some = int(new_j[0])  # there is a new row
    low_j = min(int(a.min(initial=some)) for a in (new_j, hist_j, out_j))
    span = max(int(a.max(initial=some)) for a in (new_j, hist_j, out_j)) - low_j + 1
    if (len(first) + 1) * span >= 2**62:
        return None

    def coded(kids: np.ndarray, js: np.ndarray) -> np.ndarray:
        return kids * span + (js - low_j)

    least = np.full(len(first), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(least, kid, new_j)
    on_chain = hist_j >= least[hist_kid]
    grid = distinct_sorted(
        np.concatenate((coded(kid, new_j), coded(hist_kid[on_chain], hist_j[on_chain])))
    )
    bound = first_unready(frontier, prefix)
    ready = np.ones(len(grid), bool) if bound is None else grid % span < bound - low_j
    cand, waits = grid[ready], grid[~ready]
    cand_kid = cand // span
    present = _running(coded(hist_kid, hist_j), hist_diff, cand, cand_kid * span) > 0
    error = present.astype(np.int64) - _running(
        coded(out_kid, out_j), out_diff, cand, cand_kid * span
    )
    fix = error.copy()
    same = cand_kid[1:] == cand_kid[:-1]  # the candidate before, of the same key
    fix[1:][same] -= error[:-1][same]
    changed = np.flatnonzero(fix)
    keys, times = shape.keys, time_columns(shape.depth)
    stamp_of = _stamps(times, prefix)
    fix_rows = pa.array(first[cand_kid[changed]])
    output = _build(
        [
            *_fields(shape.schema, keys, [c.take(fix_rows) for c in probe.columns]),
            *stamp_of(cand[changed] % span + low_j),
            (pa.field(DIFF, pa.int64()), pa.array(fix[changed], pa.int64())),
        ]
    )
    wait_rows = pa.array(first[waits // span])
    waiting = _build(
        [
            *_fields(shape.source, keys, [c.take(wait_rows) for c in probe.columns]),
            *stamp_of(waits % span + low_j),
        ]
    )
    return output, waiting


def _running(
    codes: np.ndarray, diffs: np.ndarray, at: np.ndarray, starts: np.ndarray
) -> np.ndarray:
    """Per position of `at`, the sum of the `diffs` whose `codes` lie from the same
    position of `starts` to it, both ends included."""
    ordered, order = driver.sort_order(codes)
    running = np.zeros(len(codes) + 1, np.int64)
    np.cumsum(diffs[order], out=running[1:])
    high = np.searchsorted(ordered, at, "right")
    return running[high] - running[np.searchsorted(ordered, starts, "left")]


class _Chain:
    """The ready candidates, sorted by key then time: `cand` their codes (key times the
    number of distinct stamps, plus the stamp's rank), and per key the count and the
    position of its first candidate."""

    def __init__(self, cand: np.ndarray, nkeys: int, stamps: np.ndarray) -> None:
        self.cand, self.span, self.stamps = cand, len(stamps), stamps
        self.cand_kid, self.cand_j = cand // self.span, stamps[cand % self.span]
        self.per_key = np.bincount(self.cand_kid, minlength=nkeys)
        self.key_start = np.concatenate(([0], np.cumsum(self.per_key)[:-1]))

    @classmethod
    def of(
        cls,
        nkeys: int,
        new_kid: np.ndarray,
        new_j: np.ndarray,
        hist_kid: np.ndarray,
        hist_j: np.ndarray,
        out_j: np.ndarray,
        bound: int | None,
    ) -> tuple[_Chain, tuple[np.ndarray, np.ndarray]]:
        """The chains of the keys `0..nkeys-1` (each a key with a new time): per key, the
        last-coordinate values of its new and history rows at or beyond its least new
        one; those below `bound` (None: all) are the ready candidates, the others wait
        (returned as keys and values)."""
        low = np.full(nkeys, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(low, new_kid, new_j)
        stamps = distinct_sorted(np.concatenate((new_j, hist_j, out_j)))
        span = len(stamps)
        on_grid = hist_j >= low[hist_kid]
        grid = distinct_sorted(
            np.concatenate(
                (
                    new_kid * span + np.searchsorted(stamps, new_j),
                    hist_kid[on_grid] * span + np.searchsorted(stamps, hist_j[on_grid]),
                )
            )
        )
        grid_kid, grid_j = grid // span, stamps[grid % span]
        ready = np.ones(len(grid), bool) if bound is None else grid_j < bound
        return cls(grid[ready], nkeys, stamps), (grid_kid[~ready], grid_j[~ready])

    def accumulate(
        self, kid: np.ndarray, vid: np.ndarray, stamp: np.ndarray, diff: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Per (key, value) group of the rows and per ready candidate of its key, the
        rows' diffs accumulated at the candidate (non-zero sums only): keys, values,
        candidate positions, sums. None when the pairs would be too many."""
        if not vid.any():  # no values (a distinct): each key with rows is a group
            present = np.flatnonzero(np.bincount(kid, minlength=len(self.per_key)))
            number = np.zeros(len(self.per_key), np.int64)
            number[present] = np.arange(len(present))
            group, gkid, gvid = number[kid], present, np.zeros(len(present), np.int64)
        else:
            width = int(vid.max()) + 1
            group, gfirst = dense_codes(kid * width + vid)
            gkid, gvid = kid[gfirst], vid[gfirst]
        rank = np.searchsorted(self.stamps, stamp)
        codes = group * self.span + rank
        sorted_codes, order = driver.sort_order(codes)
        running = np.concatenate(([0], np.cumsum(diff[order])))
        count = self.per_key[gkid]
        pairs = int(count.sum())
        if pairs > MAX_PAIRS:
            return None
        pair_group = np.repeat(np.arange(len(gkid)), count)
        offset = np.arange(pairs) - np.repeat(np.cumsum(count) - count, count)
        pair_c = self.key_start[gkid][pair_group] + offset
        pair_rank = self.cand[pair_c] % self.span
        start = np.searchsorted(sorted_codes, np.arange(len(gkid)) * self.span)
        end = np.searchsorted(sorted_codes, pair_group * self.span + pair_rank, "right")
        sums = running[end] - running[start[pair_group]]
        keep = sums != 0
        return gkid[pair_group][keep], gvid[pair_group][keep], pair_c[keep], sums[keep]

    def corrections(
        self, wanted: _Sums, held: _Sums, width: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The corrections from the wanted output and the output held, each as candidate
        positions, output values (`< width`) and diffs: `E` at each (candidate, value) is
        wanted less held, the correction `E(c) - E(predecessor of c)`; zeros dropped."""
        err_c, err_o, err = _sum_by(
            np.concatenate((wanted[0], held[0])),
            np.concatenate((wanted[1], held[1])),
            np.concatenate((wanted[2], -held[2])),
            width,
        )
        successor = err_c + 1
        has_next = successor < len(self.cand)
        has_next[has_next] = self.cand_kid[successor[has_next]] == self.cand_kid[err_c[has_next]]
        return _sum_by(
            np.concatenate((err_c, successor[has_next])),
            np.concatenate((err_o, err_o[has_next])),
            np.concatenate((err, -err[has_next])),
            width,
        )

    def position(self, kid: np.ndarray, stamp: np.ndarray) -> np.ndarray | None:
        """The candidate position of each (key, stamp); None when one is not a candidate."""
        rank = np.searchsorted(self.stamps, stamp)
        rank = np.minimum(rank, self.span - 1)
        codes = kid * self.span + rank
        at = np.minimum(np.searchsorted(self.cand, codes), max(len(self.cand) - 1, 0))
        if len(codes) and (not len(self.cand) or np.any(self.cand[at] != codes)):
            return None
        if len(codes) and np.any(self.stamps[rank] != stamp):
            return None
        return at


def _sum_by(
    cand: np.ndarray, oid: np.ndarray, diff: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The diffs summed per (candidate, output value), zero sums dropped."""
    if len(cand) == 0:
        empty = np.empty(0, np.int64)
        return empty, empty, empty
    codes, order = driver.sort_order(cand * width + oid)
    diff = diff[order]
    starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
    sums = np.add.reduceat(diff, starts)
    codes = codes[starts]
    keep = sums != 0
    return codes[keep] // width, codes[keep] % width, sums[keep]


# --- helpers ---------------------------------------------------------------------------


def _same_types(tables: Sequence[pa.Table], names: Sequence[str]) -> bool:
    """Whether the named columns have one type across the tables."""
    return all(len({t.schema.field(n).type for t in tables}) <= 1 for n in names)


def shared_prefix(tables: Sequence[pa.Table], names: Sequence[str]) -> tuple[int, ...] | None:
    """The one value each named time column takes in every row of the tables (None: a
    column takes several)."""
    prefix = []
    for name in names:
        values = concat_columns([t.column(name) for t in tables])
        low, high = pc.min_max(values).values()
        if low.as_py() is None or low.as_py() != high.as_py():
            return None
        prefix.append(int(low.as_py()))
    return tuple(prefix)


def _at_most(table: pa.Table, names: Sequence[str], prefix: tuple[int, ...]) -> bool:
    """Whether every row's named time columns are `<=` `prefix`."""
    for name, bound in zip(names, prefix, strict=True):
        high = pc.max(table.column(name)).as_py()
        if high is not None and high > bound:
            return False
    return True


def _magnitude(tables: Sequence[pa.Table]) -> float:
    """The sum of the absolute diffs of the tables (a bound on every running sum)."""
    total = 0.0
    for t in tables:
        diffs = t.column(DIFF).to_numpy().astype(np.float64)
        total += float(np.abs(diffs).sum())
    return total


def _ints(tables: Sequence[pa.Table], name: str) -> np.ndarray:
    """An int64 column of the tables, end to end."""
    if not tables:
        return np.empty(0, np.int64)
    return np.concatenate([t.column(name).to_numpy().astype(np.int64) for t in tables])


def _lookup(
    key_values: Sequence[pa.Array], wanted: Sequence[pa.ChunkedArray], nkeys: int
) -> np.ndarray | None:
    """The key code of each wanted key (the position of its values in `key_values`, whose
    rows are distinct); None when one is not there."""
    rows = len(wanted[0]) if wanted else 0
    if not key_values:  # no key columns: the one key
        return np.zeros(rows, np.int64) if nkeys == 1 else None
    columns = [concat_columns([k, w], k.type) for k, w in zip(key_values, wanted, strict=True)]
    code = row_codes(columns, nkeys + rows)
    known = np.full(int(code.max()) + 1, -1, np.int64)
    known[code[:nkeys]] = np.arange(nkeys)
    found = known[code[nkeys:]]
    return None if np.any(found < 0) else found


def _filter(tables: Sequence[pa.Table], keep: np.ndarray) -> list[pa.Table]:
    """The tables' rows where `keep` (a mask over the rows end to end) holds."""
    out, at = [], 0
    for t in tables:
        out.append(t.filter(pa.array(keep[at : at + t.num_rows])))
        at += t.num_rows
    return out


def first_unready(frontier: Antichain, prefix: tuple[int, ...]) -> int | None:
    """The least last coordinate `j` with `(prefix, j)` beyond the frontier (None: none)."""
    bounds = [e[-1] for e in frontier if all(a <= b for a, b in zip(e[:-1], prefix, strict=True))]
    return min(bounds) if bounds else None


def _stamps(times: Sequence[str], prefix: tuple[int, ...]) -> Callable[[np.ndarray], list]:
    """The time columns of rows at `(prefix, last)`, from the `last` values."""

    def columns(last: np.ndarray) -> list[tuple[pa.Field, pa.Array]]:
        fixed = [
            (pa.field(t, pa.int64()), pa.array(np.full(len(last), p, np.int64)))
            for t, p in zip(times[:-1], prefix, strict=True)
        ]
        return [*fixed, (pa.field(times[-1], pa.int64()), pa.array(last, pa.int64()))]

    return columns


def _fields(
    schema: pa.Schema, names: Sequence[str], arrays: Sequence[pa.Array]
) -> list[tuple[pa.Field, pa.Array]]:
    """Each named column of `schema`'s type (nullable), with its values."""
    return [(pa.field(n, schema.field(n).type), a) for n, a in zip(names, arrays, strict=True)]


def _build(columns: Sequence[tuple[pa.Field, pa.Array]]) -> pa.Table:
    """A table of the columns, each cast to its field's type."""
    arrays = [a if a.type == f.type else a.cast(f.type) for f, a in columns]
    return pa.Table.from_arrays(arrays, schema=pa.schema([f for f, _ in columns]))


def _empty_desired(shape: ReduceShape, times: Sequence[str]) -> pa.Table:
    """The logic's result over no groups: no rows."""
    fields = [pa.field(f.name, f.type) for f in shape.schema]
    fields += [pa.field(t, pa.int64()) for t in (*times, DIFF)]
    return pa.schema(fields).empty_table()
