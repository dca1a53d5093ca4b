"""The steps a `JoinFunction` chains, and `Segment`: a stretch of them in closed form.

A step is one of `MapStep`, `FilterStep`, `ProjectStep`, `TableStep`, `NegateStep`
(`linear.py`'s docstring says what each does). A `Segment` is a table-function-free
stretch of steps evaluated symbolically (`closed_form`): its outputs and predicates
as expressions over the stretch's input, and whether it negates. The functions here
build segments, move predicates between them (`hoist`) and renumber them; `linear.py`
uses them for `JoinFunction.segments`, `optimize`, `split` and `peel_predicates`.

Invariant: a segment's expressions read only its `input_arity` input columns.

>>> from dsql.planner.expr import parse_expr
>>> from dsql.planner.plan import Column
>>> from dsql.planner import types
>>> c = (Column("b2", types.build("int")),)
>>> seg = closed_form(2, (MapStep((parse_expr("_c1 * 2"),), c), ProjectStep((2,))))
>>> [e.sql() for e in seg.outputs]
['_c1 * 2']
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from dsql.planner.expr import conjuncts, held_col, held_key, held_refs, index, remap
from dsql.planner.plan import Column
from dsql.planner.temporal import Interval, presence


@dataclass(frozen=True, slots=True)
class MapStep:
    """Append one column per expression (`columns` names and types them)."""

    exprs: tuple[exp.Expression, ...]
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class FilterStep:
    """Keep rows for which every predicate is true (NULL is false)."""

    predicates: tuple[exp.Expression, ...]


@dataclass(frozen=True, slots=True)
class ProjectStep:
    """Keep the columns at `outputs`, in that order."""

    outputs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TableStep:
    """A table function per row: `generate_series`/`unnest` append one column;
    with no columns, `function` is `repeat_row`'s count (the diff is multiplied by it)."""

    function: exp.Expression
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class NegateStep:
    """Multiply every diff by -1."""


Step = MapStep | FilterStep | ProjectStep | TableStep | NegateStep


@dataclass(frozen=True, slots=True)
class Segment:
    """A table-function-free stretch in closed form.

    `outputs[i]` and every predicate are expressions over the stretch's input
    columns; `meta[i]` is the input position a plain output copies, or its `Column`.
    """

    input_arity: int
    outputs: tuple[exp.Expression, ...]
    meta: tuple[int | Column, ...]
    predicates: tuple[exp.Expression, ...]
    negated: bool

    def steps(self) -> tuple[Step, ...]:
        """filter, map, project, negate: the stretch as steps (identity parts left out)."""
        out: list[Step] = []
        if self.predicates:
            out.append(FilterStep(self.predicates))
        exprs: list[exp.Expression] = []
        cols: list[Column] = []
        seen: dict[Hashable, int] = {}
        layout: list[int] = []
        for e, m in zip(self.outputs, self.meta, strict=True):
            i = _column_index(e)
            if i is not None:
                layout.append(i)
                continue
            key = held_key(e)
            if key not in seen:
                seen[key] = self.input_arity + len(exprs)
                exprs.append(e)
                cols.append(
                    m if isinstance(m, Column) else Column(f"_c{m}", exp.DataType.build("unknown"))
                )
            layout.append(seen[key])
        if exprs:
            out.append(MapStep(tuple(exprs), tuple(cols)))
        if tuple(layout) != tuple(range(self.input_arity + len(exprs))):
            out.append(ProjectStep(tuple(layout)))
        if self.negated:
            out.append(NegateStep())
        return tuple(out)

    def split(self, time_scale: int) -> tuple[Segment, list[Interval]]:
        """(the stretch without temporal predicates, the intervals a row is present in)."""
        safe, intervals = presence(self.predicates, time_scale)
        return with_predicates(self, tuple(safe)), intervals


def with_predicates(s: Segment, predicates: tuple[exp.Expression, ...]) -> Segment:
    """The stretch with its predicates replaced."""
    return Segment(s.input_arity, s.outputs, s.meta, predicates, s.negated)


def stretch_reads(seg: Segment) -> set[int]:
    """The input columns a stretch reads."""
    return {c for e in (*seg.outputs, *seg.predicates) for c in held_refs(e)}


def select_outputs(seg: Segment, keep: list[int]) -> Segment:
    """The stretch with only the outputs at `keep`."""
    return Segment(
        seg.input_arity,
        tuple(seg.outputs[c] for c in keep),
        tuple(seg.meta[c] for c in keep),
        seg.predicates,
        seg.negated,
    )


def tail_steps(parts: tuple[tuple[Segment, TableStep | None], ...]) -> tuple[Step, ...]:
    """The steps after the first stretch's own: every table function and later stretch."""
    steps: list[Step] = []
    for k, (seg, table) in enumerate(parts):
        if k:
            steps.extend(seg.steps())
        if table is not None:
            steps.append(table)
    return tuple(steps)


def renumber(seg: Segment, position: dict[int, int], arity: int) -> Segment:
    """The stretch over a new input layout: input column `c` is at `position[c]`."""

    def mv(e: exp.Expression) -> exp.Expression:
        return remap(e, dict(position))

    meta = tuple(position[m] if isinstance(m, int) else m for m in seg.meta)
    return Segment(
        arity,
        tuple(mv(e) for e in seg.outputs),
        meta,
        tuple(mv(p) for p in seg.predicates),
        seg.negated,
    )


def closed_form(arity: int, steps: tuple[Step, ...]) -> Segment:
    """Symbolic execution of table-free steps: outputs and predicates over the input."""
    # An output that copies an input column is its position until the end (most are
    # projected away: a column reference for each would cost more than the rest).
    outputs: list[int | exp.Expression] = list(range(arity))
    meta: list[int | Column] = list(range(arity))
    preds: list[exp.Expression] = []
    seen: set[Hashable] = set()
    negated = False
    for step in steps:
        match step:
            case MapStep(exprs=exprs, columns=cols):
                outputs += [_inline(e, outputs) for e in exprs]
                meta += list(cols)
            case FilterStep(predicates=ps):
                for p in (c for q in ps for c in conjuncts(q)):
                    p = _inline(p, outputs)
                    key = held_key(p)
                    if not _is_true(p) and key not in seen:
                        seen.add(key)
                        preds.append(p)
            case ProjectStep(outputs=outs):
                outputs = [outputs[i] for i in outs]
                meta = [meta[i] for i in outs]
            case NegateStep():
                negated = not negated
    final = tuple(held_col(o) if type(o) is int else o for o in outputs)
    return Segment(arity, final, tuple(meta), tuple(preds), negated)  # type: ignore[arg-type]


def hoist(
    parts: list[tuple[Segment, TableStep | None]],
) -> tuple[tuple[Segment, TableStep | None], ...]:
    """Move predicates ahead of table functions they do not read; negation to the end."""
    out = list(parts)
    negated = sum(seg.negated for seg, _ in out) % 2 == 1
    for k in range(len(out) - 1, 0, -1):
        seg, table = out[k]
        prev, prev_table = out[k - 1]
        assert prev_table is not None
        width = len(prev.outputs)
        moved, kept = [], []
        for p in seg.predicates:
            used = held_refs(p)
            if all(c < width for c in used):
                moved.append(_inline(p, prev.outputs))
            else:
                kept.append(p)
        out[k] = (with_predicates(seg, tuple(kept)), table)
        seen = {held_key(p) for p in prev.predicates}
        fresh_list = []
        for p in moved:
            key = held_key(p)
            if key not in seen:
                seen.add(key)
                fresh_list.append(p)
        fresh = tuple(fresh_list)
        out[k - 1] = (with_predicates(prev, prev.predicates + fresh), prev_table)
    for k, (seg, table) in enumerate(out):
        neg = negated and k == len(out) - 1
        out[k] = (Segment(seg.input_arity, seg.outputs, seg.meta, seg.predicates, neg), table)
    return tuple(out)


def _inline(e: exp.Expression, env: Sequence[int | exp.Expression]) -> exp.Expression:
    """`e` with each `#i` replaced by `env[i]`: an expression, or the position of a column
    (`e` itself, shared, when every column it reads stays where it is)."""
    mapping: dict[int, int | exp.Expression] = {}
    for i in held_refs(e):
        target = env[i]
        j = target if type(target) is int else _column_index(target)  # type: ignore[arg-type]
        mapping[i] = target if j is None else j  # a column: renumbered, not substituted
    if all(type(j) is int and i == j for i, j in mapping.items()):
        return e
    return remap(e, mapping)


def _column_index(e: exp.Expression) -> int | None:
    return index(e) if isinstance(e, exp.Column) else None


def _is_true(p: exp.Expression) -> bool:
    return isinstance(p, exp.Boolean) and p.this is True


__all__ = [
    "FilterStep",
    "MapStep",
    "NegateStep",
    "ProjectStep",
    "Segment",
    "Step",
    "TableStep",
    "closed_form",
    "hoist",
    "renumber",
    "select_outputs",
    "stretch_reads",
    "tail_steps",
    "with_predicates",
]
