"""The general linear operator as a planner value: `JoinFunction`.

A `JoinFunction` maps each input row (a tuple of positional columns) to output
rows with times and diffs (DESIGN §2.6, seed "generalizing linear operators").
It is a chain of steps applied in order:

- `MapStep`: append one column per expression;
- `FilterStep`: keep the rows for which every predicate is true; a predicate
  that mentions `mz_now()` is a temporal bound (see `split`);
- `ProjectStep`: keep the columns at the given positions (repeats allowed);
- `TableStep`: a table function: per row, one output per element, its value
  appended as a column (`repeat_row(n)` appends none and multiplies the diff);
- `NegateStep`: multiply every diff by -1.

Invariants: every expression refers only to columns present at its step;
`input_arity` is the arity the first step sees. `optimize` puts a function in a
normal form: between table functions, one stretch of filter, map, project
whose expressions are over that stretch's input (maps inlined, predicates moved
ahead of maps and of table functions they do not depend on), and at most one
negation, at the end. The steps and the closed form of a stretch of them
(`Segment`) are in `linear_steps.py`.

>>> from dsql.planner.expr import parse_expr
>>> from dsql.planner.plan import Column
>>> from dsql.planner import types
>>> f = JoinFunction.identity(2).map((parse_expr("_c1 * 2"),), (Column("b2", types.build("int")),))
>>> g = f.filter((parse_expr("_c2 > 1"),)).project((0, 2))
>>> g.optimize().describe()
['filter (#1 * 2) > 1', 'map #2 = #1 * 2', 'project (#0, #2)']
>>> sorted(g.demand())
[0, 1]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlglot import exp

from dsql.errors import SchemaError
from dsql.planner.expr import held_refs, remap, show_expr
from dsql.planner.linear_steps import (
    FilterStep,
    MapStep,
    NegateStep,
    ProjectStep,
    Segment,
    Step,
    TableStep,
    closed_form,
    hoist,
    renumber,
    select_outputs,
    stretch_reads,
    tail_steps,
    with_predicates,
)
from dsql.planner.plan import Column
from dsql.planner.temporal import Interval, mentions_mz_now


@dataclass(frozen=True, slots=True)
class JoinFunction:
    """A chain of linear steps over `input_arity` positional columns (module docstring)."""

    input_arity: int
    steps: tuple[Step, ...] = ()
    #: Memos, held by the function itself so that they die with it: its `segments`, and
    #: whether `optimize` produced it (a normal form is its own). A table keyed by
    #: identity kept up to thousands of dead functions' expression trees alive, and each
    #: of Python's full garbage collections walked them (a quarter of select5.test).
    _segments_memo: tuple[tuple[Segment, TableStep | None], ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _normal: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        arity = self.input_arity
        for step in self.steps:
            arity = _check_step(step, arity)

    # --- construction ------------------------------------------------------------------
    @staticmethod
    def identity(arity: int) -> JoinFunction:
        """The function that returns each row unchanged."""
        return JoinFunction(arity)

    def then(self, *steps: Step) -> JoinFunction:
        return JoinFunction(self.input_arity, self.steps + steps)

    def map(self, exprs: tuple[exp.Expression, ...], columns: tuple[Column, ...]) -> JoinFunction:
        return self.then(MapStep(exprs, columns)) if exprs else self

    def filter(self, predicates: Iterable[exp.Expression]) -> JoinFunction:
        predicates = tuple(predicates)
        return self.then(FilterStep(predicates)) if predicates else self

    def project(self, outputs: Iterable[int]) -> JoinFunction:
        return self.then(ProjectStep(tuple(outputs)))

    def compose(self, other: JoinFunction) -> JoinFunction:
        """`self`, then `other` (whose input is `self`'s output)."""
        if other.input_arity != self.arity:
            raise SchemaError(
                f"cannot compose: {self.arity} output columns feed {other.input_arity} inputs"
            )
        return JoinFunction(self.input_arity, self.steps + other.steps)

    # --- facts -------------------------------------------------------------------------
    @property
    def arity(self) -> int:
        """The number of output columns."""
        arity = self.input_arity
        for step in self.steps:
            arity = _arity_after(step, arity)
        return arity

    def is_identity(self) -> bool:
        return all(
            isinstance(s, ProjectStep) and s.outputs == tuple(range(self.input_arity))
            for s in self.steps
        )

    def columns(self, inputs: tuple[Column, ...]) -> tuple[Column, ...]:
        """The output columns, given the input's."""
        cols = inputs
        for step in self.steps:
            match step:
                case MapStep(columns=new) | TableStep(columns=new):
                    cols = cols + new
                case ProjectStep(outputs=outs):
                    cols = tuple(cols[i] for i in outs)
        return cols

    def demand(self) -> frozenset[int]:
        """The input columns the output depends on (values, multiplicities or times)."""
        arities = [self.input_arity]
        for step in self.steps:
            arities.append(_arity_after(step, arities[-1]))
        needed = set(range(arities[-1]))
        for step, before in zip(reversed(self.steps), reversed(arities[:-1]), strict=True):
            match step:
                case ProjectStep(outputs=outs):
                    needed = {outs[i] for i in needed}
                case MapStep(exprs=exprs):
                    used = {c for c in needed if c < before}
                    for k, e in enumerate(exprs):
                        if before + k in needed:
                            used |= held_refs(e)
                    needed = used
                case FilterStep(predicates=preds):
                    needed |= {c for p in preds for c in held_refs(p)}
                case TableStep(function=f):
                    needed = {c for c in needed if c < before} | held_refs(f)
        return frozenset(needed)

    def segments(self) -> tuple[tuple[Segment, TableStep | None], ...]:
        """The chain in closed form: stretches, each followed by a table function (or None last).

        Every predicate sits in the earliest stretch whose columns it can be
        written over; the negation (if the count of negations is odd) is on the last.
        Computed once per function (the passes and rendering ask repeatedly); the
        segments are shared, so callers copy an expression before changing it.
        """
        if self._segments_memo is None:
            object.__setattr__(self, "_segments_memo", self._segments())
        return self._segments_memo  # type: ignore[return-value]

    def _segments(self) -> tuple[tuple[Segment, TableStep | None], ...]:
        parts: list[tuple[Segment, TableStep | None]] = []
        rest = self.steps
        arity = self.input_arity
        while True:
            cut = next((i for i, s in enumerate(rest) if isinstance(s, TableStep)), len(rest))
            seg = closed_form(arity, rest[:cut])
            if cut == len(rest):
                parts.append((seg, None))
                break
            table = rest[cut]
            assert isinstance(table, TableStep)
            parts.append((seg, table))
            arity = len(seg.outputs) + len(table.columns)
            rest = rest[cut + 1 :]
        return hoist(parts)

    # --- rewrites ----------------------------------------------------------------------
    def optimize(self) -> JoinFunction:
        """An equivalent function in normal form (module docstring); drops unused work.

        Columns a stretch computes but nothing after its table function reads
        are projected away before the table function. A function `optimize`
        returned is its own normal form (the passes re-optimize the same function).
        """
        if self._normal:
            return self
        result = self._optimize()
        object.__setattr__(result, "_normal", True)
        return result

    def _optimize(self) -> JoinFunction:
        parts = list(self.segments())
        widths = [len(seg.outputs) for seg, _ in parts]
        keeps: list[list[int]] = [[] for _ in parts]
        for k in range(len(parts) - 2, -1, -1):  # backwards: later stretches decide
            seg, table = parts[k]
            assert table is not None
            used = {c for c in stretch_reads(parts[k + 1][0]) if c < widths[k]} | held_refs(
                table.function
            )
            keeps[k] = sorted(used)
            parts[k] = (select_outputs(seg, keeps[k]), table)
        steps: list[Step] = []
        for k, (seg, table) in enumerate(parts):
            if k:
                before = parts[k - 1][1]
                assert before is not None
                keep, added = keeps[k - 1], len(before.columns)
                position = {c: i for i, c in enumerate(keep)}
                position |= {widths[k - 1] + j: len(keep) + j for j in range(added)}
                seg = renumber(seg, position, len(keep) + added)
            steps.extend(seg.steps())
            if table is not None:
                position = {c: i for i, c in enumerate(keeps[k])}
                steps.append(TableStep(remap(table.function, dict(position)), table.columns))
        return JoinFunction(self.input_arity, tuple(steps))

    def permute(self, mapping: dict[int, int], new_input_arity: int) -> JoinFunction:
        """The same function over an input whose column `i` is at `mapping[i]`.

        Columns without a position must not be demanded; they read as NULL.
        """
        if new_input_arity == self.input_arity and all(
            mapping.get(i) == i for i in range(self.input_arity)
        ):
            return self.optimize()
        missing = [i for i in range(self.input_arity) if i not in mapping]
        if missing and set(missing) & self.demand():
            raise SchemaError(f"permute: demanded columns {missing} have no position")
        prefix = JoinFunction(new_input_arity)
        nulls = {i: new_input_arity + k for k, i in enumerate(missing)}
        if missing:
            prefix = prefix.map(
                tuple(exp.Null() for _ in missing),
                tuple(Column(f"_c{i}", exp.DataType.build("unknown")) for i in missing),
            )
        layout = tuple(mapping[i] if i in mapping else nulls[i] for i in range(self.input_arity))
        return prefix.project(layout).compose(self).optimize()

    def split(self, time_scale: int) -> tuple[JoinFunction, list[Interval]]:
        """(the function without temporal predicates, the intervals a row is present in).

        Bounds are over the input columns, in runtime time units (see
        `temporal.presence`). Only for a function whose temporal predicates all
        sit in its first stretch.
        """
        parts = self.segments()
        first, intervals = parts[0][0].split(time_scale)
        if any(mentions_mz_now(p) for seg, _ in parts[1:] for p in seg.predicates):
            raise SchemaError("a temporal bound over a table function's output cannot be split off")
        rest = JoinFunction(self.input_arity, first.steps() + tail_steps(parts))
        return rest, intervals

    def peel_predicates(self) -> tuple[tuple[exp.Expression, ...], JoinFunction]:
        """(predicates over the input that may be applied before it, the rest of the function).

        Temporal predicates stay in the function.
        """
        parts = self.segments()
        first = parts[0][0]
        peeled = tuple(p for p in first.predicates if not mentions_mz_now(p))
        kept = tuple(p for p in first.predicates if mentions_mz_now(p))
        rest = with_predicates(first, kept)
        return peeled, JoinFunction(self.input_arity, rest.steps() + tail_steps(parts))

    # --- display -----------------------------------------------------------------------
    def describe(self) -> list[str]:
        """One line per step, columns as `#n`."""
        lines = []
        arity = self.input_arity
        for step in self.steps:
            match step:
                case MapStep(exprs=exprs):
                    lines.append(
                        "map "
                        + ", ".join(f"#{arity + i} = {show_expr(e)}" for i, e in enumerate(exprs))
                    )
                case FilterStep(predicates=preds):
                    lines.append("filter " + " AND ".join(show_expr(p) for p in preds))
                case ProjectStep(outputs=outs):
                    lines.append("project (" + ", ".join(f"#{o}" for o in outs) + ")")
                case TableStep(function=f, columns=cols):
                    lines.append(
                        f"table #{arity} = {show_expr(f)}" if cols else f"repeat_row {show_expr(f)}"
                    )
                case NegateStep():
                    lines.append("negate")
            arity = _arity_after(step, arity)
        return lines


def _arity_after(step: Step, arity: int) -> int:
    match step:
        case MapStep(exprs=exprs):
            return arity + len(exprs)
        case TableStep(columns=cols):
            return arity + len(cols)
        case ProjectStep(outputs=outs):
            return len(outs)
    return arity


def _check_step(step: Step, arity: int) -> int:
    match step:
        case MapStep(exprs=exprs, columns=cols):
            if len(exprs) != len(cols):
                raise SchemaError("map: one column per expression")
            bad = [c for e in exprs for c in held_refs(e) if c >= arity]
        case FilterStep(predicates=preds):
            bad = [c for p in preds for c in held_refs(p) if c >= arity]
        case ProjectStep(outputs=outs):
            bad = [c for c in outs if c >= arity]
        case TableStep(function=f):
            bad = [c for c in held_refs(f) if c >= arity]
        case _:
            bad = []
    if bad:
        raise SchemaError(
            f"linear step {type(step).__name__}: column(s) {sorted(set(bad))} do not exist "
            f"(arity {arity})"
        )
    return _arity_after(step, arity)


__all__ = ["JoinFunction"]
