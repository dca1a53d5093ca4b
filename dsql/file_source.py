"""File sources: a relation fed by the files that arrive in a directory.

`CREATE SOURCE s (a int, b text) FROM FILES 'dir' WITH (FORMAT = 'csv')` makes `s` a
relation that only its files write: each poll lists the directory, reads every file it
has not read before (names starting with `.` or `_` are skipped: write a file under such
a name and rename it into place when complete), and inserts all their rows in one write,
at one new time. Views over `s` are maintained and SUBSCRIBE sees each poll's rows.

Polls happen at statement boundaries (before each statement runs) and while a FETCH or
a cursor's fetch waits for updates: dsql's clock moves by statements (the manual clock)
or stamps each write with the wall clock when it happens, so a poll is a write like an
INSERT, serialized with the statements by the executor's lock, and needs no thread of
its own. `Session.sources.poll()` is the same poll from Python.

Each file is read once: `seen` (a file's name) is the source's progress, which a
durable session would persist with it. A file is one unit: read as COPY reads (the
source's options are COPY's: FORMAT, HEADER, DELIMITER, NULL, QUOTE, ESCAPE; a CSV
file has a header line unless `HEADER = false`), and by default a file with a malformed
row contributes no row: its error (file, line, column, value) is kept on the source
(`SHOW SOURCES`, `errors`), the poll's statement carries it as a notice, and the
source goes on with the next file. `ON ERROR = 'quarantine'` instead inserts the
file's good rows and puts each bad one into the table `<source>_quarantine` (file,
line, error, record), which is created with the source and dropped with it.

`KEY (k, ...) ENVELOPE UPSERT` after the options makes the source's records upserts
by key (`dsql.upsert`): a poll's records, in the order of their files' names and then
their lines, replace their key's row (the last record of a key in the poll wins), and
a record whose value columns are all NULL deletes it. A record with a NULL key is a bad
record: with `ON ERROR = 'report'` its file adds nothing and the error names the file
and the line (CSV, text) or record (JSON lines, Parquet); with 'quarantine' it goes to
the quarantine table and the file's other records are applied.

Files must lie inside the session's sandbox (`dsql.sandbox`), checked at CREATE and
at each poll (a symlink to elsewhere is refused, never followed). A source named by a
Hadoop URI (`file:///dir`, `hdfs://...`, `s3a://...`), or any source of a session on
the Spark kernel with a `state_uri`, is read by Spark Structured Streaming instead
(`dsql.spark_file_source`): held in `spark`, polled with the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from dsql import grammar, upsert
from dsql.copy import field_count_problem, read_text, text_fields, typed_fields, typed_file
from dsql.copy_format import CopyFormat, RecordError, records
from dsql.errors import DataError, DsqlError, SchemaError, SourceError
from dsql.planner import types
from dsql.planner.plan import Column
from dsql.spark_file_source import SparkFileSources, is_hadoop_uri

#: The columns of a source's quarantine table.
QUARANTINE = (("file", "text"), ("line", "bigint"), ("error", "text"), ("record", "text"))


@dataclass
class FileSource:
    """One source: where its files arrive, how they read, and what was read."""

    name: str
    directory: Path
    fmt: CopyFormat
    columns: tuple[Column, ...]
    on_error: str
    #: The files read so far, by name: the source's progress.
    seen: set[str] = field(default_factory=set)
    #: Every file that failed: (file, message).
    errors: list[tuple[str, str]] = field(default_factory=list)
    rows: int = 0
    #: With ENVELOPE UPSERT: the rows by key, which each poll's records replace.
    upserts: upsert.Upserts | None = None

    @property
    def quarantine(self) -> str | None:
        return f"{self.name}_quarantine" if self.on_error == "quarantine" else None


class FileSources:
    """The session's file sources (module docstring); a `dsql.sources.SourceKind`."""

    statement: type = grammar.CreateSource
    log_key = "sources"

    def __init__(self, session: Any) -> None:
        self.session = session
        self.by_name: dict[str, FileSource] = {}
        #: The sources Spark reads (`dsql.spark_file_source`).
        self.spark = SparkFileSources(session)

    def __contains__(self, name: object) -> bool:
        return name in self.by_name or name in self.spark

    def on_spark(self, location: str) -> bool:
        """Whether a source of `location` is read by Spark (module docstring)."""
        kernel = self.session.worker.kernel
        return is_hadoop_uri(location) or (
            self.session.kernel_name == "spark" and kernel.state.requested is not None
        )

    def create(self, stmt: Any) -> None:
        """CREATE SOURCE: the relation and its quarantine table if asked; the files
        already there are read by the next statement's poll, like any that arrive."""
        s = self.session
        if stmt.name in s.relations and stmt.if_not_exists:
            return
        options = dict(stmt.options)
        on_error = options.pop("on error", "report").lower()
        if on_error not in ("report", "quarantine"):
            raise SchemaError(
                f"unknown ON ERROR {on_error!r}", hint="use ON ERROR = 'report' or 'quarantine'"
            )
        kind = options.get("format", "").lower()
        if kind not in ("csv", "text", "json", "parquet"):
            raise SchemaError(
                "CREATE SOURCE ... FROM FILES needs WITH (FORMAT = 'csv' | 'json' | 'parquet')"
            )
        columns = tuple(Column(c.name, types.build(c.type)) for c in stmt.columns)
        for c in columns:
            types.to_arrow(c.type)
        if self.on_spark(stmt.location):
            if any(c.not_null for c in stmt.columns):
                raise SchemaError(
                    "a source Spark reads has no NOT NULL column",
                    hint="drop NOT NULL, or filter the nulls in a view",
                )
            if stmt.key is not None:
                raise SchemaError(
                    "a source Spark reads takes no KEY ... ENVELOPE UPSERT",
                    hint="read the files in-process (a local path), or upsert in a view",
                )
            source: Any = self.spark.create(stmt.name, stmt.location, options, columns, on_error)
        else:
            if kind == "csv" and "header" not in options:
                options["header"] = "true"
            fmt = CopyFormat.of(options.items())
            directory = s.sandbox.check(stmt.location, "read")
            if not isinstance(directory, Path):
                raise SourceError(
                    f"{stmt.location}: only local directories are read in-process",
                    hint="a session on Spark reads a Hadoop URI (kernel='spark' or 'auto')",
                )
            if not directory.is_dir():
                raise SourceError(f"no such directory: {directory}", hint="create it first")
            source = FileSource(stmt.name, directory, fmt, columns, on_error)
            if stmt.key is not None:
                names = [c.name for c in columns]
                source.upserts = upsert.Upserts(
                    upsert.check_key(stmt.key, names, stmt.name), len(names)
                )
        try:
            s.create_table(stmt.name, columns, tuple(c.not_null for c in stmt.columns))
        except DsqlError:
            self.spark.drop(stmt.name)
            raise
        s.relations[stmt.name].kind = "source"
        if source.quarantine is not None:
            try:
                q = tuple(Column(n, exp.DataType.build(t)) for n, t in QUARANTINE)
                s.create_table(source.quarantine, q)
            except DsqlError:
                s.drop(stmt.name, cascade=False, kind="source")
                raise
        if isinstance(source, FileSource):
            self.by_name[stmt.name] = source

    def drop(self, name: str, cascade: bool) -> list[str]:
        """DROP SOURCE of a file source: its relation (with CASCADE, what reads it) and
        its quarantine table; the names dropped."""
        dropped = self.session.drop(name, cascade, "source")
        source: Any = self.by_name.pop(name, None) or self.spark.by_name.get(name)
        self.spark.drop(name)
        if source is not None and source.quarantine in self.session.relations:
            dropped += self.session.drop(source.quarantine, cascade=True, kind="table")
        return dropped

    def poll(self) -> list[str]:
        """Read every new file of every source (module docstring); the notices of the
        files that failed. Not inside a transaction: its writes share one time, which
        files arriving meanwhile are no part of (they come at the next statement after
        COMMIT)."""
        if self.session.clock.in_transaction:
            return []
        notices: list[str] = []
        for source in list(self.by_name.values()):
            notices += self._poll(source)
        for spark_source in list(self.spark.by_name.values()):
            notices += self.spark.poll(spark_source)
        return notices

    def _poll(self, source: FileSource) -> list[str]:
        s = self.session
        try:
            names = sorted(
                p.name
                for p in source.directory.iterdir()
                if p.name not in source.seen and not p.name.startswith((".", "_")) and p.is_file()
            )
        except OSError as error:
            return self._failed(source, str(source.directory), f"cannot list: {error}")
        notices: list[str] = []
        batches: list[pa.Table] = []
        bad: list[tuple[str, int, str, str]] = []
        for name in names:
            source.seen.add(name)
            try:
                path = s.sandbox.check(str(source.directory / name), "read")
                batches.append(self._read(source, Path(path), bad))
            except DsqlError as error:
                notices += self._failed(source, name, error.message)
        rows = [b for b in batches if b.num_rows]
        if rows and source.upserts is not None:
            self._upsert(source, pa.concat_tables(rows))
        elif rows:
            table = pa.concat_tables(rows)
            source.rows += s.write(source.name, table, 1, kinds=("source",))
        if bad and source.quarantine in s.relations:
            q = pa.table(
                [pa.array([b[i] for b in bad], t) for i, t in enumerate(_QUARANTINE_ARROW)],
                names=[n for n, _ in QUARANTINE],
            )
            s.write(source.quarantine, q, 1)
        return notices

    def _upsert(self, source: FileSource, records: pa.Table) -> None:
        """Apply a poll's records, in order, as upserts by the source's key: the rows
        they replace retracted and their rows inserted, at one time."""
        s, state = self.session, source.upserts
        assert state is not None
        if state.rows is None:  # the relation is the state (after a restart, recovered)
            query = exp.select("*").from_(
                exp.to_table(exp.to_identifier(source.name, True).sql("postgres"))
            )
            state.load(upsert.rows_of(s.read(s.plan(query))))
        retract, insert = state.changes(upsert.rows_of(records))
        schema = records.schema
        try:
            with s.clock.one_time():
                if retract:
                    s.write(source.name, upsert.table_of(retract, schema), -1, kinds=("source",))
                if insert:
                    n = s.write(source.name, upsert.table_of(insert, schema), 1, kinds=("source",))
                    source.rows += n
        except BaseException:  # the relation may hold part: read it again at the next poll
            state.rows = None
            raise

    def _failed(self, source: FileSource, name: str, message: str) -> list[str]:
        source.errors.append((name, message))
        return [f"source '{source.name}' skipped file {name}: {message}"]

    def _read(
        self, source: FileSource, path: Path, bad: list[tuple[str, int, str, str]]
    ) -> pa.Table:
        """One file's rows, typed; with a quarantine, its bad records go to `bad`."""
        given = [c.name for c in source.columns]
        kinds = {c.name: c.type for c in source.columns}
        label = f"source {source.name}"
        raw: list[str] = []
        if source.fmt.format in ("json", "parquet"):
            columns = typed_file(path, source.fmt.format, given, kinds, label)
            lines = list(range(1, len(columns[0]) + 1)) if columns else []
        else:
            text = read_text(path)
            if source.upserts is not None:  # a NULL key's record, quarantined as written
                raw = text.splitlines()
            if source.quarantine is None:
                lines, fields = text_fields(text, source.fmt, given, label, str(path))
                columns = typed_fields(lines, fields, given, kinds, label, str(path))
            else:
                columns, lines = self._quarantined(source, path, text, given, kinds, bad)
        table = pa.table(columns, names=[f"_c{i}" for i in range(len(columns))])
        # A tombstone's NULLs delete a row; they are never stored, so NOT NULL holds.
        stored = None
        if source.upserts is not None:
            table = self._null_keys(source, path, table, lines, raw, bad)
            stored = source.upserts.stored(table)
        for i, required in enumerate(self.session.relations[source.name].not_null):
            nulls = table.column(i).is_null().combine_chunks()
            if stored is not None:
                nulls = pc.and_(nulls, stored)
            if required and pc.any(nulls).as_py():
                row = nulls.to_pylist().index(True)
                raise DataError(
                    f'null value in column "{given[i]}" violates not-null constraint '
                    f"(record {row + 1} of {path})"
                )
        return table

    def _null_keys(
        self,
        source: FileSource,
        path: Path,
        table: pa.Table,
        lines: list[int],
        raw: list[str],
        bad: list[tuple[str, int, str, str]],
    ) -> pa.Table:
        """`table` without its records whose key has a NULL, each of which goes to
        `bad` (quarantine) or fails the file, naming its line (text formats) or record
        (JSON lines, Parquet)."""
        assert source.upserts is not None
        nulls = upsert.null_keys(table, source.upserts.key)
        if not nulls:
            return table
        where = "record" if source.fmt.format in ("json", "parquet") else "line"
        names = [source.columns[i].name for i in source.upserts.key]
        message = f"null value in key ({', '.join(names)}) of an upsert source"
        if source.quarantine is None:
            raise DataError(
                f"{message} ({where} {lines[nulls[0]]} of {path})",
                hint="every record of a KEY ... ENVELOPE UPSERT source needs its key",
            )
        rows = upsert.rows_of(table)
        for i in nulls:
            line = lines[i]
            text = raw[line - 1] if raw and line <= len(raw) else json.dumps(rows[i], default=str)
            bad.append((path.name, line, message, text))
        dropped = set(nulls)
        keep = pa.array([i not in dropped for i in range(table.num_rows)])
        return table.filter(keep)

    def _quarantined(
        self,
        source: FileSource,
        path: Path,
        text: str,
        given: list[str],
        kinds: dict[str, Any],
        bad: list[tuple[str, int, str, str]],
    ) -> tuple[list[pa.Array], list[int]]:
        """A text file's good records as columns and their lines, each bad one (a wrong
        field count, a value that does not read) put in `bad` with its line and error."""
        label, where = f"source {source.name}", str(path)
        good: list[tuple[int, list[pa.Array]]] = []
        raw = text.splitlines()
        try:
            found = list(records(text, source.fmt))
        except RecordError as error:  # no record can be told apart from the next
            bad.append((path.name, error.line, f"{error.message}; no record of it was read", ""))
            return [pa.array([], types.to_arrow(kinds[n])) for n in given], []
        for line, record in found:
            try:
                problem = field_count_problem(record, given)
                if problem is not None:
                    raise DataError(problem)
                fields = [pa.array([v], pa.string()) for v in record]
                good.append((line, typed_fields([line], fields, given, kinds, label, where)))
            except DataError as error:
                message = error.message.split("\nCONTEXT")[0]
                bad.append((path.name, line, message, raw[line - 1] if line <= len(raw) else ""))
        columns = [
            pa.concat_arrays([cols[k] for _, cols in good])
            if good
            else pa.array([], types.to_arrow(kinds[n]))
            for k, n in enumerate(given)
        ]
        return columns, [line for line, _ in good]

    def progress(self) -> dict[str, tuple[str, ...]]:
        """Each source's progress: the names of the files it has read, sorted (what a
        durable session persists to read each file once across restarts)."""
        return {name: tuple(sorted(x.seen)) for name, x in self.by_name.items()}

    def restore(self, name: str, seen: Iterable[str]) -> None:
        """Resume source `name` from its persisted progress: those files are not read again."""
        self.by_name[name].seen.update(seen)

    def resume(self, progress: Mapping[str, Iterable[str]]) -> None:
        """Resume every source `progress` names that exists (`restore`)."""
        for name, seen in progress.items():
            if name in self.by_name:
                self.restore(name, seen)

    def confirm(self) -> list[str]:
        """Nothing upstream to tell: the files read are the progress."""
        return []

    def close(self) -> None:
        """Nothing held open between polls."""

    def rows(self) -> dict[str, list[Any]]:
        """SHOW SOURCES: each source's name, location (its directory or URI), format,
        files read, rows inserted, and its last error (NULL if none)."""
        sources: list[Any] = [*self.by_name.values(), *self.spark.by_name.values()]
        sources.sort(key=lambda x: x.name)
        # A Spark source's place is its URI, its format the reader's, its files its runs.
        where = [(str(x.directory), x.fmt.format, len(x.seen)) for x in self.by_name.values()]
        where += [(x.uri, x.format, x.taken + 1) for x in self.spark.by_name.values()]
        by_name = dict(zip([*self.by_name, *self.spark.by_name], where, strict=True))
        return {
            "name": [x.name for x in sources],
            "location": [by_name[x.name][0] for x in sources],
            "format": [by_name[x.name][1] for x in sources],
            "files": [by_name[x.name][2] for x in sources],
            "rows": [x.rows for x in sources],
            "error": [
                f"{x.errors[-1][0]}: {x.errors[-1][1]}" if x.errors else None for x in sources
            ],
        }


_QUARANTINE_ARROW = (pa.string(), pa.int64(), pa.string(), pa.string())

__all__ = ["FileSource", "FileSources"]
