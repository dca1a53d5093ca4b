"""Reads' results: updates accumulated into rows, and rows presented as a query asks.

A read's dataflow yields `(row, time, diff)` updates; `accumulate` sums them up to
the read's tick and repeats each row by its count (`repeat_rows`); `present` orders,
limits and names the rows (`Query.order`, `limit`, `offset`, `visible`). Both run in
one in-process DuckDB whose cursors reads share. `reads_nothing` tells the reads of
no relation, which need not close the clock's tick. `Result` is a statement's outcome.

Invariant: a correct result has no row with a negative count (`repeat_rows` raises).

>>> import pyarrow as pa
>>> repeat_rows(pa.table({"_c0": ["a", "b"], "n": [2, 1]}), "n").column(0).to_pylist()
['a', 'a', 'b']
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Generator
from dataclasses import dataclass, field
from decimal import Context, Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsql.errors import DataError
from dsql.planner import interval
from dsql.planner.expr import Outer, SubqueryExpr
from dsql.planner.plan import Get, Plan, Query, walk
from dsql.planner.stateful import Distinct, LetRec, Reduce, Threshold, TopK, expressions_of
from dsql.planner.temporal import mentions_mz_now
from dsql.planner.types import DEFAULT_DECIMAL
from dsql.runtime import memory
from dsql.runtime.kernel import float_text
from dsql.runtime.lattice import DIFF, TIME


@dataclass
class Result:
    """A statement's outcome: rows (Arrow, user column names) and/or a status message."""

    table: pa.Table | None = None
    status: str = ""
    rowcount: int = -1
    #: For SUBSCRIBE: the running `Subscription`, whose later updates callers poll.
    subscription: Any = None
    #: Notices of the statement's rounds (a materialized view went into error).
    notices: list[str] = field(default_factory=list)
    #: For a result streamed from Spark (`dsql.exports`): the rows after `table`, a
    #: bounded batch at a time.
    batches: Generator[pa.Table, None, None] | None = None
    #: For COPY ... TO STDOUT: the data, which the client writes out as it is.
    output: str | None = None


def reads_nothing(plan: Plan) -> bool:
    """Whether a plan reads no relation (not even in a subquery), never mentions `mz_now()`
    and reduces nothing."""
    for node in walk(plan):
        # A reduction (and a loop) emits only at complete times, which this round's
        # open tick is not: such plans take the ordinary read path.
        if isinstance(node, Get | Reduce | Distinct | Threshold | TopK | LetRec):
            return False
        for e in expressions_of(node):
            # A LATERAL's outer reference becomes a Distinct when decorrelated.
            if e.find(SubqueryExpr, Outer) is not None or mentions_mz_now(e):
                return False
    return True


def accumulate(updates: pa.Table, tick: int, arity: int, limit: int | None = None) -> pa.Table:
    """The rows a stream of updates holds at `tick`, each repeated by its count (in DuckDB);
    more than `limit` bytes of rows is `memory.exceeded`."""
    cols = ", ".join(f'"_c{i}"' for i in range(arity)) if arity else '0 AS "_c0"'
    con = _duckdb()
    try:
        con.register("u", updates)
        counts = con.sql(
            f'SELECT {cols}, CAST(SUM("{DIFF}") AS BIGINT) AS n FROM u WHERE "{TIME}" <= {tick} '
            f'GROUP BY ALL HAVING SUM("{DIFF}") <> 0'
        ).to_arrow_table()
    finally:
        con.close()
    return repeat_rows(counts, "n", limit)


def repeat_rows(counts: pa.Table, count: str, limit: int | None = None) -> pa.Table:
    """Each row of `counts` repeated by its column `count` (dropped); an error for a
    negative count, which no valid collection has (`repeat_row(n)` with a negative `n`
    makes one unless other rows cancel it, and then it has no rows to show)."""
    n = counts[count]
    least, most = pc.min_max(n).values()
    if counts.num_rows and least.as_py() < 0:
        raise negative_multiplicity(least.as_py(), "result")
    rows = counts.drop_columns([count])
    if not counts.num_rows or most.as_py() == 1:  # each row once: nothing to repeat
        return rows
    total = pc.sum(n).as_py()
    if limit is not None and total * max(rows.nbytes // rows.num_rows, 1) > limit:
        raise memory.exceeded(limit, f"its result holds {total} rows")
    return rows.take(np.repeat(np.arange(counts.num_rows), n.to_numpy()))


def negative_multiplicity(count: int, what: str) -> DataError:
    """The error of a `what` (a result, a snapshot) holding a row `count` times, `count`
    negative: no valid collection has such a row."""
    return DataError(
        f"invalid data: a row of the {what} has a negative multiplicity ({count})",
        hint="repeat_row(n) with a negative n retracts rows; a SELECT's result and a view "
        "must keep every row's count at zero or above, e.g. repeat_row(greatest(n, 0))",
    )


def python_values(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """A result column's values in Python, as PostgreSQL presents them.

    A `real` reads as the double nearest its shortest decimal text (as psycopg reads
    PostgreSQL's). An unbounded `numeric` is stored with `types.DEFAULT_DECIMAL`'s fixed scale; its
    values are shown without the fraction's trailing zeros (PostgreSQL keeps each
    value's own scale, which a fixed-scale column no longer knows).

    >>> python_values(pa.array([Decimal("1000"), Decimal("1.5")], pa.decimal128(38, 10)))
    [Decimal('1000'), Decimal('1.5')]
    >>> python_values(pa.array([0.1], pa.float32()))
    [0.1]

    An interval is a `datetime.timedelta` where it has no months (exactly its days and
    microseconds), else PostgreSQL's text of it: a month has no fixed length, and
    psycopg's 30 days would make `'1 mon'` and `'30 days'` one value.

    >>> day_hour, months = (0, 1, 3_600_000_000_000), (14, 0, 0)
    >>> python_values(pa.array([day_hour, months], pa.month_day_nano_interval()))
    [datetime.timedelta(days=1, seconds=3600), '1 year 2 mons']
    """
    values = column.to_pylist()
    if pa.types.is_interval(column.type):
        return [None if v is None else interval_value(v) for v in values]
    if pa.types.is_float32(column.type):  # a real's value, not its 64-bit widening's digits
        return [None if v is None else float(shortest_text(v, single=True)) for v in values]
    if column.type != _UNBOUNDED:
        return values
    return [None if v is None else _without_trailing_zeros(v) for v in values]


_UNBOUNDED = pa.decimal128(*DEFAULT_DECIMAL)


def interval_value(value: pa.MonthDayNano) -> dt.timedelta | str:
    """An interval as a result presents it in Python (`python_values`)."""
    micros = value.nanoseconds // 1000
    if value.months == 0:
        return dt.timedelta(days=value.days, microseconds=micros)
    return interval.text(value.months, value.days, micros)


def shortest_text(value: float, single: bool = False) -> str:
    """The shortest decimal text that reads back as `value` (as a 32-bit float where
    `single`: `0.1`, not `0.10000000149011612`)."""
    return float_text.shortest(value, single)


def _without_trailing_zeros(value: Decimal) -> Decimal:
    """A decimal with no zeros ending its fraction, never in exponent form (1000, not 1E+3)."""
    normal = value.normalize(_EXACT)  # the default context would round to 28 digits
    if normal.as_tuple().exponent <= 0:  # type: ignore[operator]
        return normal
    return normal.quantize(Decimal(1), context=_EXACT)


#: A context that holds every digit of a 38-digit numeric (the default rounds to 28).
_EXACT = Context(prec=80)


def _duckdb() -> Any:
    """A fresh cursor on one in-process DuckDB shared by reads (a new database per read
    costs tens of milliseconds; a cursor, with its own temporary tables, almost none)."""
    global _DUCKDB
    if _DUCKDB is None:
        from dsql.runtime.kernel import duckdb_sandbox

        _DUCKDB = duckdb_sandbox.connect()
    return _DUCKDB.cursor()


_DUCKDB: Any = None


def present(table: pa.Table, bound: Query) -> pa.Table:
    """Order, limit and name a read's rows as the query asks."""
    visible = bound.visible
    if bound.order or bound.limit is not None or bound.offset:
        order = ", ".join(
            f'"_c{o.column}" {"DESC" if o.desc else "ASC"} '
            f"NULLS {'FIRST' if o.nulls_first else 'LAST'}"
            for o in bound.order
        )
        sql = "SELECT * FROM t" + (f" ORDER BY {order}" if order else "")
        if bound.limit is not None:
            sql += f" LIMIT {bound.limit}"
        if bound.offset:
            sql += f" OFFSET {bound.offset}"
        con = _duckdb()
        con.register("t", table)
        table = con.sql(sql).to_arrow_table()
        con.close()
    if table.num_columns > visible:
        table = table.select(list(range(visible)))
    if visible == 0:
        return table.select([])  # no columns, but as many rows (`SELECT FROM t`)
    return table.rename_columns(list(bound.column_names))


__all__ = [
    "Result",
    "accumulate",
    "present",
    "python_values",
    "shortest_text",
    "reads_nothing",
    "negative_multiplicity",
    "repeat_rows",
]
