"""What a reduce computes per group: `ReduceLogic` and its kinds.

A logic turns the accumulated groups — a relation with the key columns, the
candidate time, the value columns and a non-zero `__diff__` (the multiplicity) —
into the desired output at that time: key columns, output columns, time, diff.
Groups with no rows never reach it.

- `Aggregates`: SQL aggregates, one output row per group. Aggregates are
  rewritten to respect multiplicities (`count(*)` → `sum(__diff__)`, `sum(x)` →
  `sum(x * __diff__)`, of a decimal `NUMERIC_WEIGHTED_SUM`, exact on Spark too,
  ...); aggregates with no rewrite (string_agg, ...) run
  over the group expanded to one row per copy.
- `Distinct`, `Threshold`, `Count`: the book's convenience operators.
- `PythonLogic`: a Python function over each group as an Arrow table. The slow
  path: the groups are collected to the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp, parse_one

from dsql.errors import SchemaError
from dsql.runtime import relational as rel
from dsql.runtime.dataflow import schema_key
from dsql.runtime.kernel import driver, numeric_division
from dsql.runtime.kernel.base import PER_KERNEL, Frame, Kernel, Prepared
from dsql.runtime.lattice import DIFF, time_columns

if TYPE_CHECKING:
    from dsql.runtime.arrangement import Arranged

_ACC = "acc"


class ReduceLogic:
    """The per-group computation of a reduce (see module docstring)."""

    #: Whether the desired output is each present group once (`Distinct`): the chain
    #: step then reads it from the running sums (`ReduceShape.present_once`), and a settled
    #: step over whole rows from the traces' key sums (`reduce_settled.settled_by_sums`).
    present_once = False

    def query(
        self, keys: Sequence[str], values: Sequence[str], depth: int, dialect: str
    ) -> exp.Query | None:
        """The desired output as one query over the accumulated groups (table `acc`), or
        None when the logic is not SQL (then `desired` computes it from the rows)."""
        return None

    def desired(
        self,
        kernel: Kernel,
        acc: Frame,
        keys: Sequence[str],
        values: Sequence[str],
        depth: int,
        schema: pa.Schema,
    ) -> Frame:
        """The desired output for the accumulated groups in `acc` (by default: `in_arrow`
        for groups already in the driver, else `query`, rendered once per shape)."""
        if isinstance(acc, pa.Table) and acc.num_rows:
            fast = self.in_arrow(acc, keys, values, depth)
            if fast is not None:
                return fast

        def prepare() -> Prepared:
            query = self.query(keys, values, depth, kernel.dialect)
            if query is None:
                raise NotImplementedError
            return kernel.prepare(query)

        shape = (rel.fingerprint(self), tuple(keys), tuple(values), depth)
        return kernel.query(kernel.cached(("reduce-logic", *shape), prepare), {_ACC: acc})

    def in_arrow(
        self, acc: pa.Table, keys: Sequence[str], values: Sequence[str], depth: int
    ) -> pa.Table | None:
        """The desired output for accumulated groups already in the driver, computed by
        Arrow with the rows (not the types) `query` gives; None when the logic has no
        such form (the caller runs `desired`)."""
        return None

    def settled_in_arrow(
        self,
        inp: Sequence[pa.Table],
        outp: Sequence[pa.Table],
        columns: Sequence[str],
        stamp: tuple[int, ...],
    ) -> pa.Table | None:
        """A settled step's corrections at its time `stamp` (`reduce_settled`: from the
        affected keys' input and output rows, at times up to the stamp) computed in the
        driver in one pass, or None when the logic has no such form (the step
        accumulates, applies `desired`, and subtracts)."""
        return None

    def output_schema(self, source: Arranged) -> pa.Schema:
        """Key columns, then output columns (by evaluating over an empty group)."""
        worker, kernel = source.worker, source.kernel

        def evaluate() -> pa.Schema:
            acc_schema = pa.schema(list(source.schema))
            empty = worker.empty_frame(acc_schema, source.depth)
            frame = self.desired(
                kernel, empty, source.keys, source.values, source.depth, pa.schema([])
            )
            full = kernel.schema(frame)
            internal = {*time_columns(source.depth), DIFF}
            return pa.schema([f for f in full if f.name not in internal])

        query = self.query(source.keys, source.values, source.depth, kernel.dialect)
        if query is None:
            return evaluate()
        shape = (rel.fingerprint(query), schema_key(source.schema), source.keys, source.depth)
        return kernel.cached(("reduce-schema", *shape), evaluate)

    def describe(self) -> str:
        return type(self).__name__


def _by_group(keys: Sequence[str], depth: int) -> list[exp.Expression]:
    return [rel.col(c) for c in (*keys, *time_columns(depth))]


@dataclass(frozen=True)
class Aggregates(ReduceLogic):
    """SQL aggregate expressions, each with an output name; `refuse_negative`: a group
    holding a row a negative number of times is an error (SQL's views, as Materialize),
    else each aggregate is weighted by the counts as they are (the runtime's API)."""

    aggregates: tuple[tuple[str, exp.Expr], ...]
    refuse_negative: bool = True

    def __post_init__(self) -> None:
        for name, e in self.aggregates:
            if not any(isinstance(n, exp.AggFunc) for n in e.walk()):
                raise SchemaError(
                    f"{name} = {e.sql()} has no aggregate function",
                    hint="each reduce output must aggregate, e.g. sum(x) or count(*)",
                )

    def query(self, keys, values, depth, dialect):  # type: ignore[override]
        needs_expansion = any(_rewrite(e) is None for _, e in self.aggregates)
        source: str | exp.Query = _ACC
        if needs_expansion:
            # A row with a negative count stays once, for the guard to see its count.
            copies: exp.Expr = rel.col(DIFF)
            if self.refuse_negative:
                copies = exp.Greatest(this=copies, expressions=[rel.lit(1)])
            source = rel.select(
                _ACC,
                [
                    *(rel.col(c) for c in (*keys, *time_columns(depth), *values, DIFF)),
                    exp.alias_(
                        exp.Explode(this=exp.func("SEQUENCE", rel.lit(1), copies))
                        if dialect == "spark"
                        else exp.Explode(this=exp.func("RANGE", rel.lit(0), copies)),
                        "__copy",
                        quoted=True,
                    ),
                ],
            )
        outputs = [
            (name, self._guarded(e.copy() if needs_expansion else _rewrite(e)))
            for name, e in self.aggregates
        ]
        # Spark's array_agg skips NULLs: its spelling keeps them. Each kernel picks its
        # own (`Kernel.sql`), since a step built for one kernel may run on the other.
        outputs = [(name, _per_kernel(e)) for name, e in outputs]
        group = _by_group(keys, depth)
        return rel.select(
            source,
            [
                *(exp.alias_(g.copy(), g.name, quoted=True) for g in group),
                *(exp.alias_(e, n, quoted=True) for n, e in outputs),
                exp.alias_(rel.lit(1), DIFF, quoted=True),
            ],
        ).group_by(*group)

    def describe(self) -> str:
        return ", ".join(f"{e.sql()} AS {n}" for n, e in self.aggregates)

    def _guarded(self, e: exp.Expr | None) -> exp.Expr:
        assert e is not None
        return _guarded(e) if self.refuse_negative else e


def _per_kernel(e: exp.Expr) -> exp.Expr:
    """`e`, or where it holds an array_agg, a `PER_KERNEL` call of `e` and its Spark
    spelling (`_spark_array_agg`)."""
    if not any(isinstance(n, exp.ArrayAgg) for n in e.walk()):
        return e
    spark = e.copy().transform(_spark_array_agg)
    return exp.Anonymous(this=PER_KERNEL, expressions=[e, spark])


def _spark_array_agg(node: exp.Expression) -> exp.Expr:
    """PostgreSQL's `array_agg(x [ORDER BY ...])` on Spark, whose `collect_list` skips
    NULLs and ignores an order: each value collected in a struct with its sort keys (a
    struct is never NULL), the structs sorted by the keys, and the values taken out.

    >>> e = parse_one("array_agg(x ORDER BY k DESC)", read="postgres")
    >>> _spark_array_agg(e).sql("spark")[:62]
    'TRANSFORM(ARRAY_SORT(COLLECT_LIST(STRUCT(x AS v, k AS k0)), (_'
    """
    if not isinstance(node, exp.ArrayAgg):
        return node
    value, keys = node.this, []
    if isinstance(value, exp.Order):
        keys = list(value.expressions)
        value = value.this
    # DISTINCT orders by the value itself (PostgreSQL's rule): distinct structs are
    # distinct values.
    distinct = isinstance(value, exp.Distinct)
    if isinstance(value, exp.Distinct):
        value = value.expressions[0]
    fields = [exp.PropertyEQ(this=exp.to_identifier("v"), expression=value.copy())]
    fields += [
        exp.PropertyEQ(this=exp.to_identifier(f"k{i}"), expression=k.this.copy())
        for i, k in enumerate(keys)
    ]
    collected: exp.Expr = exp.ArrayAgg(this=exp.Struct(expressions=fields))
    if distinct:
        collected = exp.func("ARRAY_DISTINCT", collected)
    if keys:
        collected = exp.func(
            "ARRAY_SORT",
            collected,
            exp.Lambda(
                this=_order_comparator(keys),
                expressions=[exp.to_identifier("__l"), exp.to_identifier("__r")],
            ),
        )
    field = exp.Dot(this=exp.column("__e"), expression=exp.to_identifier("v"))
    return exp.func(
        "TRANSFORM", collected, exp.Lambda(this=field, expressions=[exp.to_identifier("__e")])
    )


def _order_comparator(keys: Sequence[exp.Expression]) -> exp.Expression:
    """A comparator of two structs `__l` and `__r` by their fields `k0, k1, ...` in the
    order `keys` (ORDER BY items: direction and NULLS FIRST/LAST) gives: -1, 0 or 1."""
    result: exp.Expression = rel.lit(0)
    for i in reversed(range(len(keys))):
        key = keys[i]
        # Which of the two goes first: -1 the left, 1 the right.
        nulls = -1 if key.args.get("nulls_first") else 1
        lower = 1 if key.args.get("desc") else -1
        left = exp.Dot(this=exp.column("__l"), expression=exp.to_identifier(f"k{i}"))
        right = exp.Dot(this=exp.column("__r"), expression=exp.to_identifier(f"k{i}"))
        null_left = exp.Is(this=left.copy(), expression=exp.null())
        null_right = exp.Is(this=right.copy(), expression=exp.null())
        cases = [
            (exp.and_(null_left.copy(), null_right.copy()), result),
            (null_left, rel.lit(nulls)),
            (null_right, rel.lit(-nulls)),
            (exp.LT(this=left.copy(), expression=right.copy()), rel.lit(lower)),
            (exp.GT(this=left, expression=right), rel.lit(-lower)),
        ]
        result = exp.Case(
            ifs=[exp.If(this=c, true=v.copy()) for c, v in cases], default=result.copy()
        )
    return result


#: Materialize's error for an aggregate over a collection holding a row a negative
#: number of times (`repeat_row(-1)`, or retractions of rows never inserted).
NEGATIVE_INPUT = "Non-positive multiplicity in an aggregate's input"


def _guarded(e: exp.Expr | None) -> exp.Expr:
    """`e`, or an error where the group holds a row a negative number of times: no
    aggregate of such a collection means anything (Materialize refuses it too)."""
    assert e is not None
    negative = exp.LT(this=exp.Min(this=rel.col(DIFF)), expression=rel.lit(0))
    error = exp.Anonymous(this="RAISE_ERROR", expressions=[exp.Literal.string(NEGATIVE_INPUT)])
    return exp.Case(ifs=[exp.If(this=negative, true=error)], default=e)


def _rewrite(e: exp.Expr) -> exp.Expression | None:
    """`e` with each aggregate weighted by `__diff__`; None if some aggregate has no rewrite."""
    unsupported = False

    def weigh(node: exp.Expression) -> exp.Expression:
        nonlocal unsupported
        d = rel.col(DIFF)
        if not isinstance(node, exp.AggFunc):
            return node
        arg = node.this
        if isinstance(arg, exp.Distinct) or isinstance(node, exp.Min | exp.Max | exp.AnyValue):
            return node
        if isinstance(node, exp.LogicalAnd | exp.LogicalOr):
            return node
        if isinstance(node, exp.Count):
            bigint = exp.DataType.build("bigint")
            if isinstance(arg, exp.Star) or arg is None:
                return exp.Cast(this=exp.Sum(this=d), to=bigint)
            present = exp.Not(this=exp.Is(this=arg.copy(), expression=exp.null()))
            return exp.Cast(
                this=exp.Sum(this=exp.If(this=present, true=d, false=rel.lit(0))), to=bigint
            )
        if isinstance(node, exp.Sum):
            scale = _decimal_scale(arg)
            if scale is not None:  # exact on every kernel (Spark's product rounds it)
                return exp.Anonymous(
                    this=numeric_division.WEIGHTED_SUM,
                    expressions=[arg.copy(), d, rel.lit(scale), rel.lit(0)],
                )
            return exp.Sum(this=exp.Mul(this=exp.paren(arg.copy()), expression=d))
        if isinstance(node, exp.Avg):
            total = exp.Sum(
                this=exp.Mul(
                    this=exp.Cast(this=arg.copy(), to=exp.DataType.build("double")), expression=d
                )
            )
            count = exp.Sum(
                this=exp.If(
                    this=exp.Not(this=exp.Is(this=arg.copy(), expression=exp.null())),
                    true=d,
                    false=exp.null(),
                )
            )
            return exp.Div(this=total, expression=count)
        unsupported = True
        return node

    result = e.copy().transform(weigh, copy=False)
    return None if unsupported else result


def _decimal_scale(e: exp.Expr) -> int | None:
    """The scale of `e` where it is a cast to a decimal (the planner's numerics), else None.

    >>> _decimal_scale(parse_one("CAST(x AS DECIMAL(38, 20))"))
    20
    """
    if not (isinstance(e, exp.Cast) and e.to.is_type(exp.DType.DECIMAL)):
        return None
    params = e.to.expressions
    if not params:  # each engine's default scale: no cast the planner writes
        return None
    return int(params[1].name) if len(params) == 2 else 0


@dataclass(frozen=True)
class Distinct(ReduceLogic):
    """Each present row once (`count > 0`)."""

    present_once = True

    def settled_in_arrow(self, inp, outp, columns, stamp):  # type: ignore[override]
        return driver.distinct_step(inp, outp, columns, stamp)

    def in_arrow(self, acc, keys, values, depth):  # type: ignore[override]
        present = acc.filter(pc.greater(acc[DIFF], 0))
        ones = pa.array(np.ones(present.num_rows, np.int64))
        return present.select([*keys, *values, *time_columns(depth)]).append_column(DIFF, ones)

    def query(self, keys, values, depth, dialect):  # type: ignore[override]
        cols = [rel.col(c) for c in (*keys, *values, *time_columns(depth))]
        return rel.select(
            _ACC,
            [*cols, exp.alias_(rel.lit(1), DIFF, quoted=True)],
            where=exp.GT(this=rel.col(DIFF), expression=rel.lit(0)),
        )


@dataclass(frozen=True)
class Threshold(ReduceLogic):
    """Each row with the multiplicity `expression` gives, a SQL expression over `__count__`."""

    expression: exp.Expr

    def query(self, keys, values, depth, dialect):  # type: ignore[override]
        weight = self.expression.transform(
            lambda n: rel.col(DIFF) if isinstance(n, exp.Column) and n.name == "__count__" else n
        )
        cols = [rel.col(c) for c in (*keys, *values, *time_columns(depth))]
        inner = rel.select(
            _ACC,
            [
                *cols,
                exp.alias_(
                    exp.Cast(this=weight, to=exp.DataType.build("bigint")), DIFF, quoted=True
                ),
            ],
        )
        return rel.select(
            inner, [*cols, rel.col(DIFF)], where=exp.NEQ(this=rel.col(DIFF), expression=rel.lit(0))
        )

    def describe(self) -> str:
        return f"Threshold({self.expression.sql()})"


@dataclass(frozen=True)
class Count(ReduceLogic):
    """Each row with its multiplicity as a column `count` (diff 1)."""

    column: str = "count"

    def in_arrow(self, acc, keys, values, depth):  # type: ignore[override]
        rows = acc.select([*keys, *values, *time_columns(depth)])
        ones = pa.array(np.ones(acc.num_rows, np.int64))
        return rows.append_column(self.column, acc[DIFF]).append_column(DIFF, ones)

    def query(self, keys, values, depth, dialect):  # type: ignore[override]
        cols = [rel.col(c) for c in (*keys, *values, *time_columns(depth))]
        return rel.select(
            _ACC,
            [
                *cols,
                exp.alias_(rel.col(DIFF), self.column, quoted=True),
                exp.alias_(rel.lit(1), DIFF, quoted=True),
            ],
        )


@dataclass(frozen=True)
class PythonLogic(ReduceLogic):
    """`function(key: tuple, group: pa.Table) -> pa.Table` per group (the slow path).

    The group table has the value columns and `__diff__`; the result has the
    output columns of `output` and optionally `__diff__` (default 1 per row).
    """

    function: Callable[[tuple, pa.Table], pa.Table]
    output: pa.Schema

    def desired(self, kernel, acc, keys, values, depth, schema):  # type: ignore[override]
        table = kernel.to_arrow(acc)
        times = time_columns(depth)
        group_cols = [*keys, *times]
        out_fields = [table.schema.field(k) for k in keys] + list(self.output)
        out_fields += [pa.field(t, pa.int64()) for t in times] + [pa.field(DIFF, pa.int64())]
        out_schema = pa.schema(out_fields)
        pieces: list[pa.Table] = []
        if table.num_rows:
            groups = table.group_by(group_cols, use_threads=False).aggregate([])
            for g in groups.to_pylist():
                mask = None
                for c in group_cols:
                    cond = pc.is_null(table[c]) if g[c] is None else pc.equal(table[c], g[c])
                    mask = cond if mask is None else pc.and_(mask, cond)
                group = table.filter(mask).select([*values, DIFF])
                result = self.function(tuple(g[k] for k in keys), group)
                n = result.num_rows
                if n == 0:
                    continue
                cols = {k: pa.array([g[k]] * n, table.schema.field(k).type) for k in keys}
                for f in self.output:
                    cols[f.name] = result[f.name].cast(f.type)
                for t in times:
                    cols[t] = pa.array([g[t]] * n, pa.int64())
                cols[DIFF] = (
                    result[DIFF].cast(pa.int64())
                    if DIFF in result.column_names
                    else pa.array([1] * n, pa.int64())
                )
                pieces.append(pa.table(cols, schema=out_schema))
        out = pa.concat_tables(pieces) if pieces else out_schema.empty_table()
        return kernel.from_arrow(out)

    def describe(self) -> str:
        return f"Python({getattr(self.function, '__name__', 'logic')})"


def parse_aggregates(items: Sequence[str | tuple[str, str]], dialect: str) -> Aggregates:
    """Aggregates from `"sum(x) AS s"` strings or `(name, expression)` pairs, weighted by
    the counts as they are (a negative count is no error: the runtime's API)."""
    pairs: list[tuple[str, exp.Expr]] = []
    for item in items:
        if isinstance(item, tuple):
            pairs.append((item[0], parse_one(item[1], read=dialect)))
            continue
        e = parse_one(item, read=dialect)
        if not isinstance(e, exp.Alias):
            raise SchemaError(f"aggregate {item!r} needs a name", hint="write it as '... AS name'")
        pairs.append((e.alias, e.this))
    return Aggregates(tuple(pairs), refuse_negative=False)
