"""The Spark kernel's frames: Spark DataFrames, and Spark SQL over them.

DataFrame API only (no RDDs, no SparkContext), so the same code runs on a local
session, a cluster and Spark Connect. Queries are rendered by sqlglot in the
Spark dialect and evaluated with `SparkSession.sql`, the input frames passed as
arguments (Spark binds them as temporary views for the analysis only).

`SparkFrames` holds what is known of each frame while it lives, which the storage,
probes and merges built on it read: the Arrow table a frame was made from, whether it
was computed from the driver's rows alone (and from how many: a query over few of them
runs in one partition, one job with no shuffle), the columns its rows are sorted by
within every partition, and the keys it is bucketed by.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from dsql.errors import (
    ExecutionError,
    SchemaError,
    StateLostError,
    UnsupportedError,
    numeric_overflow,
)
from dsql.runtime import memory
from dsql.runtime.kernel.base import Frame, Kernel, Placement, Prepared, engine_message
from dsql.runtime.kernel.spark.state import LOST_HINT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class SparkFrames(Kernel):
    """Spark DataFrames as a kernel's frames: made, queried, united and read into the
    driver; what is known of each frame (see module docstring)."""

    def __init__(self, spark: SparkSession | None = None, small_rows: int | None = None) -> None:
        self._spark = spark
        #: The memory budget (`runtime.memory`) of what one step collects into the driver
        #: (None: unbounded); Spark's executors manage their own memory, and spill.
        self.memory_limit: int | None = None
        if small_rows is not None:
            self.small_rows = small_rows
        #: The Arrow table each frame made by `from_arrow` came from, while the frame
        #: lives: what `bounds` reads without an action.
        self._arrow: weakref.WeakKeyDictionary[DataFrame, pa.Table] = weakref.WeakKeyDictionary()
        #: Frames computed from such frames alone (queries and unions over them, while
        #: they live), each with the rows of the Arrow tables it reads: `materialize`
        #: reads their head without caching them first, and a query over small ones runs
        #: in one partition (`_one_partition`).
        self._from_driver: weakref.WeakKeyDictionary[DataFrame, int] = weakref.WeakKeyDictionary()
        #: Per prepared query's text, whether it joins (`_one_partition` hints its inputs),
        #: and its inputs read only by scalar subqueries (`_scalar_only`), by bound name.
        self._joins: dict[str, bool] = {}
        self._scalar: dict[str, frozenset[str]] = {}
        #: The columns each frame's rows are sorted by within every partition, while the
        #: frame lives: a stored batch's keys, carried through queries that keep their
        #: input's rows in order (`_order_map`). `materialize` by a prefix of them writes
        #: without a shuffle or a sort.
        self._order: weakref.WeakKeyDictionary[DataFrame, tuple[str, ...]] = (
            weakref.WeakKeyDictionary()
        )
        #: Per prepared query's text, its output columns that are input columns passed
        #: through, as (output, input) pairs, when it keeps its one input's row order.
        self._order_maps: dict[str, tuple[tuple[str, str], ...] | None] = {}
        #: The keys each frame is bucketed by, while it lives: bucketed stored batches and
        #: unions of them. Spark reads such a frame as hash-partitioned by those keys.
        self._bucketed: weakref.WeakKeyDictionary[DataFrame, tuple[str, ...]] = (
            weakref.WeakKeyDictionary()
        )

    def owns(self, frame: Frame) -> bool:
        from pyspark.sql import DataFrame  # classic and Spark Connect frames alike

        return isinstance(frame, DataFrame)

    def placement(self, frame: Frame | None = None) -> Placement:
        return Placement.SPARK

    @property
    def spark(self) -> SparkSession:
        """The Spark session, started on first use."""
        if self._spark is None:
            from dsql.runtime.spark_session import get_spark

            self._spark = get_spark()
        return self._spark

    def adopt(self, spark: SparkSession) -> None:
        """Run on `spark`: the session a kernel built before Spark was needed starts."""
        self._spark = spark

    def from_arrow(self, table: pa.Table) -> DataFrame:
        if any(pa.types.is_interval(f.type) for f in table.schema):
            raise refuse_intervals()
        if not table.num_columns:  # Arrow would carry no rows: as many rows of nothing
            frame = self.spark.range(table.num_rows).select()
        elif table.num_rows == 0:
            from pyspark.sql.pandas.types import from_arrow_schema

            frame = self.spark.createDataFrame([], from_arrow_schema(table.schema))
        else:
            frame = self.spark.createDataFrame(table)
        self._arrow[frame] = table
        self._from_driver[frame] = table.num_rows
        return frame

    def set_memory_limit(self, limit: int) -> None:
        self.memory_limit = limit

    def to_arrow(self, frame: DataFrame) -> pa.Table:
        """The frame's rows in the driver; more than `memory_limit` bytes of them are
        `memory.exceeded`, as a local query's result is (they are dropped at once)."""
        held = self._arrow.get(frame)
        try:
            if held is not None and _same_types(held.schema, self.schema(frame)):
                table = held  # the rows the frame was made from, as Spark reads them: no job
            elif not frame.columns:  # Spark's Arrow batches of no columns carry no rows
                return _no_columns(frame.count())
            else:
                table = frame.toArrow()
        except Exception as error:  # noqa: BLE001 - engine errors become DsqlErrors
            raise _engine_error(error) from error
        if self.memory_limit is not None and table.nbytes > self.memory_limit:
            size = table.nbytes
            del table
            raise memory.exceeded(
                self.memory_limit, f"the rows it collects into the driver take {size >> 20}MB"
            )
        return table

    def prepare(self, select: exp.Query) -> Prepared:
        # Inputs are bound as `{__in_name}` placeholders of `spark.sql(text, **frames)`,
        # which reads the text as a format string: every brace of the query's own text
        # (string literals, quoted names) is doubled in the tree, and each input table
        # becomes a placeholder node, so nothing else of the text is substituted.
        ctes = {c.alias for c in select.find_all(exp.CTE)}
        renamed: dict[str, str] = {}

        def rename(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Table) and not node.db and node.name not in ctes:
                bound = renamed.setdefault(node.name, f"__in_{node.name.strip('_')}")
                table = exp.Table(this=exp.Var(this="{" + bound + "}"))
                alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(node.name))
                table.set("alias", _escaped(alias))
                return table
            return _escaped(node)

        tree = select.transform(rename)
        text = self.sql(tree)
        self._order_maps[text] = _order_map(select)
        self._joins[text] = select.find(exp.Join) is not None
        self._scalar[text] = frozenset(renamed[n] for n in _scalar_only(select) if n in renamed)
        return Prepared(text, tuple(sorted(renamed.items())))

    def run(self, prepared: Prepared, inputs: Mapping[str, Frame]) -> DataFrame:
        frames = {bound: inputs[name] for name, bound in prepared.tables if name in inputs}
        text = prepared.text
        bound = self._one_partition(
            frames, self._joins.get(text, False), self._scalar.get(text, frozenset())
        )
        try:
            result = self.spark.sql(prepared.text, **bound)
        except Exception as error:  # noqa: BLE001
            raise _engine_error(error, prepared.text) from error
        self._derived(result, frames.values())
        self._keep_order(result, prepared.text, frames.values())
        return result

    def _keep_order(self, result: DataFrame, text: str, inputs: Any) -> None:
        """Record the order `result` keeps of its one input's (`_order`), if any."""
        sources = list(inputs)
        mapping = self._order_maps.get(text)
        order = self._order.get(sources[0], ()) if len(sources) == 1 else ()
        if mapping is None or not order:
            return
        named = {source: out for out, source in reversed(mapping)}
        kept: list[str] = []
        for column in order:  # the longest prefix of the order passed through
            if column not in named:
                break
            kept.append(named[column])
        if kept:
            self._order[result] = tuple(kept)

    def _one_partition(
        self, frames: dict[str, Any], joins: bool, scalar: frozenset[str]
    ) -> dict[str, Any]:
        """`frames`, each in one partition when all are computed from at most `small_rows`
        of the driver's rows (`_from_driver`), else as they are; but those the query
        reads only by scalar subqueries (`scalar`), which Spark evaluates apart, without
        a job for a local relation as it is and with one for a partition of it.

        A query over frames in one partition needs no exchange: one partition satisfies
        every distribution an aggregate, a window or a sort asks of its input, so the
        query runs as one job, where adaptive execution runs each shuffle of it as a job
        of its own (a delta's consolidation with a join and a GROUP BY: 3 jobs against 1).
        A join of them is hinted a shuffled hash join, which reads both sides in their
        partition, where a broadcast would collect one side first in a job of its own."""
        rows = [self._from_driver.get(frame) for frame in frames.values()]
        if not frames or None in rows or sum(rows) > self.small_rows:  # type: ignore[arg-type]
            return frames
        single = dict(frames)
        for name, frame in frames.items():
            if name not in scalar:
                single[name] = (
                    frame.coalesce(1).hint("shuffle_hash") if joins else frame.coalesce(1)
                )
        return single

    def _derived(self, result: DataFrame, inputs: Any) -> None:
        """Mark `result` as computed from the driver's rows when all `inputs` are."""
        rows = [self._from_driver.get(frame) for frame in inputs]
        if None not in rows:
            self._from_driver[result] = sum(rows)  # type: ignore[arg-type]

    def schema(self, frame: DataFrame) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema

        # Timestamps as `toArrow` gives them (UTC instants); no time zone fails for them.
        return to_arrow_schema(frame.schema, timezone="UTC")

    def union(self, frames: Sequence[Frame]) -> DataFrame:
        result = frames[0]
        for frame in frames[1:]:
            result = result.unionByName(frame)
        if len(frames) > 1:
            self._derived(result, frames)
            keys = {self._bucketed.get(f) for f in frames}
            if len(keys) == 1 and None not in keys:  # Spark keeps their partitioning
                self._bucketed[result] = keys.pop()  # type: ignore[assignment]
        return result


#: What Spark's error says when a file it listed (a stored batch's) cannot be read: a
#: read that would otherwise come out short, so an error of its own.
_FILE_GONE = (
    "FILE_NOT_EXIST",
    "FileNotFoundException",
    "PATH_NOT_FOUND",
    "CANNOT_READ_FILE_FOOTER",
)

#: A file's URI in Spark's message (`file:///...parquet`), without the sentence's full stop.
_URI = re.compile(r"([A-Za-z][\w+.-]*:/\S*?)\.?(?:\s|$)")


def _engine_error(error: Exception, text: str | None = None) -> Exception:
    """Turn a Spark exception into a DsqlError with the first line of Spark's message."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    message = lines[0] if lines else repr(error)
    kind = type(error).__name__
    if kind == "PythonException":
        raised = [line for line in lines if re.match(r"^[A-Za-z_.]+(Error|Exception):", line)]
        message = raised[-1] if raised else message
        if raised and raised[-1].split(":")[0].endswith("SchemaError"):
            return SchemaError(raised[-1].split(":", 1)[1].strip())
    gone = [line for line in lines if any(sign in line for sign in _FILE_GONE)]
    if gone:
        found = _URI.search(gone[0])
        return StateLostError(
            f"a file of dsql's stored state is gone: {gone[0].lstrip(': ')}",
            path=found.group(1) if found else None,
            hint=LOST_HINT,
        )
    if "UNRESOLVED_COLUMN" in message or "cannot be resolved" in message:
        return SchemaError(
            f"unknown column: {engine_message(message, None)[0]}", hint="check the column names"
        )
    if "NUMERIC_VALUE_OUT_OF_RANGE" in message:
        return numeric_overflow()
    if "division by zero" in message.lower() or "DIVIDE_BY_ZERO" in message:
        return ExecutionError("division by zero")
    if "ARITHMETIC_OVERFLOW" in message:  # Spark's message does not name the type
        return ExecutionError(
            "integer out of range (integer or bigint)", hint="cast to numeric for larger values"
        )
    raised_here = _USER_RAISED.search(message)
    if raised_here is not None:  # a RAISE_ERROR of the plan whose message is computed
        return ExecutionError(raised_here.group(1))
    # The statement is dsql's, over internal names: the user's is shown instead.
    said, own = engine_message(message, text)
    return ExecutionError(said if own else f"Spark failed ({kind}): {said}")


#: Spark's error for `raise_error(message)`: users cannot call it, so it is the plan's.
_USER_RAISED = re.compile(r"\[USER_RAISED_EXCEPTION\] (.*?)(?: SQLSTATE: \w+)?$")


def _same_types(held: pa.Schema, spark: pa.Schema) -> bool:
    """Whether an Arrow table of schema `held` is what Spark's `toArrow` gives of the
    frame made from it (schema `spark`): the same names and types (not so for types
    Spark converts, such as a timestamp without a time zone or a large string)."""
    return held.names == spark.names and held.types == spark.types


def _escaped(node: exp.Expression) -> exp.Expression:
    """`node` with the braces of its own text doubled (a string literal, a name, a
    keyword), so `spark.sql`'s formatting gives them back unchanged."""
    if isinstance(node, exp.Literal | exp.Identifier | exp.Var) and isinstance(node.this, str):
        if "{" in node.this or "}" in node.this:
            node = node.copy()
            node.set("this", node.this.replace("{", "{{").replace("}", "}}"))
    return node


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _no_columns(rows: int) -> pa.Table:
    """An Arrow table of `rows` rows and no columns."""
    return pa.table({"_": pa.nulls(rows)}).drop(["_"])


def _scalar_only(query: exp.Expr) -> set[str]:
    """The tables `query` reads only inside scalar subqueries (a subquery that is an
    expression's operand, not a FROM or JOIN item, an IN or an EXISTS: Spark makes those
    joins).

    >>> sorted(_scalar_only(exp.maybe_parse("SELECT x FROM a WHERE t <= (SELECT t FROM f)")))
    ['f']
    """
    scalar: set[str] = set()
    other: set[str] = set()
    for table in query.find_all(exp.Table):
        select = table.find_ancestor(exp.Select)
        holder = select.parent if select is not None else None
        outer = holder.parent if isinstance(holder, exp.Subquery) else None
        operand = outer is not None and not isinstance(outer, _NOT_SCALAR)
        (scalar if operand else other).add(table.name)
    return scalar - other


#: Where a subquery is read as rows rather than as a value.
_NOT_SCALAR = (exp.From, exp.Join, exp.In, exp.Exists, exp.SetOperation, exp.CTE, exp.Lateral)


#: What a SELECT may not have and still keep its input's rows in order.
_REORDERING = (
    "with",
    "joins",
    "laterals",
    "group",
    "having",
    "qualify",
    "distinct",
    "order",
    "limit",
    "offset",
)


def _order_map(query: exp.Expr) -> tuple[tuple[str, str], ...] | None:
    """The (output, input) column pairs of a query that keeps its one input's rows in
    their order (a SELECT of columns and per-row expressions, maybe filtered, over one
    table or over such a SELECT: no join, grouping, aggregate, window, DISTINCT, ORDER
    BY or LIMIT), an input column passed through under an output name; None for any
    other query."""
    if not isinstance(query, exp.Select) or any(query.args.get(a) for a in _REORDERING):
        return None
    where = query.args.get("where")
    if any(
        e.find(exp.Query, exp.Exists) for e in [*query.expressions, *([where] if where else [])]
    ):
        return None  # a subquery may be planned as a join, which may reorder
    source = query.args.get("from_")
    inner = source.this if isinstance(source, exp.From) else None
    below: dict[str, str] | None = None
    if isinstance(inner, exp.Subquery):
        pairs = _order_map(inner.this)
        if pairs is None:
            return None
        below = dict(pairs)
    elif not isinstance(inner, exp.Table):
        return None
    passed = []
    for e in query.expressions:
        if e.find(exp.AggFunc, exp.Window, exp.Star):  # `find` looks at `e` itself too
            return None
        column = e.unalias() if isinstance(e, exp.Alias) else e
        if isinstance(column, exp.Column):
            name = column.name if below is None else below.get(column.name)
            if name is not None:
                passed.append((e.alias_or_name, name))
    return tuple(passed)


def refuse_intervals() -> UnsupportedError:
    """Spark's refusal of interval values: its CalendarIntervalType cannot be stored in
    Parquet, and its day-time and year-month intervals split what PostgreSQL's keeps
    together (months, days and microseconds)."""
    return UnsupportedError(
        "interval values are not supported on the spark kernel",
        hint="run queries over intervals on kernel='local', or store the parts as integers",
    )


def has_intervals(tree: exp.Expr) -> bool:
    """Whether `tree` makes or reads an interval (a cast, literal or interval function)."""
    for node in tree.walk():
        if isinstance(node, exp.Interval):
            return True
        if isinstance(node, exp.DataType) and node.is_type(exp.DType.INTERVAL):
            return True
        if isinstance(node, exp.Anonymous) and node.name.upper().startswith("DSQL_IV_"):
            return True
    return False
