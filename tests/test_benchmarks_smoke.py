"""Benchmarks that cannot rot: every script in benchmarks/ runs, at its smallest sizes.

Each script runs as a subprocess with tiny sizes, few rounds and `--no-write` (RESULTS.md
is left alone); it must exit 0 and print its table. Timings are not checked (the
benchmarks measure them; the suite only keeps the scripts working).
"""

from __future__ import annotations

import pyarrow as pa

from dsql.runtime.kernel import key_index
from dsql.runtime.kernel.local import LocalKernel
from dsql.runtime.trace import Trace


def test_trace_size_counts_a_slot_table() -> None:
    # An index large enough for a slot table: its 4 bytes a slot count in the trace's size
    # (the size `benchmarks/skip_level.py` reports at its end).
    n = max(key_index.INDEX_ROWS, key_index.SLOT_KEYS)
    schema = pa.schema([("k", pa.int64()), ("__time__", pa.int64()), ("__diff__", pa.int64())])
    batch = pa.table({"k": range(n), "__time__": [0] * n, "__diff__": [1] * n}, schema=schema)
    trace = Trace(LocalKernel(), ("k",), ("k",), 1)
    trace.insert(batch, n)
    before = trace.nbytes()
    picked = trace.rows_with_keys(pa.table({"k": [3, n + 1]}), ("k",))
    assert picked is not None and [f.column("k").to_pylist() for f in picked] == [[3]]
    # n distinct keys, n + 1 run bounds, n positions at 8 bytes; n slots at 4.
    assert trace.nbytes() == before + 8 * (3 * n + 1) + 4 * n
