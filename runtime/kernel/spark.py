"""The Spark kernel: frames are Spark DataFrames, steps are Spark SQL over them.

DataFrame API only (no RDDs, no SparkContext), so the same code runs on a local
session, a cluster and Spark Connect. Queries are rendered by sqlglot in the
Spark dialect and evaluated with `SparkSession.sql`, the input frames passed as
arguments (Spark binds them as temporary views for the analysis only).

`materialize` cuts lineage, so plans do not grow with the number of rounds:

- a small result (at most `small_rows`) is collected as Arrow and re-entered as a
  local relation: one job, and later joins broadcast it;
- a large one is written as Parquet, range-partitioned and sorted by the arrangement's
  keys, in small row groups, and read back: compressed, with no plan behind it, and a
  probe by key (`key IN (...)`) skips the files and row groups that cannot match.
  Under a local master its row count comes from the files' footers, not a job, and
  the read back is given the written schema, so no job reads it from a footer.
  Rows known to be in key order already (a stored batch read through a query that
  keeps its rows' order, its key columns renamed: a view re-keying a big table by the
  column the table is sorted by) are written as they are, with no range bounds,
  shuffle or sort (a 2M-row table: hydration 11.5-15.6 s against 16.6-19.1 s).

A trace merge (`merge`) range-partitions the union of the batches by key before it
consolidates: the consolidation's groups are finer than the keys, so Spark needs no
exchange of its own for them, and the result is written in that partitioning. One
shuffle per merge, not two, and nothing cached.

Under a local master a keyed batch is stored as a bucketed table instead (`buckets`):
Spark reads it as hash-partitioned by its keys, so a merge of such batches and a join
of two arrangements' batches (keys matched by `=` where they are known NULL-free, and
a delta joined with each batch of a history apart: `null_free`, `join_apart`) run
with no exchange. The driver writes a big Arrow batch into its buckets itself
(`spark_buckets`).

A frame's time bounds (`bounds`), which let a reduce step that is settled at one time
run its one pipeline rather than the general step's seven stored stages, come without
a job: from the Arrow table a small frame was made from, or from a stored batch's
Parquet footers where the driver sees its files.

A probe of a stored batch by a few keys from the driver (`rows_with_key`, the auto
kernel's join and reduce over a big arrangement) is one such filtered read, collected
as Arrow. Under a local master the driver sees the files Spark wrote, and pyarrow
reads the matching row groups itself, in milliseconds rather than a job's tens.
"""

from __future__ import annotations

import os
import re
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from dsql.errors import DsqlError, ExecutionError, SchemaError, numeric_overflow
from dsql.runtime import memory
from dsql.runtime import relational as rel
from dsql.runtime.kernel import driver
from dsql.runtime.kernel.base import Frame, Kernel, Prepared, Stored, engine_message
from dsql.runtime.kernel.spark_buckets import bucket_ids
from dsql.runtime.kernel.spark_state import StateStore, check_written, counted, written_rows
from dsql.runtime.lattice import DIFF, TIME, Antichain

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


class SparkKernel(Kernel):
    """Evaluates runtime steps as Spark DataFrames (see module docstring)."""

    dialect = "spark"
    name = "spark"

    #: Parquet row-group size for stored batches: small groups make key probes selective.
    row_group_bytes = 1024 * 1024

    #: `rows_with_key` lists at most this many keys as literals of its filter.
    literal_keys = 64

    def __init__(
        self,
        spark: SparkSession | None = None,
        small_rows: int | None = None,
        state_uri: str | None = None,
    ) -> None:
        self._spark = spark
        #: The memory budget (`runtime.memory`) of what one step collects into the driver
        #: (None: unbounded); Spark's executors manage their own memory, and spill.
        self.memory_limit: int | None = None
        if small_rows is not None:
            self.small_rows = small_rows
        #: Where stored batches are written (`spark_state`): `state_uri`, else
        #: `$DSQL_STATE_URI`, else a temp directory under a local master.
        self.state = StateStore(state_uri)
        #: Per stored batch's id, the URI of its files.
        self._paths: dict[int, str] = {}
        #: Per stored batch read in the driver: its Parquet dataset and Arrow schema (None:
        #: not readable there).
        self._datasets: dict[str, tuple[Any, pa.Schema] | None] = {}
        #: Whether the driver reads stored batches' files itself (None: decided on first
        #: use by `StateStore.driver_sees`).
        self.driver_reads: bool | None = None
        #: The Arrow table each frame made by `from_arrow` came from, while the frame
        #: lives: what `bounds` reads without an action.
        self._arrow: weakref.WeakKeyDictionary[DataFrame, pa.Table] = weakref.WeakKeyDictionary()
        #: Frames computed from such frames alone (queries and unions over them, while
        #: they live): `materialize` reads their head without caching them first.
        self._from_driver: weakref.WeakSet[DataFrame] = weakref.WeakSet()
        #: Per stored batch's path, what its Parquet footers said: (reader, column) ->
        #: answer (`_from_footers`).
        self._footers: dict[str, dict[tuple[Callable[[str, str], Any], str], Any]] = {}
        #: The columns each frame's rows are sorted by within every partition, while the
        #: frame lives: a stored batch's keys, carried through queries that keep their
        #: input's rows in order (`_order_map`). `materialize` by a prefix of them writes
        #: without a shuffle or a sort.
        self._order: weakref.WeakKeyDictionary[DataFrame, tuple[str, ...]] = (
            weakref.WeakKeyDictionary()
        )
        #: Per prepared query's text, its output columns that are input columns passed
        #: through, as (output, input) pairs, when it keeps its one input's row order.
        self._order_maps: dict[str, tuple[tuple[str, str], ...] | None] = {}
        #: Buckets a keyed stored batch is written in (0: not bucketed; None: decided on
        #: first use, see `buckets`).
        self.bucket_count: int | None = None
        #: Per bucketed stored batch's id, the catalog table it is read through.
        self._tables: dict[int, str] = {}
        #: The keys each frame is bucketed by, while it lives: bucketed stored batches and
        #: unions of them. Spark reads such a frame as hash-partitioned by those keys.
        self._bucketed: weakref.WeakKeyDictionary[DataFrame, tuple[str, ...]] = (
            weakref.WeakKeyDictionary()
        )
        #: Per bucketed stored batch's path, its files' fragments by bucket (for probes).
        self._bucket_files: dict[str, dict[int, list[Any]]] = {}

    def set_state_uri(self, uri: str) -> None:
        """Store batches under `uri` from now on (those stored already stay where they are)."""
        self.state = StateStore(uri)
        self.driver_reads = None
        self.bucket_count = None

    @property
    def spark(self) -> SparkSession:
        """The Spark session, started on first use."""
        if self._spark is None:
            from dsql.runtime.spark_session import get_spark

            self._spark = get_spark()
        return self._spark

    def adopt(self, spark: SparkSession) -> None:
        """Run on `spark`: the session a kernel built before Spark was needed starts."""
        self._spark = spark

    def from_arrow(self, table: pa.Table) -> DataFrame:
        if not table.num_columns:  # Arrow would carry no rows: as many rows of nothing
            frame = self.spark.range(table.num_rows).select()
        elif table.num_rows == 0:
            from pyspark.sql.pandas.types import from_arrow_schema

            frame = self.spark.createDataFrame([], from_arrow_schema(table.schema))
        else:
            frame = self.spark.createDataFrame(table)
        self._arrow[frame] = table
        self._from_driver.add(frame)
        return frame

    def stamped(self, frame: DataFrame, schema: pa.Schema, time: int) -> DataFrame:
        """A batch of `frame`'s rows inserted at `time`: its columns, in order, renamed to
        `schema`'s data columns and cast to their types, then `__time__` = `time` and
        `__diff__` = 1. Lazy: the executors that evaluate the batch read the source, so
        a load of files or a table reaches the trace without passing the driver."""
        from pyspark.sql.functions import col, lit
        from pyspark.sql.pandas.types import from_arrow_schema

        fields = from_arrow_schema(schema).fields
        if len(fields) != len(frame.columns):
            raise SchemaError(
                f"the frame has {len(frame.columns)} columns; the table has {len(fields)}"
            )
        data = [
            col(_quote(source)).cast(field.dataType).alias(field.name)
            for source, field in zip(frame.columns, fields, strict=True)
        ]
        return frame.select(
            *data, lit(int(time)).cast("bigint").alias(TIME), lit(1).cast("bigint").alias(DIFF)
        )

    def bounds(self, frame: DataFrame, column: str) -> tuple[Any, Any] | None:
        """From the Arrow table a frame was made from, or from a stored batch's Parquet
        footers where the driver reads its files (statistics every writer here records);
        None for other frames: a time bound must not cost a job."""
        table = self._arrow.get(frame)
        if table is not None:
            return driver.bounds(table, column)
        return self._from_footers(frame, _footer_bounds, column, None)

    def null_free(self, frame: DataFrame, columns: Sequence[str]) -> bool:
        """From the Arrow table a frame was made from, or a stored batch's Parquet footers
        (the null counts every writer here records) where the driver reads its files."""
        table = self._arrow.get(frame)
        if table is not None:
            return driver.null_free(table, columns)
        return all(self._from_footers(frame, _footer_null_free, c, False) for c in columns)

    def _from_footers(
        self, frame: DataFrame, read: Callable[[str, str], Any], column: str, unknown: Any
    ) -> Any:
        """`read(path, column)` of a stored batch's files, once per batch and column;
        `unknown` for other frames, or where the driver does not see the files."""
        path = self._paths.get(id(frame))
        if path is None or not self._driver_sees_files():
            return unknown
        known = self._footers.setdefault(path, {})
        if (read, column) not in known:
            known[(read, column)] = read(self._files(path), column)
        return known[(read, column)]

    def _files(self, path: str, schema: pa.Schema | None = None) -> Any:
        """The Parquet files Spark wrote at URI `path`, as a pyarrow dataset the driver
        reads (where `_driver_sees_files`; Spark's `_SUCCESS` and `.crc` files left out),
        with `schema` when given rather than the files' own."""
        import pyarrow.dataset as ds

        filesystem, local = self.state.local(path)
        return ds.dataset(local, schema=schema, filesystem=filesystem, format="parquet")

    def join_apart(self, history: Sequence[DataFrame], delta: DataFrame) -> bool:
        """When every frame is bucketed by its side's keys: Spark joins two such batches
        without an exchange, but shuffles a union of them (the `IS NOT NULL` filters it
        infers for the join's keys, pushed below the union, hide the partitioning)."""
        keys = self._bucketed.get(history[0])
        return (
            keys is not None
            and delta in self._bucketed
            and all(self._bucketed.get(f) == keys for f in history)
        )

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

    def set_memory_limit(self, limit: int) -> None:
        self.memory_limit = limit

    def to_arrow(self, frame: DataFrame) -> pa.Table:
        """The frame's rows in the driver; more than `memory_limit` bytes of them are
        `memory.exceeded`, as a local query's result is (they are dropped at once)."""
        try:
            if not frame.columns:  # Spark's Arrow batches of no columns carry no rows
                return _no_columns(frame.count())
            table = frame.toArrow()
        except Exception as error:  # noqa: BLE001 - engine errors become DsqlErrors
            raise _engine_error(error) from error
        if self.memory_limit is not None and table.nbytes > self.memory_limit:
            size = table.nbytes
            del table
            raise memory.exceeded(
                self.memory_limit, f"the rows it collects into the driver take {size >> 20}MB"
            )
        return table

    def prepare(self, select: exp.Query) -> Prepared:
        # Inputs are bound as `{__in_name}` placeholders of `spark.sql(text, **frames)`,
        # which reads the text as a format string: every brace of the query's own text
        # (string literals, quoted names) is doubled in the tree, and each input table
        # becomes a placeholder node, so nothing else of the text is substituted.
        ctes = {c.alias for c in select.find_all(exp.CTE)}
        renamed: dict[str, str] = {}

        def rename(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Table) and not node.db and node.name not in ctes:
                bound = renamed.setdefault(node.name, f"__in_{node.name.strip('_')}")
                table = exp.Table(this=exp.Var(this="{" + bound + "}"))
                alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(node.name))
                table.set("alias", _escaped(alias))
                return table
            return _escaped(node)

        tree = select.transform(rename)
        text = self.sql(tree)
        self._order_maps[text] = _order_map(select)
        return Prepared(text, tuple(sorted(renamed.items())))

    def run(self, prepared: Prepared, inputs: Mapping[str, Frame]) -> DataFrame:
        frames = {bound: inputs[name] for name, bound in prepared.tables if name in inputs}
        try:
            result = self.spark.sql(prepared.text, **frames)
        except Exception as error:  # noqa: BLE001
            raise _engine_error(error, prepared.text) from error
        self._derived(result, frames.values())
        self._keep_order(result, prepared.text, frames.values())
        return result

    def _keep_order(self, result: DataFrame, text: str, inputs: Any) -> None:
        """Record the order `result` keeps of its one input's (`_order`), if any."""
        sources = list(inputs)
        mapping = self._order_maps.get(text)
        order = self._order.get(sources[0], ()) if len(sources) == 1 else ()
        if mapping is None or not order:
            return
        named = {source: out for out, source in reversed(mapping)}
        kept: list[str] = []
        for column in order:  # the longest prefix of the order passed through
            if column not in named:
                break
            kept.append(named[column])
        if kept:
            self._order[result] = tuple(kept)

    def _derived(self, result: DataFrame, inputs: Any) -> None:
        """Mark `result` as computed from the driver's rows when all `inputs` are."""
        if all(frame in self._from_driver for frame in inputs):
            self._from_driver.add(result)

    def materialize(
        self, frame: DataFrame, keys: Sequence[str] = (), estimate: int | None = None
    ) -> Stored:
        return self._materialize(frame, keys, estimate)

    def merge(
        self,
        frames: Sequence[Frame],
        columns: Sequence[str],
        keys: Sequence[str],
        depth: int,
        frontier: Antichain | None,
        estimate: int | None = None,
        uniform: bool = False,
    ) -> Stored | None:
        """One shuffle: the union partitioned by `keys` first, so the consolidation
        (whose groups are finer than the keys) needs no exchange of its own, and the
        result is written in that partitioning (`_write`) without a second one.

        By range, so that a probe's key falls in one file, except where the driver reads
        the files itself (a local master): there each file is sorted and its row groups'
        statistics prune as well, and hashing spares the range bounds' sampling job, a
        read of the whole union (the 10M book's two merges: 24.4 s against 27.9 s).

        Where batches are bucketed (`buckets`), the union of bucketed batches is
        partitioned already: no shuffle at all, but of a batch that is not stored."""
        if not keys or (estimate is not None and estimate <= self.small_rows):
            return None
        buckets = self._bucketing(keys, lambda: frames[0].columns)
        if buckets:  # only what is not bucketed by the keys is shuffled
            frames = [
                f if self._bucketed.get(f) == tuple(keys) else f.repartition(buckets, *keys)
                for f in frames
            ]
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)
        if frontier:
            query = rel.advance("u", columns, depth, frontier, uniform)
        else:
            query = rel.consolidate("u", columns, depth)
        prepared = self.cached(("merge", rel.fingerprint(query)), lambda: self.prepare(query))
        if not buckets:
            if self._driver_sees_files():
                union = union.repartition(*keys)
            else:
                union = union.repartitionByRange(*keys)
        merged = self.run(prepared, {"u": union})
        return self._materialize(merged, keys, estimate, partitioned=True)

    def _materialize(
        self,
        frame: DataFrame,
        keys: Sequence[str],
        estimate: int | None,
        partitioned: bool = False,
    ) -> Stored:
        """`materialize`; `partitioned`: `frame` is range-partitioned by `keys` already.

        A frame of no columns is held as Arrow whatever its size: its rows are a count,
        and Parquet cannot hold them."""
        try:
            if not frame.columns:
                table = self.to_arrow(frame)
                return Stored(self.from_arrow(table), table.num_rows, table)
            if estimate is not None and estimate <= self.small_rows:
                table = frame.toArrow()
                return Stored(self.from_arrow(table), table.num_rows, table)
            owned = False  # cached by this call, so uncached by it (a caller's cache stays)
            if estimate is None:  # no idea of the size: look at the head first
                # Cached first, as it is read again if big; but a frame computed from the
                # driver's rows alone is most likely small, and caching costs as much as
                # its job (0.1 s): if it is big after all, it is computed again.
                if not partitioned and frame not in self._from_driver and not frame.is_cached:
                    frame, owned = frame.persist(), True
                head = frame.limit(self.small_rows + 1).toArrow()
                if head.num_rows <= self.small_rows:
                    if owned:
                        frame.unpersist(blocking=False)
                    return Stored(self.from_arrow(head), head.num_rows, head)
            # Rows already in key order within each partition (a stored batch's columns
            # renamed) are written as they are: no range bounds, shuffle or sort.
            ordered = bool(keys) and self._order.get(frame, ())[: len(keys)] == tuple(keys)
            bucketed = self._bucketing(keys, lambda: frame.columns)
            partitioned = partitioned or (bucketed > 0 and self._bucketed.get(frame) == tuple(keys))
            # Written in buckets, a frame is read once: no range bounds, rows from footers.
            if not partitioned and not ordered and not bucketed and not frame.is_cached:
                frame, owned = frame.persist(), True  # read again: range bounds, rows
            stored = self._write(frame, keys, bucketed, partitioned, ordered)
            if owned:
                frame.unpersist(blocking=False)
            if stored.rows > self.small_rows:
                return stored
            # Smaller than its estimate (updates cancelled): back to a local relation.
            table = self._read_in_driver(stored.frame)
            table = self.to_arrow(stored.frame) if table is None else table
            self.release(stored.frame)
            return Stored(self.from_arrow(table), table.num_rows, table)
        except DsqlError:
            raise
        except Exception as error:  # noqa: BLE001
            raise _engine_error(error) from error

    def store_arrow(
        self,
        table: pa.Table,
        keys: Sequence[str] = (),
        consolidate: tuple[Sequence[str], int] | None = None,
    ) -> Stored | None:
        """`materialize` of a big Arrow table in the driver, when the driver writes files
        Spark reads (a local master): sorted by the first key and written by pyarrow in
        row groups of about `row_group_bytes`, without shipping the rows to Spark to
        write them. A probe filters row groups on the first key alone, so sorting by
        the others would buy nothing (a 10M-row table of two integer keys: 1.4 s by the
        first, 4.8 s by both). Where batches are bucketed (`buckets`) and the keys are
        integers, the rows go to their buckets' files (`spark_buckets.bucket_ids`), each
        sorted by the first key. None where that does not hold, or for a type whose
        Parquet form Spark may read differently.

        With `consolidate` (the data columns, the first key first, and the time depth),
        `table` is not consolidated yet: its rows go to their buckets as they are, and
        each bucket's rows are consolidated apart (equal rows have equal keys, so share a
        bucket) by `driver.consolidate`, on threads. The whole consolidated table is never
        held, and both cores sort: the 10M book's two arrangement steps took 3.4-3.8 s for
        its 20M changes, against 7.1-10.4 s consolidating and then storing them, and
        2.1-2.6 against 3.1-4.6 s for its 10M loaded rows (Python's peak 1.9 against 2.4
        GiB). None where numpy would not consolidate them (`driver.numeric_schema`) or
        the rows cannot go to buckets."""
        if not self._driver_sees_files() or not all(_read_alike(f.type) for f in table.schema):
            return None
        names, depth = consolidate or ((), 0)
        schema: pa.Schema | None = table.schema
        if consolidate is not None:  # by bucket, each in key order: the key comes first
            schema = driver.numeric_schema(table, names, depth) if names[:1] == keys[:1] else None
        if schema is None:
            return None
        import pyarrow.parquet as pq

        buckets = self._bucketing(keys, lambda: table.column_names)
        columns = _spark_columns(schema) if buckets else None
        ids = bucket_ids(table, keys, buckets) if columns else None
        counts = None if ids is None else np.bincount(ids, minlength=buckets)
        if consolidate is not None and (counts is None or counts.max() > driver.NUMERIC_ROWS):
            return None
        path = self._new_path()
        filesystem, local = self.state.local(path)
        filesystem.create_dir(local)
        per_row = max(table.nbytes // max(table.num_rows, 1), 1)
        group = max(self.row_group_bytes // per_row, 1024)
        dictionary = not all(_fixed_width(f.type) for f in schema)
        if ids is None or counts is None or columns is None:
            ordered = _sorted_by(table, keys[:1])
            name = f"{local}/part-00000.parquet"
            pq.write_table(
                ordered,
                name,
                row_group_size=group,
                use_dictionary=dictionary,
                filesystem=filesystem,
            )
            return self._read_back(path, keys[:1], ordered.num_rows)
        if consolidate is None:
            order = _bucket_order(table, keys[0], ids, buckets)
            cuts = [0, *np.cumsum(counts).tolist()]
        # Else each bucket's rows are picked as they are (its consolidation sorts them):
        # no order of all rows, whose array of positions would be fresh memory.

        def write(bucket: int) -> int:  # Spark reads a file's bucket from its name
            if consolidate is None:
                part = table.take(order[cuts[bucket] : cuts[bucket + 1]])
            else:
                part = table.take(np.flatnonzero(ids == bucket))
                part = driver.consolidate([part], names, depth, None)
                assert part is not None, "numeric_schema vouched for every bucket"
                if not part.num_rows:
                    return 0
                if not driver.in_order(part[keys[0]].to_numpy()):  # a few rows, by Python
                    part = _sorted_by(part, keys[:1])
            name = f"{local}/part-00000_{bucket:05d}.c000.parquet"
            pq.write_table(
                part, name, row_group_size=group, use_dictionary=dictionary, filesystem=filesystem
            )
            return part.num_rows

        filled = [b for b in range(buckets) if counts[b]]
        with ThreadPoolExecutor(max(1, min(len(filled), os.cpu_count() or 1))) as pool:
            rows = sum(pool.map(write, filled))  # Arrow's and numpy's work frees the GIL
        table_name = _table_name()
        self._create_table(table_name, path, columns, keys, keys[:1], buckets)
        return self._read_table(table_name, path, keys, keys[:1], rows)

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
    ) -> Stored:
        """`frame` written under a new path, in `keys` order within each file, and read
        back; `partitioned`: partitioned by `keys` already; `ordered`: each partition
        in `keys` order already (a stored batch's rows: written as they are, so a file
        may hold more than one sorted run where Spark read several files as one split,
        which a probe's pruning barely notices). With `buckets` (`_bucketing`), written
        as a bucketed table: shuffled by hash unless `partitioned` or `ordered` (then
        each task writes its rows' buckets, sorted locally)."""
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
            self._parquet_options(frame.write, frame).parquet(path)
            stored = self._read_back(path, keys, schema=frame.schema)
        try:
            check_written(path, written_rows(observation), stored.rows)
        except DsqlError:
            self.release(stored.frame)
            raise
        return stored

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
        if order:
            self._order[stored] = tuple(order)
        if rows is None and self._driver_sees_files():
            rows = self._files(path).count_rows()
        return Stored(stored, stored.count() if rows is None else rows)

    def rows_with_key(self, frame: DataFrame, column: str, keys: pa.Array) -> pa.Table | None:
        """The rows of `frame` whose `column` equals one of the distinct `keys` (NULL equals
        NULL), as Arrow in the driver; None for a key type without plain literals. A stored batch
        is read by the driver itself where it can (`_read_in_driver`); otherwise one job
        runs a filter of the DataFrame API, not a query: on a stored batch Spark pushes it
        into the Parquet scan, which skips every file and row group whose key range misses."""
        if not (pa.types.is_integer(keys.type) or pa.types.is_string(keys.type)):
            return None
        read = self._read_in_driver(frame, column, keys)
        if read is not None:
            return read
        present = keys.drop_null()
        key, nulls = frame[column], len(present) < len(keys)
        if len(present) <= self.literal_keys:
            listed = present.to_pylist()
            condition = key.isin(listed) if len(listed) != 1 else key == listed[0]
            picked = frame.filter(condition | key.isNull() if nulls else condition)
        else:  # a literal per key costs py4j calls: semi-join a shipped key list instead
            low, high = pc.min_max(present).values()
            shipped = self.from_arrow(pa.table({column: present}))
            picked = frame.filter(key.between(low.as_py(), high.as_py()))
            picked = picked.join(shipped.hint("broadcast"), on=column, how="left_semi")
            if nulls:  # a join never matches NULL keys
                picked = picked.unionByName(frame.filter(key.isNull()))
        return self.to_arrow(picked)

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
        if not dataset.files:  # an empty write leaves no file (its rows were counted)
            return schema.empty_table()
        try:
            if column is None or keys is None:
                return dataset.to_table().cast(schema)
            wanted = keys.cast(dataset.schema.field(column).type)
            condition = pc.is_in(pc.field(column), value_set=wanted, skip_nulls=False)
            return (
                self._buckets_of(path, frame, column, wanted, dataset)
                .to_table(filter=condition)
                .cast(schema)
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError):
            return None

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
        return self._files(path, schema), schema

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
            self._footers.pop(path, None)
            self._bucket_files.pop(path, None)
            self.state.delete(path)

    def nbytes(self, frame: DataFrame) -> int:
        """Spark's estimate of the frame's size, from its optimized plan's statistics
        (`EXPLAIN COST`: planning only, no job, and the same over Spark Connect); 0 when
        Spark gives none."""
        try:
            text = self.spark.sql("EXPLAIN COST SELECT * FROM {frame}", frame=frame).head()
        except Exception:  # noqa: BLE001 - sizes are estimates: a plan Spark cannot cost
            return 0
        return 0 if text is None else _size_in_bytes(str(text[0]))

    def schema(self, frame: DataFrame) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema

        # Timestamps as `toArrow` gives them (UTC instants); no time zone fails for them.
        return to_arrow_schema(frame.schema, timezone="UTC")

    def map_arrow(
        self, frame: DataFrame, function: Callable[[pa.Table], pa.Table], schema: pa.Schema
    ) -> DataFrame:
        from pyspark.sql.pandas.types import from_arrow_schema

        def batches(iterator):  # runs in Spark's Python workers, a batch at a time
            for batch in iterator:
                result = function(pa.Table.from_batches([batch]))
                yield from result.select(schema.names).cast(schema).to_batches()

        return frame.mapInArrow(batches, from_arrow_schema(schema))

    def union(self, frames: Sequence[Frame]) -> DataFrame:
        result = frames[0]
        for frame in frames[1:]:
            result = result.unionByName(frame)
        if len(frames) > 1:
            self._derived(result, frames)
            keys = {self._bucketed.get(f) for f in frames}
            if len(keys) == 1 and None not in keys:  # Spark keeps their partitioning
                self._bucketed[result] = keys.pop()  # type: ignore[assignment]
        return result

    def fanout(self, branches: Sequence[Sequence[tuple[str, exp.Expr]]]) -> exp.Expression:
        structs = [
            exp.Struct(expressions=[exp.alias_(e, name, quoted=True) for name, e in branch])
            for branch in branches
        ]
        return exp.Anonymous(this="INLINE", expressions=[exp.Array(expressions=structs)])


#: The optimized plan's root size in `EXPLAIN COST` text, as Spark writes it
#: (`Statistics(sizeInBytes=3.4 MiB, rowCount=...)`).
_SIZE_IN_BYTES = re.compile(r"Statistics\(sizeInBytes=([0-9.]+(?:E[+-]?\d+)?) ?([KMGTPE]i)?B")


def _size_in_bytes(explained: str) -> int:
    """The first `sizeInBytes` of an `EXPLAIN COST` text, in bytes; 0 if there is none.

    >>> _size_in_bytes("LocalRelation [x#6L], Statistics(sizeInBytes=3.4 MiB, rowCount=3)")
    3565158
    """
    match = _SIZE_IN_BYTES.search(explained)
    if match is None:
        return 0
    power = " KMGTPE".index(match.group(2)[0]) if match.group(2) else 0
    return int(float(match.group(1)) * 1024**power)


def _footer_statistics(files: Any, column: str) -> tuple[list[Any], bool] | None:
    """The footers' statistics of `column` for each non-empty row group of the Parquet
    `files` (a pyarrow dataset; None for a group without), and whether the column holds
    integers; None when a file lacks the column."""
    groups: list[Any] = []
    integers = True
    for fragment in sorted(files.get_fragments(), key=lambda f: f.path):
        metadata = fragment.metadata
        schema = metadata.schema.to_arrow_schema()
        if column not in schema.names:
            return None
        integers = integers and pa.types.is_integer(schema.field(column).type)
        leaves = [metadata.schema.column(j).path for j in range(metadata.num_columns)]
        at = leaves.index(column)  # a leaf's place, which nested columns before it shift
        for group in range(metadata.num_row_groups):
            chunk = metadata.row_group(group)
            if chunk.num_rows:
                groups.append(chunk.column(at).statistics)
    return groups, integers


def _footer_bounds(files: Any, column: str) -> tuple[int, int] | None:
    """The least and greatest value of integer `column` over the row groups of the
    Parquet `files`, from their footers' statistics; None when a non-empty group has
    none, the column is not of integers, or no group has rows."""
    found = _footer_statistics(files, column)
    if found is None or not found[1] or not found[0]:
        return None
    groups = found[0]
    if any(stats is None or not stats.has_min_max for stats in groups):
        return None
    return int(min(s.min for s in groups)), int(max(s.max for s in groups))


def _footer_null_free(files: Any, column: str) -> bool:
    """Whether no row group of the Parquet `files` holds a NULL in `column`, by their
    footers' statistics (False when a group has none)."""
    found = _footer_statistics(files, column)
    return found is not None and all(
        s is not None and s.has_null_count and s.null_count == 0 for s in found[0]
    )


def _bucket_order(table: pa.Table, key: str, ids: np.ndarray, buckets: int) -> np.ndarray:
    """The positions of `table`'s rows ordered by bucket (`ids`), then by `key`: for
    integer keys without NULLs one sort of the bucket and key packed in one number, or
    none but the buckets' (a radix sort) when the rows are in key order already."""
    column = table[key]
    if pa.types.is_integer(column.type) and column.type != pa.uint64() and not column.null_count:
        values = column.to_numpy()
        if driver.in_order(values):
            return np.argsort(ids, kind="stable")  # in key order already (consolidated)
        low, high = (int(values.min()), int(values.max())) if len(values) else (0, 0)
        span = high - low + 1
        if span * buckets < 2**62:
            packed = ids.astype(np.int64)
            packed *= span
            packed += values
            packed -= low
            return driver.sort_order(packed)[1]
        by_key = driver.sort_order(values)[1]
    else:
        by_key = np.asarray(pc.array_sort_indices(column, null_placement="at_start"))
    return by_key[np.argsort(ids[by_key], kind="stable")]  # int16: a radix sort


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


def _no_columns(rows: int) -> pa.Table:
    """An Arrow table of `rows` rows and no columns."""
    return pa.table({"_": pa.nulls(rows)}).drop(["_"])


def _table_name() -> str:
    return f"dsql_batch_{uuid.uuid4().hex}"


def _escaped(node: exp.Expression) -> exp.Expression:
    """`node` with the braces of its own text doubled (a string literal, a name, a
    keyword), so `spark.sql`'s formatting gives them back unchanged."""
    if isinstance(node, exp.Literal | exp.Identifier | exp.Var) and isinstance(node.this, str):
        if "{" in node.this or "}" in node.this:
            node = node.copy()
            node.set("this", node.this.replace("{", "{{").replace("}", "}}"))
    return node


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


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


def _sorted_by(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """`table` sorted by `keys`, stably: by `driver.sort_order` for one integer key
    without NULLs (10M rows: 0.45 s, where Arrow's `sort_by` takes 1.7 s)."""
    if not keys:
        return table
    if len(keys) == 1:
        column = table[keys[0]]
        if (
            pa.types.is_integer(column.type)
            and column.type != pa.uint64()
            and not column.null_count
        ):
            return table.take(driver.sort_order(column.to_numpy())[1])
    return table.sort_by([(k, "ascending") for k in keys])


def _engine_error(error: Exception, text: str | None = None) -> Exception:
    """Turn a Spark exception into a DsqlError with the first line of Spark's message."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    message = lines[0] if lines else repr(error)
    kind = type(error).__name__
    if kind == "PythonException":
        raised = [line for line in lines if re.match(r"^[A-Za-z_.]+(Error|Exception):", line)]
        message = raised[-1] if raised else message
        if raised and raised[-1].split(":")[0].endswith("SchemaError"):
            return SchemaError(raised[-1].split(":", 1)[1].strip())
    if "UNRESOLVED_COLUMN" in message or "cannot be resolved" in message:
        return SchemaError(
            f"unknown column: {engine_message(message, None)[0]}", hint="check the column names"
        )
    if "NUMERIC_VALUE_OUT_OF_RANGE" in message:
        return numeric_overflow()
    if "division by zero" in message.lower() or "DIVIDE_BY_ZERO" in message:
        return ExecutionError("division by zero")
    if "ARITHMETIC_OVERFLOW" in message:  # Spark's message does not name the type
        return ExecutionError(
            "integer out of range (integer or bigint)", hint="cast to numeric for larger values"
        )
    # The statement is dsql's, over internal names: the user's is shown instead.
    said, own = engine_message(message, text)
    return ExecutionError(said if own else f"Spark failed ({kind}): {said}")


#: What a SELECT may not have and still keep its input's rows in order.
_REORDERING = (
    "with",
    "joins",
    "laterals",
    "group",
    "having",
    "qualify",
    "distinct",
    "order",
    "limit",
    "offset",
)


def _order_map(query: exp.Expr) -> tuple[tuple[str, str], ...] | None:
    """The (output, input) column pairs of a query that keeps its one input's rows in
    their order (a SELECT of columns and per-row expressions, maybe filtered, over one
    table or over such a SELECT: no join, grouping, aggregate, window, DISTINCT, ORDER
    BY or LIMIT), an input column passed through under an output name; None for any
    other query."""
    if not isinstance(query, exp.Select) or any(query.args.get(a) for a in _REORDERING):
        return None
    where = query.args.get("where")
    if any(
        e.find(exp.Query, exp.Exists) for e in [*query.expressions, *([where] if where else [])]
    ):
        return None  # a subquery may be planned as a join, which may reorder
    source = query.args.get("from_")
    inner = source.this if isinstance(source, exp.From) else None
    below: dict[str, str] | None = None
    if isinstance(inner, exp.Subquery):
        pairs = _order_map(inner.this)
        if pairs is None:
            return None
        below = dict(pairs)
    elif not isinstance(inner, exp.Table):
        return None
    passed = []
    for e in query.expressions:
        if e.find(exp.AggFunc, exp.Window, exp.Star):  # `find` looks at `e` itself too
            return None
        column = e.unalias() if isinstance(e, exp.Alias) else e
        if isinstance(column, exp.Column):
            name = column.name if below is None else below.get(column.name)
            if name is not None:
                passed.append((e.alias_or_name, name))
    return tuple(passed)
