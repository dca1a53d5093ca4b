"""A loop's distinct over whole rows, stepped from its traces' rows as numbers.

`UNION` in a recursive query is a distinct inside a loop, and each inner round of a
round steps it with the keys that changed. Its general step in the driver
(`Kernel.reduce_small`, `chain_reduce.chain_step` when the times form chains) takes the
affected keys' rows from every batch of both traces as Arrow tables, then codes their
key columns again to group them. For a distinct over whole rows the step needs of each
such row only which key it has, its last time coordinate and its diff: each batch's
index says which probed key a row matches (`Trace.key_matches`), and the two numbers
are gathered from the batch's columns, so nothing is taken or coded but the new keys.
In the closure benchmark's rounds this is most of the step's cost (RESULTS.md).

Invariant: `chained_distinct` returns exactly what the general step would (the same
`chain_reduce` chains and corrections), or None, when it is not such a step or a trace
cannot give its rows as numbers; the caller then takes the general path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from dsql.runtime.kernel.base import Frame
from dsql.runtime.kernel.chain_reduce import distinct_chain, shared_prefix
from dsql.runtime.kernel.driver import concat_columns
from dsql.runtime.kernel.driver_reduce import ReduceShape
from dsql.runtime.lattice import DIFF, bounded, time_columns

if TYPE_CHECKING:
    from dsql.runtime.arrangement import Arranged
    from dsql.runtime.dataflow import Round
    from dsql.runtime.operators.reduce import ReduceNode


def chained_distinct(
    node: ReduceNode, source: Arranged, rnd: Round, shape: ReduceShape, pending: Frame | None
) -> tuple[pa.Table, pa.Table] | None:
    """The step's output and pending candidates (`reduce`'s general step) when `node`
    keeps each present row once, is keyed by whole rows, and every new time shares all
    coordinates but the last with the traces' latest (one chain per key); else None.
    `pending`: the candidates `node` holds back (keys, times)."""
    if not node.logic.present_once or node.source_values or node.values or not node.keys:
        return None
    delta = source.current.frame if source.current is not None else None
    new = [f for f in (delta, pending) if f is not None]
    if not new or not all(isinstance(f, pa.Table) and f.num_rows for f in new):
        return None
    times, keys = time_columns(node.depth), node.keys
    prefix = shared_prefix(new, times[:-1])
    if prefix is None or not all(bounded(a.history_upper(), prefix) for a in (source, node)):
        return None
    names, probe = [times[-1], DIFF], _keys(new, keys)
    history = source.history_matches(probe, keys, names)
    held = None if history is None else node.trace.key_matches(probe, keys, names)
    if history is None or held is None:
        return None
    new_j = np.concatenate([f.column(times[-1]).to_numpy().astype(np.int64) for f in new])
    diffs = (
        np.empty(0, np.int64) if delta is None else delta.column(DIFF).to_numpy().astype(np.int64)
    )
    return distinct_chain(
        probe,
        new_j,
        diffs,
        (history[0], *history[1]),
        (held[0], *held[1]),
        rnd.frontier,
        prefix,
        shape,
    )


def _keys(frames: list[pa.Table], keys: tuple[str, ...]) -> pa.Table:
    """The key columns of the frames' rows end to end (each cast to the first's type)."""
    if len(frames) == 1:
        return frames[0].select(list(keys))
    columns = [
        concat_columns([f.column(k) for f in frames], frames[0].schema.field(k).type) for k in keys
    ]
    return pa.Table.from_arrays(columns, names=list(keys))
