"""Spark file sources: a file source whose new files Spark's executors read.

`CREATE SOURCE s (cols) FROM FILES 'uri' WITH (FORMAT = ...)` with a Hadoop URI
(`file:///dir`, `hdfs://...`, `s3a://...`), or a plain directory in a session on the
Spark kernel with a `state_uri`, is read by Spark Structured Streaming's file source
rather than by pyarrow in the driver (`dsql.file_source`). Each poll runs one query to
completion, `trigger(availableNow=True)`: it reads the files that arrived since the last
run (with the source's schema; CSV and JSON in PERMISSIVE mode, each malformed record
kept in a corrupt-record column beside `input_file_name()`) and writes them as Parquet
into the source's staging folder by Spark's file sink. Spark's checkpoint there (offsets,
commits) and the sink's `_spark_metadata` log are the source's progress: each input
file lands in exactly one committed batch, whatever crashes. Then the batches the source
has not taken (ids above `taken`) are loaded into its relation at one dsql time, as
inserts the executors read from the staged files (`Session.load`): no row passes the
driver. Nothing calls back into the driver's Python (no `foreachBatch`), so it runs the
same under Spark Connect.

Malformed records (CSV, JSON): by default a file with one contributes no row and its
first bad record is reported (the source's `errors`, the poll's notice, naming the
file); `ON ERROR = 'quarantine'` loads the file's good records and puts each bad one in
`<source>_quarantine` (file, line NULL: Spark does not number lines, error, record).

The staging folder is `WITH (STAGING = 'uri')`, else a fresh folder under `state_uri`
(`dsql-sources/`), else, under a local master, one under the data directory or a temp
directory; it is kept when the source is dropped. Under a data directory each poll's
batches are logged by id with its time (`dsql.durable`), and recovery loads the same
batches from the staged files at the same times; batches Spark committed after the
last logged poll are taken by the next one.
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from dsql.errors import DsqlError, SchemaError, SourceError
from dsql.planner import types
from dsql.planner.plan import Column

#: The staged columns beside the source's: the malformed record's text, the input file.
CORRUPT, FILE = "_dsql_corrupt", "_dsql_file"
#: The staged partition column: the source's run (poll) that staged the row.
RUN = "dsql_run"
_RUN_FOLDER = re.compile(rf"/{RUN}=(\d+)/")
#: The readers' options each dsql option maps to (COPY's names).
_CSV_OPTIONS = {"header": "header", "delimiter": "sep", "null": "nullValue"}
_CSV_OPTIONS |= {"quote": "quote", "escape": "escape"}


@dataclass
class SparkFileSource:
    """One Spark-read source: its input URI, reader, staging folder and progress."""

    name: str
    uri: str
    format: str
    #: The streaming reader's options (CSV's header, separator, ...).
    options: dict[str, str]
    columns: tuple[Column, ...]
    on_error: str
    #: Where Spark stages the source's batches (`batches/`) and keeps its checkpoint.
    staging: str
    #: The last staged batch loaded into the relation: the source's progress.
    taken: int = -1
    #: Every file that failed: (file, message).
    errors: list[tuple[str, str]] = field(default_factory=list)
    rows: int = 0
    #: What the input directory held at the last run (`file://` only): unchanged, the
    #: next poll starts no query.
    listing: frozenset[tuple[str, int, int]] | None = None
    #: The last batch known staged (None: not looked yet).
    staged: int | None = None
    #: Per batch this process's queries staged, the rows Spark read into it.
    expected: dict[int, int] = field(default_factory=dict)

    @property
    def quarantine(self) -> str | None:
        return f"{self.name}_quarantine" if self.on_error == "quarantine" else None

    @property
    def batches(self) -> str:
        return f"{self.staging}/batches"

    @property
    def text(self) -> bool:
        return self.format in ("csv", "json")


def is_hadoop_uri(location: str) -> bool:
    """Whether `location` names a place by a URI scheme (`file:`, `hdfs:`, `s3a:`, ...)."""
    scheme = location.split(":", 1)[0] if ":" in location else ""
    return len(scheme) > 1 and location[len(scheme) :].startswith(":/")


def reader_options(kind: str, options: dict[str, str]) -> dict[str, str]:
    """The Spark reader's options for a source's (COPY's) options; a SchemaError for one
    Spark has no counterpart of."""
    if kind == "parquet":
        given = {k: v for k, v in options.items() if k != "format"}
        if given:
            raise SchemaError(f"a Parquet source takes no option {sorted(given)[0]!r}")
        return {}
    result = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    for name, value in options.items():
        if name == "format":
            continue
        if kind != "csv" or name not in _CSV_OPTIONS:
            raise SchemaError(
                f"a Spark-read {kind} source takes no option {name!r}",
                hint="CSV takes HEADER, DELIMITER, NULL, QUOTE, ESCAPE; JSON none",
            )
        result[_CSV_OPTIONS[name]] = value
    if kind == "csv":
        result.setdefault("header", "true")
    return result


def default_staging(session: Any, name: str) -> str:
    """A fresh staging folder for source `name` (module docstring)."""
    kernel = session.worker.kernel
    state = (kernel.remote if kernel.name == "auto" else kernel).state
    folder = f"{name}-{uuid.uuid4().hex[:12]}"
    if state.requested is not None:
        root = state.requested.rstrip("/")
        root = root if is_hadoop_uri(root) else "file://" + os.path.abspath(root)
        return f"{root}/dsql-sources/{folder}"
    if session.durable is not None:
        return f"file://{session.durable.path.resolve()}/spark-sources/{folder}"
    return "file://" + tempfile.mkdtemp(prefix=f"dsql-source-{name}-")


def spark_schema(columns: tuple[Column, ...], corrupt: bool) -> Any:
    """The streaming reader's schema: the source's columns, then the corrupt-record
    column for a text format."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StringType, StructField

    arrow = pa.schema([(c.name, types.to_arrow(c.type)) for c in columns])
    schema = from_arrow_schema(arrow)
    if corrupt:
        schema = schema.add(StructField(CORRUPT, StringType(), True))
    return schema


def stage(spark: Any, source: SparkFileSource, run: int) -> int:
    """Run the source's streaming query until it has staged every file that arrived:
    Spark's executors read the files and write them under `batches/dsql_run=<run>/`.
    Returns the rows Spark read into them (the query's progress reports)."""
    from pyspark.sql.functions import input_file_name, lit

    reader = spark.readStream.schema(spark_schema(source.columns, source.text))
    frame = reader.format(source.format).options(**source.options).load(source.uri)
    frame = frame.withColumn(FILE, input_file_name()).withColumn(RUN, lit(run).cast("bigint"))
    query = (
        frame.writeStream.format("parquet")
        .partitionBy(RUN)
        .option("checkpointLocation", f"{source.staging}/checkpoint")
        .queryName(f"dsql_source_{source.name}_{uuid.uuid4().hex[:8]}")
        .trigger(availableNow=True)
        .start(source.batches)
    )
    try:
        query.awaitTermination()
        return sum(int(p.numInputRows) for p in query.recentProgress)
    finally:
        query.stop()


def staged_runs(spark: Any, source: SparkFileSource) -> set[int]:
    """The runs whose batches the file sink committed: its files' `dsql_run=N` folders,
    listed from the sink's `_spark_metadata` log by Spark's file index (no job)."""
    try:
        files = spark.read.schema(staged_schema(source)).parquet(source.batches).inputFiles()
    except Exception as error:  # noqa: BLE001 - nothing committed yet: no folder
        if "PATH_NOT_FOUND" in str(error) or "does not exist" in str(error):
            return set()
        raise
    return {int(m.group(1)) for f in files if (m := _RUN_FOLDER.search(f))}


def staged_schema(source: SparkFileSource) -> Any:
    """The staged files' schema: the source's columns, the corrupt record (text
    formats), the input file, the run."""
    from pyspark.sql.types import LongType, StringType, StructField

    schema = spark_schema(source.columns, source.text)
    return schema.add(StructField(FILE, StringType(), True)).add(StructField(RUN, LongType()))


def staged_frame(spark: Any, source: SparkFileSource, first: int, last: int) -> Any:
    """The staged rows of runs `first`..`last` (Spark prunes the other runs' folders)."""
    from pyspark.sql.functions import col

    frame = spark.read.schema(staged_schema(source)).parquet(source.batches)
    return frame.where(col(RUN).between(first, last))


def good_rows(frame: Any, source: SparkFileSource, bad_files: list[str]) -> Any:
    """The rows a batch inserts: with a quarantine, its well-formed records; otherwise
    the records of its files that have no malformed one."""
    from pyspark.sql.functions import col

    if not source.text:
        return frame
    if source.quarantine is not None:
        return frame.where(col(CORRUPT).isNull())
    return frame.where(~col(FILE).isin(bad_files)) if bad_files else frame


def malformed(frame: Any, source: SparkFileSource) -> list[tuple[str, str]]:
    """Each malformed record of a batch (file, record): the few rows Spark could not
    read are the only ones brought to the driver."""
    from pyspark.sql.functions import col

    if not source.text:
        return []
    bad = frame.where(col(CORRUPT).isNotNull()).select(FILE, CORRUPT)
    return [(str(f), str(r)) for f, r in bad.collect()]


def input_listing(source: SparkFileSource) -> frozenset[tuple[str, int, int]] | None:
    """The input directory's files (name, size, mtime) for a `file://` URI, else None:
    an unchanged listing means the query would stage nothing."""
    if not source.uri.startswith("file:"):
        return None
    try:
        with os.scandir(Path(source.uri.removeprefix("file://"))) as entries:
            return frozenset(
                (e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries if e.is_file()
            )
    except OSError:
        return None


def failure(source: SparkFileSource, error: BaseException) -> DsqlError:
    """A Spark failure while staging or loading, as the source's error."""
    if isinstance(error, DsqlError):
        return error
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return SourceError(
        f"source '{source.name}' could not read {source.uri}: {first}",
        hint="fix or remove the file; the source retries at the next poll",
    )


__all__ = [
    "CORRUPT",
    "FILE",
    "SparkFileSource",
    "default_staging",
    "good_rows",
    "input_listing",
    "is_hadoop_uri",
    "malformed",
    "reader_options",
    "stage",
    "staged_runs",
    "staged_frame",
]


class SparkFileSources:
    """The session's Spark-read file sources (module docstring); `FileSources` holds
    them beside the in-process ones and hands each to this class's poll."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.by_name: dict[str, SparkFileSource] = {}
        #: The loads the polls made since `drained`: (source, first batch, last, tick).
        self.loads: list[tuple[str, int, int, int]] = []

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    @property
    def spark(self) -> Any:
        return self.session.worker.kernel.spark

    def create(
        self,
        name: str,
        location: str,
        options: dict[str, str],
        columns: tuple[Column, ...],
        on_error: str,
    ) -> SparkFileSource:
        """A source reading `location` (checked against the sandbox) with `options`
        (COPY's, FORMAT included; STAGING and ON ERROR taken out by the caller)."""
        s = self.session
        if s.kernel_name == "local":
            raise SchemaError(
                f"{location}: a Hadoop URI source is read by Spark, which kernel='local' "
                "does not use",
                hint="connect with kernel='spark' or 'auto', or name a local directory",
            )
        checked = s.sandbox.check(location, "read")
        if isinstance(checked, Path):
            if not checked.is_dir():
                raise SourceError(f"no such directory: {checked}", hint="create it first")
            uri = f"file://{checked}"
        else:
            uri = checked.rstrip("/")
        kind = options["format"].lower()
        if kind not in ("csv", "json", "parquet"):
            raise SchemaError("a Spark-read source's FORMAT is 'csv', 'json' or 'parquet'")
        read = reader_options(kind, {k: v for k, v in options.items() if k != "staging"})
        read["maxFileAge"] = _EVERY_FILE
        staging = options.get("staging") or default_staging(s, name)
        source = SparkFileSource(name, uri, kind, read, columns, on_error, staging.rstrip("/"))
        self.by_name[name] = source
        return source

    def definition(self, name: str, stmt: Any) -> str:
        """The CREATE SOURCE statement `stmt` that made source `name`, its staging
        folder named: a recovery stages into, and loads from, the same folder."""
        source, text = self.by_name[name], str(stmt.text)
        if any(option == "staging" for option, _ in stmt.options):
            return text
        staging = source.staging.replace("'", "''")
        body = text.rstrip().rstrip(";").rstrip()
        assert body.endswith(")")  # a Spark source's WITH (FORMAT ...) list
        return f"{body[:-1]}, STAGING = '{staging}')"

    def drop(self, name: str) -> None:
        self.by_name.pop(name, None)

    def poll(self, source: SparkFileSource) -> list[str]:
        """Stage what arrived as run `taken + 1` and load that run, at one time; the
        notices of files with malformed records and of a query that failed.

        A run staged but not taken before a crash keeps its number: the next poll
        stages into it again and loads both at once, so each run is loaded whole, once."""
        listing = input_listing(source)
        run = source.taken + 1
        try:
            if source.staged is None:  # once per process: what a crash left staged
                source.staged = max(staged_runs(self.spark, source), default=-1)
            if listing is None or listing != source.listing:
                fresh = source.staged < run
                read = stage(self.spark, source, run)
                source.listing = listing
                if read:
                    source.staged = run
                    if fresh:
                        source.expected[run] = read
        except Exception as error:  # noqa: BLE001 - Spark's errors, reported
            source.listing = None
            return _failed(source, source.uri, failure(source, error).message)
        if source.staged < run:
            return []
        return self.take(source, run, run, live=True)

    def replay(self, name: str, first: int, last: int) -> None:
        """Load runs `first`..`last` of source `name` again, as a logged poll loaded
        them (recovery; `dsql.durable`)."""
        source = self.by_name.get(name)
        if source is not None and last > source.taken:
            self.take(source, first, last, live=False)

    def take(self, source: SparkFileSource, first: int, last: int, live: bool) -> list[str]:
        """Insert the good rows of staged runs `first`..`last` into the source's
        relation; `live`: a poll (its quarantine rows written, its load logged), not a
        recovery's replay."""
        s = self.session
        frame = staged_frame(self.spark, source, first, last)
        bad = malformed(frame, source)
        bad_files = sorted({f for f, _ in bad})
        good = good_rows(frame, source, bad_files)
        rows = good.count()
        self._verify(source, frame, first, last, rows, bad, bad_files)
        if rows:
            columns = good.select(*[f"`{c.name}`" for c in source.columns])
            s.load(source.name, columns, rows, kinds=("source",))
        source.taken = last
        source.rows += rows
        if not live:
            return []
        self.loads.append((source.name, first, last, s.clock.tick))
        return self._report(source, bad, bad_files)

    def _verify(
        self,
        source: SparkFileSource,
        frame: Any,
        first: int,
        last: int,
        rows: int,
        bad: list[tuple[str, str]],
        bad_files: list[str],
    ) -> None:
        """The rows loaded, checked against the rows Spark's query said it read into
        these batches (where this process ran them): every staged row is loaded,
        quarantined, or in a reported file."""
        wanted = [source.expected.get(b) for b in range(first, last + 1)]
        if any(w is None for w in wanted):
            return
        total = sum(w for w in wanted if w is not None)
        if source.quarantine is not None or not bad_files:
            skipped = len(bad)
        else:
            from pyspark.sql.functions import col

            skipped = frame.where(col(FILE).isin(bad_files)).count()
        if rows + skipped != total:
            raise SourceError(
                f"source '{source.name}' staged {total} rows in batches {first}..{last} "
                f"but {rows + skipped} were read back from {source.batches}",
                hint="the staging folder was changed by hand; drop and recreate the source",
            )

    def _report(
        self, source: SparkFileSource, bad: list[tuple[str, str]], bad_files: list[str]
    ) -> list[str]:
        """The malformed records: quarantined, or each file's first one reported."""
        s = self.session
        if source.quarantine is not None:
            if bad and source.quarantine in s.relations:
                q = pa.table(
                    [
                        pa.array([f for f, _ in bad], pa.string()),
                        pa.nulls(len(bad), pa.int64()),
                        pa.array(["malformed record"] * len(bad), pa.string()),
                        pa.array([r.rstrip("\r\n") for _, r in bad], pa.string()),
                    ],
                    names=["file", "line", "error", "record"],
                )
                s.write(source.quarantine, q, 1)
            return []
        notices: list[str] = []
        for name in bad_files:
            record = next(r for f, r in bad if f == name).rstrip("\r\n")
            notices += _failed(source, name, f"malformed record {record!r}; no row of it read")
        return notices

    def drained(self) -> list[tuple[str, int, int, int]]:
        """The loads made since the last call (what the durable log records)."""
        loads, self.loads = self.loads, []
        return loads

    def progress(self) -> dict[str, int]:
        """Each source's last batch taken."""
        return {name: x.taken for name, x in self.by_name.items()}

    def restore(self, progress: dict[str, int]) -> None:
        """Resume from a checkpoint's progress: each source's batches up to its last
        taken are loaded again, at the checkpoint's time."""
        for name, last in progress.items():
            self.replay(name, 0, last)


#: `maxFileAge` for the streaming reader: Spark ignores files older than this (relative
#: to the newest) after the first batch; a source takes every file that arrives.
_EVERY_FILE = "36500d"


def _failed(source: SparkFileSource, name: str, message: str) -> list[str]:
    source.errors.append((name, message))
    return [f"source '{source.name}' skipped file {name}: {message}"]
