"""Collections: multisets of rows changing over time, and the operators that build dataflows.

A `Collection` wraps one operator (node) of a worker's graph; its methods add
operators and return new collections. Expressions are SQL strings (in the
worker's dialect, PostgreSQL by default) or sqlglot expressions, never per-row
Python: they run inside the kernel's engine. Linear operators (`map`, `filter`,
`project`, `negate`, `flat_map`, `explode`, `join_function`) applied one after
another fuse into a single `Linear` operator evaluated as one projection.

>>> from dsql.runtime.kernel.local import LocalKernel
>>> from dsql.runtime.dataflow import Worker
>>> worker = Worker(LocalKernel())
>>> manages = worker.new_input({"m2": "int", "m1": "int"})
>>> skip = (manages.to_collection().map("m1 AS k", "m2 AS boss")
...         .join(manages.to_collection().map("m2 AS k", "m1 AS person"), on=["k"]))
>>> out = skip.capture()
>>> for person in range(4): manages.insert((person // 2, person))
>>> manages.advance_to(1); manages.flush(); worker.step()
True
>>> sorted(out.poll().to_pylist(), key=lambda r: r["person"])[0]
{'k': 0, 'boss': 0, 'person': 0, '__time__': 0, '__diff__': 1}
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal

import pyarrow as pa
import sqlglot
from sqlglot import exp

from dsql.errors import ParseError, SchemaError
from dsql.runtime import relational as rel
from dsql.runtime import siblings
from dsql.runtime.arrangement import Arranged, ArrangeNode, prepare_consolidate
from dsql.runtime.capture import CaptureNode, Probe
from dsql.runtime.dataflow import Batch, Node, Round, Worker, batch_schema, schema_key
from dsql.runtime.kernel.base import Frame, Prepared
from dsql.runtime.kernel.driver import Selection
from dsql.runtime.lattice import DIFF, time_columns
from dsql.runtime.linear import Branch, Branches, Linear, Unnest, static_schema
from dsql.runtime.operators.join import JoinNode, check_key_types
from dsql.runtime.operators.reduce import ReduceNode
from dsql.runtime.operators.reduce_logic import (
    Count,
    Distinct,
    PythonLogic,
    ReduceLogic,
    Threshold,
    parse_aggregates,
)

Expr = str | exp.Expr
#: An output column: `"expr AS name"` text or tree, a bare column, or `(name, expression)`
#: (taken as it is: the caller hands the expression over and never changes it).
Named = Expr | tuple[str, exp.Expression]


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str, dialect: str) -> exp.Expr:
    """Expression strings repeat (column names, `"0 AS _c0"`): parse each once."""
    return sqlglot.parse_one(text, read=dialect)


def parse_expression(text: Expr, dialect: str) -> exp.Expr:
    """A sqlglot expression from SQL text; a ParseError with the position otherwise."""
    if isinstance(text, exp.Expr):
        return text
    try:
        return _parse_cached(text, dialect).copy()
    except sqlglot.errors.ParseError as error:
        info = error.errors[0] if error.errors else {}
        line, column = info.get("line", 1), info.get("col", 1)
        raise ParseError(
            f"cannot parse expression: {info.get('description', str(error))}",
            statement=text,
            position=(line, column),
        ) from error


def parse_named(text: Named, dialect: str) -> tuple[str, exp.Expression]:
    """`(name, expression)` from `"expr AS name"`, a bare column reference, or itself."""
    if isinstance(text, tuple):
        return text
    e = parse_expression(text, dialect)
    if isinstance(e, exp.Alias):
        return e.alias, e.this
    if isinstance(e, exp.Column):
        return e.name, e
    raise SchemaError(
        f"the output expression {e.sql()!r} needs a name",
        hint="write it as '<expression> AS <name>'",
    )


class LinearNode(Node):
    """A fused chain of linear steps over one input.

    The chain's query is rendered once, when the node first runs (a chain being
    extended by fusion never runs). The schema follows from the last step and the
    schema before it (`prior`: the node this one extends), statically where the
    step only renames and filters, else by evaluating that step over no rows.
    """

    lazy = True
    always_run = False
    applied_by_producer = True

    def __init__(self, source: Node, linear: Linear, prior: Node | None = None) -> None:
        self.linear = linear
        self._query: Prepared | None = None
        self._composed: dict[object, Prepared] = {}
        self._selection: Selection | None | Literal[False] = False  # False: not known yet
        self._branch: Branch | None | Literal[False] = False
        before = prior if prior is not None else source
        last = linear.steps[-1]
        schema = static_schema(last, before.schema)
        if schema is None:
            kernel, worker = source.kernel, source.worker

            def evaluate() -> pa.Schema:
                one = Linear((last,)).compile(kernel, "src", before.columns, source.depth)
                return worker.output_schema(one, {"src": (before.schema, before.depth)})

            shape = (rel.fingerprint(last), schema_key(before.schema), source.depth)
            schema = kernel.cached(("linear-schema", *shape), evaluate)
        super().__init__(source.worker, (source,), schema, source.depth)

    @property
    def query(self) -> Prepared:
        """The whole chain as one prepared query over the batch relation `src`."""
        if self._query is None:
            source, kernel = self.inputs[0], self.kernel

            def prepare() -> Prepared:
                query = self.linear.compile(kernel, "src", source.columns, self.depth)
                return kernel.prepare(query)

            shape = (rel.fingerprint(self.linear), source.columns, self.depth)
            self._query = kernel.cached(("linear", *shape), prepare)
        return self._query

    def step(self, rnd: Round) -> Batch | None:
        delta = rnd.delta(self.inputs[0])
        if delta is None:
            return None
        if delta.applied is self:  # the producer ran this chain in its own query
            return Batch(delta.frame, delta.rows, delta.table)
        renamed = self.renamed(delta.frame)
        if renamed is not None:
            # Keeping every column keeps distinct rows distinct.
            kept = delta.consolidated and self._keeps_every_column()
            return Batch(renamed, self.kernel.rows(renamed), consolidated=kept)
        shared = siblings.batched(self, rnd, delta.frame)
        if shared is not None:  # computed with the other readers of the batch, one query
            return Batch(shared, self.kernel.rows(shared))
        bound = self.linear.fanout_bound()
        rows = None if bound is None or delta.rows is None else delta.rows * bound
        if self.consumers == 1 and self.readers[0].composes_linear:
            # The one reader folds this query into its own: one kernel call, not two.
            kept = delta.consolidated and self._keeps_every_column()
            return Batch(delta.frame, rows, deferred=self, consolidated=kept)
        return Batch(self.kernel.query(self.query, {"src": delta.frame}), rows)

    def select_branch(self) -> Branch | None:
        """The chain's one branch when it is a single map/filter (no time or diff factor,
        some output column), else None: such chains can share a query (`siblings`)."""
        if self._branch is False:
            steps, one = self.linear.steps, None
            if len(steps) == 1 and isinstance(steps[0], Branches) and len(steps[0].branches) == 1:
                one = steps[0].branches[0]
                if one.diff is not None or any(t is not None for t in one.time) or not one.columns:
                    one = None
            self._branch = one
        return self._branch

    def renames_only(self) -> bool:
        """Whether the chain only selects, renames and drops rows with NULLs (no query)."""
        return self._selected() is not None

    def renamed(self, frame: Frame) -> Frame | None:
        """The chain over `frame` without a query, when it only selects, renames and drops
        rows with NULLs (`Linear.selection`) and the kernel can do that exactly
        (`Kernel.project_small`); else None."""
        selection = self._selected()
        return None if selection is None else self.kernel.project_small(frame, selection)

    def _keeps_every_column(self) -> bool:
        """Whether the chain's selection outputs every input column (under some name)."""
        selection = self._selected()
        kept = set() if selection is None else {source for _, source in selection.renames}
        return kept >= set(self.inputs[0].columns)

    def _selected(self) -> Selection | None:
        if self._selection is False:
            found = self.linear.selection(self.inputs[0].columns)
            extra = tuple((c, c) for c in (*time_columns(self.depth), DIFF))
            self._selection = (
                None if found is None else Selection(found.renames + extra, found.not_null)
            )
        return self._selection

    def compose(self, outer: Callable[[exp.Query], exp.Query], name: str) -> Prepared:
        """`outer` applied to this chain's query over `src` (a reader's fused query),
        prepared once per shape; `name` tells the readers' kinds apart in the cache."""
        if name in self._composed:
            return self._composed[name]
        source, kernel = self.inputs[0], self.kernel

        def prepare() -> Prepared:
            inner = self.linear.compile(kernel, "src", source.columns, self.depth)
            return kernel.prepare(outer(inner))

        shape = (rel.fingerprint(self.linear), source.columns, self.depth)
        self._composed[name] = kernel.cached((name, *shape), prepare)
        return self._composed[name]

    def over(self, producer: Callable[[], exp.Query], key: tuple) -> Prepared:
        """This chain applied to the rows of `producer()` (a producer's own query, `key`
        naming its shape), prepared once per shape: the producer runs both in one call."""
        if key in self._composed:
            return self._composed[key]  # type: ignore[index]
        source, kernel = self.inputs[0], self.kernel

        def prepare() -> Prepared:
            return kernel.prepare(
                self.linear.compile(kernel, producer(), source.columns, self.depth)
            )

        shape = (rel.fingerprint(self.linear), source.columns, self.depth)
        self._composed[key] = kernel.cached((*key, *shape), prepare)  # type: ignore[index]
        return self._composed[key]  # type: ignore[index]

    def describe(self) -> str:
        return f"Linear({len(self.linear.steps)} steps)"


class MapBatchesNode(Node):
    """A row-wise Python function over Arrow batches (the slow path of `map`)."""

    lazy = True
    always_run = False

    def __init__(self, source: Node, function: Callable[[pa.Table], pa.Table], schema: pa.Schema):
        self.function = function
        super().__init__(source.worker, (source,), schema, source.depth)

    def step(self, rnd: Round) -> Batch | None:
        delta = rnd.delta(self.inputs[0])
        if delta is None:
            return None
        data, times = self.inputs[0].columns, (*time_columns(self.depth), DIFF)
        function, names = self.function, self.columns

        def apply(table: pa.Table) -> pa.Table:
            result = function(table.select(list(data)))
            if result.num_rows != table.num_rows:
                raise SchemaError(
                    f"map_batches function returned {result.num_rows} rows for "
                    f"{table.num_rows}: it must map rows one to one"
                )
            columns = [result[n] for n in names] + [table[t] for t in times]
            return pa.Table.from_arrays(columns, names=[*names, *times])

        full = batch_schema(self.schema, self.depth)
        return Batch(self.kernel.map_arrow(delta.frame, apply, full))


class ConcatNode(Node):
    """The multiset sum of collections with the same columns."""

    lazy = True
    always_run = False

    def __init__(self, sources: Sequence[Node]) -> None:
        first = sources[0]
        for other in sources[1:]:
            if other.columns != first.columns:
                raise SchemaError(
                    f"concat of collections with different columns: ({', '.join(first.columns)}) "
                    f"and ({', '.join(other.columns)})",
                    hint="map both sides to the same column names first",
                )
            if other.depth != first.depth:
                raise SchemaError("concat of collections from different scopes")
        super().__init__(first.worker, tuple(sources), first.schema, first.depth)

    def step(self, rnd: Round) -> Batch | None:
        deltas = [d for n in self.inputs if (d := rnd.delta(n)) is not None]
        if not deltas:
            return None
        if len(deltas) == 1:
            return deltas[0]
        sizes = [d.rows for d in deltas]
        rows = None if None in sizes else sum(r for r in sizes if r is not None)
        # Kernels union by column name, so inputs need no re-projection.
        return Batch(self.kernel.union([d.frame for d in deltas]), rows)


class ConsolidateNode(Node):
    """The same updates with equal (row, time) pairs summed and zeros dropped."""

    lazy = True
    always_run = False

    def __init__(self, source: Node) -> None:
        super().__init__(source.worker, (source,), source.schema, source.depth)
        self.query = prepare_consolidate(self.kernel, self.columns, self.depth)

    def step(self, rnd: Round) -> Batch | None:
        delta = rnd.delta(self.inputs[0])
        if delta is None:
            return None
        return Batch(self.kernel.query(self.query, {"d": delta.frame}))


class Collection:
    """A collection of rows changing over time (see module docstring)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    # --- facts ---------------------------------------------------------------------
    @property
    def worker(self) -> Worker:
        return self.node.worker

    @property
    def schema(self) -> pa.Schema:
        """The data columns' names and Arrow types."""
        return self.node.schema

    @property
    def columns(self) -> tuple[str, ...]:
        return self.node.columns

    @property
    def depth(self) -> int:
        """The number of time coordinates (1 outside any iteration)."""
        return self.node.depth

    def __repr__(self) -> str:
        return f"Collection({', '.join(self.columns)}; {self.node.describe()})"

    # --- linear operators ----------------------------------------------------------
    def _linear(self, step: Branches | Unnest) -> Collection:
        node = self.node
        if isinstance(node, LinearNode):
            fused = node.linear.then(Linear((step,)))
            return Collection(LinearNode(node.inputs[0], fused, prior=node))
        return Collection(LinearNode(node, Linear((step,))))

    def _parse(self, text: Expr) -> exp.Expr:
        return parse_expression(text, self.worker.dialect)

    def _identity(self) -> list[tuple[str, exp.Expression]]:
        return rel.passthrough(self.columns)

    def map(self, *outputs: Named) -> Collection:
        """Each row replaced by the named expressions (`"a + 1 AS b"`, a column name, or
        `(name, expression)`)."""
        if not outputs:
            raise SchemaError("map needs at least one output column")
        return self._linear(Branches.single([parse_named(o, self.worker.dialect) for o in outputs]))

    def filter(self, predicate: Expr) -> Collection:
        """The rows for which `predicate` is true (NULL counts as false)."""
        return self._linear(Branches.single(self._identity(), where=self._parse(predicate)))

    def project(self, *columns: str) -> Collection:
        """The named columns only."""
        return self.map(*columns)

    def negate(self) -> Collection:
        """Every update with its diff negated."""
        return self._linear(Branches.single(self._identity(), diff=rel.lit(-1)))

    def explode(self, diff: Expr) -> Collection:
        """Each row with its diff multiplied by `diff` (may be zero or negative)."""
        return self._linear(Branches.single(self._identity(), diff=self._parse(diff)))

    def map_batches(
        self, function: Callable[[pa.Table], pa.Table], schema: pa.Schema | dict[str, Any]
    ) -> Collection:
        """Each row mapped by a Python function over Arrow batches (the slow path).

        `function` gets a table of the data columns and returns one output row per
        input row, with the columns of `schema`. Prefer `map` with SQL expressions:
        they run inside the engine's code generator.
        """
        from dsql.runtime.dataflow import _as_schema

        return Collection(MapBatchesNode(self.node, function, _as_schema(schema)))

    def flat_map(self, array: Expr, name: str, keep: Sequence[str] | None = None) -> Collection:
        """One row per element of the array expression, as column `name` beside `keep`."""
        kept = tuple(self.columns if keep is None else keep)
        return self._linear(Unnest(name, self._parse(array), kept))

    def join_function(self, branches: Sequence[dict[str, Any]]) -> Collection:
        """The general linear operator: per row, one output per branch.

        Each branch is a dict with `columns` (list of `"expr AS name"` or `(name, expression)`), and
        optionally `where` (a condition), `time` (an expression for the time the
        output is at least at; a list gives one per time coordinate) and `diff`
        (a factor for the diff). Output time = lattice join with the input time;
        output diff = input diff times `diff`.
        """
        built = []
        for b in branches:
            columns = [parse_named(c, self.worker.dialect) for c in b.get("columns", self.columns)]
            time = b.get("time")
            times = time if isinstance(time, list | tuple) else [time]
            built.append(
                Branch(
                    tuple(columns),
                    where=self._parse(b["where"]) if b.get("where") is not None else None,
                    time=tuple(self._parse(t) if t is not None else None for t in times),
                    diff=self._parse(b["diff"]) if b.get("diff") is not None else None,
                )
            )
        names = [tuple(n for n, _ in b.columns) for b in built]
        if len(set(names)) > 1:
            raise SchemaError("every branch of join_function must name the same output columns")
        return self._linear(Branches(tuple(built)))

    # --- other stateless operators -------------------------------------------------
    def concat(self, *others: Collection) -> Collection:
        """The multiset sum of this collection and the others."""
        return Collection(ConcatNode([self.node, *(o.node for o in others)]))

    def consolidate(self) -> Collection:
        """The same collection, one update per (row, time)."""
        return Collection(ConsolidateNode(self.node))

    def inspect(self, callback: Callable[[pa.Table], None]) -> Collection:
        """Call `callback` with each round's updates (an Arrow table); returns self."""
        CaptureNode(self.node, callback)
        return self

    def probe(self) -> Probe:
        """A probe reporting which times of this collection may still change."""
        return Probe(self.node)

    def capture(self, spill: bool = False) -> CaptureNode:
        """A sink collecting the updates (see `CaptureNode.poll`); `spill`: batches the
        kernel stores off the driver stay there (`CaptureNode.spilled`)."""
        return CaptureNode(self.node, spill=spill)

    # --- iteration -----------------------------------------------------------------
    def iterate(
        self,
        body: Callable[[Any, Collection], Collection],
        limit: int | None = None,
        on_limit: str = "error",
        name: str = "iterate",
    ) -> Collection:
        """The fixpoint of `body`, starting from this collection (see `dsql.runtime.scope`).

        `body(scope, variable)` returns the variable's next value, built from the
        variable and collections entered into `scope`. The loop runs until a round
        changes nothing; `limit` bounds the rounds (`on_limit="error"` fails,
        `"return"` keeps the values at the limit); without one the worker's
        `recursion_limit` applies and reaching it is an error naming `name`.
        """
        from dsql.runtime.iterate import iterate

        return iterate(self, body, limit, on_limit, name)

    def enter(self, scope: Any) -> Collection:
        """This collection inside a loop `scope` (a child of its own scope), at round 0."""
        from dsql.runtime.iterate import EnterNode

        return Collection(EnterNode(self.node, scope))

    def leave(self) -> Collection:
        """This loop collection outside its (closed) loop: its value at the fixpoint."""
        from dsql.runtime.iterate import LeaveNode

        if self.node.scope is None:
            raise SchemaError("leave() of a collection that is not in a loop")
        return Collection(LeaveNode(self.node))

    # --- arrangements, joins, reductions -------------------------------------------
    def arrange_by_key(self, *keys: str) -> Arrangement:
        """The collection arranged (indexed, shared) by the key columns.

        A collection that is already an arrangement by exactly these keys (an arrange,
        a reduce's output) is that arrangement: no second trace.
        """
        node = self.node
        if isinstance(node, ArrangeNode | ReduceNode) and node.keys == tuple(keys):
            return Arrangement(node)
        return Arrangement(ArrangeNode(node, tuple(keys)))

    def arrange_by_self(self) -> Arrangement:
        """The collection arranged by all of its columns."""
        return self.arrange_by_key(*self.columns)

    def join(self, other: Collection, on: Sequence[str | tuple[str, str]]) -> Collection:
        """Pairs of rows with equal keys: this row's columns, then the other's non-key columns."""
        left_keys, right_keys = _split_on(on)
        # Checked before arranging, so a refused join leaves nothing in the graph.
        check_key_types(self.schema, left_keys, other.schema, right_keys)
        return self.arrange_by_key(*left_keys).join_core(other.arrange_by_key(*right_keys))

    def semijoin(self, keys: Collection, on: Sequence[str | tuple[str, str]]) -> Collection:
        """The rows whose key occurs in `keys` (diffs multiplied by the key's count)."""
        left_keys, right_keys = _split_on(on)
        right = keys.project(*right_keys) if keys.columns != tuple(right_keys) else keys
        return self.arrange_by_key(*left_keys).semijoin(right.arrange_by_self())

    def antijoin(self, keys: Collection, on: Sequence[str | tuple[str, str]]) -> Collection:
        """The rows whose key does not occur in `keys`."""
        _, right_keys = _split_on(on)
        present = keys.project(*right_keys).distinct()
        return self.concat(self.semijoin(present, on).negate())

    def reduce(
        self,
        keys: Sequence[str],
        aggregates: Sequence[str | tuple[str, str]] | None = None,
        logic: ReduceLogic | Callable[[tuple, pa.Table], pa.Table] | None = None,
        output: pa.Schema | None = None,
    ) -> Collection:
        """Per key, SQL `aggregates` (`"sum(x) AS s"`), or a `logic` over each group.

        A Python `logic(key, group) -> pa.Table` needs the `output` schema; it is
        the slow path (groups are collected to the driver).
        """
        if aggregates is not None:
            chosen: ReduceLogic = parse_aggregates(aggregates, self.worker.dialect)
        elif isinstance(logic, ReduceLogic):
            chosen = logic
        elif logic is not None:
            if output is None:
                raise SchemaError("a Python reduce logic needs its output schema")
            chosen = PythonLogic(logic, output)
        else:
            raise SchemaError("reduce needs aggregates or a logic")
        if not keys:
            keyed = self.map("0 AS __global__", *self.columns)
            reduced = keyed.arrange_by_key("__global__").reduce(chosen).as_collection()
            return reduced.project(*(c for c in reduced.columns if c != "__global__"))
        return self.arrange_by_key(*keys).reduce(chosen).as_collection()

    def count(self) -> Collection:
        """Each distinct row with its multiplicity in a column `count`."""
        return self.arrange_by_self().reduce(Count()).as_collection()

    def distinct(self) -> Collection:
        """Each present row once."""
        return self.arrange_by_self().reduce(Distinct()).as_collection()

    def threshold(self, weight: Expr) -> Collection:
        """Each row with multiplicity given by a SQL expression over `__count__`."""
        return self.arrange_by_self().reduce(Threshold(self._parse(weight))).as_collection()


class Arrangement:
    """An arranged collection: indexed by key, shared by every operator that reads it."""

    def __init__(self, node: Arranged) -> None:
        self.node = node

    @property
    def keys(self) -> tuple[str, ...]:
        return self.node.keys

    @property
    def trace(self) -> Any:
        return self.node.trace

    def as_collection(self) -> Collection:
        return Collection(self.node)

    def trace_handle(self) -> Any:
        """A handle to import this arrangement into dataflows built later."""
        return self.node.trace_handle()

    def enter(self, scope: Any) -> Arrangement:
        """This arrangement inside a loop `scope`, sharing the outer trace (no copy)."""
        from dsql.runtime.iterate import EnterArrangedNode

        return Arrangement(EnterArrangedNode(self.node, scope))

    def join_core(self, other: Arrangement) -> Collection:
        """Pairs of rows with equal keys: this side's columns, then the other's values."""
        return Collection(JoinNode(self.node, other.node))

    def semijoin(self, other: Arrangement) -> Collection:
        """This side's rows whose key is in `other` (arranged by its keys, no values)."""
        return Collection(JoinNode(self.node, other.node, kind="semi"))

    def reduce(self, logic: ReduceLogic) -> Arrangement:
        """Per key, the logic over the accumulated group; the result is arranged by key."""
        return Arrangement(ReduceNode(self.node, logic))

    def stats(self) -> dict[str, int]:
        """Rows, bytes and batch count of the trace."""
        trace = self.node.trace
        return {"rows": trace.rows, "bytes": trace.nbytes(), "batches": len(trace.batches)}


def _split_on(on: Sequence[str | tuple[str, str]]) -> tuple[list[str], list[str]]:
    left = [k if isinstance(k, str) else k[0] for k in on]
    right = [k if isinstance(k, str) else k[1] for k in on]
    return left, right


def import_arrangement(handle: Any) -> Arrangement:
    """An arrangement that replays `handle`'s trace into a dataflow built now."""
    return Arrangement(handle.import_into())


__all__ = ["Arrangement", "Collection", "import_arrangement"]
