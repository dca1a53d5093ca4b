"""The PEP 249 face of a session: `connect()`, `Connection`, `Cursor`, and `compile()`.

A connection owns one `Session`; statements run as they execute (no transactions to
commit), one statement per `execute` (scripts of many run through the CLI). Parameters
use the qmark style and are bound in the parsed statement (`dsql.parameters`). Threads
may share a connection and its cursors (PEP 249 threadsafety 2): each call into the
session holds the executor's lock. Beyond PEP 249, in DuckDB's style: `.arrow()`
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

import itertools
import os
import warnings
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar

import pyarrow as pa
from sqlglot import exp

from dsql import errors, grammar, parameters
from dsql.compiled import CompiledQuery, compile, query_of
from dsql.errors import InterfaceError, ParseError
from dsql.execute import Executor
from dsql.results import Result, python_values
from dsql.runtime.kernel.spark.state import require_root
from dsql.session import Session, default_kernel
from dsql.subscribe import Subscription
from dsql.timeout import parse_duration

apilevel = "2.0"
threadsafety = 2
paramstyle = "qmark"

F = TypeVar("F", bound=Callable[..., Any])


def _objects(values: list[Any]) -> Any:
    """`values` as a pandas column of Python objects, unconverted."""
    import pandas as pd

    return pd.Series(values, dtype=object)


def _serialized(method: F) -> F:
    """`method` of a connection or cursor, run holding the connection's lock."""

    @wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        connection = self if isinstance(self, Connection) else self.connection
        with connection.executor.lock:
            return method(self, *args, **kwargs)

    return locked  # type: ignore[return-value]


def connect(
    spark: Any = None,
    master: str | None = None,
    clock: str = "manual",
    kernel: str | None = None,
    placement_threshold: int | None = None,
    statement_timeout: float | str | None = None,
    memory_limit: int | str | None = None,
    state_uri: str | None = None,
    remote: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    checkpoint_bytes: int | None = None,
    on_recovery: Callable[[int, int], None] | None = None,
    spark_conf: Mapping[str, Any] | None = None,
    allowed_paths: Sequence[str | os.PathLike[str]] = (),
    **spark_settings: Any,
) -> Connection:
    """A connection to a new dsql session.

    `kernel`: "auto" (the default, or `$DSQL_KERNEL`): each relation in-process (DuckDB)
    while it has at most `placement_threshold` rows (default 1,000,000), on Spark once it
    outgrows that, Spark started only then; "local": always in-process; "spark": every
    step on Spark. `spark` adopts an existing SparkSession (the Spark kernel unless a
    kernel is named); `master` and `spark_conf` configure the one dsql starts; `remote`
    (`sc://host:port`, default `$DSQL_REMOTE` when no master is given) runs Spark's steps
    on a Spark Connect server instead, with `spark_conf` applied to its session.
    `statement_timeout` (seconds, or text like '2s') bounds each statement, as
    `SET statement_timeout` does; `memory_limit` (bytes, or text like '2GB') bounds each
    query's intermediate state, as `SET memory_limit` does (default: half the machine's
    memory). `state_uri` (or `$DSQL_STATE_URI`) is where Spark keeps dsql's state: any
    Hadoop-compatible URI every executor and the driver reach (`file:///shared/dir`,
    `hdfs://...`, `s3a://...`); needed with a non-local master, else a temp directory.

    `data_dir`: a directory the catalog and every committed write are logged to before
    each statement returns, and recovered from on connecting (`dsql.durable`); without
    one, state is in memory and ends with the connection. `checkpoint_bytes`: the log
    size past which the tables are checkpointed (default 64 MiB); `on_recovery(done,
    total)`: called with the log bytes replayed so far.

    Spark settings go by their full names, `**{"spark.sql.shuffle.partitions": "4"}`, or
    in `spark_conf`; any other keyword is an `InterfaceError`.

    `allowed_paths`: the directories (or URI prefixes) SQL may read and write files in
    (COPY, file sources; `dsql.sandbox`); by default none, but `files/` in `data_dir`.
    """
    unknown = [k for k in spark_settings if not k.startswith("spark.")]
    if unknown:
        raise InterfaceError(
            f"connect() got an unknown keyword argument '{unknown[0]}'",
            hint="Spark settings go by their full names (**{'spark.sql.shuffle.partitions': "
            "'4'}) or in spark_conf={...}",
        )
    kernel = kernel or ("spark" if spark is not None else default_kernel())
    merged = {**(spark_conf or {}), **spark_settings}
    conf = {k: str(v) for k, v in merged.items()} or None
    if spark is not None and (master is not None or remote is not None):
        raise InterfaceError(
            "connect() takes one of spark=, master= and remote=",
            hint="an existing session already has its master",
        )
    if master is not None and remote is not None:
        raise InterfaceError(
            "connect() takes one of master= and remote=",
            hint="a Spark Connect server has its own master",
        )
    if kernel != "local":
        require_root(_master(spark, master, conf), state_uri)
    durable = None
    if data_dir is not None:  # first: a directory in use is refused before Spark starts
        from dsql.durable import Durable

        durable = Durable(data_dir, checkpoint_bytes)  # locked, and its log read
    try:
        start = None
        if spark is None and (master is not None or remote is not None or conf):
            from dsql.runtime.spark_session import SparkStart

            start = SparkStart(master, conf, remote)
            if kernel == "spark":
                spark = start()
        session = Session(
            kernel,
            clock,
            spark,
            placement_threshold,
            start_spark=start,
            memory_limit=memory_limit,
            state_uri=state_uri,
            start_tick=None if durable is None else durable.start_tick,
        )
        for path in allowed_paths:
            session.sandbox.allow(path)
        if durable is not None:
            session.sandbox.allow(durable.files)
        connection = Connection(session)
        connection.executor.statement_timeout = parse_duration(statement_timeout)
        if durable is not None:
            session.durable = durable
            with connection.executor.lock:
                durable.recover(connection.executor, on_recovery)
    except BaseException:
        if durable is not None:
            durable.close()
        raise
    return connection


def _master(spark: Any, master: str | None, conf: dict[str, str] | None) -> str | None:
    """The Spark master a connection will use: the adopted session's, else the one asked for."""
    if spark is not None:
        return spark.conf.get("spark.master", None)
    return master or (conf or {}).get("spark.master")


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
        self._sink_numbers = itertools.count(1)

    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> Cursor:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Sequence[Sequence[Any]]) -> Cursor:
        return self.cursor().executemany(sql, seq_of_parameters)

    @_serialized
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
        with self.executor.guarded(target):
            bound = _bind_target(self.session, target)
            sub = Subscription(self.session, bound, snapshot, progress, as_of, up_to, target)
        self._subscriptions.append(sub)
        return Updates(sub, self.executor)

    @_serialized
    def sink(
        self,
        target: str,
        callback: Callable[[int, pa.Table], None],
        key: Sequence[str] | None = None,
        name: str | None = None,
    ) -> str:
        """Call `callback(ms, changes)` once for each closed millisecond in which table or
        view `target` changed, with that millisecond's changes as Arrow (`mz_timestamp`,
        `mz_diff`, columns; with `key`, the upsert envelope), at each statement boundary
        from the next on, while the connection lives (`dsql.sinks`). Returns the sink's
        name, for SHOW SINKS and DROP SINK; it is not kept in a data directory."""
        from dsql import sinks

        self._check()
        s = self.session
        name = name or f"callback_sink_{next(self._sink_numbers)}"
        with self.executor.guarded(None):
            sink_key = None if key is None else tuple(key)
            sinks.create(s, name, target, sinks.CallbackTarget(callback), sink_key)
        return name

    @_serialized
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
        s = self.session
        before = s.durable.names() if s.durable is not None else set()
        tick, s.writes = s.clock.tick, []
        try:
            with self.executor.guarded(None):
                create_table(s, name, source, format, replace)
                if s.durable is not None:
                    s.durable.table_loaded(name, s.writes, before, tick)
        finally:
            s.writes = None
        return self.table(name)

    @_serialized
    def table(self, name: str) -> RelationRef:
        """A handle on a table or view: read it as Arrow, pandas or a Spark DataFrame."""
        self._check()
        self.session.columns(name)  # an unknown name raises here
        return RelationRef(self, name)

    def commit(self) -> None:
        """Writes apply as they execute; nothing to do."""

    def rollback(self) -> None:
        raise errors.UnsupportedError("ROLLBACK is not supported: writes apply as they run")

    @_serialized
    def close(self) -> None:
        from dsql import exports

        for sub in self._subscriptions:
            sub.close()
        for sub in self.executor.cursors.values():
            sub.close()
        exports.release(self.session)
        self.session.source_kinds.close()
        for sink in self.session.sinks.values():
            sink.target.close()
        if self.session.durable is not None and not self.closed:
            self.session.durable.close()
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

    @_serialized
    def to_spark(self, spark: Any = None) -> Any:
        """The contents now as a Spark DataFrame (starts Spark if none is running). A
        relation on Spark is written out by its executors, never collected in the
        driver, and the DataFrame reads that copy until the connection closes
        (`dsql.exports`)."""
        from dsql import exports

        self.connection._check()
        with self.connection.executor.guarded(None):
            return exports.to_spark(self.connection.session, self.name, spark)

    def batches(self) -> Iterator[pa.Table]:
        """The contents now as Arrow tables of at most `fetch_rows` rows (`SET fetch_rows`); for a
        relation on Spark the driver holds one at a time (`dsql.exports`)."""
        from dsql import exports

        self.connection._check()
        with self.connection.executor.lock:
            with self.connection.executor.guarded(None):
                stream = exports.batches(self.connection.session, self.name)
                first = next(stream, None)  # the read happens now, under the lock
        if first is not None:
            yield first
            yield from stream


class Updates:
    """A subscription as an iterator of Arrow batches; each `next` returns what is final now
    (possibly no rows), and iteration stops once the subscription is closed or past UP TO."""

    def __init__(self, sub: Subscription, executor: Executor) -> None:
        self.sub = sub
        self.executor = executor
        #: Every batch returned so far, for `to_spark`.
        self.seen: list[pa.Table] = []

    def __iter__(self) -> Iterator[pa.Table]:
        return self

    def __next__(self) -> pa.Table:
        with self.executor.lock:
            if self.sub.closed:
                raise StopIteration
            batch = self.executor.wait(self.sub.next_batch, 0)  # a stored snapshot: a piece
            self.seen.append(batch)
            return batch

    def to_spark(self, spark: Any = None) -> Any:
        """Every update of the subscription so far (those already iterated and those
        final now) as one Spark DataFrame: `mz_timestamp`, `mz_diff`, columns."""
        from dsql.interop import to_spark

        with self.executor.lock:
            if not self.sub.closed:
                next(self)
            updates = pa.concat_tables(self.seen) if self.seen else self.sub._empty()
            return to_spark(updates, self.sub.session, spark)

    def rows(self) -> list[tuple[Any, ...]]:
        """The next batch as tuples."""
        return _tuples(next(self, self.sub._empty()))

    def close(self) -> None:
        with self.executor.lock:
            self.sub.close()


class Cursor:
    """Executes statements and hands out their rows (PEP 249)."""

    arraysize = 1

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._table: pa.Table | None = None
        self._pos = 0
        #: A streamed result's rows after `_table` (`Result.batches`), pulled as fetched.
        self._more: Generator[pa.Table, None, None] | None = None
        self._subscription: Subscription | None = None
        self.rowcount = -1
        self.description: list[tuple[Any, ...]] | None = None
        self.closed = False
        self.status = ""
        #: The last statement's notices (also issued as `DsqlWarning`s).
        self.notices: list[str] = []
        #: The data of the last `COPY ... TO STDOUT` (text or CSV), else None.
        self.copy_output: str | None = None

    @_serialized
    def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> Cursor:
        """Run one statement, its `?` placeholders bound to `parameters` in order."""
        self._check()
        stmt = _one_statement(sql)
        self._run(stmt, parameters)
        return self

    @_serialized
    def executemany(self, sql: str, seq_of_parameters: Sequence[Sequence[Any]]) -> Cursor:
        """Run one statement once per parameter sequence (parsed once); rowcount is the
        total."""
        self._check()
        stmt = _one_statement(sql)
        total = 0
        notices: list[str] = []
        durable = self.connection.session.durable
        with durable.batch() if durable is not None else nullcontext():  # one log record
            for params in seq_of_parameters:
                self._run(stmt, params, deliver=False)  # the writes reach the views together
                total += max(self.rowcount, 0)
                notices += self.notices
        self.notices = notices
        self._notify(self.connection.executor.deliver())
        self.rowcount = total
        return self

    def _run(
        self, stmt: grammar.Statement | None, params: Sequence[Any] | None, deliver: bool = True
    ) -> None:
        if stmt is None:  # only comments: PostgreSQL's empty query
            if params:
                raise errors.ParameterError(
                    f"the statement is empty but {len(params)} parameters were given",
                    hint="pass one parameter per ? placeholder",
                )
            self._set(Result())
            return
        self._set(self.connection.executor.execute(parameters.bind(stmt, params), deliver))

    def _set(self, result: Result) -> None:
        if self._subscription is not None:
            self._subscription.close()
        self._subscription = result.subscription
        if self._more is not None:
            self._more.close()  # deletes the rest's stored copy
        self._more = result.batches
        self._table = result.table
        self._pos = 0
        self.rowcount = result.rowcount
        self.status = result.status
        self.copy_output = result.output
        self.notices = []
        self._notify(result.notices)
        self.description = (
            None
            if result.table is None
            else [
                (f.name, str(f.type), None, None, None, None, f.nullable)
                for f in result.table.schema
            ]
        )

    def _notify(self, notices: list[str]) -> None:
        for notice in notices:
            self.notices.append(notice)
            warnings.warn(notice, errors.DsqlWarning, stacklevel=4)

    @_serialized
    def _available(self, wanted: int | None, timeout: float | None) -> int:
        """Rows ready to fetch; for a SUBSCRIBE, polls for more (waiting up to `timeout`
        while none are ready)."""
        sub = self._subscription
        ready = self._pull(wanted)
        if sub is None or sub.closed or (wanted is not None and ready >= wanted):
            return ready
        fresh = self.connection.executor.wait(sub.poll, 0 if ready else timeout)
        if fresh.num_rows:
            assert self._table is not None
            rest = self._table.slice(self._pos)
            self._table, self._pos = pa.concat_tables([rest, fresh]), 0
        return self._remaining()

    def _pull(self, wanted: int | None) -> int:
        """Rows ready to fetch, after pulling a streamed result's batches until `wanted`
        are (all of them for None)."""
        while self._more is not None and (wanted is None or self._remaining() < wanted):
            batch = next(self._more, None)
            if batch is None:
                self._more = None
            elif batch.num_rows:
                assert self._table is not None
                rest = self._table.slice(self._pos)
                self._table, self._pos = pa.concat_tables([rest, batch]), 0
        return self._remaining()

    def _remaining(self) -> int:
        return 0 if self._table is None else self._table.num_rows - self._pos

    @_serialized
    def fetchone(self, timeout: float | None = None) -> tuple[Any, ...] | None:
        rows = self.fetchmany(1, timeout)
        return rows[0] if rows else None

    @_serialized
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

    @_serialized
    def fetchall(self, timeout: float | None = None) -> list[tuple[Any, ...]]:
        """Every row left; for a SUBSCRIBE, the updates available now (waiting up to
        `timeout` seconds while there are none)."""
        self._check()
        return self.fetchmany(self._available(None, timeout), 0)

    @_serialized
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
        """The rest of the result as a pandas DataFrame; an interval column holds the
        values `fetchall` gives (pandas' `DateOffset` has no PostgreSQL text)."""
        table = self.arrow()
        frame = table.to_pandas()
        for i, column in enumerate(table.columns):
            if pa.types.is_interval(column.type):
                frame[frame.columns[i]] = _objects(python_values(column))
        return frame

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

    @_serialized
    def close(self) -> None:
        if self._subscription is not None:
            self._subscription.close()
        if self._more is not None:
            self._more.close()
            self._more = None
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


def _one_statement(sql: str) -> grammar.Statement | None:
    """The one statement of `sql` (None for only comments); several are a ParseError."""
    statements = grammar.parse(sql)
    if len(statements) > 1:
        raise ParseError(
            f"execute() runs one statement; this text holds {len(statements)}",
            statement=sql,
            position=statements[1].position,
            hint="send one statement per call, or run a script of many with `dsql run "
            "file.sql` (or the REPL)",
        )
    return statements[0] if statements else None


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
