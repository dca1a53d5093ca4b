"""The Spark kernel's storage: batches written as Parquet under the storage root, read
back with no plan behind them, read in the driver, released.

A large batch is written as Parquet, range-partitioned and sorted by the arrangement's
keys, in small row groups, and read back: compressed, with no plan behind it, and a
probe by key (`key IN (...)`) skips the files and row groups that cannot match. Under a
local master its row count comes from the files' footers, not a job, and the read back
is given the written schema, so no job reads it from a footer. Every write counts its
rows in its own job and is checked against the rows committed (`state.check_written`).

Under a local master a keyed batch is stored as a bucketed table instead (`buckets`):
Spark reads it as hash-partitioned by its keys, so a merge of such batches and a join of
two arrangements' batches run with no exchange.

Where the driver sees the files Spark wrote (a check, `state.StateStore.driver_sees`),
pyarrow reads a stored batch, or the row groups of it that a probe's keys admit, itself:
milliseconds where a Spark job costs tens.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc

from dsql.errors import DsqlError
from dsql.runtime.kernel.base import Stored
from dsql.runtime.kernel.spark.buckets import bucket_ids
from dsql.runtime.kernel.spark.frames import SparkFrames, _engine_error, _quote
from dsql.runtime.kernel.spark.state import (
    StateStore,
    check_written,
    counted,
    lost,
    written_rows,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Buckets per shuffle partition (`SparkKernel.buckets`). A merge aggregates one bucket
#: per task: with one bucket per partition the 10M book's merges (30M rows into 10M,
#: 2 tasks) spilled 2.4 GB and took 23.9 and 12.9 s; with 4 a partition, 14.7 and 8.8 s
#: and no spill (8, 16 or 32 buckets alike). A probe of 2,000 keys reads smaller files
#: and costs the same (359 against 364 ms).
BUCKETS_PER_PARTITION = 4


#: A bucket file's name ends in its bucket, as Spark names them (and reads them back).
_BUCKET_FILE = re.compile(r".*_(\d+)(?:\..*)?$")


class SparkStorage(SparkFrames):
    """Stored batches of the Spark kernel: written under the storage root, read back,
    read in the driver, released (see module docstring)."""

    def __init__(
        self,
        spark: SparkSession | None = None,
        small_rows: int | None = None,
        state_uri: str | None = None,
    ) -> None:
        super().__init__(spark, small_rows)
        #: Where stored batches are written (`state`): `state_uri`, else
        #: `$DSQL_STATE_URI`, else a temp directory under a local master.
        self.state = StateStore(state_uri)
        #: Per stored batch's id, the URI of its files.
        self._paths: dict[int, str] = {}
        #: Per stored batch's URI, its rows: what every read of all of it must find.
        self._rows: dict[str, int] = {}
        #: Per stored batch read in the driver: its Parquet dataset and Arrow schema (None:
        #: not readable there).
        self._datasets: dict[str, tuple[Any, pa.Schema] | None] = {}
        #: Whether the driver reads stored batches' files itself (None: decided on first
        #: use by `StateStore.driver_sees`).
        self.driver_reads: bool | None = None
        #: Per stored batch's path, what its Parquet footers said: (reader, column) ->
        #: answer (`_from_footers`).
        self._footers: dict[str, dict[tuple[Callable[[str, str], Any], str], Any]] = {}
        #: Buckets a keyed stored batch is written in (0: not bucketed; None: decided on
        #: first use, see `buckets`).
        self.bucket_count: int | None = None
        #: Per bucketed stored batch's id, the catalog table it is read through.
        self._tables: dict[int, str] = {}
        #: Per bucketed stored batch's path, its files' fragments by bucket (for probes).
        self._bucket_files: dict[str, dict[int, list[Any]]] = {}
        #: The node batches are stored for now (`set_owner`), and per stored batch's
        #: path, the node it was stored for (`owner_of`).
        self._owner: int | None = None
        self._owners: dict[str, int] = {}

    #: Parquet row-group size for stored batches: small groups make key probes selective.
    row_group_bytes = 1024 * 1024

    def set_owner(self, owner: int | None) -> None:
        self._owner = owner

    def owner_of(self, path: str | None) -> int | None:
        """The node a stored batch was stored for (`set_owner`), by the batch's URI or the
        URI of one of its files (Spark may spell `file:///x` as `file:/x`)."""
        if path is None:
            return None
        wanted = _plain(path)
        for stored, owner in self._owners.items():
            base = _plain(stored)
            if wanted == base or wanted.startswith(base + "/"):
                return owner
        return None

    def set_state_uri(self, uri: str) -> None:
        """Store batches under `uri` from now on (those stored already stay where they are)."""
        self.state = StateStore(uri)
        self.driver_reads = None
        self.bucket_count = None

    @property
    def buckets(self) -> int:
        """How many buckets a keyed stored batch is written in, by its keys; 0: none.

        Under a local master with Spark's in-memory catalog, `BUCKETS_PER_PARTITION`
        times the shuffle partitions: each such batch is a table `CLUSTERED BY` its
        keys (created over the batch's files, dropped with the batch), which Spark
        reads as hash-partitioned by them.
        So a merge of a trace's batches and a join of two arrangements' batches need
        no exchange: only a batch that is not stored is shuffled (`repartition` by the
        same keys and count, which Spark takes for the same partitioning). Elsewhere
        (a cluster's catalog may be a shared metastore) batches are range-partitioned.
        """
        if self.bucket_count is None:
            count = 0
            try:
                conf = self.spark.conf
                if (
                    self._driver_sees_files()
                    and conf.get("spark.sql.catalogImplementation", "in-memory") == "in-memory"
                    and str(conf.get("spark.sql.sources.bucketing.enabled", "true")).lower()
                    == "true"
                ):
                    partitions = int(conf.get("spark.sql.shuffle.partitions", "0") or 0)
                    count = partitions * BUCKETS_PER_PARTITION
            except Exception:  # noqa: BLE001 - a session that does not say: no buckets
                count = 0
            self.bucket_count = max(count, 0)
        return self.bucket_count

    def _bucketing(self, keys: Sequence[str], columns: Callable[[], Sequence[str]]) -> int:
        """`buckets` for a batch stored by `keys`, whose column names `columns()` gives
        (asked only then); 0 when there are no keys or the names would clash in the
        catalog (it ignores case)."""
        if not keys or not self.buckets:
            return 0
        names = columns()
        return self.buckets if len({c.lower() for c in names}) == len(names) else 0

    def _files(self, path: str, schema: pa.Schema | None = None) -> Any:
        """The Parquet files Spark wrote at URI `path`, as a pyarrow dataset the driver
        reads (where `_driver_sees_files`; Spark's `_SUCCESS` and `.crc` files left out),
        with `schema` when given rather than the files' own."""
        import pyarrow.dataset as ds

        filesystem, local = self.state.local(path)
        return ds.dataset(local, schema=schema, filesystem=filesystem, format="parquet")

    def _create_table(
        self,
        name: str,
        path: str,
        columns: str,
        keys: Sequence[str],
        sorted_by: Sequence[str],
        buckets: int,
    ) -> None:
        """A catalog table of `columns` (`_spark_columns`) over the bucket files at
        `path` (no job: the schema is given)."""
        location = path.replace("\\", "\\\\").replace("'", "\\'")
        self.spark.sql(
            f"CREATE TABLE {_quote(name)} ({columns}) USING parquet "
            f"CLUSTERED BY ({', '.join(map(_quote, keys))}) "
            f"SORTED BY ({', '.join(map(_quote, sorted_by))}) INTO {buckets} BUCKETS "
            f"LOCATION '{location}'"
        )

    def _read_table(
        self,
        name: str,
        path: str,
        keys: Sequence[str],
        order: Sequence[str],
        rows: int | None = None,
    ) -> Stored:
        """The bucketed batch of catalog table `name` (files at `path`, bucketed by
        `keys`, each file in `order`), its table dropped and files deleted on `release`;
        `rows`: its row count when known (else read from the footers)."""
        stored = self.spark.table(_quote(name))
        self._tables[id(stored)] = name
        self._bucketed[stored] = tuple(keys)
        return self._owned(stored, path, order, rows)

    def _new_path(self) -> str:
        """A fresh URI under this kernel's directory of the storage root (`state`)."""
        return self.state.new_path(self.spark)

    def _write(
        self,
        frame: DataFrame,
        keys: Sequence[str],
        buckets: int = 0,
        partitioned: bool = False,
        ordered: bool = False,
        file_rows: int | None = None,
    ) -> Stored:
        """`frame` written under a new path, in `keys` order within each file, and read
        back, its rows checked against those written (`state.check_written`).
        `partitioned`: partitioned by `keys` already; `ordered`: each partition in `keys`
        order already (a stored batch's rows: written as they are, so a file may hold
        more than one sorted run where Spark read several files as one split, which a
        probe's pruning barely notices). With `buckets` (`_bucketing`), written as a
        bucketed table: shuffled by hash unless `partitioned` or `ordered` (then each
        task writes its rows' buckets, sorted locally). `file_rows`: at most this many
        rows a file (not bucketed)."""
        path = self._new_path()
        if buckets:  # by hash into buckets, each file sorted by the keys
            if not partitioned and not ordered:
                frame = frame.repartition(buckets, *keys)
            name = _table_name()
            frame, observation = counted(frame)
            writer = frame.write.bucketBy(buckets, keys[0], *keys[1:]).sortBy(keys[0], *keys[1:])
            writer = self._parquet_options(writer.option("path", path), frame)
            writer.saveAsTable(_quote(name))
            stored = self._read_table(name, path, keys, keys)
        else:
            # Range-partitioned, then sorted: each file holds one key range in row groups
            # of ascending keys, so a probe's footer statistics rule out all but one group.
            if keys and not partitioned and not ordered:
                frame = frame.repartitionByRange(*keys)
            if keys and not ordered:
                frame = frame.sortWithinPartitions(*keys)
            frame, observation = counted(frame)  # last: counted in the writing tasks
            writer = self._parquet_options(frame.write, frame)
            if file_rows is not None:
                writer = writer.option("maxRecordsPerFile", file_rows)
            writer.parquet(path)
            stored = self._read_back(path, keys, schema=frame.schema)
        try:
            check_written(path, written_rows(observation), stored.rows)
        except DsqlError:
            self.release(stored.frame)
            raise
        return stored

    def store(self, frame: DataFrame, file_rows: int | None = None) -> Stored:
        """`frame`'s rows written by the executors as Parquet under the storage root, in
        files of at most `file_rows` rows when given, checked against the rows the write
        counted (a lost file is an error, not fewer rows), and read back as a frame with
        no plan behind it; its files are deleted by `release` of that frame. A row the
        write fails on (a negative count a query refuses) is the user's error."""
        try:
            return self._write(frame, (), file_rows=file_rows)
        except DsqlError:
            raise
        except Exception as error:  # noqa: BLE001 - Spark's error, as the user reads it
            raise _engine_error(error) from error

    def read(self, frame: DataFrame, batch_rows: int) -> Iterator[pa.Table]:
        """The rows of a stored frame (`store`) in the driver, a file at a time in tables
        of at most `batch_rows` rows: read by pyarrow where the driver sees the files and
        reads their types as Spark does (`driver_can_read`), else by one Spark read per
        file; so a result of any size reaches the driver in bounded memory."""
        schema = self.schema(frame)
        by_pyarrow = all(_read_alike(f.type) for f in schema) and self.driver_can_read()
        for file in sorted(frame.inputFiles()):
            if by_pyarrow:
                import pyarrow.parquet as pq

                local = unquote(urlparse(file).path) if file.startswith("file:") else file
                for batch in pq.ParquetFile(local).iter_batches(batch_rows):
                    yield pa.Table.from_batches([batch]).cast(schema)
            else:
                yield self.to_arrow(self.spark.read.parquet(file)).cast(schema)

    def driver_can_read(self) -> bool:
        """Whether the driver reads the files executors write under the storage root
        itself (a check, made once: `state.StateStore.driver_sees`)."""
        return self._driver_sees_files()

    def _parquet_options(self, writer: Any, frame: DataFrame) -> Any:
        """`writer` (of `frame`) with dsql's Parquet options: row groups of about
        `row_group_bytes`, and no dictionary encoding where every column is of fixed
        width (`_fixed_width`)."""
        writer = writer.option("parquet.block.size", self.row_group_bytes)
        if all(_fixed_width(f.dataType) for f in frame.schema.fields):
            writer = writer.option("parquet.enable.dictionary", "false")
        return writer

    def _read_back(
        self, path: str, keys: Sequence[str] = (), rows: int | None = None, schema: Any = None
    ) -> Stored:
        """The batch written at `path` (in `keys` order within each file) as a frame with
        no plan behind it, its files owned (deleted on `release`); `rows`: its row count
        when known (else counted); `schema`: the schema Spark wrote it with, which spares
        the job that reads it from a file's footer."""
        reader = self.spark.read if schema is None else self.spark.read.schema(schema)
        return self._owned(reader.parquet(path), path, keys, rows)

    def _owned(
        self, stored: DataFrame, path: str, order: Sequence[str], rows: int | None
    ) -> Stored:
        """`stored`, read from the files at `path` (in `order` within each file), owned:
        its files deleted on `release`; its row count `rows`, else from the footers where
        the driver sees them (no job), else counted."""
        self._paths[id(stored)] = path
        if self._owner is not None:
            self._owners[path] = self._owner
        if order:
            self._order[stored] = tuple(order)
        if rows is None and self._driver_sees_files():
            rows = self._files(path).count_rows()
        stored_rows = stored.count() if rows is None else rows
        self._rows[path] = stored_rows
        return Stored(stored, stored_rows)

    def _driver_sees_files(self) -> bool:
        """Whether the driver reads the files executors write under the storage root, as
        a check found (`StateStore.driver_sees`: one job, on first use)."""
        if self.driver_reads is None:
            from dsql.runtime.spark_session import is_remote

            # A Spark Connect server's files are the server's, never read here.
            self.driver_reads = not is_remote(self.spark) and self.state.driver_sees(self.spark)
        return self.driver_reads

    def release(self, frame: DataFrame) -> None:
        path = self._paths.pop(id(frame), None)
        table = self._tables.pop(id(frame), None)
        if table is not None:
            try:
                self.spark.sql(f"DROP TABLE IF EXISTS {_quote(table)}")
            except Exception:  # noqa: BLE001 - a stopped session keeps no catalog
                pass
        if path is not None:
            self._datasets.pop(path, None)
            self._rows.pop(path, None)
            self._footers.pop(path, None)
            self._bucket_files.pop(path, None)
            self._owners.pop(path, None)
            self.state.delete(path)

    def _read_in_driver(
        self, frame: DataFrame, column: str | None = None, keys: pa.Array | None = None
    ) -> pa.Table | None:
        """A stored batch's rows (with `column` in `keys`, when given) read without a
        job, where the driver sees the batch's files (`_driver_sees_files`): pyarrow reads only
        the row groups whose key statistics admit a probed value (a few milliseconds where
        a Spark job costs tens). None for other frames and masters, or types pyarrow reads
        differently."""
        path = self._paths.get(id(frame))
        if path is None or not self._driver_sees_files():
            return None
        if path not in self._datasets:
            self._datasets[path] = self._dataset(path, frame)
        stored = self._datasets[path]
        if stored is None:
            return None
        dataset, schema = stored
        if not dataset.files:  # an empty write leaves no file (`_dataset` checked its rows)
            return schema.empty_table()
        try:
            if column is None or keys is None:
                return dataset.to_table().cast(schema)
            wanted = keys.cast(dataset.schema.field(column).type)
            files = self._buckets_of(path, frame, column, wanted, dataset)
            groups = _groups_admitting(files, column, wanted)
            if groups is None:
                condition = pc.is_in(pc.field(column), value_set=wanted, skip_nulls=False)
                return files.to_table(filter=condition).cast(schema)
            # The keys matched once over the groups read: a dataset filter of many keys
            # builds its set anew for every batch it scans, ten times the read.
            read = groups.to_table()
            return read.filter(pc.is_in(read.column(column), value_set=wanted)).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError):
            return None
        except OSError as error:  # a file listed when the batch was first read is gone
            raise lost(path, self._rows.get(path, 0), str(error)) from None

    def _buckets_of(
        self, path: str, frame: DataFrame, column: str, keys: pa.Array, dataset: Any
    ) -> Any:
        """`dataset` cut to the files of the buckets that hold `keys`, when the batch is
        bucketed by `column` alone: each file spans the whole key range, so the row groups'
        statistics would let every file's group around a key be read."""
        import pyarrow.dataset as ds

        if self._bucketed.get(frame) != (column,):
            return dataset
        files = self._bucket_files.get(path)
        if files is None:
            files = {}
            for fragment in dataset.get_fragments():
                found = _BUCKET_FILE.match(os.path.basename(fragment.path))
                if found is None:
                    return dataset
                fragment.ensure_complete_metadata()  # kept: read once, not per probe
                files.setdefault(int(found.group(1)), []).append(fragment)
            self._bucket_files[path] = files
        ids = bucket_ids(pa.table({column: keys}), [column], self.buckets)
        if ids is None:
            return dataset
        picked = [f for b in sorted(set(ids.tolist())) for f in files.get(b, [])]
        return ds.FileSystemDataset(picked, dataset.schema, dataset.format, dataset.filesystem)

    def _dataset(self, path: str, frame: DataFrame) -> tuple[Any, pa.Schema] | None:
        """The stored batch at `path` as a pyarrow dataset, with the Arrow schema Spark
        gives it; None when a column's type is one pyarrow may read differently.

        The dataset is given that schema rather than reading it from the files: a batch
        whose updates all cancelled may be stored as no file at all (a bucketed table
        writes a file per bucket it has rows for), and its rows must still have the
        batch's columns."""
        schema = self.schema(frame)
        if not all(_read_alike(f.type) for f in schema):
            return None
        return self._stored_files(path, schema), schema

    def _stored_files(self, path: str, schema: pa.Schema | None = None) -> Any:
        """The files of the batch stored at `path` (`_files`), checked to hold its rows by
        their footers: a read that would find fewer (a file gone since it was written, or
        never seen here) is `lost`, an error, never a shorter batch."""
        stored = self._rows.get(path, 0)
        try:
            files = self._files(path, schema)
            found = files.count_rows()
        except (OSError, pa.ArrowInvalid) as error:
            raise lost(path, stored, str(error)) from None
        if found != stored:
            raise lost(path, stored, f"{found} rows")
        return files


#: A probe of at least this many keys picks the row groups itself (`_groups_admitting`).
MANY_KEYS = 32


def _groups_admitting(files: Any, column: str, keys: pa.Array) -> Any:
    """The row groups of the Parquet `files` (a pyarrow dataset) whose footer statistics
    of integer `column` admit one of the NULL-free `keys`, as a dataset; None for fewer
    than `MANY_KEYS` keys, a NULL key, a column not of integers or a group without
    statistics (the caller filters the files by the keys).

    A key admitted by a group's `[min, max]` is found by a binary search of the sorted
    keys, so many keys cost one pass over the footers; a dataset filter by `is_in`
    prunes no group by it.

    >>> import pyarrow.dataset as ds, tempfile, pyarrow.parquet as pq
    >>> d = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"k": list(range(100))}), f"{d}/a.parquet", row_group_size=10)
    >>> picked = _groups_admitting(ds.dataset(d), "k", pa.array(range(40, 72)))
    >>> picked.to_table().num_rows
    40
    """
    import numpy as np
    import pyarrow.dataset as ds

    if len(keys) < MANY_KEYS or keys.null_count or not pa.types.is_integer(keys.type):
        return None
    probed = np.sort(keys.to_numpy(zero_copy_only=False))
    picked = []
    for fragment in files.get_fragments():
        fragment.ensure_complete_metadata()
        metadata = fragment.metadata
        leaves = [metadata.schema.column(j).path for j in range(metadata.num_columns)]
        if column not in leaves:
            return None
        at = leaves.index(column)
        ids = []
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(at).statistics
            if metadata.row_group(group).num_rows == 0:
                continue
            if stats is None or not stats.has_min_max:
                return None
            low = np.searchsorted(probed, stats.min, "left")
            if low < len(probed) and probed[low] <= stats.max:
                ids.append(group)
        if ids:
            picked.append(fragment.subset(row_group_ids=ids))
    return ds.FileSystemDataset(picked, files.schema, files.format, files.filesystem)


def _fixed_width(kind: Any) -> bool:
    """Whether a column of Arrow or Spark type `kind` is a number, boolean, date or
    timestamp: a batch of such columns only is written without Parquet's dictionary
    encoding. A writer builds a key column's dictionary and then drops it (too many
    values), and a reader decodes what it kept: the 10M book's batches (four integer
    columns) were written in 4.5 against 5.5 s and merged in 13.2-13.9 against
    14.8-16.0 s without it. Keeping it for the time and diff columns alone, whose values
    repeat, merged no faster. Strings keep it."""
    if isinstance(kind, pa.DataType):
        return bool(
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind)
            or pa.types.is_temporal(kind)
            or pa.types.is_decimal(kind)
        )
    from pyspark.sql import types as T

    return isinstance(
        kind, (T.NumericType, T.BooleanType, T.DateType, T.TimestampType, T.TimestampNTZType)
    )


def _spark_columns(schema: pa.Schema) -> str | None:
    """The column list of a table's DDL for Arrow `schema`; None for a type Spark lacks."""
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        fields = from_arrow_schema(schema).fields
    except (TypeError, ValueError, NotImplementedError):
        return None
    return ", ".join(f"{_quote(f.name)} {f.dataType.simpleString()}" for f in fields)


def _plain(uri: str) -> str:
    """`uri` with a `file:` scheme's slashes made one, so two spellings compare equal.

    >>> _plain("file:///tmp/a/b") == _plain("file:/tmp/a/b") == "file:/tmp/a/b"
    True
    """
    if uri.startswith("file:"):
        return "file:/" + uri[len("file:") :].lstrip("/")
    return uri


def _table_name() -> str:
    return f"dsql_batch_{uuid.uuid4().hex}"


def _read_alike(kind: pa.DataType) -> bool:
    """Whether pyarrow reads a Parquet column Spark wrote as exactly the value Spark reads
    (not so for timestamps, whose physical form depends on Spark's settings, or nested
    types, whose element names differ)."""
    return (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_date32(kind)
    )
