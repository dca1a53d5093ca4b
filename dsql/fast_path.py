"""Fast-path reads: a one-off SELECT answered from an arrangement, with no dataflow.

A read whose optimized plan is a `Get` of a relation that keeps an arrangement
(a table, a materialized view, or a view with an index), possibly under one
linear function (map, filter, project, table functions; no `mz_now()`), is
answered from the arrangement's trace at the read's tick in one kernel query:
the history advanced to the tick and consolidated (what an import replays),
then the function, then accumulated (Materialize calls these fast-path peeks).

Invariant: the rows are those the dataflow path (`Session.read`: import, render,
run a round, capture, accumulate) gives; the function is evaluated over the same
consolidated updates, so it fails where that path fails. AS OF reads, reads of
plain views and anything else take the dataflow path (`peek` returns None).

>>> from dsql.session import Session
>>> from dsql.execute import Executor
>>> ex = Executor(Session(kernel="local"))
>>> _ = ex.run("CREATE TABLE t (a int); INSERT INTO t VALUES (1), (2), (2)")
>>> query = sqlglot.parse_one("SELECT a + 1 AS b FROM t WHERE a > 1", read="postgres")
>>> bound = ex.session.plan(query)
>>> peek(ex.session, bound).to_pylist()
[{'b': 3}, {'b': 3}]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa
import sqlglot
from sqlglot import exp

from dsql.planner.decorrelate import decorrelate
from dsql.planner.expr import Outer, SubqueryExpr, is_col
from dsql.planner.linear import JoinFunction
from dsql.planner.optimize import optimize
from dsql.planner.plan import (
    Constant,
    Filter,
    Get,
    Linear,
    Map,
    Plan,
    Project,
    Query,
    walk,
)
from dsql.planner.temporal import mentions_mz_now
from dsql.runtime import relational as rel
from dsql.runtime.dataflow import batch_schema
from dsql.runtime.lattice import DIFF, TIME
from dsql.runtime.linear import Branch, Branches, Step, Unnest
from dsql.runtime.linear import Linear as RuntimeLinear

if TYPE_CHECKING:
    from dsql.runtime.arrangement import Arranged
    from dsql.runtime.kernel.base import Frame, Kernel
    from dsql.session import Session

T = TypeVar("T")

#: Plan nodes a fast-path read may hold above its one `Get` (before optimizing).
_LINEAR = (Map, Filter, Project, Linear)


def candidate(plan: Plan) -> bool:
    """Whether a bound plan may take the fast path: one `Get` under maps, filters and
    projections with no subquery and no `mz_now()` (a cheap test before optimizing)."""
    gets = 0
    for node in walk(plan):
        if isinstance(node, Get):
            gets += 1
        elif not isinstance(node, _LINEAR):
            return False
        for e in _expressions(node):
            if mentions_mz_now(e) or any(not _plain(n) for n in e.walk()):
                return False
    return gets == 1


def peek(session: Session, bound: Query, optimized: Plan | None = None) -> pa.Table | None:
    """The read's rows from an arrangement at the current time, or None when the read
    needs a dataflow (module docstring). `optimized`: the plan, already optimized."""
    kernel = session.worker.kernel
    counts = peek_counts(session, bound, lambda frame, _: kernel.to_arrow(frame), optimized)
    if counts is None:
        return None
    from dsql.results import present, repeat_rows

    return present(repeat_rows(counts, DIFF, session.memory_limit), bound)


def peek_counts(
    session: Session,
    bound: Query,
    read: Callable[[Frame, Arranged], T],
    optimized: Plan | None = None,
) -> T | None:
    """`read(counts, arranged)` of the read's rows with their counts (`count_frame`) and
    the arrangement they come from, or None when the read needs a dataflow."""
    if optimized is None:
        if not candidate(bound.plan):
            return None
        optimized = optimize(decorrelate(bound.plan))
    shape = _shape(optimized)
    if shape is None:
        return None
    name, fn = shape
    arranged = _arranged(session, name)
    if arranged is None:
        return None
    params: list[int] = []
    steps = () if fn is None else _runtime_steps(fn, arranged.columns, params)
    if steps is None:
        return None
    probe = None if fn is None else _pinned_keys(fn, arranged)
    kernel = session.worker.kernel
    return held(
        session,
        name,
        arranged,
        lambda tick: read(count_frame(kernel, arranged, steps, tick, params, probe), arranged),
    )


def held(session: Session, name: str, arranged: Arranged, read: Callable[[int], T]) -> T:
    """`read(tick)` of relation `name`'s arrangement at the current time, its trace held
    meanwhile. As the dataflow path does: every write so far is final, the trace is held
    at the open tick (compaction stops there), then that tick closes too, so what the
    views emit at it (a temporal bound that falls on it) is in the trace before it is
    read; a view in error, before or since that round, is refused."""
    tick = session.close_time()
    session._check_failed(session.relations[name])
    handle = arranged.trace_handle()
    try:
        session.close_time(force=True)
        session._check_failed(session.relations[name])  # in error since this round?
        return read(tick)
    finally:
        handle.release()


def count_frame(
    kernel: Kernel,
    arranged: Arranged,
    steps: tuple[Step, ...],
    tick: int,
    params: list[int],
    probe: pa.Table | None = None,
) -> Frame:
    """The rows at `tick` with their counts (`__diff__`), a frame of `kernel` (lazy on
    Spark while a batch of the trace is there), by one query prepared once per
    shape (the tick is an input, `f`; the compared integers `params`, `p`): the history
    advanced to the tick and consolidated, `steps`, then summed. With no steps the
    history is summed as it is. `probe`: the values of the first key the steps' filter
    pins (`_pinned_keys`); the query then reads only the rows with those keys, where the
    kernel can pick them from every batch (a point read of a table stored by Spark is
    read from the few row groups that can hold the key, not by a job over the table)."""
    depth = arranged.depth
    frames = arranged.trace.frames()
    if probe is not None and frames:
        picked = [kernel.rows_with_keys(f, arranged.keys[:1], probe) for f in frames]
        if all(p is not None for p in picked):
            frames = [p for p in picked if p is not None]
    empty = batch_schema(arranged.schema, depth).empty_table()
    # With no rows the function still decides the columns' types.
    history = kernel.union(frames) if frames else kernel.from_arrow(empty)
    key = ("fast-path", rel.fingerprint(steps), arranged.columns, depth)
    prepared = kernel.cached(key, lambda: kernel.prepare(_query(kernel, arranged, steps)))
    at = kernel.from_arrow(pa.table({"t": pa.array([tick], pa.int64())}))
    inputs = {"h": history, "f": at}
    if params:
        values = {f"p{i}": pa.array([v], pa.int64()) for i, v in enumerate(params)}
        inputs["p"] = kernel.from_arrow(pa.table(values))
    return kernel.query(prepared, inputs)


def _pinned_keys(fn: JoinFunction, arranged: Arranged) -> pa.Table | None:
    """The values of the arrangement's first key that a conjunct of `fn`'s first filter
    pins (`key = literal`, `key IN (literals)`), as a one-column probe of the key's type;
    None when no conjunct does, or a value is not a literal of the key's kind. Every row
    the filter keeps has one of these values, so reading only those rows is exact."""
    if not arranged.keys or not fn.segments():
        return None
    key = arranged.keys[0]
    position = arranged.columns.index(key)
    kind = arranged.schema.field(key).type
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind)):
        return None
    segment = fn.segments()[0][0]
    for predicate in segment.predicates:
        values = _pinned(predicate, position)
        if values is None or any(isinstance(v, str) != pa.types.is_string(kind) for v in values):
            continue
        try:
            return pa.table({key: pa.array(values, kind)})
        except (pa.ArrowException, OverflowError, TypeError):
            return None
    return None


def _pinned(predicate: exp.Expression, position: int) -> list[object] | None:
    """The values `predicate` allows column `position` to take, when it is an equality
    with a literal or an IN list of literals (booleans excluded); else None. A NULL in
    an IN list matches no row, so it adds no value; `= NULL` is not pinned."""
    if isinstance(predicate, exp.EQ):
        sides = (predicate.this, predicate.expression)
        for column, other in (sides, sides[::-1]):
            if is_col(column, position):
                return _literals([other])
        return None
    if isinstance(predicate, exp.In) and is_col(predicate.this, position):
        if predicate.args.get("query") or predicate.args.get("unnest"):
            return None
        return _literals(predicate.expressions, skip_null=True)
    return None


def _literals(items: list[exp.Expression], skip_null: bool = False) -> list[object] | None:
    """The Python values of plain integer or string literals (casts of them looked
    through; NULLs left out with `skip_null`), or None if one is anything else or no
    value is left."""
    values = []
    for item in items:
        while isinstance(item, exp.Cast):
            item = item.this
        value = _literal(item)
        if value is None and skip_null:
            continue
        if value is _NOT_LITERAL or value is None or isinstance(value, bool):
            return None
        values.append(value)
    return values or None


def _query(kernel: Kernel, arranged: Arranged, steps: tuple[Step, ...]) -> exp.Query:
    columns, depth = arranged.columns, arranged.depth
    tick = exp.select(rel.col("t")).from_("f").subquery()
    source: str | exp.Query = "h"
    outputs = columns
    if steps:
        advanced = rel.select(
            "h",
            [
                *rel.passthrough(columns),
                (TIME, rel.greatest(rel.col(TIME), tick.copy())),
                (DIFF, rel.col(DIFF)),
            ],
        )
        linear = RuntimeLinear(steps)
        consolidated = rel.consolidate(advanced, columns, depth)
        source = linear.compile(kernel, consolidated, columns, depth)
        outputs = linear.output_columns(columns)
    total = exp.Cast(this=exp.Sum(this=rel.col(DIFF)), to=exp.DataType.build("bigint"))
    keys = [rel.col(c) for c in outputs]
    at_tick = exp.LTE(this=rel.col(TIME), expression=tick)
    query = rel.select(source, [*keys, exp.alias_(total, DIFF, quoted=True)], where=at_tick)
    query = query.group_by(*(k.copy() for k in keys), copy=False)
    return query.having(exp.NEQ(this=total.copy(), expression=rel.lit(0)), copy=False)


def literal_rows(bound: Query) -> pa.Table | None:
    """The rows of a `VALUES` list of plain literals (integers, strings, booleans, typed
    NULLs), built in Arrow with the types the dataflow would give them; None for anything
    else, or a value Arrow will not take as is (the dataflow path then decides, with its
    errors). An `INSERT ... VALUES` so costs no dataflow.

    >>> from dsql.session import Session
    >>> values = sqlglot.parse_one("VALUES (1, 'a'), (-2, NULL)", read="postgres")
    >>> literal_rows(Session(kernel="local").plan(values)).to_pylist()
    [{'column1': 1, 'column2': 'a'}, {'column1': -2, 'column2': None}]
    """
    plan = bound.plan
    if not isinstance(plan, Constant) or bound.visible != plan.arity or not plan.arity:
        return None
    arrays = []
    for i, column in enumerate(plan.columns):
        values = [_literal(row[i]) for row in plan.rows]
        target = _LITERAL_TYPES.get(column.type.this)
        if column.type.this == exp.DataType.Type.UNKNOWN and all(v is None for v in values):
            target = pa.null()  # a bare NULL: the engines' NULL type
        if target is None or any(v is _NOT_LITERAL for v in values):
            return None
        try:
            arrays.append(pa.array(values, target))
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            return None
    return pa.table(arrays, names=list(bound.column_names))


#: The SQL types whose literals `literal_rows` builds, and their Arrow types (as the
#: kernels produce them: `types.to_arrow`).
_LITERAL_TYPES = {
    exp.DataType.Type.SMALLINT: pa.int16(),
    exp.DataType.Type.INT: pa.int32(),
    exp.DataType.Type.BIGINT: pa.int64(),
    exp.DataType.Type.VARCHAR: pa.string(),
    exp.DataType.Type.TEXT: pa.string(),
    exp.DataType.Type.BOOLEAN: pa.bool_(),
}
_NOT_LITERAL = object()


def _literal(e: exp.Expression) -> object:
    """The Python value of a plain literal, else `_NOT_LITERAL`."""
    if isinstance(e, exp.Null) or (isinstance(e, exp.Cast) and isinstance(e.this, exp.Null)):
        return None
    if isinstance(e, exp.Boolean):
        return bool(e.this)
    negative = isinstance(e, exp.Neg)
    if negative:
        e = e.this
    if type(e) is not exp.Literal:
        return _NOT_LITERAL
    if e.is_string:
        return _NOT_LITERAL if negative else e.this
    text = e.this
    if not (text.isascii() and text.isdigit()):
        return _NOT_LITERAL
    return -int(text) if negative else int(text)


def _shape(plan: Plan) -> tuple[str, JoinFunction | None] | None:
    """(the relation read, the function over it or None) for `Get` or `Linear(Get)`."""
    if isinstance(plan, Get):
        return plan.name, None
    if isinstance(plan, Linear) and isinstance(plan.input, Get):
        return plan.input.name, plan.function
    return None


def _arranged(session: Session, name: str) -> Arranged | None:
    """The arrangement that holds relation `name`'s rows (its own, or an index's)."""
    relation = session.relations.get(name)
    if relation is None:
        return None
    if relation.arrangement is not None:
        return relation.arrangement.node  # type: ignore[no-any-return]
    indexes = session.indexes.on(name)
    if indexes:
        return indexes[0].arrangement.node  # type: ignore[no-any-return]
    return None


def _runtime_steps(
    fn: JoinFunction, columns: tuple[str, ...], params: list[int]
) -> tuple[Step, ...] | None:
    """`fn` as the runtime's linear steps over `columns` (`_c0..`), output `_c0..`, as
    `render_linear` builds them; None if it has temporal bounds (the dataflow path's).
    Integers compared in its predicates are appended to `params` and read from the
    relation `p` (`_parameters`), so reads that differ only in them share one query."""
    steps: list[Step] = []
    width = len(columns)
    for seg, table in fn.segments():
        if any(mentions_mz_now(p) for p in seg.predicates):
            return None
        n = len(seg.outputs)
        outputs = tuple((f"_c{i}", e.copy()) for i, e in enumerate(seg.outputs))
        condition = (
            exp.and_(*(p.copy() for p in seg.predicates), copy=False) if seg.predicates else None
        )
        where = _parameters(condition, params) if condition is not None else None
        diff = rel.lit(-1) if seg.negated else None
        plain = n == width and all(is_col(e, i) for i, e in enumerate(seg.outputs))
        if not (plain and where is None and diff is None):
            steps.append(Branches((Branch(outputs or (("_c0", rel.lit(0)),), where, (), diff),)))
        width = n or 1
        if table is None:
            break
        keep = tuple(f"_c{i}" for i in range(n))
        if table.columns:
            steps.append(Unnest(f"_c{n}", table.function.copy(), keep))
            width = n + 1
        else:
            identity = tuple(rel.passthrough(keep or ("_c0",)))
            steps.append(Branches.single(identity, diff=table.function.copy()))
    return tuple(steps)


_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _parameters(where: exp.Expr, params: list[int]) -> exp.Expression:
    """`where` with each integer literal that a comparison reads replaced by column
    `p<i>` of the one-row relation `p` (its value appended to `params`), cast to the
    type the literal has (INT when it fits, else BIGINT): a comparison's truth, and
    so the read, does not change."""

    def swap(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Literal) and isinstance(node.parent, _COMPARISONS)):
            return node
        if _in_spelling(node):
            return node  # a kernel's own spelling: a lambda may not read a subquery
        if node.is_string or not node.this.isdigit():
            return node
        value = int(node.this)
        if value >= 2**63:
            return node
        name = f"p{len(params)}"
        params.append(value)
        read = exp.select(rel.col(name)).from_("p").subquery()
        kind = "int" if value < 2**31 else "bigint"
        return exp.Cast(this=read, to=exp.DataType.build(kind))

    return where.transform(swap)


def _in_spelling(node: exp.Expression) -> bool:
    """Whether `node` lies inside a per-kernel spelling (`DSQL_PER_KERNEL(...)`)."""
    parent = node.parent
    while parent is not None:
        if isinstance(parent, exp.Anonymous) and parent.name.upper() == "DSQL_PER_KERNEL":
            return True
        parent = parent.parent
    return False


def _expressions(node: Plan) -> tuple[exp.Expression, ...]:
    match node:
        case Map(exprs=e) | Filter(predicates=e):
            return e
    return ()


def _plain(node: object) -> bool:
    """Not a subquery or an outer reference (those need decorrelation's joins)."""
    return not isinstance(node, SubqueryExpr | Outer | exp.Subquery)


__all__ = ["candidate", "literal_rows", "peek", "sqlglot"]
