"""The PEP 249 face of a session: `connect()`, `Connection`, `Cursor`.

>>> import dsql
>>> con = dsql.connect()
>>> cur = con.execute("CREATE TABLE t (a int)")
>>> _ = con.execute("INSERT INTO t VALUES (?), (?)", (1, 2))
>>> con.execute("SELECT count(*) AS n FROM t").fetchall()
[(2,)]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dsql import errors
from dsql.execute import Executor
from dsql.session import Result, Session
from dsql.subscribe import Subscription

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"

Error = errors.DsqlError
DatabaseError = errors.DsqlError
ProgrammingError = errors.SchemaError
OperationalError = errors.ExecutionError
NotSupportedError = errors.UnsupportedError


def connect(
    spark: Any = None,
    master: str | None = None,
    clock: str = "manual",
    kernel: str = "local",
    **spark_conf: Any,
) -> Connection:
    """A connection to a new dsql session (in-process; Spark when `kernel="spark"`)."""
    if spark is None and (master is not None or spark_conf) and kernel == "spark":
        from dsql.runtime.spark_session import get_spark

        spark = get_spark(master=master, conf=spark_conf or None)
    return Connection(Session(kernel=kernel, clock=clock, spark=spark))


class Connection:
    """A session with PEP 249 methods plus DuckDB-style shortcuts."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.executor = Executor(session)
        self.closed = False

    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> Cursor:
        return self.cursor().execute(sql, parameters)

    def subscribe(
        self,
        target: str,
        snapshot: bool = True,
        progress: bool = False,
        as_of: int | None = None,
        up_to: int | None = None,
    ) -> Iterator[pa.Table]:
        """Batches of updates of a view or query (`SUBSCRIBE` as an iterator; never blocks)."""
        self._check()
        from sqlglot import parse_one

        s = self.session
        if target.strip().lower().startswith(("select", "with", "values")):
            bound = s.plan(parse_one(target, read="postgres"))
        else:
            s.columns(target)
            bound = s.plan(exp.select("*").from_(exp.to_table(target)))
        sub = Subscription(s, bound, snapshot, progress, as_of, up_to)
        return _Updates(sub)

    def commit(self) -> None:
        """Writes apply as they execute; nothing to do."""

    def close(self) -> None:
        self.closed = True

    def _check(self) -> None:
        if self.closed:
            raise errors.ExecutionError(
                "the connection is closed", hint="open a new one with dsql.connect()"
            )


class _Updates:
    def __init__(self, sub: Subscription) -> None:
        self.sub = sub

    def __iter__(self) -> Iterator[pa.Table]:
        return self

    def __next__(self) -> pa.Table:
        if self.sub.closed:
            raise StopIteration
        return self.sub.poll()

    def close(self) -> None:
        self.sub.close()


class Cursor:
    """Executes statements and hands out their rows."""

    arraysize = 1

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._table: pa.Table | None = None
        self._pos = 0
        self.rowcount = -1
        self.description: list[tuple[Any, ...]] | None = None
        self.closed = False
        self.status = ""

    def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> Cursor:
        if self.closed:
            raise errors.ExecutionError("the cursor is closed", hint="use connection.cursor()")
        self.connection._check()
        if parameters:
            sql = _bind_parameters(sql, parameters)
        results = self.connection.executor.run(sql)
        last = results[-1] if results else Result()
        self._set(last)
        return self

    def executemany(self, sql: str, seq_of_parameters: Sequence[Sequence[Any]]) -> Cursor:
        for parameters in seq_of_parameters:
            self.execute(sql, parameters)
        return self

    def _set(self, result: Result) -> None:
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

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self.fetchmany(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        if self._table is None:
            return []
        n = self.arraysize if size is None else size
        chunk = self._table.slice(self._pos, n)
        self._pos += chunk.num_rows
        columns = [c.to_pylist() for c in chunk.columns]  # names may repeat: not dicts
        return list(zip(*columns, strict=False)) if columns else [() for _ in range(chunk.num_rows)]

    def fetchall(self) -> list[tuple[Any, ...]]:
        if self._table is None:
            return []
        return self.fetchmany(self._table.num_rows - self._pos)

    def arrow(self) -> pa.Table:
        """The rest of the result as an Arrow table."""
        if self._table is None:
            return pa.table({})
        rest = self._table.slice(self._pos)
        self._pos = self._table.num_rows
        return rest

    fetch_arrow_table = arrow

    def df(self) -> Any:
        return self.arrow().to_pandas()

    def close(self) -> None:
        self.closed = True


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
                raise errors.ParseError("more ? placeholders than parameters", statement=sql)
            out.append(exp.convert(values.pop(0)).sql("postgres"))
        else:
            out.append(ch)
    if values:
        raise errors.ParseError(f"{len(values)} parameters were not used", statement=sql)
    return "".join(out)


__all__ = ["Connection", "Cursor", "apilevel", "connect", "paramstyle", "threadsafety"]
