"""Delta Lake sources: a relation kept equal to a Delta table, one version at a time.

`CREATE SOURCE s [(col type, ...)] FROM DELTA 'path'` makes `s` a relation with the
table's columns (its Delta schema; columns given must be those; a type dsql has no
counterpart for is refused at CREATE). The first poll reads the snapshot at the table's
current version; every later poll reads each version committed since, in order, as
that version's changes: its inserted rows with a diff of +1, its removed rows with -1.
A version is atomic: its changes are written at one time, never split (the versions a
poll finds share that poll's time, in order).

Where a version's changes come from:

- the change data feed (`delta.enableChangeDataFeed = true` in effect at that
  version), read with `DeltaTable.load_cdf`: `insert` and `update_postimage` rows are
  inserts, `delete` and `update_preimage` rows retractions;
- without the feed, a version that only adds data (an append) is its added files,
  read with their partition values;
- without the feed, a version that removes data (a delete, update, merge or overwrite)
  cannot be told apart from the rows it kept: the source stops there with an error
  (notice and `SHOW SOURCES`), never guessing; the versions before it stay applied.

Versions that change no data (OPTIMIZE, metadata) add nothing; a version that changes
the schema stops the source. Polls run with the file sources' (before each statement
and while a FETCH waits; `dsql.execute`), and the last version read is the source's
progress, logged with the poll's rows (`Durable.polled`), so a restarted session
neither loses nor repeats a version; the log keeps the source's columns
(`definition`), so a recovery makes its relation even when the table is gone then. The
path passes the sandbox (`dsql.sandbox`) at CREATE, and every data file the table's log
names passes it at the poll that reads it. Tables are read in the driver with
`deltalake` (delta-rs): no Spark needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlglot import exp

from dsql import grammar
from dsql.errors import DsqlError, SchemaError, SourceError, UnsupportedError
from dsql.planner import types
from dsql.planner.plan import Column

#: The table property that turns the change data feed on.
FEED = "delta.enableChangeDataFeed"

#: Change data feed rows: inserted (+1) or retracted (-1).
_CHANGE_DIFF = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}


@dataclass
class DeltaSource:
    """One source: its table, its columns, and the last version read."""

    name: str
    path: Path
    columns: tuple[Column, ...]
    #: The Delta schema (field names and types) the columns were made from.
    schema: pa.Schema
    #: The table's schema as Delta's (name, type) pairs, to tell a version that changes
    #: it (None until the table is first opened).
    fields: list[tuple[str, str]] | None
    #: The last version read (the source's progress); None before the snapshot.
    version: int | None = None
    #: Why the source stopped (None: it runs).
    error: str | None = None
    #: Why the table cannot be opened now (told once, until it can be again).
    unreadable: str | None = None
    rows: int = 0
    changes: list[tuple[pa.Table, int]] = field(default_factory=list)


class DeltaSources:
    """The session's Delta sources (module docstring)."""

    statement: type = grammar.CreateDeltaSource
    log_key = "delta_sources"

    def __init__(self, session: Any) -> None:
        self.session = session
        self.by_name: dict[str, DeltaSource] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def create(self, stmt: Any) -> None:
        """CREATE SOURCE ... FROM DELTA: the relation, typed from the table's schema; its
        snapshot is read by the next poll."""
        s = self.session
        if stmt.name in s.relations and stmt.if_not_exists:
            return
        place = s.sandbox.check(stmt.location, "read")
        if not isinstance(place, Path):
            raise SourceError(
                f"{stmt.location}: only local Delta tables are read",
                hint="give the table's directory on this machine",
            )
        given = None
        if stmt.columns is not None:
            given = (
                tuple(Column(c.name, types.build(c.type)) for c in stmt.columns),
                tuple(c.not_null for c in stmt.columns),
            )
        try:
            table = open_table(place, stmt.location)
        except DsqlError:
            if not (s.sandbox.recovering and given):
                raise
            table = None  # recovered from its logged columns; the first poll tells why
        fields, stopped, found = None, None, given
        if table is not None:
            found = _columns(table, stmt.location)
            fields = _fields(json.loads(table.schema().to_json()))
            if given is not None and _spelled(given) != _spelled(found):
                if not s.sandbox.recovering:
                    raise SchemaError(
                        f"the columns given, ({_spelled(given)}), are not Delta table "
                        f"{stmt.location}'s: ({_spelled(found)})",
                        hint="leave the columns out: they are read from the table",
                    )
                stopped = f"the table's columns are now ({_spelled(found)})"
        assert found is not None  # the table's, or the given ones when it cannot be read
        columns, not_null = given or found
        s.create_table(stmt.name, columns, not_null)
        s.relations[stmt.name].kind = "source"
        schema = pa.schema([pa.field(c.name, types.to_arrow(c.type)) for c in columns])
        source = DeltaSource(stmt.name, place, columns, schema, fields)
        source.error = stopped
        self.by_name[stmt.name] = source

    def definition(self, name: str) -> str:
        """The CREATE SOURCE statement that makes source `name` again: its columns (a
        recovery needs no table to make the relation its views read) and its path,
        absolute."""
        quoted = exp.to_identifier(name, quoted=True).sql("postgres")
        rel = self.session.relations[name]
        columns = _spelled((rel.columns, rel.not_null))
        where = exp.Literal.string(str(self.by_name[name].path)).sql("postgres")
        return f"CREATE SOURCE {quoted} ({columns}) FROM DELTA {where}"

    def drop(self, name: str, cascade: bool) -> list[str]:
        """DROP SOURCE of a Delta source: its relation (with CASCADE, what reads it); the
        names dropped. The Delta table is the user's and stays."""
        dropped = self.session.drop(name, cascade, "source")
        del self.by_name[name]
        return dropped

    # --- polling -------------------------------------------------------------------------
    def poll(self) -> list[str]:
        """Write every running source's new versions, all at one time (module
        docstring); the notices of sources that stopped or could not be read."""
        if self.session.clock.in_transaction or not self.by_name:
            return []
        notices: list[str] = []
        for source in self.by_name.values():
            if source.error is None:
                notices += self._read(source)
        pending = [x for x in self.by_name.values() if x.changes]
        if pending:
            with self.session.clock.one_time():
                for source in pending:
                    for rows, diff in source.changes:
                        source.rows += diff * self.session.write(
                            source.name, rows, diff, kinds=("source",)
                        )
                    source.changes = []
        return notices

    def _read(self, source: DeltaSource) -> list[str]:
        """Collect the changes of the versions after `source.version` into
        `source.changes`, moving the version past each one read."""
        quiet = source.version is not None and not _commit(source.path, source.version + 1).exists()
        if quiet and (source.path / "_delta_log").is_dir():
            return []  # no new version: two stats, where opening the table reads its log
        try:
            table = open_table(source.path, str(source.path))
        except DsqlError as error:  # gone for now: the next poll looks again
            told, source.unreadable = source.unreadable, error.message
            return (
                []
                if told == error.message
                else [f"source '{source.name}' cannot read its table: {error.message}"]
            )
        source.unreadable = None
        if source.fields is None:
            source.fields = _fields(json.loads(table.schema().to_json()))
        latest = table.version()
        try:
            self._collect(source, table, latest)
        except DsqlError as error:
            message, hint = error.message, error.hint
        except delta_failures() as error:  # a file gone, a protocol feature delta-rs lacks
            message, hint = f"{type(error).__name__}: {error}", None
        else:
            return []
        at = "the snapshot" if source.version is None else f"version {source.version + 1}"
        source.error = f"{at}: {message}"
        return [
            f"source '{source.name}' stopped at {source.error}" + (f" ({hint})" if hint else "")
        ]

    def _collect(self, source: DeltaSource, table: Any, latest: int) -> None:
        """Collect the snapshot (first) and each version up to `latest` into
        `source.changes`, moving `source.version` past each one read."""
        if source.version is None:
            for uri in table.file_uris():
                self._inside(source, uri)
            snapshot = table.to_pyarrow_table(columns=source.schema.names).cast(source.schema)
            source.changes.append((self._typed(source, snapshot), 1))
            source.version = latest
        while source.version < latest:
            for rows, diff in self._version(source, table, source.version + 1):
                source.changes.append((self._typed(source, rows), diff))
            source.version += 1

    def _version(self, source: DeltaSource, table: Any, version: int) -> list[tuple[pa.Table, int]]:
        """Version `version`'s changes as (rows, diff) pairs (module docstring)."""
        actions = commit_actions(source.path, version)
        for action in actions:
            for kind in ("add", "remove", "cdc"):
                if kind in action:
                    self._inside(source, unquote(action[kind]["path"]))
            meta = action.get("metaData")
            if meta is not None and _fields(json.loads(meta["schemaString"])) != source.fields:
                raise SourceError(
                    f"Delta table {source.path} changed its schema",
                    hint="recreate the source: DROP SOURCE, then CREATE SOURCE again",
                )
        adds = [a["add"] for a in actions if "add" in a and a["add"].get("dataChange", True)]
        removes = [a for a in actions if "remove" in a and a["remove"].get("dataChange", True)]
        if not adds and not removes:
            return []
        if _feed_on(table, version):
            changes = pa.table(table.load_cdf(starting_version=version, ending_version=version))
            kinds = changes["_change_type"].cast(pa.string())
            changes = changes.select(source.schema.names).cast(source.schema)
            return [
                (changes.filter(pc.is_in(kinds, pa.array(names))), diff)
                for diff, names in (
                    (1, [k for k, d in _CHANGE_DIFF.items() if d == 1]),
                    (-1, [k for k, d in _CHANGE_DIFF.items() if d == -1]),
                )
            ]
        if removes:
            info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            operation = info.get("operation")
            raise SourceError(
                f"Delta table {source.path} removed rows at version {version}"
                + (f" ({operation})" if operation else "")
                + " and has no change data feed to tell which",
                hint="enable the change data feed (ALTER TABLE ... SET TBLPROPERTIES "
                f"({FEED} = true)), then recreate the source",
            )
        return [(pa.concat_tables([self._added(source, a) for a in adds]), 1)]

    def _inside(self, source: DeltaSource, file: str) -> None:
        """Refuse a data file a Delta table names outside itself (an absolute path, as
        a shallow clone writes) unless the sandbox lets SQL read it there too."""
        place = file if "://" in file or file.startswith("/") else str(source.path / file)
        self.session.sandbox.check(place, "read")

    def _added(self, source: DeltaSource, add: dict[str, Any]) -> pa.Table:
        """The rows of one added data file, its partition columns filled in."""
        if add.get("deletionVector"):
            raise UnsupportedError(
                f"Delta table {source.path} adds a file with a deletion vector",
                hint="enable the change data feed",
            )
        path = source.path / unquote(add["path"])
        try:
            rows = pq.read_table(path)
        except (OSError, pa.ArrowException) as error:
            raise SourceError(f"cannot read Delta data file {path}: {error}") from None
        partitions = add.get("partitionValues") or {}
        columns = []
        for f in source.schema:
            if f.name in partitions:
                text = pa.array([partitions[f.name]] * rows.num_rows, pa.string())
                columns.append(text.cast(f.type))
            else:
                columns.append(rows[f.name])
        return pa.table(columns, names=source.schema.names)

    def _typed(self, source: DeltaSource, rows: pa.Table) -> pa.Table:
        """`rows` as the relation's columns (the feed's own columns dropped)."""
        return rows.select(source.schema.names).cast(
            pa.schema([pa.field(c.name, types.to_arrow(c.type)) for c in source.columns])
        )

    # --- progress ------------------------------------------------------------------------
    def progress(self) -> dict[str, int | None]:
        """Each source's progress: the last version read (None: not even the snapshot)."""
        return {name: x.version for name, x in self.by_name.items()}

    def resume(self, progress: Mapping[str, int | None]) -> None:
        """Resume the sources from their logged progress (sources dropped since are gone)."""
        for name, version in progress.items():
            if name in self.by_name:
                self.by_name[name].version = version

    def confirm(self) -> list[str]:
        """Nothing upstream to tell: the versions read are the progress."""
        return []

    def close(self) -> None:
        """Nothing held open between polls."""

    def rows(self) -> dict[str, list[Any]]:
        """SHOW SOURCES' columns for the Delta sources (`files`: the last version read)."""
        sources = sorted(self.by_name.values(), key=lambda x: x.name)
        return {
            "name": [x.name for x in sources],
            "location": [str(x.path) for x in sources],
            "format": ["delta"] * len(sources),
            "files": [x.version for x in sources],
            "rows": [x.rows for x in sources],
            "error": [x.error or x.unreadable for x in sources],
        }


def open_table(path: Path, label: str) -> Any:
    """The Delta table at `path`; a `SourceError` naming `label` if there is none."""
    from deltalake import DeltaTable

    if not path.is_dir():
        raise SourceError(f"no such Delta table: {label}", hint="give the table's directory")
    if not (path / "_delta_log").is_dir():
        raise SourceError(
            f"{label} is not a Delta table (it has no _delta_log)",
            hint="give the directory a Delta writer created",
        )
    try:
        return DeltaTable(str(path))
    except delta_failures() as error:
        raise SourceError(f"cannot open Delta table {label}: {error}") from None


def _columns(table: Any, label: str) -> tuple[tuple[Column, ...], tuple[bool, ...]]:
    """The columns of Delta table `table` and which are NOT NULL; refused if it uses
    column mapping or a type dsql has none for."""
    mapping = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mapping not in (None, "none"):
        raise UnsupportedError(
            f"Delta table {label} uses column mapping ({mapping})",
            hint="read a table without delta.columnMapping.mode",
        )
    schema = arrow_schema(table)
    columns = tuple(Column(f.name, sql_type(f, label)) for f in schema)
    return columns, tuple(not f.nullable for f in schema)


def _spelled(columns: tuple[tuple[Column, ...], tuple[bool, ...]]) -> str:
    """Columns and their NOT NULLs as a CREATE statement lists them."""
    return ", ".join(
        f"{exp.to_identifier(c.name, quoted=True).sql('postgres')} {c.type.sql('postgres')}"
        + (" NOT NULL" if required else "")
        for c, required in zip(*columns, strict=True)
    )


def delta_failures() -> tuple[type[BaseException], ...]:
    """What reading or writing a Delta table may raise besides dsql's errors: delta-rs's
    `DeltaError`s, and Arrow's and the file system's errors under it."""
    from deltalake.exceptions import DeltaError

    return (DeltaError, OSError, pa.ArrowException)


def arrow_schema(table: Any) -> pa.Schema:
    """The table's schema as Arrow's (view types as their plain counterparts)."""
    schema = pa.schema(table.schema().to_arrow())
    return pa.schema([f.with_type(_PLAIN.get(f.type, f.type)) for f in schema])


#: Arrow's view types (delta-rs reads strings as views) and the plain types dsql keeps.
_PLAIN = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def sql_type(f: pa.Field, label: str) -> exp.DataType:
    """Column `f`'s SQL type; a `SchemaError` for a type dsql has none for."""
    dtype = types.from_arrow(f.type)
    try:
        if dtype.this == exp.DataType.Type.UNKNOWN:
            raise SchemaError("")
        types.to_arrow(dtype)
    except DsqlError:
        raise SchemaError(
            f'column "{f.name}" of Delta table {label} has type {f.type}, '
            "which dsql has no type for",
            hint="read a table (or a copy) without it: maps and structs are not supported",
        ) from None
    return dtype


def commit_actions(path: Path, version: int) -> list[dict[str, Any]]:
    """The actions of commit `version` (`_delta_log/<version>.json`, one JSON a line)."""
    log = _commit(path, version)
    try:
        text = log.read_text(encoding="utf-8")
    except OSError:
        raise SourceError(
            f"the log entry of version {version} of Delta table {path} is gone",
            hint="the table's log retention removed it before dsql read it: recreate the source",
        ) from None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _commit(path: Path, version: int) -> Path:
    """The log entry of commit `version` of the table at `path` (the Delta protocol's name)."""
    return path / "_delta_log" / f"{version:020d}.json"


def _feed_on(table: Any, version: int) -> bool:
    """Whether the change data feed is on at `version` (the configuration then)."""
    from deltalake import DeltaTable

    config = DeltaTable(table.table_uri, version=version).metadata().configuration
    return str(config.get(FEED, "false")).lower() == "true"


def _fields(schema: dict[str, Any]) -> list[tuple[str, str]]:
    """A Delta schema's (name, type) pairs, for telling a schema change."""
    return [(f["name"], json.dumps(f["type"], sort_keys=True)) for f in schema["fields"]]


__all__ = ["DeltaSource", "DeltaSources", "delta_failures", "open_table"]
