"""PostgreSQL sinks: a relation's closed milliseconds written into a PostgreSQL table.

`CREATE SINK k FROM v INTO POSTGRES CONNECTION pg (TABLE 'schema.t') [KEY (a)
ENVELOPE UPSERT]` (`PgTarget`, a `dsql.sinks` target). The diff envelope appends each
millisecond's changes as rows (`mz_timestamp`, `mz_diff`, columns); the upsert envelope
keeps the table equal to the relation's current rows by key: per millisecond, the rows
of the keys that changed are deleted and their new rows inserted.

The table is created when missing (in its schema, created too), its columns typed as
dsql types them in PostgreSQL's spelling (`numeric(10,2)`, `timestamp with time zone`,
`integer[]`, `bytea`, ...); the upsert envelope's gets a unique index on the key (NULLS
NOT DISTINCT). An existing table must have exactly those columns and types (compared
as PostgreSQL's `format_type` prints both), else CREATE SINK is a `SchemaError` listing
the differences. Values go in as PostgreSQL's text through COPY, so the server parses
each as its own input function would.

Exactly once. Each millisecond is one PostgreSQL transaction holding its rows and the
sink's progress, a row of `dsql_sink_progress (target, sink, ts)` beside the table
(`ts` the last millisecond written), locked at the start of the transaction: a
millisecond at or before it is skipped, so a retry after a connection lost during
COMMIT, or a process killed between PostgreSQL's COMMIT and anything dsql records,
never writes it twice. Progress is read back when the sink is created (a recovered
sink, under a data directory, resumes after it; `dsql.sinks.Sink`), and
`contents` (what the table accumulates to) lets a recovered sink write the difference
a checkpoint folded into one snapshot. A table with rows but no progress row was not
written by a sink and is refused. A server that cannot be reached makes the flush fail:
`dsql.sinks.flush` warns, and the same changes are offered at the next flush.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from dsql.copy import text_data
from dsql.copy_format import CopyFormat
from dsql.errors import SchemaError, SourceError
from dsql.pg_source import PgConnection, upstream_error
from dsql.planner.plan import Column
from dsql.runtime.lattice import DIFF
from dsql.text_input import BadValue, from_text

#: The table of every sink's progress, in the schema of the sink's table.
PROGRESS = "dsql_sink_progress"


def split_name(name: str) -> tuple[str, str]:
    """'schema.table' (or 'table': schema public) as (schema, table)."""
    schema, _, table = name.rpartition(".")
    if not table:
        raise SchemaError(f"TABLE {name!r} names no table", hint="write TABLE 'schema.table'")
    return schema or "public", table


def pg_type(column: Column) -> str:
    """The PostgreSQL type a dsql column is written as (dsql's types are PostgreSQL's)."""
    return column.type.sql("postgres")


class PgTarget:
    """A PostgreSQL table a sink writes (module docstring)."""

    #: Logged in the data directory and recovered with it.
    kept = True

    def __init__(
        self,
        connection: PgConnection,
        table: str,
        sink: str,
        columns: Sequence[Column],
        key: tuple[str, ...] | None,
    ) -> None:
        self.connection, self.sink, self.key = connection, sink, key
        self.table_name = table
        self.schema, self.table = split_name(table)
        self.columns = tuple(columns)
        self._conn: psycopg.Connection[Any] | None = None
        try:
            self._run(self._prepare)
        except BaseException:  # refused: no connection left open behind it
            self.close()
            raise

    # --- the table ------------------------------------------------------------------------
    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        """Create the schema, the progress table and the sink's table when missing;
        check an existing table's columns."""
        with conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(self._schema()))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (target text PRIMARY KEY, sink text NOT NULL,"
                    " ts bigint NOT NULL)"
                ).format(self._progress())
            )
            wanted = self._expected_types(conn)
            found = _column_types(conn, self.schema, self.table)
            if not found:
                conn.execute(self._create_sql())
                return
            self._check(wanted, found)
            if (
                self._read_progress(conn) is None
                and conn.execute(
                    sql.SQL("SELECT 1 FROM {} LIMIT 1").format(self._qualified())
                ).fetchone()
            ):
                raise SchemaError(
                    f"table {self.table_name} has rows that no sink wrote "
                    f"(it has no row in {self.schema}.{PROGRESS})",
                    hint="a sink starts from an empty table: TRUNCATE it, or name another table",
                )

    def _create_sql(self) -> sql.Composed:
        """CREATE TABLE with the envelope's columns (and the upsert key's unique index)."""
        defs = [
            sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind))
            for name, kind in self._column_defs()
        ]
        made = sql.SQL("CREATE TABLE {} ({})").format(self._qualified(), sql.SQL(", ").join(defs))
        if self.key is None:
            return made
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in self.key)
        return sql.SQL("{}; CREATE UNIQUE INDEX ON {} ({}) NULLS NOT DISTINCT").format(
            made, self._qualified(), keys
        )

    def _column_defs(self) -> list[tuple[str, str]]:
        envelope = (
            [] if self.key is not None else [("mz_timestamp", "bigint"), ("mz_diff", "bigint")]
        )
        return envelope + [(c.name, pg_type(c)) for c in self.columns]

    def _expected_types(self, conn: psycopg.Connection[Any]) -> dict[str, str]:
        """The columns the table needs, typed as `format_type` prints them: a temporary
        table made with them, read back, dropped with the savepoint."""
        probe = sql.Identifier("dsql_sink_probe")
        defs = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(k)) for n, k in self._column_defs()
        )
        try:
            with conn.transaction():
                conn.execute(sql.SQL("CREATE TEMPORARY TABLE {} ({})").format(probe, defs))
                types = _column_types(conn, None, "dsql_sink_probe")
                raise _Undo(types)
        except _Undo as undo:
            return undo.types
        except psycopg.Error as error:
            raise SchemaError(
                f"PostgreSQL has no type for a column of sink {self.sink}: {error}".strip()
            ) from None

    def _check(self, wanted: dict[str, str], found: dict[str, str]) -> None:
        """Refuse an existing table whose columns are not the sink's."""
        problems = [
            f"{n} is {found[n]}, the sink writes {kind}"
            for n, kind in wanted.items()
            if n in found and found[n] != kind
        ]
        problems += [f"{n} ({kind}) is missing" for n, kind in wanted.items() if n not in found]
        problems += [f"{n} is not a column of the sink" for n in found if n not in wanted]
        if problems:
            spelled = ", ".join(f"{n} {k}" for n, k in wanted.items())
            raise SchemaError(
                f"table {self.table_name} does not fit sink {self.sink}: " + "; ".join(problems),
                hint=f"the sink writes ({spelled}); drop the table or name another one",
            )

    # --- the Target protocol --------------------------------------------------------------
    def progress(self) -> int | None:
        """The last millisecond the table holds, from its progress row."""
        return self._run(self._read_progress)

    def contents(self, columns: list[str], key: tuple[str, ...] | None) -> pa.Table:
        """What the table accumulates to (diff: the rows' summed `mz_diff`; upsert: its
        rows, once each), typed as the relation's columns."""
        names = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in columns)
        if key is None:
            query = sql.SQL(
                "SELECT sum(mz_diff)::bigint, {} FROM {} GROUP BY {} HAVING sum(mz_diff) <> 0"
            ).format(
                names,
                self._qualified(),
                sql.SQL(", ").join(map(sql.Literal, range(2, len(columns) + 2))),
            )
        else:
            query = sql.SQL("SELECT 1::bigint, {} FROM {}").format(names, self._qualified())
        rows = self._run(lambda conn: conn.execute(query).fetchall())
        arrays = {DIFF: pa.array([r[0] for r in rows], pa.int64())}
        by_name = {c.name: c for c in self.columns}
        for i, name in enumerate(columns, start=1):
            try:
                arrays[name] = from_text([r[i] for r in rows], by_name[name].type, name)
            except BadValue as bad:
                raise SourceError(
                    f"table {self.table_name}, column {name}: {bad.error.message}"
                ) from None
        return pa.table(arrays)

    def write(self, first: int, last: int, changes: pa.Table) -> None:
        """Write each millisecond of `changes` in its own transaction with the progress,
        the last one's progress `last` (the whole range is closed)."""
        times = changes["mz_timestamp"]
        stamps = sorted(pc.unique(times).to_pylist())
        for ms in stamps:
            rows = changes.filter(pc.equal(times, ms))
            through = last if ms == stamps[-1] else ms
            self._run(
                lambda conn, ms=ms, rows=rows, through=through: self._write_one(
                    conn, ms, rows, through
                )
            )
            self.committed(through)

    def committed(self, ms: int) -> None:
        """Called after the transaction that made `ms` the progress committed (a test
        kills the process here: the window between PostgreSQL's commit and dsql's own)."""

    def describe(self) -> str:
        return f"postgres {self.connection.name} {self.schema}.{self.table}"

    def into(self) -> str:
        """The INTO clause that names this target again."""
        where = f"{self.schema}.{self.table}".replace("'", "''")
        name = self.connection.name.replace('"', '""')
        return f"INTO POSTGRES CONNECTION \"{name}\" (TABLE '{where}')"

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # --- writing --------------------------------------------------------------------------
    def _write_one(
        self, conn: psycopg.Connection[Any], ms: int, rows: pa.Table, through: int
    ) -> None:
        """One millisecond's rows and the progress, in one transaction (skipped if the
        progress row says the table holds it already)."""
        with conn.transaction():
            done = self._read_progress(conn, lock=True)
            if done is not None and done >= ms:
                return
            if self.key is None:
                self._copy(conn, self._qualified(), rows)
            else:
                self._upsert(conn, rows)
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (target, sink, ts) VALUES (%s, %s, %s) ON CONFLICT (target)"
                    " DO UPDATE SET sink = excluded.sink, ts = excluded.ts"
                ).format(self._progress()),
                (self.table, self.sink, through),
            )

    def _upsert(self, conn: psycopg.Connection[Any], rows: pa.Table) -> None:
        """The changed keys' rows deleted, their new rows ('upsert') inserted; a key
        with several rows cannot be one row of the table and fails the write."""
        states = rows["mz_state"]
        violations = rows.filter(pc.equal(states, "key_violation"))
        if violations.num_rows:
            first = violations.slice(0, 1).to_pylist()[0]
            spelled = ", ".join(f"{k} = {first[k]!r}" for k in self.key or ())
            raise SourceError(
                f"key ({spelled}) has several rows at {first['mz_timestamp']};"
                f" table {self.table_name} holds one row per key",
                hint="the sink waits until it is dropped: make the key unique in the view",
            )
        keys = self.key or ()
        changed = sql.Identifier("dsql_sink_changed")
        defs = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(pg_type(c)))
            for c in self.columns
        )
        conn.execute(
            sql.SQL("CREATE TEMPORARY TABLE IF NOT EXISTS {} ({}) ON COMMIT DELETE ROWS").format(
                changed, defs
            )
        )
        self._copy(conn, changed, rows.drop_columns(["mz_timestamp", "mz_state"]))
        nulls = any(rows[k].null_count for k in keys)
        same = sql.SQL(" IS NOT DISTINCT FROM ") if nulls else sql.SQL(" = ")
        match = sql.SQL(" AND ").join(
            sql.SQL("t.{k}{op}c.{k}").format(k=sql.Identifier(k), op=same) for k in keys
        )
        conn.execute(
            sql.SQL("DELETE FROM {} t USING {} c WHERE {}").format(
                self._qualified(), changed, match
            )
        )
        upserted = pc.equal(states, "upsert")
        if pc.any(upserted).as_py():
            self._copy(
                conn,
                self._qualified(),
                rows.filter(upserted).drop_columns(["mz_timestamp", "mz_state"]),
            )

    def _copy(self, conn: psycopg.Connection[Any], table: sql.Identifier, rows: pa.Table) -> None:
        """`rows` appended to `table` by COPY, each value in PostgreSQL's text."""
        columns = sql.SQL(", ").join(sql.Identifier(n) for n in rows.column_names)
        data = text_data(rows, CopyFormat())
        with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(table, columns)) as copy:
            copy.write(data.encode())

    # --- plumbing -------------------------------------------------------------------------
    def _read_progress(self, conn: psycopg.Connection[Any], lock: bool = False) -> int | None:
        query = sql.SQL("SELECT ts FROM {} WHERE target = %s" + (" FOR UPDATE" if lock else ""))
        row = conn.execute(query.format(self._progress()), (self.table,)).fetchone()
        return None if row is None else int(row[0])

    def _run(self, work: Any) -> Any:
        """`work(connection)`, connecting first if need be; a failure is a SourceError
        and drops the connection (the next call connects again)."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self.connection.connect()
            return work(self._conn)
        except psycopg.Error as error:
            self.close()
            raise upstream_error(self.connection, error) from None

    def _schema(self) -> sql.Identifier:
        return sql.Identifier(self.schema)

    def _qualified(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)

    def _progress(self) -> sql.Identifier:
        return sql.Identifier(self.schema, PROGRESS)


class _Undo(Exception):
    """Rolls a probe's savepoint back, carrying what it read."""

    def __init__(self, types: dict[str, str]) -> None:
        super().__init__()
        self.types = types


def _column_types(conn: psycopg.Connection[Any], schema: str | None, table: str) -> dict[str, str]:
    """A table's columns and their `format_type`, in order (none: no such table); schema
    None is the session's temporary schema."""
    where = "n.oid = pg_my_temp_schema()" if schema is None else "n.nspname = %(schema)s"
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
        " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        f" WHERE {where} AND c.relname = %(table)s AND a.attnum > 0 AND NOT a.attisdropped"
        " ORDER BY a.attnum",
        {"schema": schema, "table": table},
    ).fetchall()
    return {name: kind for name, kind in rows}


__all__ = ["PROGRESS", "PgTarget", "pg_type", "split_name"]
