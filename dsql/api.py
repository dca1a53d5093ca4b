"""The PEP 249 face of a session: `connect()`, `Connection`, `Cursor`, and `compile()`.

A connection owns one `Session`; statements run as they execute (no transactions to
commit). Parameters use the qmark style. Beyond PEP 249, in DuckDB's style: `.arrow()`
(= `.fetch_arrow_table()`), `.df()`, and for Spark `.to_spark()`; tables load from Spark
DataFrames, Arrow tables or files (`con.create_table`), views read out as DataFrames
(`con.table("v").to_spark()`). After `cur.execute("SUBSCRIBE ...")` the fetch methods
return the updates available so far, waiting at most `timeout` seconds for some.

>>> import dsql
>>> con = dsql.connect()
>>> cur = con.execute("CREATE TABLE t (a int)")
>>> _ = con.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
>>> con.execute("SELECT count(*) AS n FROM t").fetchall()
[(2,)]
>>> plan = dsql.compile("SELECT a + 1 AS b FROM t WHERE a > 1", con)
>>> plan.columns, "Get t" in plan.explain()
([('b', 'int')], True)
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dsql import errors, grammar
from dsql.compiled import CompiledQuery, compile, query_of
from dsql.errors import InterfaceError
from dsql.execute import Executor
from dsql.results import Result, python_values
from dsql.session import Session, default_kernel
from dsql.subscribe import Subscription
from dsql.timeout import parse_duration

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"
#: How long a SUBSCRIBE fetch waits between polls while it has a timeout to spend.
_POLL_SECONDS = 0.05


def connect(
    spark: Any = None,
    master: str | None = None,
    clock: str = "manual",
    kernel: str | None = None,
    placement_threshold: int | None = None,
    statement_timeout: float | str | None = None,
    **spark_conf: Any,
) -> Connection:
    """A connection to a new dsql session.

    `kernel`: "auto" (the default, or `$DSQL_KERNEL`): each relation in-process (DuckDB)
    while it has at most `placement_threshold` rows (default 1,000,000), on Spark once it
    outgrows that, Spark started only then; "local": always in-process; "spark": every
    step on Spark. `spark` adopts an existing SparkSession (the Spark kernel unless a
    kernel is named); `master` and `spark_conf` configure the one dsql starts.
    `statement_timeout` (seconds, or text like '2s') bounds each statement, as
    `SET statement_timeout` does.
    """
    kernel = kernel or ("spark" if spark is not None else default_kernel())
    conf = {k: str(v) for k, v in spark_conf.items()} or None
    start = None
    if spark is None and (master is not None or conf):
        from dsql.runtime.spark_session import get_spark

        if kernel == "spark":
            spark = get_spark(master=master, conf=conf)
        else:
            start = lambda: get_spark(master=master, conf=conf)  # noqa: E731
    session = Session(kernel, clock, spark, placement_threshold, start_spark=start)
    connection = Connection(session)
    connection.executor.statement_timeout = parse_duration(statement_timeout)
    return connection


class Connection:
    """A session with PEP 249 methods plus DuckDB-style shortcuts and Spark interop."""

    # PEP 249's optional extension: the exception classes as connection attributes.
    Error = errors.DsqlError
    ProgrammingError = errors.ProgrammingError
    OperationalError = errors.OperationalError

    def __init__(self, session: Session) -> None:
        self.session = session
        self.executor = Executor(session)
        self.closed = False
        self._subscriptions: list[Subscription] = []

    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> Cursor:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Sequence[Sequence[Any]]) -> Cursor:
        return self.cursor().executemany(sql, seq_of_parameters)

    def subscribe(
        self,
        target: str,
        snapshot: bool = True,
        progress: bool = False,
        as_of: int | None = None,
        up_to: int | None = None,
    ) -> Updates:
        """Batches of updates of a view or query (`SUBSCRIBE` as an iterator; never blocks)."""
        self._check()
        sub = Subscription(
            self.session, _bind_target(self.session, target), snapshot, progress, as_of, up_to
        )
        self._subscriptions.append(sub)
        return Updates(sub)

    def create_table(
        self,
        name: str,
        source: Any,
        format: str | None = None,
        replace: bool = False,  # noqa: A002
    ) -> RelationRef:
        """A new table holding the rows of a Spark DataFrame, Arrow/pandas table or file."""
        from dsql.interop import create_table

        self._check()
        create_table(self.session, name, source, format, replace)
        return self.table(name)

    def table(self, name: str) -> RelationRef:
        """A handle on a table or view: read it as Arrow, pandas or a Spark DataFrame."""
        self._check()
        self.session.columns(name)  # an unknown name raises here
        return RelationRef(self, name)

    def commit(self) -> None:
        """Writes apply as they execute; nothing to do."""

    def rollback(self) -> None:
        raise errors.UnsupportedError("ROLLBACK is not supported: writes apply as they run")

    def close(self) -> None:
        for sub in self._subscriptions:
            sub.close()
        for sub in self.executor.cursors.values():
            sub.close()
        self.closed = True

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self) -> None:
        if self.closed:
            raise InterfaceError(
                "the connection is closed", hint="open a new one with dsql.connect()"
            )


@dataclass(frozen=True)
class RelationRef:
    """A named table or view of a connection; each read sees its contents now."""

    connection: Connection
    name: str

    @property
    def columns(self) -> list[str]:
        return [c.name for c in self.connection.session.columns(self.name)]

    def cursor(self) -> Cursor:
        return self.connection.execute(f'SELECT * FROM "{self.name}"')

    def arrow(self) -> pa.Table:
        return self.cursor().arrow()

    def df(self) -> Any:
        return self.cursor().df()

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.cursor().fetchall()

    def to_spark(self, spark: Any = None) -> Any:
        """The contents as a Spark DataFrame (starts Spark if none is running)."""
        return self.cursor().to_spark(spark)


class Updates:
    """A subscription as an iterator of Arrow batches; each `next` returns what is final now
    (possibly no rows), and iteration stops once the subscription is closed or past UP TO."""

    def __init__(self, sub: Subscription) -> None:
        self.sub = sub

    def __iter__(self) -> Iterator[pa.Table]:
        return self

    def __next__(self) -> pa.Table:
        if self.sub.closed:
            raise StopIteration
        return self.sub.poll()

    def rows(self) -> list[tuple[Any, ...]]:
        """The next batch as tuples."""
        return _tuples(next(self, self.sub._empty()))

    def close(self) -> None:
        self.sub.close()


class Cursor:
    """Executes statements and hands out their rows (PEP 249)."""

    arraysize = 1

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._table: pa.Table | None = None
        self._pos = 0
        self._subscription: Subscription | None = None
        self.rowcount = -1
        self.description: list[tuple[Any, ...]] | None = None
        self.closed = False
        self.status = ""

    def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> Cursor:
        self._check()
        if parameters:
            sql = _bind_parameters(sql, parameters)
        results = self.connection.executor.run(sql)
        self._set(results[-1] if results else Result())
        return self

    def executemany(self, sql: str, seq_of_parameters: Sequence[Sequence[Any]]) -> Cursor:
        """Run `sql` once per parameter sequence; rowcount is the total."""
        total = 0
        for parameters in seq_of_parameters:
            self.execute(sql, parameters)
            total += max(self.rowcount, 0)
        self.rowcount = total
        return self

    def _set(self, result: Result) -> None:
        if self._subscription is not None:
            self._subscription.close()
        self._subscription = result.subscription
        self._table = result.table
        self._pos = 0
        self.rowcount = result.rowcount
        self.status = result.status
        self.description = (
            None
            if result.table is None
            else [
                (f.name, str(f.type), None, None, None, None, f.nullable)
                for f in result.table.schema
            ]
        )

    def _available(self, wanted: int | None, timeout: float | None) -> int:
        """Rows ready to fetch; for a SUBSCRIBE, polls for more (waiting up to `timeout`)."""
        sub = self._subscription
        ready = self._remaining()
        if sub is None or (wanted is not None and ready >= wanted):
            return ready
        deadline = time.monotonic() + (timeout or 0.0)
        while not sub.closed:
            fresh = sub.poll()
            if fresh.num_rows:
                assert self._table is not None
                rest = self._table.slice(self._pos)
                self._table, self._pos = pa.concat_tables([rest, fresh]), 0
                ready = self._remaining()
            if ready or time.monotonic() >= deadline or sub.session.clock.kind == "manual":
                break  # under the manual clock waiting cannot bring updates
            time.sleep(_POLL_SECONDS)
        return ready

    def _remaining(self) -> int:
        return 0 if self._table is None else self._table.num_rows - self._pos

    def fetchone(self, timeout: float | None = None) -> tuple[Any, ...] | None:
        rows = self.fetchmany(1, timeout)
        return rows[0] if rows else None

    def fetchmany(
        self, size: int | None = None, timeout: float | None = None
    ) -> list[tuple[Any, ...]]:
        """At most `size` rows; for a SUBSCRIBE, waits up to `timeout` seconds for some."""
        self._check()
        n = self.arraysize if size is None else size
        self._available(n, timeout)
        if self._table is None:
            return []
        chunk = self._table.slice(self._pos, n)
        self._pos += chunk.num_rows
        return _tuples(chunk)

    def fetchall(self, timeout: float | None = None) -> list[tuple[Any, ...]]:
        """Every row left; for a SUBSCRIBE, the updates available now (waiting up to
        `timeout` seconds while there are none)."""
        self._check()
        return self.fetchmany(self._available(None, timeout), 0)

    def arrow(self) -> pa.Table:
        """The rest of the result as an Arrow table."""
        self._check()
        self._available(None, 0)
        if self._table is None:
            return pa.table({})
        rest = self._table.slice(self._pos)
        self._pos = self._table.num_rows
        return rest

    fetch_arrow_table = arrow

    def df(self) -> Any:
        return self.arrow().to_pandas()

    def to_spark(self, spark: Any = None) -> Any:
        """The rest of the result as a Spark DataFrame (starts Spark if none is running)."""
        from dsql.interop import to_spark

        return to_spark(self.arrow(), self.connection.session, spark)

    def setinputsizes(self, sizes: Any) -> None:
        """PEP 249: accepted and ignored."""

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """PEP 249: accepted and ignored."""

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while (row := self.fetchone()) is not None:
            yield row

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._subscription is not None:
            self._subscription.close()
        self.closed = True

    def _check(self) -> None:
        if self.closed:
            raise InterfaceError("the cursor is closed", hint="use connection.cursor()")
        self.connection._check()


def _bind_target(session: Session, target: str) -> Any:
    """A view name or query text, bound (for `subscribe`)."""
    text = target.strip()
    if text.lower().startswith(("select", "with", "values", "(")):
        (stmt,) = grammar.parse(f"SUBSCRIBE {text}" if text[0] == "(" else f"SUBSCRIBE ({text})")
        return session.plan(query_of(stmt))
    session.columns(target)
    return session.plan(exp.select("*").from_(exp.to_table(target)))


def _tuples(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = [python_values(c) for c in table.columns]  # names may repeat: not dicts
    return list(zip(*columns, strict=False)) if columns else [() for _ in range(table.num_rows)]


def _bind_parameters(sql: str, parameters: Sequence[Any]) -> str:
    """Replace each `?` outside strings with the literal of the next parameter."""
    out = []
    values = list(parameters)
    quote: str | None = None
    for ch in sql:
        if quote:
            quote = None if ch == quote else quote
            out.append(ch)
        elif ch in ("'", '"'):
            quote = ch
            out.append(ch)
        elif ch == "?":
            if not values:
                raise InterfaceError("more ? placeholders than parameters", statement=sql)
            out.append(exp.convert(values.pop(0)).sql("postgres"))
        else:
            out.append(ch)
    if values:
        raise InterfaceError(f"{len(values)} parameters were not used", statement=sql)
    return "".join(out)


__all__ = [
    "CompiledQuery",
    "Connection",
    "Cursor",
    "RelationRef",
    "Updates",
    "apilevel",
    "compile",
    "connect",
    "paramstyle",
    "threadsafety",
]
