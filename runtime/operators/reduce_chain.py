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
import pyarrow.compute as pc

from dsql.runtime.kernel.base import Frame
from dsql.runtime.kernel.chain_reduce import distinct_chain, first_unready, shared_prefix
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
    later = None
    if pending is not None and SPLIT_DUE:
        pending, later = _due(pending, times[-1], first_unready(rnd.frontier, prefix))
        new = [f for f in (delta, pending) if f is not None]
        if not new:
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
    stepped = distinct_chain(
        probe,
        new_j,
        diffs,
        (history[0], *history[1]),
        (held[0], *held[1]),
        rnd.frontier,
        prefix,
        shape,
    )
    if stepped is None or later is None:
        return stepped
    output, waiting = stepped
    return output, pa.concat_tables(
        [waiting, later.select(waiting.column_names).cast(waiting.schema)]
    )


#: Whether a step probes only the pending candidates that are due (`_due`), carrying
#: the others; False probes them all, as before (kept for same-process comparisons and
#: tests: both give the same output).
SPLIT_DUE = True


def _due(
    pending: pa.Table, last: str, bound: int | None
) -> tuple[pa.Table | None, pa.Table | None]:
    """The pending candidates the frontier has passed (their last time coordinate below
    `bound`) and the others, each None when empty.

    A candidate not yet due needs no probe: its key's chain from that time is built
    when it is due, from the history as it then stands, so it is carried as it is. In
    the closure benchmark's rounds about a quarter of the pending candidates are due at
    an inner step."""
    if bound is None:
        return pending, None
    due = pending.column(last).to_numpy() < bound
    if due.all():
        return pending, None
    if not due.any():
        return None, pending
    mask = pa.array(due)
    return pending.filter(mask), pending.filter(pc.invert(mask))


def _keys(frames: list[pa.Table], keys: tuple[str, ...]) -> pa.Table:
    """The key columns of the frames' rows end to end (each cast to the first's type)."""
    if len(frames) == 1:
        return frames[0].select(list(keys))
    columns = [
        concat_columns([f.column(k) for f in frames], frames[0].schema.field(k).type) for k in keys
    ]
    return pa.Table.from_arrays(columns, names=list(keys))
