"""Reduce: per-key logic over accumulated groups, exact for partially ordered times.

For every key and time `t`, the output accumulated at `t` must equal
`logic(key, input accumulated at t)` (nothing at all when the group is empty:
the logic is never called on an empty group).

When new input updates arrive for a key, the output may have to change at their
times and at every time that is a lattice join of theirs with times already in
the key's history (the "interesting times" of seed 000). For product times
(a product of chains) every such join lies on the *grid* of the key's
per-coordinate time values, and accumulations are constant between grid points,
so the operator works on the grid:

1. candidates: grid points `>=` some new time (or some time left pending);
2. ready candidates are those the frontier has passed; the rest stay pending;
3. at each ready candidate: `E = logic(accumulated input) - accumulated output`;
4. the corrections are the Möbius inversion of `E` over the grid: for one
   coordinate, `E(t) - E(previous candidate)`; for `d` coordinates, the
   inclusion-exclusion over the `2^d` predecessor combinations.

Every step is a relational query (joins on key, group-bys), written once.
The logic is a `ReduceLogic`: SQL aggregates, distinct/threshold/count, or a
Python function over Arrow groups (the documented slow path).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp, parse_one

from dsql.runtime import relational as rel
from dsql.runtime.arrangement import Arranged, TracedNode
from dsql.runtime.dataflow import Batch, Round
from dsql.runtime.kernel.base import Frame, Pipeline, Stage, Stored, per_kernel
from dsql.runtime.kernel.driver_reduce import ReduceRows, ReduceShape
from dsql.runtime.lattice import DIFF, Antichain, time_columns
from dsql.runtime.operators.reduce_chain import chained_distinct
from dsql.runtime.operators.reduce_logic import ReduceLogic
from dsql.runtime.operators.reduce_settled import (
    SettledQueries,
    settled_by_sums,
    settled_inputs,
)
from dsql.runtime.operators.reduce_settled import name_list as _list
from dsql.runtime.operators.reduce_settled import quote as _q
from dsql.runtime.trace import Trace


def _keys_match(a: str, b: str, keys: Sequence[str]) -> str:
    return " AND ".join(f"{a}.{_q(k)} <=> {b}.{_q(k)}" for k in keys) or "TRUE"


def _accumulate_at(
    candidates: str,
    source: str,
    keys: Sequence[str],
    cols: Sequence[str],
    depth: int,
    negate: bool = False,
) -> str:
    """Per candidate (keys, time), the rows of `source` accumulated at that time."""
    times = time_columns(depth)
    kt = [*keys, *times]
    values = _list(cols, "s.") + ", " if cols else ""
    total = f"{'-' if negate else ''}CAST(SUM(s.{_q(DIFF)}) AS BIGINT)"
    at_most = rel.times_at_most("s", "c", depth).sql("spark")
    group = _list(kt, "c.") + (", " + _list(cols, "s.") if cols else "")
    return (
        f"SELECT {_list(kt, 'c.')}, {values}{total} AS {_q(DIFF)} "
        f"FROM ({candidates}) c JOIN {source} s ON {_keys_match('c', 's', keys)} AND {at_most} "
        f"GROUP BY {group} HAVING SUM(s.{_q(DIFF)}) <> 0"
    )


#: The flag column separating output rows (0) from pending candidates (1) in a step's result.
_PENDING = "__pending__"


def _beyond(table: str, depth: int) -> str:
    """`table`'s time is beyond the frontier relation `fr` (some element is `<=` it)."""
    ge = " AND ".join(f"{table}.{_q(t)} >= fr.{_q(t)}" for t in time_columns(depth))
    return f"EXISTS (SELECT 1 FROM fr WHERE {ge})"


def _queries(
    keys: Sequence[str],
    vals: Sequence[str],
    out_cols: Sequence[str],
    d: int,
    all_columns: Sequence[str],
) -> tuple[tuple[Stage, ...], Stage, tuple[Stage, ...], exp.Query]:
    """A reduce step as stages over the tables `inp` (input trace), `outp` (output
    trace), `delta` (new input), `pending` (candidates held back) and `fr` (frontier):
    the stages up to the grid candidates, the accumulation `acc` the logic reads, the
    stages from the logic's `desired` to the corrections, and the final query (the
    corrections, then the candidates still pending, told apart by `_PENDING`)."""
    times = time_columns(d)
    kt = [*keys, *times]

    def stage(name: str, sql: str, store: bool = True) -> Stage:
        query = parse_one(sql, read="spark")
        assert isinstance(query, exp.Query)
        return Stage(name, query, store)

    new_times = (
        f"SELECT DISTINCT {_list(kt)} FROM delta UNION SELECT DISTINCT {_list(kt)} FROM pending"
    )
    base = [stage("nt", new_times, store=False)]
    # H: the input history of the affected keys.
    affected = f"SELECT DISTINCT {_list(keys)} FROM nt"
    base.append(
        stage("hist", f"SELECT h.* FROM inp h JOIN ({affected}) k ON {_keys_match('h', 'k', keys)}")
    )
    # Grid values per coordinate, at or beyond the least new value of that coordinate.
    lows = ", ".join(f"MIN({_q(t)}) AS {_q('lo_' + t)}" for t in times)
    # Stored only where it is read more than once (by each coordinate's grid values).
    lo = f"SELECT {_list(keys)}, {lows} FROM nt GROUP BY {_list(keys)}"
    base.append(stage("lo", lo, store=d > 1))
    grid_sources = f"SELECT {_list(kt)} FROM hist UNION ALL SELECT {_list(kt)} FROM nt"
    for c, t in enumerate(times):
        base.append(
            stage(
                f"gv{c}",
                f"SELECT DISTINCT {_list(keys, 'g.')}{', ' if keys else ''}g.{_q(t)} "
                f"FROM ({grid_sources}) g JOIN lo ON {_keys_match('g', 'lo', keys)} "
                f"WHERE g.{_q(t)} >= lo.{_q('lo_' + t)}",
            )
        )
    # Candidates: grid points >= some new time.
    grid = f"SELECT {_list(keys, 'v0.')}{', ' if keys else ''}v0.{_q(times[0])}"
    grid_from = "gv0 v0"
    for c, t in enumerate(times[1:], start=1):
        grid += f", v{c}.{_q(t)}"
        grid_from += f" JOIN gv{c} v{c} ON {_keys_match('v0', f'v{c}', keys)}"
    candidates = f"{grid} FROM {grid_from}"
    if d > 1:
        above = " AND ".join(f"c.{_q(t)} >= n.{_q(t)}" for t in times)
        candidates = (
            f"SELECT DISTINCT c.* FROM ({candidates}) c JOIN nt n "
            f"ON {_keys_match('c', 'n', keys)} AND {above}"
        )
    base.append(stage("cand", candidates))
    base.append(stage("ready", f"SELECT * FROM cand c WHERE NOT {_beyond('c', d)}", store=False))

    # E = logic(accumulated input) - accumulated output, at every ready candidate.
    # Read once (by the logic's `desired`, itself read once by `err`): not stored.
    acc = stage("acc", _accumulate_at("SELECT * FROM ready", "hist", keys, vals, d), store=False)
    current = _accumulate_at("SELECT * FROM ready", "outp", keys, out_cols, d, negate=True)
    allc = [*keys, *out_cols, *times]
    errors = (
        f"SELECT {_list(allc)}, CAST(SUM({_q(DIFF)}) AS BIGINT) AS {_q(DIFF)} FROM ("
        f"SELECT {_list(allc)}, {_q(DIFF)} FROM desired UNION ALL "
        f"SELECT {_list(allc)}, {_q(DIFF)} FROM ({current}) cur"
        f") u GROUP BY {_list(allc)} HAVING SUM({_q(DIFF)}) <> 0"
    )
    tail = [stage("err", errors)]

    # Predecessors of each coordinate on the grid.
    with_preds = "SELECT r.*" + "".join(f", p{c}.{_q('p_' + t)}" for c, t in enumerate(times))
    with_preds += " FROM ready r"
    for c, t in enumerate(times):
        part = ", ".join(_q(k) for k in keys)
        order = f"PARTITION BY {part} ORDER BY {_q(t)}" if keys else f"ORDER BY {_q(t)}"
        pred = (
            f"SELECT {_list(keys)}{', ' if keys else ''}{_q(t)}, "
            f"LAG({_q(t)}) OVER ({order}) AS {_q('p_' + t)} FROM gv{c}"
        )
        with_preds += (
            f" JOIN ({pred}) p{c} ON {_keys_match('r', f'p{c}', keys)} AND r.{_q(t)} = p{c}.{_q(t)}"
        )
    tail.append(stage("preds", with_preds))

    # Corrections: Möbius inversion of E over the grid (the 2^d terms share `preds`).
    terms = []
    for size in range(d + 1):
        for subset in itertools.combinations(range(d), size):
            sign = "-" if size % 2 else ""
            match = " AND ".join(
                f"e.{_q(t)} = p.{_q('p_' + t) if c in subset else _q(t)}"
                for c, t in enumerate(times)
            )
            terms.append(
                f"SELECT {_list(keys, 'p.')}{', ' if keys else ''}"
                f"{_list(out_cols, 'e.') + ', ' if out_cols else ''}{_list(times, 'p.')}, "
                f"{sign}e.{_q(DIFF)} AS {_q(DIFF)} FROM preds p JOIN err e "
                f"ON {_keys_match('p', 'e', keys)} AND {match}"
            )
    out_all = [*keys, *out_cols, *times]
    corrections = (
        f"SELECT {_list(out_all)}, CAST(SUM({_q(DIFF)}) AS BIGINT) AS {_q(DIFF)} FROM ("
        + " UNION ALL ".join(terms)
        + f") t GROUP BY {_list(out_all)} HAVING SUM({_q(DIFF)}) <> 0"
    )
    nulls = "".join(f"NULL AS {_q(c)}, " for c in out_cols)
    final = parse_one(
        f"SELECT {_list(all_columns)}, 0 AS {_q(_PENDING)} FROM ({corrections}) c "
        f"UNION ALL SELECT {_list(keys, 'c.')}, {nulls}{_list(times, 'c.')}, "
        f"CAST(0 AS BIGINT) AS {_q(DIFF)}, 1 AS {_q(_PENDING)} FROM cand c WHERE {_beyond('c', d)}",
        read="spark",
    )
    assert isinstance(final, exp.Query)
    return tuple(base), acc, tuple(tail), final


class ReduceNode(TracedNode):
    """Applies a `ReduceLogic` per key (see module docstring); its output is arranged by key."""

    #: Steps when its input changes or while it holds pending times (see `Worker._run_top`).
    always_run = False

    def __init__(self, source: Arranged, logic: ReduceLogic) -> None:
        self.keys = source.keys
        self.logic = logic
        self.source_values = source.values
        schema = logic.output_schema(source)
        super().__init__(source.worker, (source,), schema, source.depth)
        self._trace = Trace(self.kernel, self.columns, self.keys, self.depth)
        self._pending: Frame | None = None
        self._pending_lower = Antichain()
        self._prepared: tuple[Any, Any] | None = None
        self._sql_logic: bool | None = None
        self._shape: ReduceShape | None = None
        self._settled: SettledQueries | None = None
        self._empty_pending: Frame | None = None
        self._frontier: tuple[Antichain, Frame] | None = None

    def describe(self) -> str:
        return f"Reduce(keys={', '.join(self.keys) or '()'}, {self.logic.describe()})"

    # --- the round -----------------------------------------------------------------
    def step(self, rnd: Round) -> Batch | None:
        self.current = None
        source = self.inputs[0]
        assert isinstance(source, Arranged)
        woken = any(rnd.frontier.complete(t) for t in self._pending_lower)
        if source.current is None and not woken:
            return None
        kernel, d = self.kernel, self.depth
        summed = settled_by_sums(self, source, rnd)
        if summed is not None:
            return self._finish_step(kernel.materialize(summed, self.keys), None, [])
        chained = chained_distinct(self, source, rnd, self._reduce_shape(source), self._pending)
        if chained is not None:
            output, waiting = (kernel.materialize(t, self.keys) for t in chained)
            return self._finish_step(output, waiting, [])
        history, outputs, cut = self._affected_rows(source)
        input_frames = history + ([source.current.frame] if source.current else [])
        if not input_frames:
            if not outputs and self._pending is None:
                return None
            # Every input update cancelled out (a trace drops its empty batches), yet
            # pending times may still owe corrections to the output: step over no input.
            input_frames = [self.worker.empty_frame(source.schema, d)]
        if self._sql_logic is None:
            query = self.logic.query(self.keys, self.source_values, d, kernel.dialect)
            self._sql_logic = query is not None
        sql_logic = self._sql_logic
        settled = settled_inputs(self, source, rnd, history, outputs, cut) if sql_logic else None
        if settled is not None:
            # One time, nothing later: the output is the logic over the keys' histories.
            done = settled.in_arrow(self)
            if done is None:
                if self._settled is None:  # rendered when first needed
                    self._settled = SettledQueries.build(self)
                done = self._settled.run(self, source, settled)
            output = kernel.materialize(done, self.keys)
            return self._finish_step(output, None, [])
        small = self._in_driver(input_frames, source, outputs, rnd.frontier)
        if small is not None:
            return self._finish_step(*small, [])
        frames: dict[str, Frame] = {
            "inp": kernel.union(input_frames) if len(input_frames) > 1 else input_frames[0],
            "outp": (
                kernel.union(outputs)
                if len(outputs) > 1
                else outputs[0]
                if outputs
                else self.worker.empty_frame(self.schema, d)
            ),
            "delta": (
                source.current.frame
                if source.current is not None
                else self.worker.empty_frame(source.schema, d)
            ),
            "pending": self._pending if self._pending is not None else self._no_pending(),
            "fr": self._frontier_frame(rnd.frontier),
        }
        if self._prepared is None:  # rendered when first needed: the paths above need none
            self._prepared = self._prepare()
        first, second = self._prepared
        if sql_logic:
            result, stored = kernel.run_pipeline(first, frames, self.keys)
        else:
            acc, stored = kernel.run_pipeline(first, frames, self.keys)
            acc = kernel.materialize(acc, self.keys).frame
            frames["desired"] = self.logic.desired(
                kernel, acc, self.keys, self.source_values, d, self.schema
            )
            stored.append(acc)
            result, more = kernel.run_pipeline(second, frames, self.keys)
            stored += more
        output, pending = self._split(kernel.materialize(result, self.keys))
        return self._finish_step(output, pending, stored)

    def _affected_rows(self, source: Arranged) -> tuple[list[Frame], list[Frame], bool]:
        """The input history and the output trace, as frames; only the rows of the keys
        this step can change (those of the new input and of the pending candidates: every
        query of the step joins on them) when the kernel picks them without a query (then
        the flag is True)."""
        history, outputs = source.history(), self._trace.frames()
        parts = [source.current.frame] if source.current is not None else []
        parts += [self._pending] if self._pending is not None else []
        if not self.keys or not parts:
            return history, outputs, False
        probe = parts[0] if len(parts) == 1 else self.kernel.key_union(parts, self.keys)
        if probe is None:
            return history, outputs, False
        old = source.history_with_keys(probe, self.keys)
        out = self._trace.rows_with_keys(probe, self.keys)
        if old is None or out is None:
            return history, outputs, False
        return old, out, True

    def _in_driver(
        self, inputs: list[Frame], source: Arranged, outputs: list[Frame], frontier: Antichain
    ) -> tuple[Stored, Stored] | None:
        """The general step's output and pending candidates computed by the kernel without
        its pipeline (`Kernel.reduce_small`: few rows), or None."""
        kernel, keys, d = self.kernel, self.keys, self.depth

        def logic(acc: Frame) -> Frame:
            return self.logic.desired(kernel, acc, keys, self.source_values, d, self.schema)

        delta = source.current.frame if source.current is not None else None
        uppers = (source.history_upper(), self.history_upper())
        shape = self._reduce_shape(source)
        rows = ReduceRows(inputs, delta, self._pending, outputs, frontier, shape, uppers)
        small = kernel.reduce_small(rows, logic)
        if small is None:
            return None
        return kernel.materialize(small[0], keys), kernel.materialize(small[1], keys)

    def _reduce_shape(self, source: Arranged) -> ReduceShape:
        """What the step is besides its rows (`driver_reduce.ReduceShape`), made once."""
        if self._shape is None:
            self._shape = ReduceShape(
                self.keys,
                self.source_values,
                self.values,
                self.depth,
                source.schema,
                self.schema,
                self.logic.present_once,
            )
        return self._shape

    def _finish_step(
        self, output: Stored, pending: Stored | None, stored: list[Frame]
    ) -> Batch | None:
        """The step's output batch; `pending`: the candidates held back (None: none)."""
        kernel = self.kernel
        for frame in stored:
            kernel.release(frame)
        old_pending = self._pending
        if pending is None:
            self._pending, self._pending_lower = None, Antichain()
        else:
            self._set_pending(pending)
        if old_pending is not None:
            kernel.release(old_pending)
        if output.rows == 0:
            kernel.release(output.frame)
            return None
        self.current = Batch(output.frame, output.rows, output.table, consolidated=True)
        return self.current

    def _prepare(self) -> tuple[Any, Any]:
        """The step's pipelines, rendered once per shape: with SQL logic one pipeline to
        the corrections (and None); otherwise one to the accumulations and one from the
        logic's `desired` to the corrections."""
        keys, vals, d, kernel = self.keys, self.source_values, self.depth, self.kernel
        desired = self.logic.query(keys, vals, d, kernel.dialect)

        def build() -> tuple[Any, Any]:
            base, acc, tail, final = _queries(keys, vals, self.values, d, self.all_columns())
            prepare = kernel.prepare_pipeline
            if desired is not None:
                stages = (*base, acc, Stage("desired", desired, store=False), *tail)
                return prepare(Pipeline(stages, final)), None
            return prepare(Pipeline(base, acc.query)), prepare(Pipeline((*base, *tail), final))

        if desired is None:
            return build()
        shape = (
            keys,
            vals,
            self.values,
            d,
            per_kernel(desired, kernel.dialect).sql(dialect=kernel.dialect),
        )
        return kernel.cached(("reduce-pipeline", *shape), build)

    def _split(self, stored: Stored) -> tuple[Stored, Stored]:
        """The step's result split into the output batch and the pending candidates."""
        kernel, kt = self.kernel, [*self.keys, *time_columns(self.depth)]
        table = stored.table
        if table is not None:
            flag = table[_PENDING]
            out = table.filter(pc.equal(flag, 0)).select(list(self.all_columns()))
            pend = table.filter(pc.equal(flag, 1)).select(kt)
            kernel.release(stored.frame)
            return (
                Stored(kernel.from_arrow(out), out.num_rows, out),
                Stored(kernel.from_arrow(pend), pend.num_rows, pend),
            )
        parts = []
        for flag, cols in ((0, self.all_columns()), (1, kt)):
            query = parse_one(
                f"SELECT {_list(cols)} FROM r WHERE {_q(_PENDING)} = {flag}", read="spark"
            )
            assert isinstance(query, exp.Query)
            frame = kernel.query(query, {"r": stored.frame})
            parts.append(kernel.materialize(frame, self.keys))
        kernel.release(stored.frame)
        return parts[0], parts[1]

    def _no_pending(self) -> Frame:
        if self._empty_pending is None:
            fields = [self.inputs[0].schema.field(k) for k in self.keys]
            fields += [pa.field(t, pa.int64()) for t in time_columns(self.depth)]
            self._empty_pending = self.kernel.from_arrow(pa.schema(fields).empty_table())
        return self._empty_pending

    def _frontier_frame(self, frontier: Antichain) -> Frame:
        """The frontier as a relation: one row per element, one column per coordinate."""
        if self._frontier is None or self._frontier[0] != frontier:
            times = time_columns(self.depth)
            columns = {
                t: pa.array([f[i] for f in frontier], pa.int64()) for i, t in enumerate(times)
            }
            self._frontier = (frontier, self.kernel.from_arrow(pa.table(columns)))
        return self._frontier[1]

    def pending(self) -> tuple[tuple[int, ...], ...]:
        return self._pending_lower.elements

    def _set_pending(self, pending: Stored) -> None:
        times = time_columns(self.depth)
        if pending.rows == 0:
            self.kernel.release(pending.frame)
            self._pending, self._pending_lower = None, Antichain()
            return
        lower = pending.table
        if lower is None:
            query = parse_one(f"SELECT DISTINCT {_list(times)} FROM pending", read="spark")
            assert isinstance(query, exp.Query)
            lower = self.kernel.to_arrow(self.kernel.query(query, {"pending": pending.frame}))
        columns = [lower[t].to_numpy() for t in times]
        self._pending = pending.frame
        self._pending_lower = Antichain.of_columns(columns)

    def release(self) -> None:
        super().release()
        if self._pending is not None:
            self.kernel.release(self._pending)
