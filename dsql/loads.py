"""Loads: where the rows of a new table are read, by the driver or by Spark's executors.

`place(session, source, format)` is the load of `create_table`: an Arrow table when
the driver reads the rows, or a `SparkLoad` (a Spark DataFrame and its row count) when
the table will live on Spark, so its executors read the source and store the table's
arrangement and no row passes the driver. Spark reads it under kernel="spark", and
under "auto" when the source holds more rows than the placement threshold; the driver
reads it under "local", and under "auto" when it is small (Spark then starts only if
the source is Spark's own). An Arrow or pandas table is in the driver already.

What Spark reads: a Spark DataFrame; a Spark table (`format="table"`, the source its
name); a Parquet, CSV, TSV or JSON-lines file or directory by path or URI (`file:`,
`hdfs:`, `s3a:`, ...: a URI other than `file:` is read by Spark only). A size is asked
as cheaply as it can be: a local Parquet source's footers (no Spark), a bound on a
local text file's rows from its line breaks (no Spark, no parsing), else a Spark count.

A text file is typed the same wherever it is read: by pyarrow's inference over the
first block of its first file, which Spark is handed as the schema. Both read CSV as
PostgreSQL's `COPY ... CSV` does: an unquoted empty field is NULL, a quoted one the
empty string, no other text is NULL. A value that does not parse as its column's type
(one past pyarrow's first block, which typed the column) fails the load, as COPY
does: the driver's read raises, and Spark reads in FAILFAST mode, so the executors
storing the table fail, and the load is refused with a `SourceError` naming the file,
the record and the value (`refused`; Spark gives no line number); the table is not
created.

>>> import pyarrow as pa
>>> from dsql.session import Session
>>> place(Session(kernel="local"), pa.table({"a": [1]}), None).num_rows
1
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa

from dsql.errors import SourceError, TypeMismatchError

#: File formats by extension; a directory without `format=` is Parquet (Spark's output).
FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".tsv": "tsv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}
#: Formats `format=` may name: the files', and "table" (a Spark table's name).
KNOWN = frozenset(FORMATS.values()) | {"table"}

#: A field text no CSV file holds (Spark's `nullValue`, see `read_on_spark`).
_NO_TEXT = "\u0000dsql:no-such-text\u0000"
#: Bytes read at a time when counting a text file's line breaks.
_CHUNK = 1 << 22


@dataclass(frozen=True, slots=True)
class SparkLoad:
    """A load read by Spark: the source as a DataFrame (lazy) and its row count, or
    with `exact` False a bound on it."""

    frame: Any
    rows: int
    exact: bool = True


@dataclass(frozen=True, slots=True)
class FileSource:
    """A file or directory to load: `location` as Spark is given it, `path` where the
    driver opens it (None for a URI only Spark reads), and its format."""

    location: str
    path: Path | None
    kind: str

    def files(self) -> list[Path]:
        """The data files (a directory's, as Spark lists them: no `_` or `.` names)."""
        assert self.path is not None
        if not self.path.is_dir():
            return [self.path]
        return sorted(
            p for p in self.path.rglob("*") if p.is_file() and not p.name.startswith(("_", "."))
        )


def file_source(source: str | Path, format: str | None) -> FileSource:  # noqa: A002
    """The file `source` names (a path, or a URI), its format from `format` or its
    extension; a SourceError when a local path does not exist or its format is unknown."""
    text = str(source)
    scheme = urlparse(text).scheme if isinstance(source, str) else ""
    path: Path | None
    if len(scheme) > 1 and scheme != "file":  # one letter: a Windows drive
        path, location = None, text
    else:
        path = Path(unquote(urlparse(text).path)) if scheme == "file" else Path(text)
        if not path.exists():
            raise SourceError(f"no such file or directory: {path}", hint="check the path")
        location = str(path.absolute())
    directory = path.is_dir() if path is not None else not Path(text).suffix
    kind = format or ("parquet" if directory else FORMATS.get(Path(text).suffix.lower()))
    if kind is None:
        raise SourceError(
            f"cannot tell the format of {text}",
            hint="name it .parquet, .csv or .json, or pass format='parquet' | 'csv' | 'json'",
        )
    if kind not in KNOWN - {"table"}:
        raise SourceError(f"unknown format {kind!r}", hint="use 'parquet', 'csv' or 'json'")
    return FileSource(location, path, kind)


# --- the driver's reads ---------------------------------------------------------------------
def read_in_driver(source: FileSource) -> pa.Table:
    """The rows of a local file or directory, read by pyarrow."""
    if source.path is None:
        raise SourceError(
            f"{source.location} is read by Spark only",
            hint="use kernel='auto' or kernel='spark', or a local path",
        )
    try:
        if source.kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(source.path)
        files = source.files()
        if not files:
            raise SourceError(f"{source.location} holds no files")
        schema = text_schema(source)  # every file read as the first is typed
        return pa.concat_tables([_read_text(f, source.kind, schema) for f in files])
    except (pa.ArrowException, OSError) as error:
        raise SourceError(f"cannot read {source.location} as {source.kind}: {error}") from None


def text_schema(source: FileSource) -> pa.Schema:
    """The column types of a CSV or JSON source: pyarrow's inference over the first
    block of its first file (all the driver reads of a source Spark loads)."""
    first = source.files()[0]
    if source.kind == "json":
        import pyarrow.json as pjson

        with pjson.open_json(first) as reader:
            return reader.schema
    import pyarrow.csv as pcsv

    with pcsv.open_csv(
        first, parse_options=_csv_parse(source.kind), convert_options=_csv_convert()
    ) as reader:
        return reader.schema


def _read_text(path: Path, kind: str, schema: pa.Schema) -> pa.Table:
    if kind == "json":
        import pyarrow.json as pjson

        return pjson.read_json(path, parse_options=pjson.ParseOptions(explicit_schema=schema))
    import pyarrow.csv as pcsv

    convert = _csv_convert()
    convert.column_types = schema
    return pcsv.read_csv(path, parse_options=_csv_parse(kind), convert_options=convert)


def _csv_parse(kind: str) -> Any:
    import pyarrow.csv as pcsv

    return pcsv.ParseOptions(delimiter="\t" if kind == "tsv" else ",")


def _csv_convert() -> Any:
    """PostgreSQL's CSV NULL: an unquoted empty field, in a column of any type."""
    import pyarrow.csv as pcsv

    return pcsv.ConvertOptions(
        null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=False
    )


def rows_at_most(source: FileSource) -> int | None:
    """A bound on a local source's rows read without Spark and without parsing it: a
    Parquet source's count from its footers; a text file's lines (its line breaks, plus
    one for a last line without, less a CSV file's header); None for a URI."""
    if source.path is None:
        return None
    if source.kind == "parquet":
        import pyarrow.dataset as ds

        try:
            return int(ds.dataset(source.path, format="parquet").count_rows())
        except (pa.ArrowException, OSError) as error:
            raise SourceError(f"cannot read {source.location} as parquet: {error}") from None
    total = 0
    for file in source.files():
        with open(file, "rb") as handle:  # a chunk at a time: memory bounded by _CHUNK
            while chunk := handle.read(_CHUNK):
                total += chunk.count(b"\n")
        total += 0 if source.kind in ("csv", "tsv") else 1  # a CSV file's first line names
    return total


# --- Spark's reads ----------------------------------------------------------------------------
def read_on_spark(spark: Any, source: FileSource) -> Any:
    """The source as a DataFrame read by Spark's executors (lazy), typed as the driver
    would type it (module docstring)."""
    reader = spark.read
    if source.kind == "parquet":
        return reader.parquet(source.location)
    if source.path is not None:  # the driver types it; Spark is told the types
        from pyspark.sql.pandas.types import from_arrow_schema

        reader = reader.schema(from_arrow_schema(text_schema(source)))
    else:
        reader = reader.option("inferSchema", "true")
    reader = reader.option("mode", "FAILFAST")
    if source.kind == "json":
        return reader.json(source.location)
    return (
        reader.option("header", "true")
        .option("sep", "\t" if source.kind == "tsv" else ",")
        .option("escape", '"')
        # Spark reads an unquoted empty field as `nullValue` and a quoted one as
        # `emptyValue`, then takes what equals `nullValue` for NULL: with a text no file
        # holds there, only the unquoted empty field is NULL.
        .option("nullValue", _NO_TEXT)
        .option("emptyValue", "")
        .csv(source.location)
    )


# --- placement -------------------------------------------------------------------------------
def place(session: Any, source: Any, format: str | None) -> pa.Table | SparkLoad:  # noqa: A002
    """Where `source` is read (module docstring): its rows as Arrow, or a `SparkLoad`."""
    from dsql.interop import is_spark_frame, read_source, spark_of

    kernel = session.worker.kernel
    name = getattr(kernel, "name", "local")
    threshold: int | None = getattr(kernel, "threshold", None) if name == "auto" else None
    if format is not None and format not in KNOWN:
        raise SourceError(f"unknown format {format!r}", hint="use 'parquet', 'csv' or 'json'")
    if format == "table":
        if not isinstance(source, str):
            raise TypeMismatchError("format='table' takes a Spark table's name")
        frame = _spark_table(spark_of(session), source)
    elif is_spark_frame(source):
        frame = source
    elif isinstance(source, str | Path):
        found = file_source(source, format)
        bound = None if name == "local" or found.path is None else rows_at_most(found)
        if name == "local" or (threshold is not None and bound is not None and bound <= threshold):
            return read_in_driver(found)
        frame = read_on_spark(spark_of(session), found)
        if found.kind == "parquet" or bound is None:
            return _placed(frame, bound, threshold, name)
        # A local text file's line count stands for its rows, not counted by a job: a
        # count parses no value, so it would not fail on one that does not parse.
        return SparkLoad(frame, bound, exact=False)
    else:
        return read_source(source, format)
    return _placed(frame, None, threshold, name)


def _placed(frame: Any, rows: int | None, threshold: int | None, kernel: str) -> Any:
    """`frame` as a `SparkLoad` (its rows counted by a job unless known), or collected
    as Arrow when the in-process kernel or a small load under "auto" keeps it."""
    from dsql.interop import spark_rows

    if kernel == "local":
        return spark_rows(frame)
    count = _count(frame) if rows is None else rows
    if threshold is not None and count <= threshold:
        return spark_rows(frame)
    return SparkLoad(frame, count)


def _count(frame: Any) -> int:
    try:
        return int(frame.count())
    except Exception as error:  # noqa: BLE001 - Spark's errors reach the user as SourceErrors
        raise SourceError(f"cannot read the source: {_first_line(error)}") from None


def _spark_table(spark: Any, name: str) -> Any:
    try:
        return spark.table(name)
    except Exception as error:  # noqa: BLE001
        raise SourceError(f"no Spark table {name!r}: {_first_line(error)}") from None


#: What Spark's FAILFAST error names: the file, the malformed record, and the cause.
_FILE_SAID = re.compile(r"while reading file (\S+?)\.?\s")
_RECORD_SAID = re.compile(r"detected in record parsing: (.*?)\.?\s*$", re.MULTILINE)
_CAUSE_SAID = re.compile(r"^Caused by: [\w.$]+: (.+)$", re.MULTILINE)


def refused(error: Exception, source: Any) -> SourceError | None:
    r"""The error of a load Spark's executors failed while reading `source` (a file they
    read in FAILFAST mode): the file, the malformed record and the value Spark names;
    None when `error` is not Spark's failure to read a file.

    >>> said = (
    ...     "Encountered error while reading file file:///d/a.csv.  SQLSTATE: KD001\n"
    ...     "Caused by: SparkException: Malformed records are detected in record "
    ...     "parsing: [7,null].\nCaused by: java.lang.NumberFormatException: x"
    ... )
    >>> print(refused(Exception(said), "a.csv").message)
    cannot load file:///d/a.csv: a value does not fit its column's type: x (record [7,null])
    """
    text = "\n".join(str(e) for e in _chain(error))
    file = _FILE_SAID.search(text)
    record = _RECORD_SAID.search(text)
    causes = _CAUSE_SAID.findall(text)
    if file is None and record is None:
        return None
    where = file.group(1) if file else str(source)
    reason = causes[-1].strip() if causes else "a malformed record"
    found = f" (record {record.group(1)})" if record else ""
    return SourceError(
        f"cannot load {where}: a value does not fit its column's type: {reason}{found}",
        hint="the column's type is inferred from the file's first rows: "
        "fix the value, or load the column as text and cast it",
    )


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and the exceptions it was raised from."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__
    return chain


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


__all__ = [
    "FORMATS",
    "FileSource",
    "SparkLoad",
    "file_source",
    "place",
    "read_in_driver",
    "read_on_spark",
    "refused",
    "rows_at_most",
    "text_schema",
]
