"""The worker: a graph of operators, and the driver-side scheduler that runs it in rounds.

Operators (nodes) are created by `Collection` methods and appended to the
worker, so creation order is a topological order. A *round* starts when inputs
have flushed updates or advanced their frontiers: every live node, in order,
turns the batches its inputs produced this round into its own output batch
(`Node.step`), then every node tidies its state (`Node.finish`: arrangements
append and merge, captures release complete updates).

The worker's frontier is the meet of its open inputs' frontiers: every time not
beyond it is complete, and after a round every operator's output at those times
is final. Updates may carry times beyond the frontier (`update_at`, temporal
filters); stateful operators hold them until the frontier passes.

A batch is lazy where the kernel allows (Spark composes a round's steps into
few jobs); nodes that keep state materialize what they keep.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dsql.errors import (
    DsqlError,
    ExecutionError,
    QueryCanceledError,
    SchemaError,
    StateLostError,
)
from dsql.runtime.kernel.base import Frame, Kernel
from dsql.runtime.lattice import DIFF, Antichain, Time, time_columns

if TYPE_CHECKING:
    from dsql.runtime.input import InputSession
    from dsql.runtime.scope import Scope

#: Default recursion limit: the rounds an iteration may take before it fails (or returns).
DEFAULT_RECURSION_LIMIT = 1000

#: Marker for "the node belongs to the scope of its inputs".
INHERIT = object()


def _inherited_scope(inputs: tuple[Node, ...]) -> Scope | None:
    scopes = {id(n.scope): n.scope for n in inputs}
    if len(scopes) > 1:
        raise SchemaError(
            "an operator mixes collections of different iteration scopes",
            hint="bring outer collections into a loop with enter(scope), results out with leave()",
        )
    return next(iter(scopes.values())) if scopes else None


@dataclass(slots=True)
class Batch:
    """Updates produced by one node in one round: a frame, when known an upper bound on
    its row count (exact once materialized), and for small materialized batches its
    rows as an Arrow table."""

    frame: Frame
    rows: int | None = None
    table: pa.Table | None = None
    #: A linear node whose query is still to be applied to `frame` (its input batch): only
    #: a sole reader that composes that query into its own sees such a batch.
    deferred: Any = None
    #: The sole reader (a linear node) whose query the producer already applied to `frame`.
    applied: Any = None
    #: Whether the updates are known consolidated (no two share a row and a time, no diff
    #: is 0), as an arrangement's batches are: a reader that would consolidate need not.
    #: With `deferred`, it says so of the updates once the deferred query is applied.
    consolidated: bool = False


@dataclass(slots=True)
class Round:
    """What a round knows: its number, the frontiers before and after, and the batches so far.

    Inside an iteration a round is one inner step of the loop: `number` is the step,
    `frontier` says which product times are complete after it, `parent` is the
    enclosing scope's round, and `compaction` (when set) is the frontier traces may
    be compacted to, which inside a loop lags the completeness frontier.
    """

    number: int
    previous: Antichain
    frontier: Antichain
    outputs: dict[int, Batch | None] = field(default_factory=dict)
    parent: Round | None = None
    compaction: Antichain | None = None
    #: Work nodes share within the round (`siblings`: one query for many readers' steps).
    shared: dict[Any, Any] = field(default_factory=dict)

    def delta(self, node: Node) -> Batch | None:
        """The batch `node` produced this round (None when it produced nothing)."""
        return self.outputs.get(node.id)

    @property
    def compaction_frontier(self) -> Antichain:
        """The frontier traces may advance their times to at the end of this round."""
        return self.frontier if self.compaction is None else self.compaction


class Node:
    """An operator of the worker's graph.

    Subclasses set `columns` and `schema` (the data columns' names and Arrow types)
    and implement `step`. Invariant: for every time, the accumulation of a node's
    outputs equals its operator applied to the accumulations of its inputs.
    """

    #: A lazy node is skipped in rounds when nothing reads it (e.g. a map fused into another).
    lazy = False
    #: Whether a top-level node steps in every round. When False it steps only in its first
    #: round, in rounds where one of its inputs produced a batch, and while `pending()`
    #: holds times; in other rounds it neither steps nor finishes (its state waits).
    always_run = True
    #: Whether the node folds a linear input's query into its own (see `Batch.deferred`).
    composes_linear = False
    #: Whether a producer may apply this node's query for it (see `Batch.applied`).
    applied_by_producer = False
    #: Whether the node's step can run again when its round is interrupted and retried
    #: (`Worker.step`): the step keeps no state that `finish` does not commit, or
    #: `rewind` undoes what it keeps. A node that cannot (a loop, whose inner rounds
    #: finish inside its step) is failed by an interrupt instead.
    rewindable = True

    def __init__(
        self,
        worker: Worker,
        inputs: tuple[Node, ...],
        schema: pa.Schema,
        depth: int,
        scope: Scope | None | object = INHERIT,
    ):
        self.worker = worker
        #: The iteration scope the node belongs to (None: the worker's top level).
        chosen: Any = _inherited_scope(inputs) if scope is INHERIT else scope
        self.scope: Scope | None = chosen
        if chosen is not None:
            chosen.check_open()
        self.consumers = 0
        #: The nodes that read this one (the rounds' schedule follows these edges).
        self.readers: list[Node] = []
        for node in inputs:
            node.consumers += 1
            node.readers.append(self)
        self.inputs = inputs
        self.schema = schema
        self.depth = depth
        self.dropped = False
        #: Where the node steps in a round: nodes step in rank order, a topological order
        #: (the creation order, unless the node was built `Worker.ranked_before` another).
        self.rank: tuple[int, ...] = ()
        self.id = worker._register(self)

    @property
    def columns(self) -> tuple[str, ...]:
        """The names of the data columns."""
        return tuple(self.schema.names)

    @property
    def kernel(self) -> Kernel:
        return self.worker.kernel

    def all_columns(self) -> tuple[str, ...]:
        """Data columns, then time columns, then the diff column."""
        return (*self.columns, *time_columns(self.depth), DIFF)

    def step(self, rnd: Round) -> Batch | None:
        """Produce this round's output from the inputs' batches of this round."""
        raise NotImplementedError

    def finish(self, rnd: Round) -> None:
        """Tidy state at the end of a round (after every node has stepped)."""

    def rewind(self) -> None:
        """Undo what the latest step kept: its round was interrupted and runs again."""

    def pending(self) -> tuple[Time, ...]:
        """Times at which the node holds work that waits for the frontier to pass them."""
        return ()

    def release(self) -> None:
        """Free any storage the node holds (it is being dropped)."""

    def describe(self) -> str:
        """A one-line description for EXPLAIN-style listings."""
        return type(self).__name__


class Worker:
    """Owns the kernel, the operator graph, the inputs and the round scheduler."""

    def __init__(self, kernel: Kernel | None = None, dialect: str = "postgres") -> None:
        if kernel is None:
            from dsql.runtime.kernel.spark import SparkKernel

            kernel = SparkKernel()
        self.kernel = kernel
        #: The SQL dialect in which expression strings given to operators are read.
        self.dialect = dialect
        #: Every node by id; a dropped node's entry is None (its state and the edges
        #: to it are gone, so a session's short-lived dataflows leave nothing behind).
        self.nodes: list[Node | None] = []
        self.inputs: list[InputSession] = []
        self.frontier = Antichain([(0,)])
        self.rounds = 0
        #: The round limit of iterations that do not set one (they fail when they reach it).
        self.recursion_limit = DEFAULT_RECURSION_LIMIT
        self._woken = False
        self._empty: dict[tuple[tuple[str, str], ...], Frame] = {}
        #: Top-level nodes that step every round, nodes not run yet, nodes holding times.
        self._always: dict[int, Node] = {}
        self._fresh: list[Node] = []
        self._standing: dict[int, Node] = {}
        #: The running statement's deadline (`time.monotonic()` seconds; None: no bound)
        #: and its first node: nodes from there on are its own, and may be cut short or
        #: fail without failing the round (older nodes belong to dataflows that stay).
        self.deadline: float | None = None
        self.cancelable_from = 1 << 62  # no statement runs: no node is cut short
        #: An error met inside a round, raised once the round is complete (see `abort`).
        self._failure: DsqlError | None = None
        #: Nodes whose step failed, with the error: they step no more, so what reads them
        #: is frozen; the owner of such a dataflow reports the error when it is used.
        self.failed: dict[int, DsqlError] = {}
        #: Of `failed`, the nodes failed by an interrupted round (not by their data): their
        #: owner rebuilds them without waiting for the data to change (`dsql.heal`).
        self.interrupted: set[int] = set()
        #: Whether a failure of a node older than the running statement is only recorded in
        #: `failed` (a session: the INSERT that feeds a failing view succeeds, reading the
        #: view reports the error) rather than raised after the round.
        self.isolate_failures = False
        #: Nodes whose failure is never isolated: the owner has no dataflow to rebuild
        #: them from (a table's input and arrangement hold its rows), so a failure there
        #: is raised after the round, and the node, frozen, is refused by its owner until
        #: dropped (`vital_failure`). Isolating it would leave readers a shorter table.
        self.vital: set[int] = set()
        #: Called with each node after it steps (a front end's progress display).
        self.on_step: Callable[[Node], None] | None = None
        #: While set, the rank prefix of the nodes being built (`ranked_before`).
        self._rank_prefix: tuple[int, ...] | None = None

    def _register(self, node: Node) -> int:
        self.nodes.append(node)
        node_id = len(self.nodes) - 1
        prefix = self._rank_prefix
        node.rank = (node_id,) if prefix is None else (*prefix, node_id)
        if node.scope is not None:
            node.scope.nodes.append(node)
        else:
            self._fresh.append(node)
            if node.always_run:
                self._always[node_id] = node
        return node_id

    # --- building ------------------------------------------------------------------
    @contextmanager
    def ranked_before(self, node: Node) -> Iterator[None]:
        """Build nodes inside the block that step before `node` in every round (after every
        node ranked before it), so a dataflow built later can feed an older node.

        The new nodes may read only nodes ranked before `node`.
        """
        *head, last = node.rank
        previous, self._rank_prefix = self._rank_prefix, (*head, last - 1, len(self.nodes))
        try:
            yield
        finally:
            self._rank_prefix = previous

    def revive(self, node: Node) -> None:
        """Let a failed node step again: for a node whose failed step kept nothing (a
        switch, an arrangement), once what made it fail is gone."""
        self.failed.pop(node.id, None)

    def refresh(self, node: Node) -> None:
        """Step `node` in the next round even if none of its inputs produces a batch."""
        if node.scope is None and node not in self._fresh:
            self._fresh.append(node)

    def new_input(self, schema: pa.Schema | dict[str, Any] | list[tuple[str, Any]]) -> InputSession:
        """A new input collection with the given data columns (names and Arrow types)."""
        from dsql.runtime.input import InputSession

        session = InputSession(self, _as_schema(schema))
        self.inputs.append(session)
        return session

    def empty_frame(self, schema: pa.Schema, depth: int) -> Frame:
        """An empty frame of a batch relation with these data columns (cached)."""
        full = batch_schema(schema, depth)
        key = schema_key(full)
        if key not in self._empty:
            self._empty[key] = self.kernel.from_arrow(full.empty_table())
        return self._empty[key]

    def output_schema(
        self, query: Any, inputs: dict[str, Node | tuple[pa.Schema, int]]
    ) -> pa.Schema:
        """The data columns of `query` evaluated over empty inputs (validates it, too).

        An input is a node or the (data schema, depth) of a batch relation.
        """
        frames = {
            name: self.empty_frame(*((n.schema, n.depth) if isinstance(n, Node) else n))
            for name, n in inputs.items()
        }
        frame = self.kernel.query(query, frames)
        full = self.kernel.schema(frame)
        data = [f for f in full if not f.name.startswith("__time") and f.name != DIFF]
        return pa.schema(data)

    def scope(self, name: str = "loop", limit: int | None = None, on_limit: str = "error") -> Scope:
        """A new iteration scope at the top level (use `with`; see `dsql.runtime.scope`)."""
        from dsql.runtime.scope import Scope

        return Scope(self, None, 1, name, limit, on_limit)

    # --- running -------------------------------------------------------------------
    def input_frontier(self) -> Antichain:
        """The meet of the open inputs' frontiers (empty when every input is closed)."""
        times = [s.frontier for s in self.inputs if not s.closed]
        return Antichain([(min(times),)]) if times else Antichain()

    def wake(self) -> None:
        """Ask for a round at the next `step` even if no input changed (a new import)."""
        self._woken = True

    def expired(self, node: Node) -> bool:
        """Whether `node` belongs to the running statement and its deadline has passed."""
        return (
            self.deadline is not None
            and node.id >= self.cancelable_from
            and time.monotonic() > self.deadline
        )

    def abort(self, error: DsqlError) -> None:
        """Fail the current round once it is complete: a round cut in the middle would leave
        nodes that stepped without finishing (an arrangement would lose its batch), so a
        node that must stop stops producing and the round ends before `step` raises."""
        if self._failure is None:
            self._failure = error

    def vital_failure(self, nodes: Sequence[Node | None]) -> DsqlError | None:
        """The error of the first of `nodes` that is `vital` and failed; None if none."""
        for node in nodes:
            if node is not None and node.id in self.vital and node.id in self.failed:
                return self.failed[node.id]
        return None

    def check_deadline(self) -> None:
        """Raise `QueryCanceledError` when the running statement's deadline has passed."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise canceled()

    def step(self) -> bool:
        """Run one round if any input flushed updates or moved its frontier.

        Returns whether a round ran. After it, every output at times not beyond the
        worker's frontier is final. An error `abort`ed in the round is raised after it.
        """
        try:
            ran = self._step()
        except BaseException:
            self._failure = None  # the round was undone (`_run_top`) and runs again
            raise
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
        return ran

    def _step(self) -> bool:
        frontier = self.input_frontier()
        has_data = any(s.has_flushed() for s in self.inputs)
        if not has_data and frontier == self.frontier and not self._woken:
            return False
        self._woken = False
        self.rounds += 1
        rnd = Round(self.rounds, self.frontier, frontier)
        self._run_top(rnd)
        self.frontier = frontier
        return True

    def _run_top(self, rnd: Round) -> None:
        """Step the top-level nodes that have work, in creation (topological) order.

        A node has work when it always runs, is new, holds pending times, or one of its
        inputs produced a non-empty batch this round; so a round costs what changed,
        not the size of the graph (many idle views cost nothing). Then each node that
        stepped finishes.
        """
        heap: list[tuple[tuple[int, ...], int]] = []
        queued: set[int] = set()

        def add(node: Node) -> None:
            if node.id not in queued and node.scope is None and not node.dropped:
                if node.id in self.failed:
                    return
                queued.add(node.id)
                heapq.heappush(heap, (node.rank, node.id))

        for fresh in (*self._fresh, *self._always.values(), *self._standing.values()):
            add(fresh)
        self._fresh = []
        ran: list[Node] = []
        stepped: list[Node] = []
        try:
            while heap:
                node = self.nodes[heapq.heappop(heap)[1]]
                assert node is not None  # queued nodes are live
                if node.lazy and node.consumers == 0:
                    continue
                if self.deadline is not None:  # only the statement's own queries are cut
                    own = node.id >= self.cancelable_from
                    self.kernel.set_deadline(self.deadline if own else None)
                stepped.append(node)
                self.kernel.set_owner(node.id)
                try:
                    batch = node.step(rnd)
                except StateLostError as error:
                    # Stored state is gone: no node's error, and no round to finish. The
                    # round is undone as an interrupted one is; the session names and
                    # fences the relation whose state it was (`dsql.lost_state`).
                    self._owned(error, node)
                    raise
                except DsqlError as error:
                    # A round cut in the middle would leave nodes that stepped unfinished:
                    # the node fails alone (it steps no more), the round ends, then the
                    # error is raised (`abort`), unless the node belongs to a dataflow
                    # kept from before the running statement and failures are isolated
                    # (see `failed`). A canceled statement is no error of the data: it is
                    # never isolated.
                    self.failed[node.id] = error
                    own = node.id >= self.cancelable_from
                    if (
                        own
                        or not self.isolate_failures
                        or node.id in self.vital
                        or isinstance(error, QueryCanceledError)
                    ):
                        self.abort(error)
                    continue
                if self.on_step is not None:
                    self.on_step(node)
                if batch is not None and (batch.rows == 0 or self.kernel.rows(batch.frame) == 0):
                    batch = None  # an empty batch changes nothing downstream
                rnd.outputs[node.id] = batch
                ran.append(node)
                if batch is not None:
                    for reader in node.readers:
                        add(reader)
        except BaseException:  # an interrupt (Ctrl-C), lost state: no node has finished
            self._undo_round(stepped, queued)
            raise
        finally:
            self.kernel.set_owner(None)
        self._standing = {}
        self.kernel.set_deadline(None)  # finishing (traces merging) is never cut short
        for node in ran:
            self.kernel.set_owner(node.id)
            try:
                node.finish(rnd)
            except StateLostError as error:
                # A merge met lost state: the other nodes still finish (their batches
                # are the round's), the error is raised after it (`abort`), and the
                # session fences the relation whose state it was.
                self.abort(self._owned(error, node))
                continue
            finally:
                self.kernel.set_owner(None)
            if node.pending():
                self._standing[node.id] = node
        self.kernel.set_deadline(self.deadline)

    def _owned(self, error: StateLostError, node: Node) -> StateLostError:
        """`error` with the node whose state was lost: the one that stored it (the
        kernel's `owner_of` its path), else `node`, which met it."""
        if error.owner is None:
            error.owner = self.kernel.owner_of(error.path)
        if error.owner is None:
            error.owner = node.id
        return error

    def _undo_round(self, stepped: list[Node], queued: set[int]) -> None:
        """Leave the graph as before a round that an interrupt cut short, so that the next
        `step` runs it again: each node that stepped rewinds (inputs take back their
        batches), one that cannot is failed (`interrupted`), and every node the round
        queued is queued again. Nothing finished, so no trace holds the round's batches."""
        for node in stepped:
            if node.rewindable:
                node.rewind()
            else:
                self.failed[node.id] = ExecutionError(
                    "its dataflow was interrupted in the middle of a round",
                    hint="it is rebuilt from its inputs",
                )
                self.interrupted.add(node.id)
        self._fresh.extend(n for i in sorted(queued) if (n := self.nodes[i]) is not None)
        self._woken = True

    def run(self) -> None:
        """Step until no input has anything to deliver (between rounds, a passed deadline
        cancels the statement: the graph is consistent there)."""
        self.check_deadline()
        while self.step():
            self.check_deadline()

    def drop(self, nodes: Sequence[Node | None]) -> None:
        """Remove operators from the graph and free their state (None: already gone).

        A dropped node is unlinked from the nodes it reads and its id's entry in `nodes`
        becomes None, so nothing keeps it (or what it holds) alive: without this a
        session that answers thousands of reads grew by every read's dataflow.
        """
        for node in nodes:
            if node is None:
                continue
            if not node.dropped:  # a loop's release drops its inner nodes itself
                node.dropped = True
                node.release()
            self._always.pop(node.id, None)
            self._standing.pop(node.id, None)
            self.failed.pop(node.id, None)
            self.interrupted.discard(node.id)
            self.vital.discard(node.id)
            for source in node.inputs:
                if node in source.readers:
                    source.readers.remove(node)
                    source.consumers -= 1
            self.nodes[node.id] = None
        # An input whose node is gone delivers nothing more: updates it flushed on closing
        # would otherwise count as work for every later round, which never takes them.
        self.inputs = [s for s in self.inputs if not s.node.dropped]


def canceled() -> QueryCanceledError:
    """The error of a statement that ran past its deadline (PostgreSQL's message)."""
    return QueryCanceledError(
        "canceling statement due to statement timeout",
        hint="raise it (SET statement_timeout = '30s'; 0 disables it), or make the query "
        "cheaper; a recursive query that does not converge needs a round limit",
    )


def run_nodes(nodes: list[Node], rnd: Round) -> None:
    """Step every live node in order (skipping lazy ones nobody reads), then finish each."""
    for node in nodes:
        if not node.dropped and not (node.lazy and node.consumers == 0):
            rnd.outputs[node.id] = node.step(rnd)
            if node.worker.on_step is not None:
                node.worker.on_step(node)
    for node in nodes:
        if not node.dropped:
            node.finish(rnd)


def schema_key(schema: pa.Schema) -> tuple[tuple[str, str], ...]:
    """A hashable key of a schema's names and types (for caches keyed by input shape)."""
    return tuple((f.name, str(f.type)) for f in schema)


def batch_schema(data: pa.Schema, depth: int) -> pa.Schema:
    """The schema of a batch relation: data columns, time columns, diff."""
    fields = list(data) + [pa.field(t, pa.int64()) for t in time_columns(depth)]
    return pa.schema(fields + [pa.field(DIFF, pa.int64())])


def _as_schema(schema: pa.Schema | dict[str, Any] | list[tuple[str, Any]]) -> pa.Schema:
    if isinstance(schema, pa.Schema):
        result = schema
    else:
        items = schema.items() if isinstance(schema, dict) else schema
        result = pa.schema([(name, _as_type(t)) for name, t in items])
    for name in result.names:
        if name.startswith("__"):
            raise SchemaError(
                f"column name {name!r} is reserved", hint="names starting with '__' are internal"
            )
    if len(set(result.names)) != len(result.names):
        raise SchemaError("duplicate column names in schema", hint="give each column its own name")
    return result


def _as_type(t: Any) -> pa.DataType:
    if isinstance(t, pa.DataType):
        return t
    names = {
        "int": pa.int64(),
        "bigint": pa.int64(),
        "integer": pa.int64(),
        "int64": pa.int64(),
        "int32": pa.int32(),
        "double": pa.float64(),
        "float": pa.float64(),
        "float64": pa.float64(),
        "string": pa.string(),
        "text": pa.string(),
        "varchar": pa.string(),
        "bool": pa.bool_(),
        "boolean": pa.bool_(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us"),
    }
    if isinstance(t, str) and t.lower() in names:
        return names[t.lower()]
    if t is int:
        return pa.int64()
    if t is float:
        return pa.float64()
    if t is str:
        return pa.string()
    if t is bool:
        return pa.bool_()
    raise SchemaError(f"unknown column type {t!r}", hint="use an Arrow type or int/float/str/bool")
