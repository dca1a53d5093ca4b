"""COPY: a table's rows from a file or the client, a table's or query's rows to them.

`copy_from(executor, stmt)` reads the whole input, converts every value into its
column's type by PostgreSQL's input rules (`dsql.text_input`; a Parquet or JSON file's
typed values by INSERT's, `dsql.assignment`), fills the columns not listed with their
defaults, and only then writes the rows: one write at one time, so a bad row fails the
COPY and nothing is written. An error names the input and where in it, as
PostgreSQL's context line does (`COPY t, line 3, column b: "x"`).

`copy_to(executor, stmt)` writes a table's (or a query's) rows as text or CSV (values in
PostgreSQL's text), Parquet, or JSON lines; a file is written beside its target and
renamed into place once complete, so no reader sees half of it.

Files are reached only inside the session's sandbox (`dsql.sandbox`); the client's data
(`FROM STDIN`, `TO STDOUT`) always.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dsql.assignment import assign
from dsql.copy_format import CopyFormat, RecordError, plain_columns, records, render
from dsql.errors import DataError, DsqlError, SchemaError, SourceError, UnsupportedError
from dsql.printer import column_texts
from dsql.results import Result
from dsql.text_input import BadValue, from_text


def copy_from(executor: Any, stmt: Any) -> Result:
    """Run `COPY t [(cols)] FROM 'file' | STDIN` (module docstring)."""
    s = executor.session
    rel = s._table(stmt.table)
    if stmt.table in getattr(s, "sources", {}):
        raise SchemaError(f"cannot COPY into source '{stmt.table}'", hint="its files feed it")
    names = [c.name for c in rel.columns]
    given = list(stmt.columns or names)
    for i, g in enumerate(given):
        if g not in names:
            raise SchemaError(f'column "{g}" of relation "{rel.name}" does not exist')
        if g in given[:i]:
            raise SchemaError(f'column "{g}" specified more than once')
    fmt = CopyFormat.of(stmt.options)
    label = f"COPY {rel.name}"
    if stmt.path is None:
        if stmt.data is None:
            raise UnsupportedError(
                "COPY FROM STDIN needs the client to send the rows",
                hint="in dsql run or the shell, the rows follow the statement up to a "
                "line \\.; from Python, INSERT them or COPY FROM a file",
            )
        text: str | None = stmt.data
        where = "STDIN"
        path = None
    else:
        path = local(s.sandbox.check(stmt.path, "read"), "read")
        where = str(path)
        text = None
    types = {c.name: c.type for c in rel.columns}
    if fmt.format in ("text", "csv"):
        if text is None:
            assert path is not None  # no data from the client: a file
            text = read_text(path)
        lines, fields = text_fields(text, fmt, given, label, where)
        columns = typed_fields(lines, fields, given, types, label, where)
    else:
        if path is None:
            raise UnsupportedError(f"COPY FROM STDIN takes text or csv, not {fmt.format}")
        columns = typed_file(path, fmt.format, given, types, label)
        lines = []
    n = len(columns[0]) if columns else 0
    arrays = []
    for i, c in enumerate(rel.columns):
        if c.name in given:
            arrays.append(columns[given.index(c.name)])
        else:
            arrays.append(executor._default(rel.defaults[i], c.type, n, c.name))
    rows = pa.table(arrays, names=[f"_c{i}" for i in range(len(arrays))])
    for i, required in enumerate(rel.not_null):
        if required and rows.column(i).null_count:
            row = rows.column(i).is_null().combine_chunks().to_pylist().index(True)
            raise DataError(
                f'null value in column "{names[i]}" of relation "{rel.name}" violates '
                f"not-null constraint\nCONTEXT: {label}, "
                + (f"line {lines[row]}" if lines else f"row {row + 1}")
                + f" of {where}"
            )
    count = s.write(rel.name, rows, 1)
    return Result(status=f"COPY {count}", rowcount=count)


def local(location: Path | str, action: str) -> Path:
    """A checked location as a local path to `action` ("read", "write"): a URI
    (`s3a://...`) is refused (COPY reads and writes local files; Spark reads URIs for
    `create_table`), and so is what is no regular file (a directory; a FIFO or device,
    whose reading would block the session)."""
    if isinstance(location, str):
        raise UnsupportedError(
            f"COPY reads and writes local files, not {location}",
            hint="load a URI from Python: con.create_table(name, uri) reads it on Spark",
        )
    if action == "read" and not location.exists():
        raise SourceError(
            f'could not open file "{location}" for reading: No such file or directory'
        )
    if location.exists() and not location.is_file():
        kind = "a directory" if location.is_dir() else "not a regular file"
        raise SourceError(f'"{location}" is {kind}', hint="name a file")
    return location


def read_text(path: Path) -> str:
    """A file's text, UTF-8; a DataError naming the byte that is not."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f'invalid byte sequence for encoding "UTF8" at byte {error.start} of {path}'
        ) from None
    except OSError as error:
        raise SourceError(f'could not open file "{path}" for reading: {error.strerror}') from None


def text_fields(
    text: str, fmt: CopyFormat, given: list[str], label: str, where: str
) -> tuple[list[int], list[pa.Array]]:
    """The fields of a text or CSV input as one string column per column `given`, and
    each record's line; a DataError at a record without one field per column."""
    plain = plain_columns(text, fmt, len(given))
    if plain is not None:
        first = 1 + int(fmt.header)
        return list(range(first, first + (len(plain[0]) if plain else 0))), plain
    lines: list[int] = []
    fields: list[list[str | None]] = [[] for _ in given]
    try:
        for line, record in records(text, fmt):
            problem = field_count_problem(record, given)
            if problem is not None:
                raise DataError(f"{problem}\nCONTEXT: {label}, line {line} of {where}")
            lines.append(line)
            for column, value in zip(fields, record, strict=True):
                column.append(value)
    except RecordError as error:
        raise DataError(
            f"{error.message}\nCONTEXT: {label}, line {error.line} of {where}", hint=error.hint
        ) from None
    return lines, [pa.array(f, pa.string()) for f in fields]


def field_count_problem(record: list[str | None], given: list[str]) -> str | None:
    """PostgreSQL's words for a record without one field per column; None if it has."""
    if len(record) > len(given):
        return "extra data after last expected column"
    if len(record) < len(given):
        return f'missing data for column "{given[len(record)]}"'
    return None


def typed_fields(
    lines: list[int],
    fields: list[pa.Array],
    given: list[str],
    types: dict[str, Any],
    label: str,
    where: str,
) -> list[pa.Array]:
    """The columns `fields` spell, each value read as its column's type; a DataError
    naming the line and column of the first value that does not read."""
    out = []
    for name, values in zip(given, fields, strict=True):
        try:
            out.append(from_text(values, types[name], name))
        except BadValue as bad:
            raise DataError(
                f"{bad.error.message}\nCONTEXT: {label}, line {lines[bad.index]}, column "
                f'{name}: "{values[bad.index].as_py()}" of {where}',
                hint=bad.error.hint,
            ) from None
    return out


def typed_file(
    path: Path, kind: str, given: list[str], types: dict[str, Any], label: str
) -> list[pa.Array]:
    """The columns of a Parquet or JSON-lines file, matched to the table's by name."""
    table = read_typed(path, kind)
    extra = [n for n in table.column_names if n not in given]
    missing = [n for n in given if n not in table.column_names]
    if missing or extra:
        raise SchemaError(
            f"{label}: {path} "
            + (f'has no column "{missing[0]}"' if missing else f'has column "{extra[0]}"')
            + f" (the COPY's columns are {', '.join(given)})",
            hint="list the columns the file holds: COPY t (a, b) FROM ...",
        )
    out = []
    for name in given:
        column = table.column(name)
        try:
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                out.append(from_text(column.cast(pa.string()).combine_chunks(), types[name], name))
            else:
                out.append(assign(column, types[name], name).combine_chunks())
        except BadValue as bad:
            raise DataError(
                f"{bad.error.message}\nCONTEXT: {label}, row {bad.index + 1}, column {name} "
                f"of {path}"
            ) from None
        except DsqlError as error:
            raise DataError(f"{error.message}\nCONTEXT: {label}, column {name} of {path}") from None
    return out


def read_typed(path: Path, kind: str) -> pa.Table:
    """A Parquet or JSON-lines file's rows, as pyarrow reads them."""
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        import pyarrow.json as pjson

        return pjson.read_json(path)
    except (pa.ArrowException, OSError) as error:
        raise SourceError(f"cannot read {path} as {kind}: {error}") from None


# --- out ----------------------------------------------------------------------------------
def copy_to(executor: Any, stmt: Any) -> Result:
    """Run `COPY t [(cols)] | (query) TO 'file' | STDOUT` (module docstring)."""
    s = executor.session
    fmt = CopyFormat.of(stmt.options)
    if stmt.query is not None:
        bound = s.plan(stmt.query)
        names = [c.name for c in bound.plan.columns[: bound.visible]]
        rows = s.read(bound)
    else:
        relation = s.relations.get(stmt.table)
        if relation is not None and relation.kind == "view":
            raise SchemaError(
                f'cannot copy from view "{stmt.table}"',
                hint=f"try the COPY (SELECT ...) TO variant: COPY (TABLE {stmt.table}) TO ...",
            )
        names = list(stmt.columns or [c.name for c in s.columns(stmt.table)])
        known = [c.name for c in s.columns(stmt.table)]
        for n in names:
            if n not in known:
                raise SchemaError(f'column "{n}" of relation "{stmt.table}" does not exist')
        rows = executor._matching(stmt.table, None)
        rows = rows.select([known.index(n) for n in names])
    rows = rows.rename_columns(names)
    if stmt.path is None:
        if fmt.format not in ("text", "csv"):
            raise UnsupportedError(f"COPY TO STDOUT takes text or csv, not {fmt.format}")
        return Result(
            status=f"COPY {rows.num_rows}", rowcount=rows.num_rows, output=text_data(rows, fmt)
        )
    _write(local(s.sandbox.check(stmt.path, "write"), "write"), rows, fmt)
    return Result(status=f"COPY {rows.num_rows}", rowcount=rows.num_rows)


def text_data(rows: pa.Table, fmt: CopyFormat) -> str:
    """`rows` as a text or CSV COPY's data, each value in PostgreSQL's text."""
    return render([_texts(c.combine_chunks()) for c in rows.columns], fmt, rows.column_names)


def _texts(column: pa.Array) -> pa.Array:
    """A column's values in PostgreSQL's text (nulls stay null): Arrow's own text where
    it is PostgreSQL's (integers, text, dates), `t`/`f` for booleans, else the
    printer's."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_date32(kind):
        return column.cast(pa.string())
    if pa.types.is_boolean(kind):
        return pc.if_else(column, "t", "f")
    texts = column_texts(column)
    return pa.array(
        [None if v is None else t for t, v in zip(texts, column.to_pylist(), strict=True)],
        pa.string(),
    )


def _json_values(column: pa.Array) -> list[Any]:
    """A column's values as JSON holds them: numbers, booleans and text as themselves,
    every other type in PostgreSQL's text (which COPY FROM reads back)."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        return column.to_pylist()
    return _texts(column).to_pylist()


def _write(path: Path, rows: pa.Table, fmt: CopyFormat) -> None:
    """Write `rows` to `path` whole or not at all: into a file beside it, renamed over it."""
    if not path.parent.is_dir():
        raise SourceError(f'could not open file "{path}" for writing: no such directory')
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as error:
        raise SourceError(f'could not open file "{path}" for writing: {error.strerror}') from None
    os.close(handle)
    try:
        if fmt.format == "parquet":
            import pyarrow.parquet as pq

            # Parquet has no month-day-nanosecond interval: PostgreSQL's text stands for it.
            columns = [
                _texts(c.combine_chunks()) if pa.types.is_interval(c.type) else c
                for c in rows.columns
            ]
            pq.write_table(pa.table(columns, names=rows.column_names), temporary)
        elif fmt.format == "json":
            with open(temporary, "w", encoding="utf-8") as out:
                values = [_json_values(c.combine_chunks()) for c in rows.columns]
                for row in zip(*values, strict=True):
                    record = dict(zip(rows.column_names, row, strict=True))
                    out.write(json.dumps(record, default=str) + "\n")
        else:
            Path(temporary).write_text(text_data(rows, fmt), encoding="utf-8")
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise SourceError(f'could not write file "{path}": {error.strerror}') from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


__all__ = [
    "field_count_problem",
    "local",
    "read_text",
    "copy_from",
    "copy_to",
    "read_typed",
    "text_fields",
    "typed_file",
    "typed_fields",
]
