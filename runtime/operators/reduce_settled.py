"""The settled reduce step: one new time, and nothing at or after it before.

A reduce step is *settled* when its new input is at one complete time `t`, nothing is
pending, and every update of its input and output traces is at a time `<= t` (the
usual round of a view: one write, then the clock moves on). Then, for the affected
keys, `t` is the only point of the grid of interesting times (`reduce`'s module
docstring), the input accumulated at `t` is each key's whole history, and the
correction at `t` is

    logic(input of the key) - output of the key

so the general step's grid, candidates and Möbius inversion reduce to the logic and
one subtraction. The affected keys' rows are picked in the driver
(`Kernel.rows_with_keys`, `SettledRows`), or by a join with the new keys where the
kernel cannot pick them (Spark: part of the step's one pipeline, where the general
step runs seven stored stages), then set to time `t`; the accumulation and the
subtraction run in the driver too when they are small (`Kernel.consolidate_small`),
leaving one statement, the logic itself. A logic with a one-pass form in the driver
(`ReduceLogic.settled_in_arrow`: Distinct, one grouping of the rows as the traces hold
them) needs no statement and no times set. A Distinct over whole rows whose traces'
times are all at most `t` needs not even the rows: each new row's key sums in the input
and output traces (`Trace.key_sums`, read from the batches' indexes) decide its
correction (`settled_by_sums`).

Invariant: the result equals the general step's output for the same inputs (the
oracle tests run both, since a history with several times per batch takes the
general path).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp, parse_one

from dsql.runtime.dataflow import Round
from dsql.runtime.kernel import driver
from dsql.runtime.kernel.base import Capability, Frame, Pipeline, Prepared, Stage, per_kernel
from dsql.runtime.lattice import DIFF, bounded, time_columns

if TYPE_CHECKING:
    from dsql.runtime.arrangement import Arranged
    from dsql.runtime.operators.reduce import ReduceNode


def quote(name: str) -> str:
    """`name` as a quoted identifier of the queries written here (Spark's backticks)."""
    return "`" + name.replace("`", "``") + "`"


def name_list(names: Sequence[str], prefix: str = "") -> str:
    """Quoted names separated by commas, each with `prefix` (a table alias and a dot)."""
    return ", ".join(f"{prefix}{quote(n)}" for n in names)


@dataclass(frozen=True, slots=True)
class SettledRows:
    """A settled step's rows: its time, and the affected keys' input rows (the history's
    and the new batch's) and output rows, at their own times. `whole`: the input rows
    are the new batch alone, consolidated (a view's first step over a table): they are
    their accumulation as they are."""

    stamp: tuple[int, ...]
    inp: list[Frame]
    outp: list[Frame]
    whole: bool = False

    def in_arrow(self, node: ReduceNode) -> pa.Table | None:
        """The step's output by the logic's one-pass form in the driver
        (`ReduceLogic.settled_in_arrow`), or None when it has none or a row is not there
        (then `SettledQueries.run`)."""
        if not node.kernel.takes(Capability.REDUCE_SMALL, (*self.inp, *self.outp)):
            return None
        return node.logic.settled_in_arrow(self.inp, self.outp, node.columns, self.stamp)

    def frames(self, node: ReduceNode, source: Arranged) -> dict[str, Frame]:
        """The input (`inp`) and output (`outp`) rows as one frame each, times set to
        the stamp (the step's queries read them so)."""
        kernel, frames = node.kernel, {}
        for table, parts in (("inp", self.inp), ("outp", self.outp)):
            if not parts:
                schema = source.schema if table == "inp" else node.schema
                parts = [node.worker.empty_frame(schema, node.depth)]
            frame = kernel.union(parts) if len(parts) > 1 else parts[0]
            for name, at in zip(time_columns(node.depth), self.stamp, strict=True):
                frame = kernel.set_time(frame, name, at)
            frames[table] = frame
        return frames


def settled_inputs(
    node: ReduceNode,
    source: Arranged,
    rnd: Round,
    history: list[Frame],
    outputs: list[Frame],
    cut: bool = False,
) -> SettledRows | None:
    """The affected keys' input and output rows when the step is settled (module
    docstring); None when it is not. `history` and `outputs`: the input's history and
    the output trace (or at least every row of the affected keys; `cut`: only those
    rows). Where the kernel cannot pick a frame's rows of those keys without a query,
    they are the query (`_of_keys`: lazy on Spark, part of the step's one pipeline)."""
    if node.pending() or source.current is None or not node.keys:
        return None
    kernel, names, delta = node.kernel, time_columns(node.depth), source.current.frame
    stamp = _complete_time(kernel, delta, names, rnd)
    if stamp is None:
        return None
    sides: dict[str, list[Frame]] = {}
    for side, parts, arranged in (("inp", [*history, delta], source), ("outp", outputs, node)):
        # A trace's batches know their times' ranges: when none is later than the stamp,
        # no frame of it needs its own check (the delta is at the stamp).
        known = bounded(arranged.history_upper(), tuple(stamp))
        kept: list[Frame] = []
        unpicked: list[Frame] = []
        for frame in parts:
            if kernel.rows(frame) == 0:
                continue
            if not known and not _at_most(kernel, frame, names, stamp):
                return None
            rows = frame if cut else kernel.rows_with_keys(frame, node.keys, delta)
            (unpicked if rows is None else kept).append(frame if rows is None else rows)
        if unpicked:  # one join with the new keys for all of them
            union = kernel.union(unpicked) if len(unpicked) > 1 else unpicked[0]
            kept.append(_of_keys(kernel, union, node.keys, delta))
        sides[side] = kept
    inp = sides["inp"]
    whole = len(inp) == 1 and inp[0] is delta and source.current.consolidated
    return SettledRows(tuple(stamp), sides["inp"], sides["outp"], whole)


def _of_keys(kernel: Any, frame: Frame, keys: Sequence[str], probe: Frame) -> Frame:
    """The rows of `frame` whose `keys` equal those of some row of `probe` (NULL equals
    NULL), by a query: its join with the probe's distinct keys."""

    def build() -> Prepared:
        match = " AND ".join(f"f.{quote(k)} <=> k.{quote(k)}" for k in keys)
        distinct = f"SELECT DISTINCT {name_list(keys)} FROM probe"
        return kernel.prepare(_parse(f"SELECT f.* FROM src f JOIN ({distinct}) k ON {match}"))

    prepared = kernel.cached(("rows-of-keys", tuple(keys)), build)
    return kernel.query(prepared, {"src": frame, "probe": probe})


def settled_by_sums(node: ReduceNode, source: Arranged, rnd: Round) -> pa.Table | None:
    """A settled step of a logic that keeps each present row once (`present_once`) and is
    keyed by whole rows, from sums alone, or None when the step is not such a one or the
    kernel cannot give the sums.

    The new batch is consolidated, so it holds each of its keys once; per row, the
    correction is the row once when its input diffs (the history's sum and its own) sum
    above zero, less its output diffs' sum. Each trace batch's index gives a key's sum
    without taking its rows (`Trace.key_sums`), so nothing is grouped: where
    `settled_inputs` gathers the affected keys' rows from both traces and groups them
    all (`driver.distinct_step`), this searches the batches' keys and adds."""
    delta = source.current
    if not node.logic.present_once or node.source_values or not node.keys or node.pending():
        return None
    if delta is None or not delta.consolidated:
        return None
    if not node.kernel.takes(Capability.KEY_SUMS, (delta.frame,)):
        return None
    stamp = _complete_time(node.kernel, delta.frame, time_columns(node.depth), rnd)
    if stamp is None or not all(bounded(a.history_upper(), stamp) for a in (source, node)):
        return None
    before = source.history_sums(delta.frame, node.keys)
    if before is None:
        return None
    held = node.trace.key_sums(delta.frame, node.keys)
    if held is None:
        return None
    return driver.distinct_from_sums(delta.frame, before, held, node.columns, node.depth)


def _complete_time(
    kernel: Any, frame: Frame, names: Sequence[str], rnd: Round
) -> tuple[int, ...] | None:
    """The one time of every row of `frame`, when it has one and `rnd` completes it."""
    stamp = []
    for name in names:
        bounds = kernel.bounds(frame, name)
        if bounds is None or bounds[0] != bounds[1]:
            return None
        stamp.append(bounds[0])
    return tuple(stamp) if rnd.frontier.complete(tuple(stamp)) else None


def _at_most(kernel: Any, frame: Frame, names: Sequence[str], stamp: Sequence[int]) -> bool:
    """Whether every time of `frame` is at most `stamp`, coordinate by coordinate."""
    for name, at in zip(names, stamp, strict=True):
        bounds = kernel.bounds(frame, name)
        if bounds is None or bounds[1] > at:
            return False
    return True


@dataclass(frozen=True, slots=True)
class SettledQueries:
    """A settled step's queries, rendered once per reduce: all of it as one pipeline
    (`inp` and `outp` to the corrections), the same for input rows that need no
    accumulating (`SettledRows.whole`: on Spark, a 2M-row GROUP BY's hydration query
    took 1.8 s warm without the consolidation, against 4.7-6.7 s with it), and the
    subtraction alone (`desired` and `outp` to the corrections; the logic alone is
    `ReduceLogic.desired`)."""

    pipeline: Any
    #: The pipeline for `SettledRows.whole` input, rendered when first asked.
    direct: Callable[[], Any]
    final: Prepared

    @classmethod
    def build(cls, node: ReduceNode) -> SettledQueries:
        keys, vals, d, kernel = node.keys, node.source_values, node.depth, node.kernel
        desired = node.logic.query(keys, vals, d, kernel.dialect)
        assert desired is not None, "a settled step needs SQL logic"

        def build() -> SettledQueries:
            group = name_list([*keys, *time_columns(d), *vals])
            total = f"CAST(SUM({quote(DIFF)}) AS BIGINT) AS {quote(DIFF)}"
            acc = _parse(
                f"SELECT {group}, {total} FROM inp GROUP BY {group} HAVING SUM({quote(DIFF)}) <> 0"
            )
            data = name_list([*keys, *node.values, *time_columns(d)])
            final = _parse(
                f"SELECT {name_list(node.all_columns())} FROM ("
                f"SELECT {data}, {total} FROM ("
                f"SELECT {data}, {quote(DIFF)} FROM desired UNION ALL "
                f"SELECT {data}, -{quote(DIFF)} AS {quote(DIFF)} FROM outp"
                f") u GROUP BY {data} HAVING SUM({quote(DIFF)}) <> 0) c"
            )

            def pipeline(first: exp.Query) -> Any:
                # Each stage is read once (every logic reads `acc` once): nothing stored,
                # so Spark runs the step as one query (storing `acc` cost a job of 0.3 s).
                stages = (
                    Stage("acc", first, store=False),
                    Stage("desired", desired.copy(), store=False),
                )
                return kernel.prepare_pipeline(Pipeline(stages, final.copy()))

            def direct() -> Any:
                as_is = _parse(f"SELECT {group}, {quote(DIFF)} FROM inp")
                return kernel.cached(("reduce-settled-direct", *shape), lambda: pipeline(as_is))

            return cls(pipeline(acc), direct, kernel.prepare(final))

        shape = (
            keys,
            vals,
            node.values,
            d,
            per_kernel(desired, kernel.dialect).sql(dialect=kernel.dialect),
        )
        result: SettledQueries = kernel.cached(("reduce-settled", *shape), build)
        return result

    def run(self, node: ReduceNode, source: Arranged, rows: SettledRows) -> Frame:
        """The step's output (the corrections at `t`) from `settled_inputs`' rows."""
        kernel, keys, d = node.kernel, node.keys, node.depth
        frames = rows.frames(node, source)
        inp, outp = frames["inp"], frames["outp"]
        acc = kernel.consolidate_small([inp], [*keys, *node.source_values], d)
        if acc is None:
            pipeline = self.direct() if rows.whole else self.pipeline
            result, stored = kernel.run_pipeline(pipeline, frames, keys)
            if stored:
                result = kernel.materialize(result, keys).frame
                for frame in stored:
                    kernel.release(frame)
            return result
        desired = node.logic.desired(kernel, acc, keys, node.source_values, d, node.schema)
        done = kernel.consolidate_small([desired, outp], node.columns, d, signs=(1, -1))
        if done is not None:
            return done
        return kernel.query(self.final, {"desired": desired, "outp": outp})


def _parse(sql: str) -> exp.Query:
    query = parse_one(sql, read="spark")
    assert isinstance(query, exp.Query)
    return query
