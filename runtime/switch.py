"""The switch: the output of a dataflow that can be replaced by a new one while readers stay.

A `SwitchNode` passes its source's updates on unchanged. Its owner may `detach` the
source (the dataflow failed and was dropped: the switch then emits nothing) and later
`attach` a new source built from scratch; in the first round after that the switch
emits the new source's updates plus the retraction of everything its arrangement
holds, with every time advanced to the attach frontier. The arrangement that reads
the switch therefore accumulates to its old contents before that frontier and to the
new source's contents from it on, so readers of the arrangement (joins, imports,
captures) see one exact correction instead of a rebuild.

Invariant: in a round where a node of the current source failed, the switch emits
nothing, so no half-computed round reaches its readers.

A new source is built `Worker.ranked_before(switch)`: it is younger than the switch
but must step before it in every round.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dsql.errors import SchemaError
from dsql.runtime import relational as rel
from dsql.runtime.arrangement import Arranged
from dsql.runtime.dataflow import Batch, Node, Round
from dsql.runtime.lattice import DIFF, Antichain, time_columns


class SwitchNode(Node):
    """Its source's updates, with the source replaceable (see module docstring)."""

    always_run = False
    #: A linear source's query is left to the arrangement that reads the switch (its sole
    #: reader), as it would be without the switch: the switch passes the batch on.
    composes_linear = True

    def __init__(self, source: Node) -> None:
        super().__init__(source.worker, (source,), source.schema, source.depth)
        #: The nodes of the current source's dataflow: a failure of one mutes the round.
        self._sources: tuple[int, ...] = ()
        #: The arrangement of the switch's output, whose contents an attach retracts.
        self.arranged: Arranged | None = None
        #: The frontier of the latest attach, while its retraction is still to be emitted.
        self._retract_at: Antichain | None = None

    @property
    def watched(self) -> tuple[int, ...]:
        """The ids of the nodes whose failure is the view's: the source's dataflow, the
        switch and its arrangement (which may run the source's last linear step)."""
        own = (self.id,) if self.arranged is None else (self.id, self.arranged.id)
        return (*self._sources, *own)

    @watched.setter
    def watched(self, ids: tuple[int, ...]) -> None:
        self._sources = ids

    def detach(self) -> None:
        """Stop reading the source (its nodes are being dropped); the switch and its
        arrangement, whose failed steps kept nothing, may step again."""
        for source in self.inputs:
            if self in source.readers:
                source.readers.remove(self)
                source.consumers -= 1
        self.inputs: tuple[Node, ...] = ()
        self._sources = ()
        self.worker.revive(self)
        if self.arranged is not None:
            self.worker.revive(self.arranged)

    def attach(self, source: Node, watched: Sequence[int]) -> None:
        """Read `source` from now on; the next round corrects the output to its contents."""
        if source.schema.types != self.schema.types or source.depth != self.depth:
            raise SchemaError(
                f"a switch's new source has columns {source.schema}, the old one {self.schema}"
            )
        self.detach()
        source.consumers += 1
        source.readers.append(self)
        self.inputs = (source,)
        self.watched = tuple(watched)
        self._retract_at = self.worker.frontier
        self.worker.refresh(self)

    def step(self, rnd: Round) -> Batch | None:
        failed = self.worker.failed
        if any(n in failed for n in self._sources):
            return None
        delta = rnd.delta(self.inputs[0]) if self.inputs else None
        if self._retract_at is None:
            return delta
        frames = [] if self.arranged is None else self.arranged.history()
        parts = []
        if delta is not None:
            linear = delta.deferred
            query = None if linear is None else linear.query
            parts.append(
                delta.frame if query is None else self.kernel.query(query, {"src": delta.frame})
            )
        if frames:
            parts.append(self.kernel.query(self._retraction(), {"h": self.kernel.union(frames)}))
        return Batch(self.kernel.union(parts)) if parts else None

    def _retraction(self) -> exp.Query:
        """The arrangement's updates (relation `h`), times advanced to the attach
        frontier, diffs negated."""
        assert self._retract_at is not None
        times = time_columns(self.depth)
        advanced = rel.advance("h", self.columns, self.depth, self._retract_at)
        negated = exp.Neg(this=rel.col(DIFF))
        return rel.select(advanced, [*rel.passthrough((*self.columns, *times)), (DIFF, negated)])

    def finish(self, rnd: Round) -> None:
        if not any(n in self.worker.failed for n in self._sources):
            self._retract_at = None

    def describe(self) -> str:
        return "Switch"


__all__ = ["SwitchNode"]
