"""The general linear operator (`join_function`) and its compilation to one query.

A linear operator maps every update `(row, t, d)` to updates
`(row2, join(t, t2), d * d2)` for each `(row2, t2, d2)` that its logic produces
from `row` alone (seed "generalizing linear operators"). Map, filter, project,
negate, flat_map (table functions), explode (diffs from data) and temporal
filters are all instances. Here the logic is a chain of steps:

- `Branches`: a fixed fan-out. Each `Branch` has an optional condition, output
  columns, optional per-coordinate time expressions `t2` and a diff factor `d2`.
  One branch with no time or diff is a map/filter/project; two branches with times
  `lo` and `hi` and diffs `+1`/`-1` are a temporal filter; a diff of `-1` negates.
- `Unnest`: a variable fan-out, one output row per element of an array expression
  (generate_series, unnest).

`Linear` is a value: `then` composes two chains; `compile` renders the whole chain
as a single query, so a chain of linear operators costs one projection (and both
engines collapse the nested selects into one pass).

>>> from sqlglot import parse_one
>>> step = Branches.single([("y", parse_one("x + 1"))], where=parse_one("x > 0"))
>>> Linear((step,)).output_columns(("x",))
('y',)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from dsql.runtime import relational as rel
from dsql.runtime.kernel.base import Kernel
from dsql.runtime.kernel.driver import Selection
from dsql.runtime.lattice import DIFF, time_columns


@dataclass(frozen=True, slots=True)
class Branch:
    """One output row per input row that satisfies `where`."""

    columns: tuple[tuple[str, exp.Expression], ...]
    where: exp.Expr | None = None
    #: Per time coordinate, an expression for `t2` (output = GREATEST(t, t2)), or None.
    time: tuple[exp.Expr | None, ...] = ()
    #: A factor the input diff is multiplied by, or None for 1.
    diff: exp.Expr | None = None

    def __post_init__(self) -> None:
        names = [name for name, _ in self.columns]
        if len(set(names)) != len(names):
            from dsql.errors import SchemaError

            duplicate = sorted({n for n in names if names.count(n) > 1})
            raise SchemaError(
                f"duplicate output column(s): {', '.join(duplicate)}",
                hint="give each output expression a distinct name with AS",
            )


@dataclass(frozen=True, slots=True)
class Branches:
    """A fixed fan-out: every input row yields one row per branch whose condition holds."""

    branches: tuple[Branch, ...]

    @classmethod
    def single(
        cls,
        columns: Sequence[tuple[str, exp.Expression]],
        where: exp.Expr | None = None,
        diff: exp.Expr | None = None,
    ) -> Branches:
        """One branch: a map (with an optional filter and diff factor)."""
        return cls((Branch(tuple(columns), where=where, diff=diff),))

    def output_columns(self, inputs: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(name for name, _ in self.branches[0].columns)


@dataclass(frozen=True, slots=True)
class Unnest:
    """A variable fan-out: one row per element of `array`, as column `column`."""

    column: str
    array: exp.Expr
    keep: tuple[str, ...]

    def output_columns(self, inputs: tuple[str, ...]) -> tuple[str, ...]:
        return (*self.keep, self.column)


Step = Branches | Unnest


def _not_null_columns(condition: exp.Expr) -> list[str] | None:
    """The columns of a condition `c IS NOT NULL AND ...` (None for any other condition)."""
    if isinstance(condition, exp.Paren):
        return _not_null_columns(condition.this)
    if isinstance(condition, exp.And):
        left, right = _not_null_columns(condition.this), _not_null_columns(condition.expression)
        return None if left is None or right is None else left + right
    # sqlglot writes `c IS NOT NULL` as `Is(negate=True)` and `NOT (c IS NULL)` as
    # `Not(Is)`; `NOT c IS NOT NULL` (`Not(Is(negate=True))`) is `c IS NULL`.
    negated = isinstance(condition, exp.Not)
    test = condition.this if negated else condition
    while isinstance(test, exp.Paren):
        test = test.this
    if not isinstance(test, exp.Is) or negated == bool(test.args.get("negate")):
        return None
    if isinstance(test.expression, exp.Null) and isinstance(test.this, exp.Column):
        return None if test.this.table else [test.this.name]
    return None


@dataclass(frozen=True, slots=True)
class Linear:
    """A chain of linear steps applied in order (see module docstring)."""

    steps: tuple[Step, ...]

    def then(self, other: Linear) -> Linear:
        """The operator that applies `self`, then `other`."""
        return Linear(self.steps + other.steps)

    def fanout_bound(self) -> int | None:
        """The most output rows one input row can yield (None: unbounded, an `Unnest`)."""
        bound = 1
        for step in self.steps:
            if isinstance(step, Unnest):
                return None
            bound *= len(step.branches)
        return bound

    def output_columns(self, inputs: tuple[str, ...]) -> tuple[str, ...]:
        columns = inputs
        for step in self.steps:
            columns = step.output_columns(columns)
        return columns

    def selection(self, inputs: tuple[str, ...]) -> Selection | None:
        """The chain as a `Selection` when it only selects, renames and keeps rows whose
        named columns are not NULL (no other condition, no time or diff factor), else
        None: such a chain needs no query.

        >>> from sqlglot import parse_one
        >>> step = Branches.single([("k", parse_one("x")), ("x", parse_one("x"))])
        >>> keep = Branches.single([("k", parse_one("k"))], where=parse_one("k IS NOT NULL"))
        >>> Linear((step, keep)).selection(("x",))
        Selection(renames=(('k', 'x'),), not_null=('x',))
        """
        source = {c: c for c in inputs}
        not_null: list[str] = []
        for step in self.steps:
            if not isinstance(step, Branches) or len(step.branches) != 1:
                return None
            branch = step.branches[0]
            if branch.diff is not None or any(t is not None for t in branch.time):
                return None
            if branch.where is not None:
                names = _not_null_columns(branch.where)
                if names is None or any(n not in source for n in names):
                    return None
                not_null += [source[n] for n in names]
            renamed = {}
            for name, e in branch.columns:
                read = rel.column_name(e)
                if read is None or read not in source:
                    return None
                renamed[name] = source[read]
            source = renamed
        return Selection(tuple(source.items()), tuple(dict.fromkeys(not_null)))

    def compile(
        self, kernel: Kernel, source: str | exp.Query, inputs: tuple[str, ...], depth: int
    ) -> exp.Query:
        """One query evaluating the chain over the batch relation `source` (a table name,
        or a query whose rows it reads)."""
        query: str | exp.Query = source
        columns = inputs
        for step in self.steps:
            query = _compile_step(kernel, step, query, columns, depth)
            columns = step.output_columns(columns)
        assert not isinstance(query, str), "a linear operator has at least one step"
        return query


def _compile_step(
    kernel: Kernel, step: Step, source: str | exp.Query, columns: tuple[str, ...], depth: int
) -> exp.Query:
    times = time_columns(depth)
    if isinstance(step, Unnest):
        array = _as_array(step.array)
        exploded = exp.alias_(exp.Explode(this=array), step.column, quoted=True)
        return rel.select(
            source,
            [*(rel.col(c) for c in step.keep), exploded, *(rel.col(t) for t in (*times, DIFF))],
        )
    branches = step.branches
    rendered = [_branch_columns(b, times) for b in branches]
    if len(branches) == 1:
        return rel.select(source, rendered[0], where=branches[0].where)
    for branch, cols in zip(branches, rendered, strict=True):
        if branch.where is not None:
            name, value = cols[-1]
            cols[-1] = (name, exp.If(this=branch.where, true=value, false=rel.lit(0)))
    inner = rel.select(source, [kernel.fanout(rendered)])
    return rel.select(
        inner,
        [rel.col(c) for c in (*step.output_columns(columns), *times, DIFF)],
        where=exp.NEQ(this=rel.col(DIFF), expression=rel.lit(0)),
    )


def _as_array(e: exp.Expr) -> exp.Expr:
    """The array an `Unnest` explodes, in a form every engine reads alike.

    A table function written as such (`unnest(a)`, PostgreSQL's `generate_series`)
    is unwrapped to its array, and a series is guarded so an empty range is empty
    everywhere (Spark's SEQUENCE counts down when the end is below the start).
    """
    if isinstance(e, exp.Explode | exp.Unnest) and not isinstance(e, exp.ExplodingGenerateSeries):
        inner = e.this if isinstance(e, exp.Explode) else (e.expressions or [e])[0]
        return _as_array(inner)
    if isinstance(e, exp.GenerateSeries | exp.ExplodingGenerateSeries):
        start, end = e.args["start"], e.args["end"]
        step = e.args.get("step") or exp.Literal.number(1)
        series = exp.GenerateSeries(start=start.copy(), end=end.copy(), step=step.copy())
        # A step moves forward when it is above 0, or, for an interval stepping through
        # timestamps (not comparable with 0), when it moves the start forward.
        if _is_number(step):
            ahead, behind = step, rel.lit(0)
        else:
            ahead, behind = exp.Add(this=start.copy(), expression=step.copy()), start
        up = exp.and_(
            exp.GT(this=ahead.copy(), expression=behind.copy()),
            exp.LTE(this=start.copy(), expression=end.copy()),
        )
        down = exp.and_(
            exp.LT(this=ahead.copy(), expression=behind.copy()),
            exp.GTE(this=start.copy(), expression=end.copy()),
        )
        return exp.Case(ifs=[exp.If(this=exp.or_(up, down), true=series)])
    return e


def _is_number(e: exp.Expression) -> bool:
    """Whether `e` is a numeric literal, possibly negated."""
    inner = e.this if isinstance(e, exp.Neg) else e
    return isinstance(inner, exp.Literal) and not inner.is_string


def _branch_columns(branch: Branch, times: tuple[str, ...]) -> list[tuple[str, exp.Expr]]:
    out: list[tuple[str, exp.Expr]] = list(branch.columns)
    for i, name in enumerate(times):
        t2 = branch.time[i] if i < len(branch.time) else None
        out.append((name, rel.col(name) if t2 is None else rel.greatest(rel.col(name), t2)))
    diff: exp.Expression = rel.col(DIFF)
    if branch.diff is not None:
        diff = exp.Mul(this=diff, expression=exp.paren(branch.diff))
    out.append((DIFF, diff))
    return out


#: Column types every kernel passes through a projection unchanged.
STABLE_TYPES = (
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.bool_(),
    pa.string(),
    pa.date32(),
)

#: SQL types whose NULL (or literal cast) every kernel produces as this Arrow type.
_CAST_TYPES = {
    exp.DataType.Type.SMALLINT: pa.int16(),
    exp.DataType.Type.INT: pa.int32(),
    exp.DataType.Type.BIGINT: pa.int64(),
    exp.DataType.Type.DOUBLE: pa.float64(),
    exp.DataType.Type.BOOLEAN: pa.bool_(),
}


def _constant_type(e: exp.Expression) -> pa.DataType | None:
    """The Arrow type of a constant output every kernel types alike: TRUE/FALSE, an
    integer literal within 32 bits, `CAST(NULL AS t)`, or an integer literal cast to an
    integer type it fits; None for anything else (the kernel decides)."""
    if isinstance(e, exp.Boolean):
        return pa.bool_()
    if _small_integer(e):
        return pa.int32()
    if isinstance(e, exp.Cast) and not e.args.get("format"):
        to = e.args.get("to")
        if not isinstance(to, exp.DataType):
            return None
        target = _CAST_TYPES.get(to.this)
        if target is None or to.expressions:
            return None
        if isinstance(e.this, exp.Null):
            return target
        if _small_integer(e.this) and pa.types.is_integer(target):
            value = int(e.this.name)
            bits = target.bit_width - 1
            return target if -(2**bits) <= value < 2**bits else None
    return None


def _small_integer(e: exp.Expr) -> bool:
    return (
        isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit() and int(e.this) < 2**31
    )


def _constant_diff(diff: exp.Expr | None) -> bool:
    """Whether a branch's diff factor is absent or a plain integer (cannot fail)."""
    if diff is None:
        return True
    inner = diff.this if isinstance(diff, exp.Neg | exp.Paren) else diff
    return _small_integer(inner)


#: Condition nodes whose evaluation cannot fail or change a schema (over known columns).
_PLAIN = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Null,
    exp.Boolean,
    exp.Paren,
    exp.And,
    exp.Or,
    exp.Not,
    exp.Is,
    exp.EQ,
    exp.NEQ,
    exp.NullSafeEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
)


def static_schema(step: Step, schema: pa.Schema) -> pa.Schema | None:
    """The output schema of `step` over rows of `schema`, when it follows from the step
    alone: one branch whose outputs are columns of the input, with only plain
    comparisons of input columns and literals as its condition. None otherwise (the
    kernel must evaluate the step to know, which also validates it).

    >>> from sqlglot import parse_one
    >>> s = Branches.single([("y", parse_one("x"))], where=parse_one("x > 0"))
    >>> static_schema(s, pa.schema([("x", pa.int32())])).names
    ['y']
    """
    if not isinstance(step, Branches) or len(step.branches) != 1:
        return None
    branch = step.branches[0]
    if not _constant_diff(branch.diff) or any(t is not None for t in branch.time):
        return None
    fields = []
    types = dict(zip(schema.names, schema.types, strict=True))  # a schema's lookups are linear
    if len(types) != len(schema):
        return None
    for name, e in branch.columns:
        if not isinstance(e, exp.Column):
            constant = _constant_type(e)
            if constant is None:
                return None
            fields.append(pa.field(name, constant))
            continue
        read = rel.column_name(e)
        source = types.get(read) if read is not None else None
        if source is None or source not in STABLE_TYPES:
            return None
        fields.append(pa.field(name, source))
    if branch.where is not None:
        for node in branch.where.walk():
            if not isinstance(node, _PLAIN):
                return None
            if isinstance(node, exp.Column) and rel.column_name(node) not in types:
                return None
            if isinstance(node, exp.Literal) and node is branch.where:
                return None  # `WHERE 1`: engines differ on non-boolean conditions
    return pa.schema(fields)
