"""Spark's bucket of a row, computed in the driver with numpy.

Spark assigns a row of a table `CLUSTERED BY (k1, k2, ...) INTO n BUCKETS` to bucket
`pmod(hash(k1, k2, ...), n)`, where `hash` is Murmur3 x86 32-bit with seed 42, the value
of each column hashed with the previous column's hash as its seed (a NULL leaves the hash
as it is). The same expression places a row in a hash shuffle (`repartition(n, keys)`),
so a table whose files hold their buckets' rows is read by Spark as partitioned by its
keys: a join or an aggregate by them needs no exchange.

`bucket_ids` computes it for signed integer and date columns (Spark hashes bytes,
shorts, ints and dates as 32-bit ints, longs as 64-bit), so that the driver can write
a big Arrow table as a bucketed table's files itself, as `SparkKernel.store_arrow`
does; None for other types (Spark writes those).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

_SEED = 42
#: Rows hashed at a time, chunks on threads: arrays this small are reused from one chunk
#: to the next, where a whole column's are fresh memory, whose first touch costs more
#: than the hash (20M rows: 0.10 against 1.35 s in a fresh process, 0.07-0.10 against
#: 0.22-0.31 s after).
CHUNK_ROWS = 1 << 20
_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)

#: Arrow types hashed as Spark hashes their Spark type: 32-bit, or 64-bit.
_INT32 = (pa.int8(), pa.int16(), pa.int32(), pa.date32())
_INT64 = (pa.int64(),)


def hashable(kind: pa.DataType) -> bool:
    """Whether `bucket_ids` hashes a column of type `kind`."""
    return kind in _INT32 or kind in _INT64


def bucket_ids(table: pa.Table, keys: Sequence[str], buckets: int) -> np.ndarray | None:
    """Each row's Spark bucket (int16) by the columns `keys` among `buckets`; None when a
    key column's type is not `hashable`.

    >>> bucket_ids(pa.table({"k": [0, 1, None]}), ["k"], 7).tolist()
    [4, 5, 0]
    """
    if not keys or not all(hashable(table.schema.field(k).type) for k in keys):
        return None
    ids = np.empty(table.num_rows, dtype=np.int16)
    starts = range(0, table.num_rows, CHUNK_ROWS)

    def chunk(start: int) -> None:
        part = table.slice(start, CHUNK_ROWS)
        ids[start : start + part.num_rows] = _ids(part, keys, buckets)

    if len(starts) < 2:  # a probe's few keys: no thread started
        for start in starts:
            chunk(start)
    else:
        with ThreadPoolExecutor(min(len(starts), os.cpu_count() or 1)) as pool:
            list(pool.map(chunk, starts))  # numpy's passes free the GIL
    return ids


def _ids(table: pa.Table, keys: Sequence[str], buckets: int) -> np.ndarray:
    """`bucket_ids` of a chunk of rows."""
    h = np.full(table.num_rows, _SEED, dtype=np.uint32)
    scratch = np.empty(table.num_rows, dtype=np.uint32)
    for key in keys:  # in place: a few passes over two arrays
        column = table[key]
        values = _numbers(column)
        before = h.copy() if column.null_count else None
        if column.type in _INT64:
            words = values.astype(np.int64, copy=False).view(np.uint64)
            low = words.astype(np.uint32)  # the low 32 bits
            high = (words >> np.uint64(32)).astype(np.uint32)
            _mix_h1(h, _mix_k1(low, scratch), scratch)
            _mix_h1(h, _mix_k1(high, scratch), scratch)
            _fmix(h, 8, scratch)
        else:
            _mix_h1(h, _mix_k1(values.astype(np.int32).view(np.uint32), scratch), scratch)
            _fmix(h, 4, scratch)
        if before is not None:  # a NULL leaves the hash as it was
            np.copyto(h, before, where=~np.asarray(column.is_valid()))
    if buckets & (buckets - 1) == 0:  # a power of two: pmod is the low bits
        return (h & np.uint32(buckets - 1)).astype(np.int16)
    return np.mod(h.view(np.int32), np.int32(buckets)).astype(np.int16)


def _numbers(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The column's values as integers, NULLs as 0 (their hash is not used)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    if column.type == pa.date32():
        column = column.cast(pa.int32())
    if column.null_count:
        column = column.fill_null(0)
    return column.to_numpy(zero_copy_only=False)


def _rotl(x: np.ndarray, r: int, scratch: np.ndarray) -> None:
    np.right_shift(x, np.uint32(32 - r), out=scratch)
    x <<= np.uint32(r)
    x |= scratch


def _mix_k1(k1: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Murmur3's mix of a 32-bit word, in place (`k1` is returned)."""
    k1 *= _C1
    _rotl(k1, 15, scratch)
    k1 *= _C2
    return k1


def _mix_h1(h1: np.ndarray, k1: np.ndarray, scratch: np.ndarray) -> None:
    h1 ^= k1
    _rotl(h1, 13, scratch)
    h1 *= np.uint32(5)
    h1 += np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray, length: int, scratch: np.ndarray) -> None:
    h1 ^= np.uint32(length)
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35), (16, 0)):
        np.right_shift(h1, np.uint32(shift), out=scratch)
        h1 ^= scratch
        if factor:
            h1 *= np.uint32(factor)
