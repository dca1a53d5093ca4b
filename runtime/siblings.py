"""Siblings: the linear steps of many readers of one batch, evaluated by one query.

Many views over one table each begin with their own map and filter of the table's
batch (every view imports the table's arrangement, so each round hands all of them
the same frame). One query per view costs a DuckDB statement's fixed work each
(about a millisecond); one query computing every view's rows as columns of one
result costs a fraction of that per view. `batched` does that once per round and
batch, and each sibling takes its own rows when it steps.

Siblings of a linear node are the top-level linear nodes whose input batch is, this
round, the same frame: the readers of one node, and the readers of imports that
follow it (`ImportNode`). Only chains of one map/filter branch take part
(`Kernel.select_many`), of the same statement as the node (`Worker.cancelable_from`).

Invariant: a sibling's rows are exactly those its own query gives over the frame;
when the shared query fails (one view's expression raises), each node runs its own,
so an error stays with the node that raises it.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from dsql.errors import DsqlError
from dsql.runtime.arrangement import ImportNode
from dsql.runtime.dataflow import Node, Round
from dsql.runtime.kernel.base import Frame

if TYPE_CHECKING:
    from dsql.runtime.collection import LinearNode

#: Fewer siblings than this run their own queries.
MIN_SIBLINGS = 3

#: Per source node, the siblings' node ids and their shared query (prepared once per set).
_QUERIES: weakref.WeakKeyDictionary[Node, tuple[tuple[int, ...], Any]] = weakref.WeakKeyDictionary()


def batched(node: LinearNode, rnd: Round, frame: Frame) -> Frame | None:
    """`node`'s output over `frame` computed with its siblings' (once per round and
    frame), or None when it has too few siblings or the kernel cannot share a query."""
    if node.scope is not None or node.select_branch() is None:
        return None
    key = ("siblings", id(frame))
    entry = rnd.shared.get(key)
    if entry is None or entry[0] is not frame:
        entry = (frame, _run(node, frame))  # holding the frame keeps its id unique
        rnd.shared[key] = entry
    return entry[1].get(node.id)


def _run(node: LinearNode, frame: Frame) -> dict[int, Frame]:
    source = _followed(node.inputs[0])
    siblings = _siblings(node, source)
    if len(siblings) < MIN_SIBLINGS:
        return {}
    ids = tuple(s.id for s in siblings)
    kernel = node.kernel
    memo = _QUERIES.get(source)
    if memo is None or memo[0] != ids:
        branches = [s.select_branch() for s in siblings]
        memo = (ids, kernel.prepare_many(branches, node.depth))
        _QUERIES[source] = memo
    if memo[1] is None:
        return {}
    try:
        frames = kernel.run_many(memo[1], frame)
    except DsqlError:  # each runs its own query, and fails alone; this set shares no more
        _QUERIES[source] = (ids, None)
        return {}
    if frames is None:
        return {}
    return dict(zip(ids, frames, strict=True))


def _siblings(node: LinearNode, source: Node) -> list[LinearNode]:
    """The linear nodes reading the batch of `source` this round (see module docstring)."""
    from dsql.runtime.collection import LinearNode

    worker = node.worker
    own = node.id >= worker.cancelable_from
    readers: list[Node] = []
    for reader in source.readers:
        if isinstance(reader, ImportNode):
            if reader.following() and not reader.dropped:
                readers += reader.readers
        else:
            readers.append(reader)
    return [
        r
        for r in readers
        if isinstance(r, LinearNode)
        and r.scope is None
        and not r.dropped
        and not (r.lazy and r.consumers == 0)
        and r.id not in worker.failed
        and (r.id >= worker.cancelable_from) == own
        and r.select_branch() is not None
        and not r.renames_only()
    ]


def _followed(node: Node) -> Node:
    """The node whose batch `node` hands on unchanged this round (an import that follows
    its source), else `node` itself."""
    if isinstance(node, ImportNode) and node.following():
        return node.handle.source
    return node
