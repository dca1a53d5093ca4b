"""Iteration scopes: nested timestamps `(outer, round)` and the fixpoint schedule of a loop.

A `Scope` is a region of the dataflow whose times have one more coordinate than
its parent's: the *round* of the loop. Collections enter it (`enter`: round 0),
variables feed each round's result back to the next (`Variable.set`: round + 1),
and results leave it (`leave`: the round coordinate is dropped, so the outer
collection accumulates to the fixpoint).

The scope's operators run as one node of the parent (`ScopeNode`). In each parent
round the node runs *inner steps* `k = 0, 1, ...` over the scope's operators, in
creation order. Step `k` tells them that a product time `(t, i)` is complete when
`t` is complete in the parent and `i <= k`:

    inner frontier at step k = {(f, 0) for f in parent frontier} ∪ {(0, ..., 0, k + 1)}

This is sound because every update made at step `k` has round `>= k`: enters emit
only at step 0 (round 0), feedback adds one to the round of the previous step's
output, joins take lattice joins, and a reduce emits only at complete times
`>=` its new inputs. So every round-`k` update exists by the end of step `k`, and
a reduce that re-checks a key at a later interesting time `(t, j)` is woken at
step `j` (its pending times are the scope's wake-up calls).

The loop ends after a step when no variable has feedback and no operator holds a
pending time that is complete in the parent: then every round of every complete
outer time is final. Updates at outer times the parent frontier has not passed
flow through the rounds too, but reductions hold them until a later parent round.

Traces inside the scope compact only outer times: during the steps of a parent
round to the parent's previous frontier (every read is at or beyond it), and at
the end of the round to the new one. Round coordinates are kept: later outer
changes re-run the rounds against them, which is what makes the loop incremental.

The round limit: a variable's feedback may not reach a round beyond `limit`.
`on_limit="error"` raises `RecursionLimitError` naming the loop; `"return"` drops
the feedback beyond the limit, so the variables hold their values after `limit`
rounds (Materialize's ERROR / RETURN AT RECURSION LIMIT). A scope without a limit
has the worker's `recursion_limit` and fails there: a loop never hangs.

>>> from dsql.runtime.kernel.local import LocalKernel
>>> from dsql.runtime.dataflow import Worker
>>> worker = Worker(LocalKernel())
>>> edges = worker.new_input({"src": "int", "dst": "int"}).to_collection()
>>> with worker.scope(name="reach") as s:
...     reach = s.variable({"node": "int"})
...     step = reach.join(edges.enter(s).map("src AS node", "dst"), on=["node"])
...     _ = reach.set(step.map("dst AS node").concat(edges.enter(s).map("src AS node")).distinct())
>>> out = reach.leave().capture()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dsql.errors import RecursionLimitError, SchemaError
from dsql.runtime.dataflow import Batch, Node, Round, Worker, canceled, run_nodes
from dsql.runtime.kernel.base import Frame
from dsql.runtime.lattice import Antichain, Time

if TYPE_CHECKING:
    from dsql.runtime.collection import Collection
    from dsql.runtime.iterate import Variable

LIMIT_MODES = ("error", "return")


class Scope:
    """A loop's region of the dataflow (see module docstring); use it with `with`.

    Invariant: nodes are added only while the scope is open; it closes once every
    variable is set, and only then can collections leave it.
    """

    def __init__(
        self,
        worker: Worker,
        parent: Scope | None,
        outer_depth: int,
        name: str,
        limit: int | None,
        on_limit: str,
    ) -> None:
        if on_limit not in LIMIT_MODES:
            raise SchemaError(
                f"on_limit must be 'error' or 'return', not {on_limit!r}",
                hint="'return' keeps the values reached at the limit; 'error' fails there",
            )
        if limit is not None and limit < 1:
            raise SchemaError(f"the round limit of loop {name!r} must be at least 1")
        if parent is not None:
            parent.check_open()
        self.worker = worker
        self.parent = parent
        self.name = name
        #: The number of time coordinates inside the scope.
        self.depth = outer_depth + 1
        self.limit = worker.recursion_limit if limit is None else limit
        self.on_limit = on_limit if limit is not None else "error"
        self.default_limit = limit is None
        #: What the limit error suggests; a front end may put it in its own terms.
        self.hint = (
            "check that the loop body converges (distinct() a monotone body), pass "
            "limit=<rounds> for a longer loop, or on_limit='return' to keep the values "
            "reached at the limit"
        )
        self.nodes: list[Node] = []
        self.variables: list[Variable] = []
        self.exports: list[Node] = []
        self.closed = False
        self.node: ScopeNode | None = None
        #: Per exported node, this parent round's batches (stored) and which we own.
        self.collected: dict[int, list[Frame]] = {}
        self._owned: list[Frame] = []

    # --- building ------------------------------------------------------------------
    def __enter__(self) -> Scope:
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if kind is None:
            self.close()

    def check_open(self) -> None:
        """Refuse to add operators to a closed scope."""
        if self.closed:
            raise SchemaError(
                f"loop {self.name!r} is closed: no operators can be added to it",
                hint="build the whole loop body inside the scope, then leave() its results",
            )

    def variable(self, initial: Collection | pa.Schema | dict[str, Any]) -> Variable:
        """A collection defined by its own later value: `set` it before the scope closes.

        `initial` is an outer collection (the variable starts as it, at round 0) or a
        schema (the variable starts empty).
        """
        from dsql.runtime.iterate import new_variable

        return new_variable(self, initial)

    def enter(self, collection: Collection) -> Collection:
        """An outer collection brought into the scope (see `Collection.enter`)."""
        return collection.enter(self)

    def scope(self, name: str = "loop", limit: int | None = None, on_limit: str = "error") -> Scope:
        """A loop nested in this one: its times have one more coordinate."""
        return Scope(self.worker, self, self.depth, name, limit, on_limit)

    def close(self) -> None:
        """End the body: every variable must be set; the loop joins its parent's graph."""
        if self.closed:
            return
        unset = [v for v in self.variables if not v.is_set]
        if unset:
            raise SchemaError(
                f"loop {self.name!r} has a variable that was never set",
                hint="call variable.set(collection) for every variable of the loop",
            )
        self.closed = True
        self.node = ScopeNode(self)

    def export(self, node: Node) -> None:
        """Collect `node`'s batches of every step, for a `leave`."""
        if not self.closed or self.node is None:
            raise SchemaError(
                f"a collection can leave loop {self.name!r} only after the loop is closed",
                hint="leave() results after the `with` block (or after iterate returns)",
            )
        if self.node.ran:
            raise SchemaError(
                f"loop {self.name!r} has already run: leave its results before the first step"
            )
        if node not in self.exports:
            self.exports.append(node)

    # --- running -------------------------------------------------------------------
    def inner_frontier(self, parent: Antichain, step: int) -> Antichain:
        """Times complete after inner step `step`: complete in the parent, round <= step."""
        d = self.depth - 1
        return Antichain([*lift(parent), (0,) * d + (step + 1,)])

    def next_step(self, step: int, parent: Antichain) -> int | None:
        """The next inner step with work, or None when the loop has converged."""
        if any(v.has_feedback() for v in self.variables):
            return step + 1
        d = self.depth - 1
        rounds = [
            p[d]
            for node in self.nodes
            if not node.dropped
            for p in node.pending()
            if parent.complete(p[:d])
        ]
        return max(min(rounds), step + 1) if rounds else None

    def limit_error(self, round_: int) -> RecursionLimitError:
        """The error of a loop whose feedback reached a round beyond its limit."""
        which = "the default limit" if self.default_limit else "its limit"
        return RecursionLimitError(
            f"loop {self.name!r} did not converge: round {round_} is beyond {which} "
            f"of {self.limit} rounds",
            hint=self.hint,
        )


class ScopeNode(Node):
    """A loop as one node of its parent: runs the inner steps to the fixpoint each round."""

    #: The inner rounds finish inside the step: an interrupted round cannot run again.
    rewindable = False

    def __init__(self, loop: Scope) -> None:
        self.loop = loop
        self.ran = False
        sources: list[Node] = []
        for node in loop.nodes:
            for source in node.inputs:
                if source.scope is loop.parent and source not in sources:
                    sources.append(source)
        super().__init__(
            loop.worker, tuple(sources), pa.schema([]), loop.depth - 1, scope=loop.parent
        )

    def step(self, rnd: Round) -> Batch | None:
        loop = self.loop
        self.ran = True
        for frame in loop._owned:
            self.kernel.release(frame)
        loop._owned = []
        loop.collected = {n.id: [] for n in loop.exports}
        basis = rnd.compaction if rnd.compaction is not None else rnd.previous
        compaction = Antichain(lift(basis))
        step: int | None = 0
        while step is not None:
            # The worker ends the parent round before it raises (see `Worker.abort`).
            if step > loop.limit + 1:
                raise loop.limit_error(step)
            if self.worker.expired(self):
                raise canceled()
            inner = Round(
                step,
                compaction,
                loop.inner_frontier(rnd.frontier, step),
                parent=rnd,
                compaction=compaction,
            )
            run_nodes(loop.nodes, inner)
            for node in loop.exports:
                batch = inner.delta(node)
                if batch is not None:
                    loop.collected[node.id].append(self._keep(batch, node))
            step = loop.next_step(step, rnd.frontier)
        return None

    def _keep(self, batch: Batch, node: Node) -> Frame:
        if batch.table is not None:
            return batch.frame
        stored = self.kernel.materialize(batch.frame, (), batch.rows)
        self.loop._owned.append(stored.frame)
        return stored.frame

    def finish(self, rnd: Round) -> None:
        # The rounds are done: traces inside may forget outer times the parent completed.
        done = Antichain(lift(rnd.frontier))
        compaction = Antichain(lift(rnd.compaction_frontier))
        final = Round(rnd.number, done, done, parent=rnd, compaction=compaction)
        for node in self.loop.nodes:
            if not node.dropped:
                node.finish(final)

    def pending(self) -> tuple[Time, ...]:
        return tuple(p for node in self.loop.nodes if not node.dropped for p in node.pending())

    def release(self) -> None:
        for node in self.loop.nodes:
            node.dropped = True
            node.release()
        for frame in self.loop._owned:
            self.kernel.release(frame)
        self.loop._owned = []

    def describe(self) -> str:
        return f"Iterate({self.loop.name!r}, {len(self.loop.nodes)} operators)"


def lift(frontier: Antichain) -> list[Time]:
    """A parent frontier's elements with round 0 appended."""
    return [(*e, 0) for e in frontier]
