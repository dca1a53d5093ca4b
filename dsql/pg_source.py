"""PostgreSQL sources: relations kept equal to upstream tables by logical replication.

`CREATE CONNECTION pg TO POSTGRES (HOST 'h', PORT 5432, USER 'u', PASSWORD 'p',
DATABASE 'd')` names a server (checked by connecting; `SHOW CONNECTIONS` never shows
the password). `CREATE SOURCE s FROM POSTGRES CONNECTION pg (PUBLICATION 'p') FOR
TABLES (t1, sch.t2 AS b)` (or `FOR ALL TABLES`: the publication's) makes one relation
per upstream table, named as the table (or its `AS` name), its columns typed from
PostgreSQL's catalog (`format_type`, read as dsql reads a type name; a type dsql has
not is refused, naming the column).

Snapshot and slot agree: the source creates its logical replication slot
(`pgoutput`) over a replication connection with `CREATE_REPLICATION_SLOT ... (SNAPSHOT
'export')`, which returns the snapshot of exactly the transactions the slot will not
decode; the tables are read in a REPEATABLE READ transaction that adopts it (`SET
TRANSACTION SNAPSHOT`), so every upstream transaction is in the snapshot or in the
slot's stream, never both nor neither. (`pg_create_logical_replication_slot` exports no
snapshot: a transaction committing between a snapshot taken beside it and the slot's
consistent point would be lost.)

Changes are polled like file sources' files: before each statement and while a FETCH
waits, `pg_logical_slot_peek_binary_changes` returns the committed transactions since
the slot's confirmed position, decoded by `dsql.pgoutput`. One poll's transactions are
written together at one time (each transaction therefore atomic: no time shows part of
one), then, once the writes are applied (and logged, under a data directory), the slot
is advanced past the last (`pg_replication_slot_advance`): a crash before that decodes
them again, and a durable session skips the ones its log holds (`lsn`).

Updates and deletes need the old row: each table must have `REPLICA IDENTITY FULL`
(PostgreSQL's default identity sends only the key), checked at CREATE and on every
change. TRUNCATE retracts the relation's rows. A server that cannot be reached at a
poll is a notice of the statement that polled; the next poll tries again. `DROP
SOURCE s` drops its relations and its slot.
"""

from __future__ import annotations

import re
import secrets
import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import pq, sql
from sqlglot import exp

from dsql import grammar, pgoutput
from dsql.errors import DsqlError, DsqlWarning, SchemaError, SourceError
from dsql.planner import types
from dsql.planner.plan import Column
from dsql.text_input import BadValue, from_text

#: The options of CREATE CONNECTION ... TO POSTGRES, and their defaults.
CONNECTION_OPTIONS = {
    "host": None,
    "port": "5432",
    "user": None,
    "password": None,
    "database": None,
}

Row = tuple[Any, ...]


@dataclass(frozen=True)
class PgConnection:
    """A PostgreSQL server and the role dsql logs in as."""

    name: str
    host: str
    port: int
    user: str
    password: str | None = field(repr=False)
    database: str
    #: The secret the password is, if it was given as `PASSWORD SECRET name`.
    secret: str | None = None

    def connect(self, **extra: Any) -> psycopg.Connection[Any]:
        """A connection, or a SourceError saying why there is none (with a hint)."""
        try:
            return psycopg.connect(
                host=self.host,
                port=self.port,
                user=self.user,
                password=self.password,
                dbname=self.database,
                connect_timeout=5,
                autocommit=True,
                **extra,
            )
        except psycopg.OperationalError as error:
            raise connection_error(self, error) from None


def connection_error(c: PgConnection, error: Exception) -> SourceError:
    """The SourceError of a failed connection to `c`: authentication or reachability."""
    detail = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
    if "authentication" in detail or "password" in detail or "role" in detail:
        hint = f"check USER and PASSWORD of CONNECTION {c.name}"
    else:
        hint = f"check that PostgreSQL runs at HOST {c.host!r} PORT {c.port}"
    where = f"{c.user}@{c.host}:{c.port}/{c.database}"
    return SourceError(f"cannot connect to PostgreSQL {where}: {detail}", hint=hint)


def upstream_error(c: PgConnection, error: psycopg.Error) -> SourceError:
    """The SourceError of a statement the server of `c` failed or refused."""
    if isinstance(error, psycopg.OperationalError):
        return connection_error(c, error)
    detail = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
    return SourceError(
        f"PostgreSQL {c.host}:{c.port} refused: {detail}",
        hint="the role needs to read the tables and to replicate (REPLICATION)",
    )


@dataclass
class UpstreamTable:
    """One replicated table: its upstream name and oid, and the relation it feeds."""

    schema: str
    table: str
    oid: int
    local: str
    columns: tuple[Column, ...]


@dataclass
class PgSource:
    """One source: its connection, publication, slot, tables and progress."""

    name: str
    connection: PgConnection
    publication: str
    slot: str
    tables: dict[int, UpstreamTable]
    #: The end of the last transaction applied: the source's progress.
    lsn: int = 0
    conn: psycopg.Connection[Any] | None = None
    errors: list[str] = field(default_factory=list)
    rows: int = 0


class PgSources:
    """The session's PostgreSQL connections and sources (module docstring); a
    `dsql.sources.SourceKind`."""

    statement: type = grammar.CreatePgSource
    log_key = "pg_sources"

    def __init__(self, session: Any) -> None:
        self.session = session
        self.connections: dict[str, PgConnection] = {}
        #: CREATE SECRET's values by name.
        self.secrets: dict[str, str] = {}
        self.by_name: dict[str, PgSource] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    # --- connections ---------------------------------------------------------------------
    def create_connection(self, stmt: Any) -> None:
        """CREATE CONNECTION: its options checked, and the server reached once."""
        if stmt.name in self.connections:
            if stmt.if_not_exists:
                return
            raise SchemaError(f'connection "{stmt.name}" already exists')
        if stmt.name in self.secrets:
            raise SchemaError(f'"{stmt.name}" is a secret', hint="choose another name")
        options = dict(stmt.options)
        secret = options.pop("password secret", None)
        if secret is not None:
            if "password" in options:
                raise SchemaError("give PASSWORD or PASSWORD SECRET, not both")
            options["password"] = self.secret(secret)
        unknown = sorted(set(options) - set(CONNECTION_OPTIONS))
        if unknown:
            raise SchemaError(
                f"unknown CONNECTION option {unknown[0].upper()!r}",
                hint="CREATE CONNECTION ... TO POSTGRES takes HOST, PORT, USER, PASSWORD "
                "(a string, or SECRET name), DATABASE",
            )
        values = {**CONNECTION_OPTIONS, **options}
        missing = [k for k in ("host", "user", "database") if values[k] is None]
        if missing:
            raise SchemaError(f"CREATE CONNECTION ... TO POSTGRES needs {missing[0].upper()}")
        try:
            port = int(str(values["port"]))
        except ValueError:
            raise SchemaError(f"PORT must be a number, not {values['port']!r}") from None
        c = PgConnection(
            stmt.name,
            str(values["host"]),
            port,
            str(values["user"]),
            values["password"],
            str(values["database"]),
            secret,
        )
        if not self._replaying():
            c.connect().close()
        self.connections[stmt.name] = c

    def drop_connection(self, stmt: Any) -> None:
        """DROP CONNECTION: refused while a source uses it."""
        for name in stmt.names:
            if name not in self.connections:
                if stmt.if_exists:
                    continue
                raise SchemaError(f'connection "{name}" does not exist')
            users = [
                ("source", x.name) for x in self.by_name.values() if x.connection.name == name
            ] + [
                ("sink", k.name)
                for k in self.session.sinks.values()
                if getattr(k.target, "connection", None) is self.connections[name]
            ]
            if users:
                kind, user = sorted(users)[0]
                raise SchemaError(
                    f'cannot drop connection "{name}": {kind} "{user}" uses it',
                    hint=f"DROP {kind.upper()} {user} first",
                )
            del self.connections[name]

    # --- secrets ---------------------------------------------------------------------------
    def create_secret(self, stmt: Any) -> None:
        """CREATE SECRET: a value kept for connections to name; no message prints it."""
        if stmt.name in self.secrets and stmt.if_not_exists:
            return
        if stmt.name in self.secrets or stmt.name in self.connections:
            kind = "secret" if stmt.name in self.secrets else "connection"
            raise SchemaError(f'{kind} "{stmt.name}" already exists', hint="choose another name")
        self.secrets[stmt.name] = stmt.value

    def drop_secret(self, stmt: Any) -> None:
        """DROP SECRET: refused while a connection uses it."""
        for name in stmt.names:
            if name not in self.secrets:
                if stmt.if_exists:
                    continue
                raise SchemaError(f'secret "{name}" does not exist')
            users = sorted(c.name for c in self.connections.values() if c.secret == name)
            if users:
                raise SchemaError(
                    f'cannot drop secret "{name}": connection "{users[0]}" uses it',
                    hint=f"DROP CONNECTION {users[0]} first",
                )
            del self.secrets[name]

    def secret(self, name: str) -> str:
        """Secret `name`'s value, or a SchemaError saying to create it."""
        if name not in self.secrets:
            raise SchemaError(
                f'secret "{name}" does not exist', hint="CREATE SECRET name AS '...' first"
            )
        return self.secrets[name]

    def secret_rows(self) -> dict[str, list[Any]]:
        """SHOW SECRETS: their names, never their values."""
        return {"name": sorted(self.secrets)}

    def connection(self, name: str) -> PgConnection:
        """Connection `name`, or a SchemaError saying to create it."""
        if name not in self.connections:
            raise SchemaError(
                f'connection "{name}" does not exist',
                hint="CREATE CONNECTION ... TO POSTGRES first",
            )
        return self.connections[name]

    def connection_rows(self) -> dict[str, list[Any]]:
        """SHOW CONNECTIONS: name, type, host, port, user, database (no password)."""
        cs = sorted(self.connections.values(), key=lambda c: c.name)
        return {
            "name": [c.name for c in cs],
            "type": ["postgres" for _ in cs],
            "host": [c.host for c in cs],
            "port": [c.port for c in cs],
            "user": [c.user for c in cs],
            "database": [c.database for c in cs],
        }

    def source_rows(self) -> dict[str, list[Any]]:
        """SHOW SOURCES' rows of the PostgreSQL sources (`FileSources.rows`' columns):
        name, where (connection, publication, tables), format `pgoutput`, files NULL,
        rows applied, last error."""
        xs = sorted(self.by_name.values(), key=lambda x: x.name)
        return {
            "name": [x.name for x in xs],
            "location": [
                f"postgres {x.connection.name} (PUBLICATION {_literal(x.publication)}) "
                + ", ".join(
                    f"{t.schema}.{t.table} AS {t.local}"
                    for t in sorted(x.tables.values(), key=lambda t: t.local)
                )
                for x in xs
            ],
            "format": ["pgoutput" for _ in xs],
            "files": [None for _ in xs],
            "rows": [x.rows for x in xs],
            "error": [x.errors[-1] if x.errors else None for x in xs],
        }

    # --- sources -------------------------------------------------------------------------
    def create(self, stmt: Any) -> None:
        """CREATE SOURCE ... FROM POSTGRES: the slot, the snapshot and the relations."""
        s = self.session
        if stmt.name in self.by_name:
            if stmt.if_not_exists or self._replaying():  # one definition, several relations
                return
            if stmt.if_not_exists:
                return
            raise SchemaError(f'source "{stmt.name}" already exists')
        c = self.connection(stmt.connection)
        options = dict(stmt.options)
        publication = options.pop("publication", None)
        slot = options.pop("slot", None) if self._replaying() else None
        if publication is None or options:
            raise SchemaError(
                "CREATE SOURCE ... FROM POSTGRES takes (PUBLICATION 'name') and nothing else"
            )
        try:
            with c.connect() as conn:
                _check_server(conn, c, publication)
                tables = _tables(conn, publication, stmt.tables)
        except psycopg.Error as error:
            raise upstream_error(c, error) from None
        if slot is not None:  # recovered: the slot exists, the rows come from the log
            self._attach(stmt.name, c, publication, slot, tables)
            return
        for t in tables:
            if t.local in s.relations:
                raise SchemaError(
                    f'relation "{t.local}" already exists',
                    hint=f"name the table another way: FOR TABLES ({t.table} AS other)",
                )
        # a slot's name is lower-case letters, digits and _ only
        slot = f"dsql_{re.sub('[^a-z0-9_]', '_', stmt.name.lower())[:40]}_{secrets.token_hex(4)}"
        source = PgSource(stmt.name, c, publication, slot, {t.oid: t for t in tables})
        try:
            snapshot = self._slot_and_snapshot(source)
        except psycopg.Error as error:
            _drop_slot(source)
            raise upstream_error(c, error) from None
        created: list[str] = []
        try:
            for t in tables:
                s.create_table(t.local, t.columns)
                s.relations[t.local].kind = "source"
                created.append(t.local)
            for t in tables:
                rows = snapshot[t.oid]
                if rows.num_rows:
                    source.rows += s.write(t.local, rows, 1, kinds=("source",))
        except BaseException:
            for name in created:
                s.drop(name, cascade=True, kind="source")
            _drop_slot(source)
            raise
        self.by_name[stmt.name] = source

    def _attach(
        self,
        name: str,
        c: PgConnection,
        publication: str,
        slot: str,
        tables: list[UpstreamTable],
    ) -> None:
        """A recovered source: its relations made again, reading from its slot."""
        for t in tables:
            self.session.create_table(t.local, t.columns)
            self.session.relations[t.local].kind = "source"
        self.by_name[name] = PgSource(name, c, publication, slot, {t.oid: t for t in tables})

    def definition(self, name: str) -> str:
        """The statement that makes source `name` again in a recovered session: its
        slot named, its tables listed with their local names."""
        x = self.by_name[name]
        tables = ", ".join(
            f'"{t.schema}"."{t.table}" AS "{t.local}"'
            for t in sorted(x.tables.values(), key=lambda t: t.local)
        )
        return (
            f'CREATE SOURCE "{x.name}" FROM POSTGRES CONNECTION "{x.connection.name}" '
            f"(PUBLICATION {_literal(x.publication)}, SLOT {_literal(x.slot)}) "
            f"FOR TABLES ({tables})"
        )

    def names(self) -> set[str]:
        """The connections' and secrets' names (catalog objects a data directory keeps)."""
        return set(self.connections) | set(self.secrets)

    def progress(self) -> dict[str, int]:
        """Each source's progress: the end of the last upstream transaction applied."""
        return {name: x.lsn for name, x in self.by_name.items()}

    def resume(self, progress: Mapping[str, int]) -> None:
        """Resume the sources from their logged progress: transactions that end at or
        before it are applied already and skipped when the slot sends them again."""
        for name, lsn in progress.items():
            if name in self.by_name:
                self.by_name[name].lsn = max(self.by_name[name].lsn, int(lsn))

    def _slot_and_snapshot(self, source: PgSource) -> dict[int, pa.Table]:
        """Create the source's slot and read its tables in the slot's exported snapshot
        (module docstring); each table's rows, typed."""
        c = source.connection
        replication = c.connect(replication="database")
        try:
            command = f"CREATE_REPLICATION_SLOT {source.slot} LOGICAL pgoutput (SNAPSHOT 'export')"
            result = replication.pgconn.exec_(command.encode())
            if result.status != pq.ExecStatus.TUPLES_OK:
                message = (result.error_message or b"").decode().strip()
                raise SourceError(
                    f"cannot create replication slot {source.slot}: {message}",
                    hint="the role needs the REPLICATION attribute and a free slot "
                    "(max_replication_slots)",
                )
            snapshot = (result.get_value(0, 2) or b"").decode()
            try:
                with c.connect() as conn:
                    conn.autocommit = False
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(snapshot))
                    out = {oid: _snapshot(conn, t) for oid, t in source.tables.items()}
                    conn.rollback()
                    return out
            except BaseException:
                _drop_slot(source)
                raise
        finally:
            replication.close()

    def drop(self, name: str, cascade: bool) -> list[str]:
        """DROP SOURCE of a PostgreSQL source: its relations (and, with CASCADE, what
        reads them) and its slot; the names dropped."""
        s = self.session
        source = self.by_name[name]
        dropped: list[str] = []
        for t in source.tables.values():
            if t.local in s.relations:
                dropped += s.drop(t.local, cascade, "source")
        del self.by_name[name]
        if source.conn is not None:
            source.conn.close()
        if not self._replaying():
            _drop_slot(source)
        return dropped

    def close(self) -> None:
        """Close the sources' connections to their servers (their slots stay: a
        durable session resumes from them)."""
        for source in self.by_name.values():
            if source.conn is not None:
                source.conn.close()
                source.conn = None

    # --- polling -------------------------------------------------------------------------
    def poll(self) -> list[str]:
        """Apply every source's committed upstream transactions, all at one time (module
        docstring); the notices of sources that could not be read. The slots advance in
        `confirm`."""
        if self.session.clock.in_transaction or not self.by_name:
            return []
        notices: list[str] = []
        changed: list[tuple[PgSource, dict[int, Counter[Row]]]] = []
        for source in list(self.by_name.values()):
            deltas = self._read(source, notices)
            if any(deltas.values()):
                changed.append((source, deltas))
        if changed:
            with self.session.clock.one_time():
                for source, deltas in changed:
                    self._write(source, deltas)
        return notices

    def confirm(self) -> list[str]:
        """Advance each slot past what `poll` applied (and the log holds)."""
        notices: list[str] = []
        for source in self.by_name.values():
            if source.conn is None or source.lsn == 0:
                continue
            try:
                source.conn.execute(
                    "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)"
                    " WHERE %s::pg_lsn > (SELECT confirmed_flush_lsn"
                    " FROM pg_replication_slots WHERE slot_name = %s)",
                    (source.slot, _lsn_text(source.lsn), _lsn_text(source.lsn), source.slot),
                )
            except psycopg.Error as error:
                notices.append(self._lost(source, error))
        return notices

    def _read(self, source: PgSource, notices: list[str]) -> dict[int, Counter[Row]]:
        """The net change of each table of `source` since its progress; on a failure,
        none, and a notice."""
        try:
            if source.conn is None or source.conn.closed:
                source.conn = source.connection.connect()
            changes = source.conn.execute(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL,"
                " 'proto_version', '1', 'publication_names', %s)",
                (source.slot, _quote_publication(source.publication)),
            ).fetchall()
        except DsqlError as error:
            source.errors.append(error.message)
            notices.append(f"source '{source.name}' is not reachable ({error.message}); retrying")
            return {}
        except psycopg.Error as error:
            notices.append(self._lost(source, error))
            return {}
        try:
            messages = [pgoutput.decode(data) for (data,) in changes]
        except pgoutput.DecodeError as error:
            source.errors.append(str(error))
            notices.append(f"source '{source.name}' stopped: {error}")
            return {}
        return self._deltas(source, messages, notices)

    def _write(self, source: PgSource, deltas: dict[int, Counter[Row]]) -> None:
        """Write each table's net change: its retracted rows, then its added ones."""
        s = self.session
        for oid, delta in deltas.items():
            t = source.tables[oid]
            if t.local not in s.relations:
                continue
            for diff in (-1, 1):
                rows = [row for row, n in delta.items() if n * diff > 0 for _ in range(abs(n))]
                if rows:
                    table = pa.table(
                        [
                            pa.array([r[i] for r in rows], types.to_arrow(c.type))
                            for i, c in enumerate(t.columns)
                        ],
                        names=[c.name for c in t.columns],
                    )
                    n = s.write(t.local, table, diff, kinds=("source",))
                    source.rows += n if diff > 0 else 0

    def _lost(self, source: PgSource, error: Exception) -> str:
        if source.conn is not None:
            source.conn.close()
        source.conn = None
        message = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        source.errors.append(message)
        return f"source '{source.name}' lost its connection ({message}); retrying at the next poll"

    def _deltas(
        self, source: PgSource, messages: list[pgoutput.Message], notices: list[str]
    ) -> dict[int, Counter[Row]]:
        """The net change of each table over the transactions not applied yet (those
        ending past `source.lsn`); `source.lsn` moves to the last one's end. A
        transaction the source cannot read stops it there: the ones before are applied,
        and a notice says why."""
        deltas: dict[int, Counter[Row]] = {}
        txn: list[pgoutput.Message] = []
        for m in messages:
            if not isinstance(m, pgoutput.Commit):
                txn.append(m)
                continue
            if m.end_lsn > source.lsn:
                try:
                    ops = self._typed_ops(source, [op for c in txn for op in self._ops(source, c)])
                except (DsqlError, pgoutput.DecodeError) as error:
                    message = getattr(error, "message", str(error))
                    source.errors.append(message)
                    notices.append(f"source '{source.name}' stopped: {message}")
                    return deltas
                for oid, row, diff in ops:
                    delta = deltas.setdefault(oid, Counter())
                    if row is None:  # TRUNCATE: the rows before this poll, and its changes, go
                        delta.clear()
                        delta.subtract(self._contents(source.tables[oid]))
                    else:
                        delta[row] += diff
                source.lsn = m.end_lsn
            txn = []
        return deltas

    def _ops(self, source: PgSource, m: pgoutput.Message) -> list[tuple[int, Row | None, int]]:
        """Change `m` as (table oid, typed row, diff) steps; a row of None truncates."""
        match m:
            case pgoutput.Relation() if m.oid in source.tables:
                t = source.tables[m.oid]
                if m.columns != tuple(c.name for c in t.columns):
                    raise SourceError(
                        f"source '{source.name}': table {t.schema}.{t.table} changed its "
                        f"columns upstream to ({', '.join(m.columns)})",
                        hint="recreate the source: DROP SOURCE, then CREATE SOURCE again",
                    )
                if m.replica_identity != "f":
                    raise SourceError(
                        f"source '{source.name}': table {t.schema}.{t.table} lost REPLICA "
                        "IDENTITY FULL; its updates and deletes no longer carry the old row",
                        hint=f"ALTER TABLE {t.schema}.{t.table} REPLICA IDENTITY FULL, "
                        "then recreate the source",
                    )
            case pgoutput.Insert() if m.oid in source.tables:
                return [(m.oid, m.new, 1)]
            case pgoutput.Update() if m.oid in source.tables:
                old = m.old if m.old_kind == "O" else None
                if old is None:
                    raise SourceError(
                        f"source '{source.name}': an update came without its old row",
                        hint="the table needs REPLICA IDENTITY FULL",
                    )
                pairs = zip(old, m.new, strict=True)
                new = tuple(o if n is pgoutput.UNCHANGED else n for o, n in pairs)
                return [(m.oid, old, -1), (m.oid, new, 1)]
            case pgoutput.Delete() if m.oid in source.tables:
                return [(m.oid, m.old, -1)]
            case pgoutput.Truncate():
                return [(oid, None, 0) for oid in m.oids if oid in source.tables]
        return []

    def _typed_ops(
        self, source: PgSource, ops: list[tuple[int, Any, int]]
    ) -> list[tuple[int, Row | None, int]]:
        """`ops` with their text rows typed as their tables' columns, a table's rows
        read together."""
        out: list[tuple[int, Row | None, int]] = list(ops)
        by_table: dict[int, list[int]] = {}
        for i, (oid, values, _) in enumerate(ops):
            if values is not None:
                by_table.setdefault(oid, []).append(i)
        for oid, positions in by_table.items():
            t = source.tables[oid]
            texts = [ops[i][1] for i in positions]
            if any(v is pgoutput.UNCHANGED for row in texts for v in row):
                raise SourceError(
                    f"source '{source.name}': a change to {t.table} lacks a TOASTed value",
                    hint="the table needs REPLICA IDENTITY FULL",
                )
            rows = _typed(t, [list(column) for column in zip(*texts, strict=True)])
            for i, row in zip(positions, rows, strict=True):
                out[i] = (oid, row, ops[i][2])
        return out

    def _contents(self, t: UpstreamTable) -> Counter[Row]:
        """The rows relation `t.local` holds before this poll's writes."""
        s = self.session
        if t.local not in s.relations:
            return Counter()
        table = s.read(s.plan(exp.select("*").from_(exp.to_table(f'"{t.local}"'))))
        columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
        return Counter(_rows(columns))

    def _replaying(self) -> bool:
        durable = self.session.durable
        return durable is not None and bool(durable.replaying)


def _check_server(conn: psycopg.Connection[Any], c: PgConnection, publication: str) -> None:
    """Refuse a server that cannot replicate logically or lacks the publication."""
    row = conn.execute("SHOW wal_level").fetchone()
    level = row[0] if row else None
    if level != "logical":
        raise SourceError(
            f"PostgreSQL at {c.host}:{c.port} has wal_level = {level}; logical replication "
            "needs wal_level = logical",
            hint="set wal_level = logical in postgresql.conf and restart the server",
        )
    found = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
    if found.fetchone() is None:
        raise SourceError(
            f'publication "{publication}" does not exist in database {c.database}',
            hint=f"CREATE PUBLICATION {publication} FOR TABLE ... upstream",
        )


def _tables(
    conn: psycopg.Connection[Any],
    publication: str,
    wanted: tuple[tuple[str, str | None], ...] | None,
) -> list[UpstreamTable]:
    """The tables the source replicates, each checked and typed (module docstring)."""
    published = conn.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1, 2",
        (publication,),
    ).fetchall()
    if wanted is None:
        chosen = [(sch, tab, tab) for sch, tab in published]
        if not chosen:
            raise SourceError(f'publication "{publication}" has no tables')
    else:
        chosen = []
        for upstream, local in wanted:
            sch, _, tab = upstream.rpartition(".")
            sch = sch or "public"
            if (sch, tab) not in published:
                raise SourceError(
                    f'table {sch}.{tab} is not in publication "{publication}"',
                    hint=f"ALTER PUBLICATION {publication} ADD TABLE {sch}.{tab} upstream",
                )
            chosen.append((sch, tab, local or tab))
    locals_ = [local for _, _, local in chosen]
    if len(set(locals_)) < len(locals_):
        raise SchemaError("two tables of the source have the same name", hint="rename one with AS")
    return [_table(conn, sch, tab, local) for sch, tab, local in chosen]


def _table(conn: psycopg.Connection[Any], schema: str, table: str, local: str) -> UpstreamTable:
    oid, identity = conn.execute(
        "SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n"
        " ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (schema, table),
    ).fetchone() or (None, None)
    if oid is None:
        raise SourceError(f"table {schema}.{table} does not exist", hint="check its name")
    if identity != "f":
        raise SourceError(
            f"table {schema}.{table} does not have REPLICA IDENTITY FULL: its updates and "
            "deletes would not carry the old row",
            hint=f"ALTER TABLE {schema}.{table} REPLICA IDENTITY FULL",
        )
    columns = []
    for name, kind in conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (oid,),
    ).fetchall():
        columns.append(Column(name, _type(schema, table, name, kind)))
    return UpstreamTable(schema, table, int(oid), local, tuple(columns))


def _type(schema: str, table: str, column: str, kind: str) -> exp.DataType:
    """Column `column`'s PostgreSQL type as dsql's, or a SchemaError naming it."""
    try:
        built = types.build(kind)
        types.to_arrow(built)
        return built
    except (DsqlError, ValueError, TypeError, KeyError, AttributeError) as error:
        detail = getattr(error, "message", str(error))
        raise SchemaError(
            f"column {schema}.{table}.{column} has type {kind}, which dsql does not support"
            f" ({detail})",
            hint="leave the table out of the source, or change the column's type upstream",
        ) from None


def _snapshot(conn: psycopg.Connection[Any], t: UpstreamTable) -> pa.Table:
    """Table `t`'s rows in the transaction's snapshot, read as text and typed as changes are."""
    columns = sql.SQL(", ").join(
        sql.SQL("{}::text").format(sql.Identifier(c.name)) for c in t.columns
    )
    query = sql.SQL("SELECT {} FROM {}.{}").format(
        columns, sql.Identifier(t.schema), sql.Identifier(t.table)
    )
    rows = conn.execute(query).fetchall()
    arrays = _arrays(t, [[r[i] for r in rows] for i in range(len(t.columns))])
    return pa.table(arrays, names=[c.name for c in t.columns])


def _arrays(t: UpstreamTable, texts: list[list[Any]]) -> list[pa.Array]:
    """Each column's text values read as its type (PostgreSQL's output format)."""
    out = []
    for c, values in zip(t.columns, texts, strict=True):
        try:
            out.append(from_text(values, c.type, c.name))
        except BadValue as bad:
            raise SourceError(
                f"table {t.schema}.{t.table}, column {c.name}: {bad.error.message}",
                hint="dsql reads the value as PostgreSQL prints it",
            ) from None
    return out


def _typed(t: UpstreamTable, texts: list[list[Any]]) -> list[Row]:
    """Rows of text values typed as `t`'s columns, as Python values."""
    arrays = _arrays(t, texts)
    return _rows([a.to_pylist() for a in arrays])


def _rows(columns: list[list[Any]]) -> list[Row]:
    """Columns of Python values as rows a Counter can hold: arrays as tuples (Arrow
    reads them back as lists)."""
    return [tuple(map(_frozen, row)) for row in zip(*columns, strict=True)]


def _frozen(value: Any) -> Any:
    return tuple(map(_frozen, value)) if isinstance(value, list) else value


def _drop_slot(source: PgSource) -> None:
    """Drop the source's slot; if the server cannot be reached it stays there, holding
    back the server's WAL, and a warning says how to drop it by hand."""
    try:
        with source.connection.connect() as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE slot_name = %s",
                (source.slot,),
            )
    except (DsqlError, psycopg.Error) as error:
        detail = getattr(error, "message", None) or str(error).strip()
        warnings.warn(
            f"the replication slot {source.slot} of source '{source.name}' could not be "
            f"dropped ({detail}): it keeps the server's WAL until it is; run "
            f"SELECT pg_drop_replication_slot('{source.slot}') there",
            DsqlWarning,
            stacklevel=3,
        )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _quote_publication(name: str) -> str:
    """`publication_names` is a list of identifiers: quoted, so any name reads as itself."""
    return '"' + name.replace('"', '""') + '"'


__all__ = ["PgConnection", "PgSource", "PgSources"]
