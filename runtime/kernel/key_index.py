"""A sorted index over one key column of an in-process trace batch.

An arrangement is an index: readers look up the updates of the keys they were given
(a join's delta, a reduce's affected keys) without scanning the rest. A trace batch is
immutable, so its index is built once, when first probed: the batch's row positions
sorted by one integer key column (`driver.sort_order`), and that column in sorted
order. A probe finds each probed key's run of rows by binary search, so its cost grows
with the probe and the rows it returns, not with the batch (3 ms for `is_in` over 1M
rows; a few microseconds this way). A reader that needs only each key's sum of diffs
(a settled distinct) reads it without taking a row (`KeyIndex.sums`).

Keys with several integer columns and no NULL are packed into one int64: non-negative
values get `62 // columns` bits each, the same packing in every batch, so a trace packs a
probe once for all its batches; other values are packed each column less its least
value, shifted, when their ranges fit in 62 bits. Other keys with several
columns are indexed on their first integer column: the rows it picks are then cut
exactly to the probe's whole keys (`driver.rows_with_keys`, over the rows picked).
NULL matches NULL, as in the engines' `IS NOT DISTINCT FROM`.

Invariant: `KeyIndex.rows(probe, by)` returns exactly the rows of the indexed table
whose keys equal those of some row of `probe` (as `driver.rows_with_keys` would), in
the table's order, and `KeyIndex.sums(probe, by)` the sum of their diffs per probe row,
or None when it cannot say exactly.

>>> import pyarrow as pa
>>> t = pa.table({"k": [3, 1, None, 3, 2], "v": ["a", "b", "c", "d", "e"]})
>>> index = KeyIndex.build(t, ("k",))
>>> index.rows(pa.table({"x": [3, None, 7]}), ("x",)).column("v").to_pylist()
['a', 'c', 'd']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsql.runtime.kernel import driver
from dsql.runtime.lattice import DIFF

_NONE = np.empty(0, np.int64)

#: Batches with fewer rows are not indexed: scanning them is as cheap as a lookup.
INDEX_ROWS = 256
#: The same for keys of several columns: every batch, however small. Their scan is an
#: Arrow semi-join (0.1 ms a probe in the closure benchmark's loop), where building an
#: index of a few rows and probing it takes a third of that.
MULTI_INDEX_ROWS = 1


#: An index of at least this many distinct keys finds probed keys in a dense table of
#: slots, one per value in the box of its keys (`KeyIndex._slots`), rather than by binary
#: search, when the box has at most `SLOTS_PER_KEY` slots per distinct key: a search
#: into hundreds of thousands of keys misses the cache at every step.
SLOT_KEYS = 1 << 16
SLOTS_PER_KEY = 4


def worth_indexing(rows: int, keys: Sequence[str]) -> bool:
    """Whether a batch of `rows` rows is indexed by `keys` (see `INDEX_ROWS`)."""
    return bool(keys) and rows >= (INDEX_ROWS if len(keys) == 1 else MULTI_INDEX_ROWS)


_INTEGERS = frozenset(
    (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32())
)


def _indexable(t: pa.DataType) -> bool:
    return t in _INTEGERS or t == pa.date32()


def _as_int64(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """An integer or date column as int64 values (NULLs kept), for sorting and search."""
    if isinstance(column, pa.ChunkedArray):  # one chunk: itself, not a copy
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if column.type == pa.date32():
        column = column.view(pa.int32())
    return column if column.type == pa.int64() else column.cast(pa.int64())


@dataclass(frozen=True, slots=True)
class KeyIndex:
    """Row positions of `table` sorted by its key column `keys[column]`, or by all its
    key columns packed (`packing`: per column its least and greatest value and shift),
    see module docstring: `order` the positions, `distinct` the distinct keys in sorted
    order, `bounds` where each one's run of positions starts in `order` (and, last, the
    length of `order`); `nulls`: the positions whose key is NULL; `cache`: what `sums`
    computes once, each distinct key's sum of diffs."""

    table: pa.Table
    keys: tuple[str, ...]
    column: int
    distinct: np.ndarray
    bounds: np.ndarray
    order: np.ndarray
    nulls: np.ndarray
    packing: tuple[tuple[int, int, int], ...] = ()
    cache: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def build(cls, table: pa.Table, keys: Sequence[str]) -> KeyIndex | None:
        """The index of `table` on its first integer key column (None: none is)."""
        keys = tuple(keys)
        packed = _packed(table, keys)
        if packed is not None:
            data, packing = packed
            ordered, order = driver.sort_order(data)
            return cls._sorted(table, keys, -1, ordered, order, _NONE, packing)
        column = next((i for i, k in enumerate(keys) if _indexable(table.schema.field(k).type)), -1)
        if column < 0:
            return None
        values = _as_int64(table[keys[column]])
        valid = values.is_valid()
        nulls = np.flatnonzero(~valid.to_numpy(zero_copy_only=False))
        data = values.fill_null(0).to_numpy()
        order = driver.sort_order(data)[1]
        if len(nulls):
            order = order[np.isin(order, nulls, assume_unique=True, invert=True)]
        return cls._sorted(table, keys, column, data[order], order, nulls)

    @classmethod
    def merged(cls, table: pa.Table, parts: Sequence[KeyIndex]) -> KeyIndex | None:
        """The index of `table`, the rows of the parts' tables end to end, from the
        parts' indexes: their sorted keys are runs that a stable sort merges in linear
        time (one part: its index over `table`, what it computed kept). None when the
        parts are not indexed alike (column, packing)."""
        first = parts[0]
        if len(parts) == 1 and first.table.num_rows == table.num_rows:
            return replace(first, table=table)  # the same rows, stored anew
        alike = all(
            p.keys == first.keys and p.column == first.column and p.packing == first.packing
            for p in parts
        )
        if not alike or sum(p.table.num_rows for p in parts) != table.num_rows:
            return None
        offsets = np.cumsum([0] + [p.table.num_rows for p in parts[:-1]])
        keys = np.concatenate([np.repeat(p.distinct, np.diff(p.bounds)) for p in parts])
        order = np.concatenate([p.order + at for p, at in zip(parts, offsets, strict=True)])
        nulls = np.concatenate([p.nulls + at for p, at in zip(parts, offsets, strict=True)])
        by = np.argsort(keys, kind="stable")  # linear over sorted runs (timsort)
        return cls._sorted(
            table, first.keys, first.column, keys[by], order[by], nulls, first.packing
        )

    @classmethod
    def _sorted(
        cls,
        table: pa.Table,
        keys: tuple[str, ...],
        column: int,
        sorted_keys: np.ndarray,
        order: np.ndarray,
        nulls: np.ndarray,
        packing: tuple[tuple[int, int, int], ...] = (),
    ) -> KeyIndex:
        """The index from the positions `order` and their keys in sorted order: a probe
        searches the distinct keys once, where searching both ends of each run in the
        sorted keys took twice as long (0.21 against 0.45 ms for 2,500 keys into 800k
        rows)."""
        at = np.flatnonzero(driver.run_starts(sorted_keys))
        bounds = np.append(at, len(sorted_keys))
        return cls(table, keys, column, sorted_keys[at], bounds, order, nulls, packing)

    @property
    def nbytes(self) -> int:
        """The bytes the index holds beside its table."""
        arrays = (self.distinct, self.bounds, self.order, self.nulls)
        slots = self.cache.get("slots")
        return sum(int(a.nbytes) for a in arrays) + (0 if slots is None else slots.nbytes)

    def _locate(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of the `wanted` keys (coded as the index codes them), the positions in
        `distinct` of those it holds, and a mask of which those are."""
        slots = self._slots()
        if slots is not None:
            place, inside = slots.places(wanted)
            at = slots.table[place]
            hit = inside & (at >= 0)
            return at[hit].astype(np.int64), hit
        at = np.searchsorted(self.distinct, wanted)
        if not len(self.distinct):
            return at[:0], np.zeros(len(wanted), bool)
        np.minimum(at, len(self.distinct) - 1, out=at)
        hit = self.distinct[at] == wanted
        return at[hit], hit

    def _runs(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The table positions of the rows of the distinct keys at `at`, each key's run
        laid end to end, and the runs' lengths (None: every run is one row)."""
        low = self.bounds[at]
        if self._one_row_per_key():  # no run to lay out
            return self.order[low], None
        counts = self.bounds[at + 1] - low
        if len(at) and int(counts.max()) == 1:
            return self.order[low], None
        starts = np.repeat(low - (np.cumsum(counts) - counts), counts)
        return self.order[starts + np.arange(int(counts.sum()))], counts

    def _one_row_per_key(self) -> bool:
        """Whether every distinct key has one row (asked once)."""
        single = self.cache.get("single")
        if single is None:
            single = self.cache["single"] = len(self.distinct) == len(self.order)
        return single

    def _slots(self) -> _Slots | None:
        """The index's slot table (see `SLOT_KEYS`), built when first asked; None when
        its keys are too few or too sparse."""
        if "slots" not in self.cache:
            slots = None
            if len(self.distinct) >= SLOT_KEYS and (self.packing or len(self.keys) == 1):
                slots = _Slots.build(self.distinct, self.packing)
            self.cache["slots"] = slots
        return self.cache["slots"]

    def rows(self, probe: pa.Table, by: Sequence[str]) -> pa.Table | None:
        """The rows whose keys equal the `by` columns of some row of `probe` (None: the
        types do not compare exactly)."""
        by = tuple(by)
        if self.packing:
            return self._packed_rows(probe, by)
        probed = probe[by[self.column]]
        if not _comparable(probed.type, self.table.schema.field(self.keys[self.column]).type):
            return None
        values = _as_int64(probed)
        wanted = driver.distinct_sorted(values.drop_null().to_numpy())
        picked = self._take(wanted, values.null_count > 0)
        if len(self.keys) == 1 or picked.num_rows == 0:
            return picked
        return driver.rows_with_keys(picked, self.keys, probe, by)

    def _packed_rows(self, probe: pa.Table, by: tuple[str, ...]) -> pa.Table | None:
        """`rows` for a packed index: probe keys with a NULL or out of range match nothing."""
        codes = _probe_codes(self, probe, by)
        if codes is None:
            return None
        ordered, _, inside = codes
        kept = ordered[inside]
        return self._take(kept[driver.run_starts(kept)], False)

    def sums(self, probe: pa.Table, by: Sequence[str]) -> np.ndarray | None:
        """Per row of `probe`, the sum of the diffs of the rows whose keys equal its `by`
        columns, whatever their times (0: no row does). None when the index cannot say
        exactly: it is on one column of several keys, a probed key is NULL or does not
        compare exactly, or a sum could overflow.

        No row is taken: the index keeps each key's sum (`_key_sums`). The smaller side
        is searched in the other, both sorted: the probe's keys in the distinct keys, or
        the distinct keys in the probe's (a probe of 170k keys into a batch of 2k then
        costs 2k searches, not 170k)."""
        if len(self.keys) > 1 and not self.packing:
            return None
        per_key = self._key_sums()
        codes = _probe_codes(self, probe, tuple(by))
        if per_key is None or codes is None:
            return None
        ordered, order, inside = codes
        if len(self.distinct) < len(ordered):
            low = np.searchsorted(ordered, self.distinct, "left")
            counts = np.searchsorted(ordered, self.distinct, "right") - low
            hit = np.flatnonzero(counts)
            counts = counts[hit]
            # Each hit key's run of equal probe keys, the runs laid end to end.
            starts = np.repeat(low[hit] - (np.cumsum(counts) - counts), counts)
            positions = starts + np.arange(int(counts.sum()))
            values = np.repeat(per_key[hit], counts)
        else:
            at = np.searchsorted(self.distinct, ordered)
            found = at < len(self.distinct)
            found[found] = self.distinct[at[found]] == ordered[found]
            positions = np.flatnonzero(found)
            values = per_key[at[positions]]
        keep = inside[positions]
        result = np.zeros(len(ordered), np.int64)
        result[order[positions[keep]]] = values[keep]
        return result

    def matches(self, probe: pa.Table, by: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows whose keys equal the `by` columns of some row of `probe`, as positions
        in the table, and for each the position of a probe row with its key; in no
        particular order. None when the index cannot say exactly (it is on one column of
        several keys, or a probed key is NULL or does not compare exactly).

        Unlike `rows`, nothing is taken: a reader that needs a few columns of the rows
        as numbers gathers them itself (`ints`)."""
        if len(self.keys) > 1 and not self.packing:
            return None
        found = _probed_keys(self, probe, tuple(by))
        if found is None:
            return None
        wanted, probe_rows = found
        if len(self.distinct) < len(wanted) and self._slots() is None:
            # Fewer keys here than probed: each searched among the probe's, both sorted.
            at = np.searchsorted(wanted, self.distinct)
            np.minimum(at, len(wanted) - 1, out=at)
            found = wanted[at] == self.distinct
            probe_rows, at = probe_rows[at[found]], np.flatnonzero(found)
        else:
            at, hit = self._locate(wanted)
            probe_rows = probe_rows[hit]
        positions, counts = self._runs(at)
        return positions, probe_rows if counts is None else np.repeat(probe_rows, counts)

    def ints(self, name: str) -> np.ndarray | None:
        """The table's column `name` as int64 numbers (a view where it can be), kept
        once asked; None when it is not an integer column or holds a NULL."""
        key = "ints:" + name
        if key not in self.cache:
            column = self.table.column(name)
            values = None
            if pa.types.is_integer(column.type) and not column.null_count:
                chunk = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
                values = chunk.to_numpy().astype(np.int64, copy=False)
            self.cache[key] = values
        return self.cache[key]

    def _key_sums(self) -> np.ndarray | None:
        """Per distinct key, the sum of its rows' diffs; None when a sum could overflow.
        Computed once."""
        if "sums" not in self.cache:
            diffs = self.table[DIFF].to_numpy().astype(np.int64, copy=False)[self.order]
            per_key = None
            if not len(diffs):
                per_key = np.zeros(0, np.int64)
            elif not driver.may_overflow(diffs):
                per_key = np.add.reduceat(diffs, self.bounds[:-1])
            self.cache["sums"] = per_key
        return self.cache["sums"]

    def _take(self, wanted: np.ndarray, nulls: bool) -> pa.Table:
        """The rows whose indexed key is in `wanted` (sorted, distinct), and the rows with
        a NULL key when `nulls`, in the table's order."""
        positions = self._runs(self._locate(wanted)[0])[0]
        if nulls and len(self.nulls):
            positions = np.concatenate((positions, self.nulls))
        if not len(positions):
            return self.table.slice(0, 0)
        positions.sort()
        return self.table.take(positions)


@dataclass(frozen=True, slots=True)
class _Slots:
    """A dense table from each key in a box to its position among an index's distinct
    keys (-1: none there). Keys are coded as the index codes them (one column's values,
    or several packed: `packing`); `fields` gives per column the shift and width of its
    bits in a code (no packing: 0, 63; a packed column's bits hold its value less the
    packing's least), its least value there and its span; a key's slot numbers the box
    row by row.

    Invariant: `table[places(k)]` is the position of `k` in the distinct keys, for every
    key `k` of the index, and -1 for every other key inside the box."""

    fields: tuple[tuple[int, int, int, int], ...]
    table: np.ndarray

    @property
    def nbytes(self) -> int:
        """The bytes of the slot table (4 a slot)."""
        return int(self.table.nbytes)

    @classmethod
    def build(
        cls, distinct: np.ndarray, packing: tuple[tuple[int, int, int], ...]
    ) -> _Slots | None:
        """The slots of the sorted `distinct` keys, or None when the box has more than
        `SLOTS_PER_KEY` slots per key."""
        layout = [(shift, max(1, (high - low).bit_length())) for low, high, shift in packing]
        fields, size = [], 1
        for shift, width in layout or [(0, 63)]:
            values = (distinct >> shift) & ((1 << width) - 1) if layout else distinct
            low, high = int(values.min()), int(values.max())
            fields.append((shift, width, low, high - low + 1))
            size *= high - low + 1
            if size > SLOTS_PER_KEY * len(distinct):
                return None
        slots = cls(tuple(fields), np.full(size, -1, np.int32))
        slots.table[slots.places(distinct)[0]] = np.arange(len(distinct), dtype=np.int32)
        return slots

    def places(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per code, its slot (a slot of the box whatever the code) and whether the code
        lies in the box."""
        place, inside = np.zeros(len(codes), np.int64), np.ones(len(codes), bool)
        for shift, width, low, span in self.fields:
            values = (codes >> shift) & ((1 << width) - 1) if width < 63 else codes
            offset, within = _offsets(values, low, span)
            inside &= within
            place *= span
            place += offset
        return place, inside


def _offsets(values: np.ndarray, low: int, span: int) -> tuple[np.ndarray, np.ndarray]:
    """Per value, its offset from `low` (0 outside the span) and whether it lies in
    `low .. low + span - 1`. The difference wraps modulo 2**64 for a value far below
    `low`, so one unsigned comparison tests both ends (`np.clip` costs ten times as much
    on a few values)."""
    offset = values - low
    within = offset.view(np.uint64) < span
    if within.all():  # the usual case: no copy with the outsiders zeroed
        return offset, within
    return np.where(within, offset, 0), within


def _comparable(probed: pa.DataType, indexed: pa.DataType) -> bool:
    """Whether probe values of type `probed` compare exactly with an `indexed` key."""
    return _indexable(probed) and (probed == pa.date32()) == (indexed == pa.date32())


def _packed(
    table: pa.Table, keys: tuple[str, ...]
) -> tuple[np.ndarray, tuple[tuple[int, int, int], ...]] | None:
    """Several integer key columns without NULLs packed into one int64 per row, and the
    packing; None when the keys do not allow it (module docstring)."""
    if len(keys) < 2 or table.num_rows == 0:
        return None
    if not all(_indexable(table.schema.field(k).type) for k in keys):
        return None
    columns = [_as_int64(table[k]) for k in keys]
    if any(c.null_count for c in columns):
        return None
    data = [c.to_numpy() for c in columns]
    canonical = _canonical(len(keys))
    limit = canonical[0][1]
    if all(int(v.min()) >= 0 and int(v.max()) <= limit for v in data):
        packed = np.zeros(table.num_rows, np.int64)
        for values, (_, _, at) in zip(data, canonical, strict=True):
            packed |= values << at
        return packed, canonical
    packing, shift = [], 0
    for values in reversed(data):
        low, high = int(values.min()), int(values.max())
        packing.append((low, high, shift))
        shift += max(1, (high - low).bit_length())
    if shift > 62:
        return None
    packing.reverse()
    packed = np.zeros(table.num_rows, np.int64)
    for values, (low, _, at) in zip(data, packing, strict=True):
        packed |= (values - low) << at
    return packed, tuple(packing)


def _probe_codes(
    index: KeyIndex, probe: pa.Table, by: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per row of `probe`, its key as `index` holds keys (packed, or the one key column),
    in sorted order; the rows' positions in that order; and whether each can match (a
    packed key with a NULL or out of the index's ranges cannot). Searching sorted keys
    is 7 times faster than searching them as they come (cache misses), and a trace
    searches each of its batches with one probe: the last probe's codes are kept. None
    when a key does not compare exactly, or one key column holds a NULL (it would
    match the index's NULL rows, which `sums` does not count)."""
    global _last_codes
    types = index.cache.get("types")
    if types is None:
        types = index.cache["types"] = tuple(index.table.schema.field(k).type for k in index.keys)
    shape = (by, index.packing, types)
    memo = _last_codes
    if memo is not None and memo[0] is probe and memo[1] == shape:
        return memo[2]
    columns = [probe[name] for name in by]
    if not all(_comparable(c.type, t) for c, t in zip(columns, types, strict=True)):
        return None
    values = [_as_int64(c) for c in columns]
    inside = np.ones(probe.num_rows, bool)
    if not index.packing:  # one key column: its values are the codes
        if values[0].null_count:
            return None
        codes = values[0].to_numpy()
    else:
        codes = np.zeros(probe.num_rows, np.int64)
        for column, (low, high, shift) in zip(values, index.packing, strict=True):
            if column.null_count:
                inside &= column.is_valid().to_numpy(zero_copy_only=False)
                column = column.fill_null(low)
            offset, within = _offsets(column.to_numpy(), low, high - low + 1)
            inside &= within
            codes |= offset << shift
    ordered, order = driver.sort_order(codes)
    result = (ordered, order, inside[order])
    _last_codes = (probe, shape, result)
    return result


#: The last probe coded by `_probe_codes`: the probe, its columns with the index's
#: packing and key types, and the codes.
_last_codes: tuple[pa.Table, tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
#: The last codes `_probed_keys` read, and what it made of them.
_last_keys: tuple[tuple, tuple[np.ndarray, np.ndarray]] | None = None


def _probed_keys(
    index: KeyIndex, probe: pa.Table, by: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray] | None:
    """The distinct keys of `probe` that can match (`_probe_codes`), sorted, and for each
    the position of a probe row with it; None as `_probe_codes`. A trace probes each of
    its batches with the same probe: the last result is kept with the codes it came
    from."""
    global _last_keys
    codes = _probe_codes(index, probe, by)
    if codes is None:
        return None
    memo = _last_keys
    if memo is not None and memo[0] is codes:
        return memo[1]
    ordered, order, inside = codes
    if not inside.all():
        ordered, order = ordered[inside], order[inside]
    first = driver.run_starts(ordered)
    result = (ordered[first], order[first])
    _last_keys = (codes, result)
    return result


def _canonical(columns: int) -> tuple[tuple[int, int, int], ...]:
    """The packing of `columns` non-negative key columns that needs no table's ranges:
    each column gets `62 // columns` bits."""
    bits = 62 // columns
    return tuple((0, (1 << bits) - 1, (columns - 1 - i) * bits) for i in range(columns))


#: A trace's key directory has at most this many entries per row of the trace (64 bytes
#: a row while its sums fit in 32 bits: about what an index of its batches holds), at
#: least `DIRECTORY_MIN` whatever its rows, and never more than `DIRECTORY_MAX`.
DIRECTORY_PER_ROW = 16
DIRECTORY_MIN = 1 << 12
DIRECTORY_MAX = 1 << 24


@dataclass(slots=True)
class KeyDirectory:
    """Each key's sum of diffs over a whole trace, for integer keys that are dense: the
    sums sit in one array indexed by the key's place in the box of key values the trace
    holds (per key column its least value and span; several columns are numbered row by
    row). A probe's sums are then one gather, whatever the trace's batches, where the
    batches' indexes cost a binary search per probed key and batch.

    Merges and compaction leave every key's sum as it is, so the directory follows the
    trace by adding each inserted batch (`add`); a batch with a key outside the box is
    refused and the trace drops the directory. Built only while the box has at most
    `DIRECTORY_PER_ROW` entries per trace row (`build`).

    Invariant: `sums[place(k)]` is the sum of the diffs of every row with key `k` in the
    batches added, and `bound` is at least the sum of their absolute diffs, so no sum
    can have overflowed while `bound < 2**62` (nor its 32-bit form while `bound < 2**31`).

    >>> import pyarrow as pa
    >>> t = pa.table({"k": [3, 1, 3, 2], "__diff__": [1, 1, 2, -1]})
    >>> d = KeyDirectory.build([t], ("k",))
    >>> d.lookup(pa.table({"x": [3, 0, 2]}), ("x",)).tolist()
    [3, 0, -1]
    """

    keys: tuple[str, ...]
    types: tuple[pa.DataType, ...]
    lows: tuple[int, ...]
    spans: tuple[int, ...]
    sums: np.ndarray  # int32 while `bound` < 2**31, then int64
    bound: float = 0.0

    @classmethod
    def build(cls, tables: Sequence[pa.Table], keys: Sequence[str]) -> KeyDirectory | None:
        """The directory of `tables`' keys; None when a key column is not an integer or
        date column, holds a NULL, or the box of their values is not dense enough."""
        keys = tuple(keys)
        tables = [t for t in tables if t.num_rows]
        if not keys or not tables:
            return None
        types = tuple(tables[0].schema.field(k).type for k in keys)
        if not all(_indexable(t) for t in types):
            return None  # a table with other key types is refused by `add`
        lows, spans = [], []
        for k in keys:
            columns = [_as_int64(t[k]) for t in tables]
            if any(c.null_count for c in columns):
                return None
            extremes = [pc.min_max(c) for c in columns]
            low = min(int(e["min"].as_py()) for e in extremes)
            lows.append(low)
            spans.append(max(int(e["max"].as_py()) for e in extremes) - low + 1)
        size, rows = 1, sum(t.num_rows for t in tables)
        limit = min(DIRECTORY_MAX, max(DIRECTORY_MIN, DIRECTORY_PER_ROW * rows))
        for span in spans:
            size *= span
            if size > limit:
                return None
        directory = cls(keys, types, tuple(lows), tuple(spans), np.zeros(size, np.int32))
        return directory if all(directory.add(t) for t in tables) else None

    @property
    def nbytes(self) -> int:
        return int(self.sums.nbytes)

    def add(self, frame: pa.Table) -> bool:
        """Add a batch's diffs (an Arrow table: the caller asks its kernel, `Kernel.takes`);
        False (nothing added) when its key types are not the directory's, or a key of it
        is NULL or outside the box."""
        if not frame.num_rows:
            return True
        if tuple(frame.schema.field(k).type for k in self.keys) != self.types:
            return False
        placed = self._places(frame, self.keys)
        if placed is None or not placed[1].all():
            return False
        diffs = frame[DIFF].to_numpy().astype(np.int64, copy=False)
        self.bound += float(np.abs(diffs).sum(dtype=np.float64))
        if self.bound >= 2.0**31 and self.sums.dtype != np.int64:
            self.sums = self.sums.astype(np.int64)  # a sum may no longer fit 32 bits
        np.add.at(self.sums, placed[0], diffs.astype(self.sums.dtype, copy=False))
        return True

    def lookup(self, probe: pa.Table, by: Sequence[str]) -> np.ndarray | None:
        """Per row of `probe`, the sum of the diffs of the rows whose keys equal its `by`
        columns (0: none); None when a probed key is NULL or of a type that does not
        compare exactly, or a sum may have overflowed."""
        if self.bound >= 2.0**62:
            return None
        by = tuple(by)
        types = [probe.schema.field(name).type for name in by]
        if not all(_comparable(p, t) for p, t in zip(types, self.types, strict=True)):
            return None
        placed = self._places(probe, by)
        if placed is None:
            return None
        places, inside = placed
        found = self.sums[places].astype(np.int64, copy=False)
        found[~inside] = 0
        return found

    def _places(
        self, table: pa.Table, names: tuple[str, ...]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Per row of `table`, its key's place in the box (a place in it whatever the
        key), and whether the key is inside; None when a key is NULL."""
        places, inside = np.zeros(table.num_rows, np.int64), np.ones(table.num_rows, bool)
        for name, low, span in zip(names, self.lows, self.spans, strict=True):
            values = _as_int64(table[name])
            if values.null_count:
                return None
            offset, within = _offsets(values.to_numpy(), low, span)
            inside &= within
            places *= span
            places += offset
        return places, inside
