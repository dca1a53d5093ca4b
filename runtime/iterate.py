"""The operators that cross a loop's boundary: enter, variables and their feedback, leave.

With `d` the parent's depth, a loop's times are `(outer..., round)`:

- `EnterNode`: an outer collection inside the loop, every update at round 0. It
  emits only at inner step 0 (see `dsql.runtime.scope` for why that matters).
- `EnterArrangedNode`: an outer *arrangement* inside the loop, without a copy: its
  history and batches are the outer trace's frames with a round-0 column added
  (lazily on Spark; on the in-process kernel Arrow shares every other column).
- `VariableNode` / `Variable`: a collection defined by its own later value. It is
  its initial collection (entered, round 0) plus the feedback of
  `result - initial`, moved one round later. Accumulated at `(t, i)` it is the
  initial value for `i = 0` and `result` at `(t, i - 1)` for `i >= 1`.
- `FeedbackNode`: computes that feedback at the end of each inner step, enforces
  the round limit, and hands it to the variable for the next step.
- `LeaveNode`: the updates of an inner collection over all rounds with the round
  dropped: accumulated at outer time `t`, the fixpoint at `t`.

>>> from dsql.runtime.kernel.local import LocalKernel
>>> from dsql.runtime.dataflow import Worker
>>> worker = Worker(LocalKernel())
>>> n = worker.new_input({"x": "int"})
>>> out = n.to_collection().iterate(
...     lambda s, v: v.map("x + 1 AS x").filter("x < 5").concat(n.to_collection().enter(s))
...     .distinct()).capture()
>>> n.insert((1,)); n.advance_to(1); n.flush(); worker.step()
True
>>> sorted(r["x"] for r in out.poll().to_pylist())
[1, 2, 3, 4]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from dsql.errors import SchemaError
from dsql.runtime import relational as rel
from dsql.runtime.arrangement import Arranged
from dsql.runtime.collection import Collection
from dsql.runtime.dataflow import Batch, Node, Round, _as_schema
from dsql.runtime.kernel.base import Capability, Frame, Stored
from dsql.runtime.lattice import DIFF, time_columns
from dsql.runtime.scope import Scope

if TYPE_CHECKING:
    from dsql.runtime.trace import Trace


def _check_enter(source: Node, loop: Scope) -> None:
    if source.scope is not loop.parent:
        raise SchemaError(
            f"only collections of the loop's parent scope can enter loop {loop.name!r}",
            hint="enter nested loops one scope at a time",
        )


class EnterNode(Node):
    """An outer collection inside a loop, at round 0 (see module docstring)."""

    lazy = True

    def __init__(self, source: Node, loop: Scope) -> None:
        _check_enter(source, loop)
        super().__init__(source.worker, (source,), source.schema, loop.depth, scope=loop)

    def step(self, rnd: Round) -> Batch | None:
        if rnd.number != 0 or rnd.parent is None:
            return None
        delta = rnd.parent.delta(self.inputs[0])
        if delta is None:
            return None
        table = delta.table
        if table is not None:
            table = _round_zero_table(table, self.depth)
        name = time_columns(self.depth)[-1]
        frame = self.kernel.append_time(delta.frame, name, 0)
        return Batch(frame, delta.rows, table, consolidated=delta.consolidated)

    def describe(self) -> str:
        return "Enter"


class EnterArrangedNode(Arranged):
    """An outer arrangement read inside a loop without copying (see module docstring)."""

    def __init__(self, source: Arranged, loop: Scope) -> None:
        _check_enter(source, loop)
        self.source = source
        self.keys = source.keys
        self._step = 0
        self._lifted: dict[int, Frame] = {}
        #: The outer round's batch and its index: every inner step probes it.
        self._current_index: tuple[Frame, Any] | None = None
        #: The lifted history and outer batch as one table's index, made at the first
        #: inner step of an outer round that reads them (`_whole_index`; False: cannot).
        self._whole: Any = None
        super().__init__(source.worker, (source,), source.schema, loop.depth, scope=loop)

    @property
    def trace(self) -> Trace:
        return self.source.trace

    def _lift(self, frame: Frame) -> Frame:
        key = id(frame)
        if key not in self._lifted:
            name = time_columns(self.depth)[-1]
            self._lifted[key] = (frame, self.kernel.append_time(frame, name, 0))
        return self._lifted[key][1]

    def history(self) -> list[Frame]:
        frames = self.source.history()
        if self._step > 0 and self.source.current is not None:
            frames = [*frames, self.source.current.frame]
        return [self._lift(f) for f in frames]

    def history_with_keys(self, probe: Frame, by: Sequence[str]) -> list[Frame] | None:
        if self._step > 0:
            whole = self._whole_index()
            rows = None if whole is None else whole.rows(probe, by)
            if rows is not None:
                return [rows] if self.kernel.rows(rows) else []
        picked = self.source.history_with_keys(probe, by)
        if picked is not None and self._step > 0 and self.source.current is not None:
            rows = self._current_rows(self.source.current.frame, probe, by)
            picked = None if rows is None else [*picked, rows]
        if picked is None:
            return None
        name = time_columns(self.depth)[-1]
        return [self.kernel.append_time(f, name, 0) for f in picked]

    def _whole_index(self) -> Any:
        """The index of the outer trace's batches and the outer round's batch, lifted to
        round 0, as one table, when they are few rows in the driver (`WHOLE_ROWS`), else
        None. Made once per outer round: each inner step then probes one index, where it
        probed every batch of the trace and the round's batch and lifted what it found
        (the closure benchmark's join of each step with the entered edges)."""
        if self._whole is None:
            self._whole = False
            frames = self.source.history()
            if self.source.current is not None:
                frames = [*frames, self.source.current.frame]
            kernel = self.kernel
            if frames and kernel.takes(Capability.KEY_INDEX, frames):
                rows = sum(kernel.rows(f) or 0 for f in frames)  # a local frame's are known
                if rows <= WHOLE_ROWS:
                    table = kernel.union(frames) if len(frames) > 1 else frames[0]
                    stored = kernel.materialize(table, self.keys, rows)
                    lifted = kernel.append_time(stored.frame, time_columns(self.depth)[-1], 0)
                    self._whole = kernel.key_index(lifted, self.keys) or False
        return self._whole or None

    def _current_rows(self, frame: Frame, probe: Frame, by: Sequence[str]) -> Frame | None:
        """The rows of the outer round's batch `frame` with the keys of `probe`, through
        an index built at the first inner step that asks (the outer trace indexes the
        batch only once it holds it, after the round)."""
        if self._current_index is None or self._current_index[0] is not frame:
            self._current_index = (frame, self.kernel.key_index(frame, self.keys))
        index = self._current_index[1]
        rows = index.rows(probe, by) if index is not None else None
        return rows if rows is not None else self.kernel.rows_with_keys(frame, self.keys, probe, by)

    def step(self, rnd: Round) -> Batch | None:
        self._step = rnd.number
        self.current = None
        if rnd.number == 0:
            # The outer trace changes only between parent rounds: forget stale frames.
            live = {id(f) for f in self.source.history()}
            self._lifted = {k: v for k, v in self._lifted.items() if k in live}
            self._current_index = None
            self._whole = None
            outer = self.source.current
            if outer is not None:
                table = None if outer.table is None else _round_zero_table(outer.table, self.depth)
                self.current = Batch(self._lift(outer.frame), outer.rows, table)
        return self.current

    def finish(self, rnd: Round) -> None:
        self.current = None

    def describe(self) -> str:
        return f"EnterArranged(keys={', '.join(self.keys) or '()'})"


#: An entered arrangement of at most this many rows is read at inner steps through one
#: index of all its rows (`EnterArrangedNode._whole_index`): made once per outer round,
#: at the cost of a few of its probes.
WHOLE_ROWS = 1 << 16


def _round_zero_table(table: pa.Table, depth: int) -> pa.Table:
    column = pa.repeat(pa.scalar(0, pa.int64()), table.num_rows)
    return table.add_column(table.schema.get_field_index(DIFF), time_columns(depth)[-1], column)


class VariableNode(Node):
    """The variable's updates: its initial collection's, then last step's feedback."""

    def __init__(self, loop: Scope, schema: pa.Schema, initial: Node | None) -> None:
        self.loop = loop
        self.initial = initial
        self.incoming: Batch | None = None
        inputs = (initial,) if initial is not None else ()
        super().__init__(loop.worker, inputs, schema, loop.depth, scope=loop)

    def step(self, rnd: Round) -> Batch | None:
        parts = []
        if self.initial is not None and (d := rnd.delta(self.initial)) is not None:
            parts.append(d)
        if self.incoming is not None:
            parts.append(self.incoming)
            self.incoming = None
        if len(parts) <= 1:
            return parts[0] if parts else None
        return Batch(self.kernel.union([p.frame for p in parts]))

    def describe(self) -> str:
        return f"Variable({self.loop.name!r})"


class FeedbackNode(Node):
    """`result - initial`, one round later, within the limit: the variable's next input."""

    def __init__(self, result: Node, variable: VariableNode) -> None:
        self.variable = variable
        inputs = (result,) if variable.initial is None else (result, variable.initial)
        super().__init__(result.worker, inputs, variable.schema, variable.depth)

    def step(self, rnd: Round) -> Batch | None:
        loop = self.variable.loop
        times = time_columns(self.depth)
        batches = [(i, rnd.delta(n)) for i, n in enumerate(self.inputs)]
        deltas = [(i, b.frame) for i, b in batches if b is not None]
        if not deltas:
            return None
        result = batches[0][1]
        stored = self._in_driver(deltas, result is not None and result.consolidated)
        if stored is None:
            present = tuple(i for i, _ in deltas)
            query = self.kernel.cached(
                ("feedback", self.columns, self.depth, loop.on_limit, loop.limit, present),
                lambda: self.kernel.prepare(self._query(present)),
            )
            names = {f"f{i}": frame for i, frame in deltas}
            stored = self.kernel.materialize(self.kernel.query(query, names))
        if stored.rows == 0:
            self.kernel.release(stored.frame)
            return None
        if loop.on_limit == "error":
            last = self._max_round(stored.frame, stored.table, times[-1])
            if last > loop.limit:
                raise loop.limit_error(last)
        self.variable.incoming = Batch(stored.frame, stored.rows, stored.table, consolidated=True)
        return None

    def _query(self, present: tuple[int, ...]) -> exp.Query:
        """The feedback of the inputs numbered `present` (bound as `f0`, `f1`): the
        result's updates one round later, less the initial collection's."""
        loop, times = self.variable.loop, time_columns(self.depth)
        parts: list[exp.Query] = []
        for i in present:
            moved = exp.Add(this=rel.col(times[-1]), expression=rel.lit(1))
            diff = rel.col(DIFF) if i == 0 else exp.Neg(this=rel.col(DIFF))
            columns = [*rel.passthrough((*self.columns, *times[:-1])), (times[-1], moved)]
            parts.append(rel.select(f"f{i}", [*columns, (DIFF, diff)]))
        union = parts[0]
        for p in parts[1:]:
            union = exp.union(union, p, distinct=False)
        if loop.on_limit == "return":
            bound = exp.LTE(this=rel.col(times[-1]), expression=rel.lit(loop.limit))
            union = rel.select(union, [exp.Star()], where=bound)
        return rel.consolidate(union, self.columns, self.depth)

    def _in_driver(self, deltas: list[tuple[int, Frame]], consolidated: bool) -> Stored | None:
        """`_query`'s result computed without a query (`Kernel.shift_time`, then
        `Kernel.consolidate_small`) when the kernel can, else None. The result's batch
        alone, when `consolidated` (an arrangement's), stays so shifted."""
        kernel, loop, last = self.kernel, self.variable.loop, time_columns(self.depth)[-1]
        bound = loop.limit if loop.on_limit == "return" else None
        moved = []
        for _, frame in deltas:
            shifted = kernel.shift_time(frame, last, 1, bound)
            if shifted is None:
                return None
            moved.append(shifted)
        if len(deltas) == 1 and deltas[0][0] == 0 and consolidated:
            return kernel.materialize(moved[0])
        signs = [1 if i == 0 else -1 for i, _ in deltas]
        frame = kernel.consolidate_small(moved, self.columns, self.depth, None, signs)
        return None if frame is None else kernel.materialize(frame)

    def _max_round(self, frame: Frame, table: pa.Table | None, name: str) -> int:
        if table is None:
            query = rel.select("f", [exp.alias_(exp.Max(this=rel.col(name)), "m")])
            table = self.kernel.to_arrow(self.kernel.query(query, {"f": frame}))
            return int(table["m"][0].as_py() or 0)
        return int(pc.max(table[name]).as_py() or 0)

    def describe(self) -> str:
        return f"Feedback({self.variable.loop.name!r})"


class LeaveNode(Node):
    """An inner collection's updates of every round, the round dropped (see module docstring)."""

    lazy = True

    def __init__(self, inner: Node) -> None:
        loop = inner.scope
        assert loop is not None
        loop.export(inner)
        self.loop = loop
        self.inner = inner
        super().__init__(inner.worker, (inner,), inner.schema, loop.depth - 1, scope=loop.parent)

    def step(self, rnd: Round) -> Batch | None:
        frames = self.loop.collected.get(self.inner.id, [])
        if not frames:
            return None
        # The consolidation reads the outer time columns by name: the round drops out.
        small = self.kernel.consolidate_small(frames, self.columns, self.depth)
        if small is not None:
            return Batch(small, self.kernel.rows(small))
        names = {f"l{i}": f for i, f in enumerate(frames)}
        columns = (*self.columns, *time_columns(self.depth), DIFF)
        union = rel.union_all(list(names), columns)
        query = rel.consolidate(union, self.columns, self.depth)
        return Batch(self.kernel.query(query, names))

    def describe(self) -> str:
        return f"Leave({self.loop.name!r})"


class Variable(Collection):
    """A loop variable: a collection used before it is defined (`set` defines it).

    Invariant: set exactly once, to a collection of the same loop with the same
    columns, before the loop closes.
    """

    node: VariableNode
    _result: Collection | None = None

    @property
    def is_set(self) -> bool:
        """Whether `set` was called."""
        return self._result is not None

    def set(self, result: Collection) -> Collection:
        """Define the variable: at round `i + 1` it is `result` at round `i`."""
        if self._result is not None:
            raise SchemaError(f"a variable of loop {self.node.loop.name!r} was set twice")
        if result.node.scope is not self.node.loop:
            raise SchemaError(
                "a variable must be set to a collection of its own loop",
                hint="build the result from the variable and entered collections",
            )
        if result.columns != self.columns:
            raise SchemaError(
                f"variable has columns ({', '.join(self.columns)}) but is set to "
                f"({', '.join(result.columns)})",
                hint="map the result to the variable's columns",
            )
        self._result = result
        FeedbackNode(result.node, self.node)
        return result

    def has_feedback(self) -> bool:
        """Whether the last inner step left changes for the next one."""
        return self.node.incoming is not None


def new_variable(loop: Scope, initial: Collection | pa.Schema | dict[str, Any]) -> Variable:
    """A `Variable` of `loop`, starting as the outer collection `initial` or empty."""
    loop.check_open()
    if isinstance(initial, Collection):
        entered = EnterNode(initial.node, loop)
        node = VariableNode(loop, initial.schema, entered)
    else:
        node = VariableNode(loop, _as_schema(initial), None)
    variable = Variable(node)
    loop.variables.append(variable)
    return variable


def iterate(
    initial: Collection,
    body: Callable[[Scope, Collection], Collection],
    limit: int | None,
    on_limit: str,
    name: str,
) -> Collection:
    """The fixpoint of `body` starting from `initial`, as a collection of `initial`'s scope."""
    loop = Scope(initial.worker, initial.node.scope, initial.depth, name, limit, on_limit)
    with loop:
        variable = loop.variable(initial)
        result = body(loop, variable)
        if not isinstance(result, Collection):
            raise SchemaError(f"the body of loop {name!r} must return a collection")
        variable.set(result)
    return variable.leave()
