"""Exports: a table's or view's contents handed out without collecting them in the driver.

A relation whose arrangement has a batch on Spark (kernel="spark", or "auto" once it
outgrew the placement threshold) is read out by Spark's executors: its rows at the
current time, each repeated by its count, are written by them as Parquet files of at
most `FILE_ROWS` rows under the kernel's storage (`stored`). That copy is

- the DataFrame `to_spark` returns (`con.table(name).to_spark()`): it reads those files,
  so it stays valid while the trace's own batches merge and compact, until the
  connection closes (`release`); the user may write it anywhere with Spark's writers;
- the source `batches` streams from: one file, at most `FILE_ROWS` rows, in the driver
  at a time (read by pyarrow where the driver sees the files, else one Spark read per
  file), so a result of any size reaches the client in bounded memory.

A relation held in the driver (or without an arrangement: a plain view) is read as any
SELECT is, and handed out from Arrow.

>>> FILE_ROWS
100000
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa

from dsql import fast_path
from dsql.runtime.lattice import DIFF

#: Rows per file of a stored copy, and so at most per batch `batches` yields.
FILE_ROWS = 100_000


def stored(session: Any, name: str) -> Any | None:
    """Relation `name`'s rows now as a Spark DataFrame over files Spark's executors
    wrote (module docstring), columns named as the relation's; None when no batch of its
    arrangement is on Spark. Released with the session's other exports (`release`)."""
    relation = session.relations[name]
    kernel = session.worker.kernel
    if getattr(kernel, "name", "local") == "local" or relation.arrangement is None:
        return None
    names = [c.name for c in relation.columns]
    arranged = relation.arrangement.node

    def write(tick: int) -> Any | None:
        counts = fast_path.count_frame(kernel, arranged, (), tick, [])
        if isinstance(counts, pa.Table):  # every batch in the driver
            return None
        return _store(session, counts, names)

    return fast_path.held(session, name, arranged, write)


def _store(session: Any, counts: Any, names: list[str]) -> Any:
    """A Spark frame of counts written out by the executors, each row repeated by its
    count, in files of at most `FILE_ROWS` rows; the frame reading them, kept in the
    session's exports."""
    kernel = session.worker.kernel
    spark_kernel = getattr(kernel, "remote", kernel)
    from dsql.runtime.kernel.spark.state import check_written, counted, written_rows

    path = spark_kernel._new_path()  # noqa: SLF001 - the kernel's storage root
    rows, observation = counted(_repeated(counts, names))  # counted in the writing tasks
    rows.write.option("maxRecordsPerFile", FILE_ROWS).parquet(path)
    stored = spark_kernel._read_back(path, schema=rows.schema)  # noqa: SLF001
    try:  # verified as the kernel's own writes are: a lost file is an error
        check_written(path, written_rows(observation), stored.rows)
    except Exception:
        spark_kernel.release(stored.frame)
        raise
    session.exports.append(stored.frame)
    return stored.frame


def _repeated(counts: Any, names: list[str]) -> Any:
    """The rows of a frame of counts (`__diff__`), each repeated by its count, by the
    executors; a negative count fails the job, as a read refuses it
    (`results.repeat_rows`)."""
    from pyspark.sql import functions as F  # noqa: N812

    from dsql.results import negative_multiplicity

    count = F.col(DIFF)
    message = str(negative_multiplicity(-1, "result")).split(" (")[0]
    checked = F.when(count < 0, F.raise_error(F.lit(message))).otherwise(count)
    copies = F.explode(F.sequence(F.lit(1).cast("bigint"), checked))
    data = [F.col(f"_c{i}").alias(n) for i, n in enumerate(names)]
    return counts.select(*data, copies.alias("__copy__")).select(*names)


def to_spark(session: Any, name: str, spark: Any = None) -> Any:
    """Relation `name`'s rows now as a Spark DataFrame: the executors' stored copy when
    it is on Spark, else its rows shipped from the driver (`interop.to_spark`)."""
    frame = stored(session, name)
    if frame is not None:
        return frame
    from dsql.interop import to_spark as ship

    return ship(_read(session, name), session, spark)


def batches(session: Any, name: str) -> Iterator[pa.Table]:
    """Relation `name`'s rows now, as Arrow tables of at most `FILE_ROWS` rows each, the
    driver holding one at a time when the relation is on Spark (module docstring)."""
    frame = stored(session, name)
    if frame is None:
        yield from _read(session, name).to_batches(FILE_ROWS)
        return
    yield from (part for part in _files(session, frame) if part.num_rows)


def select_batches(session: Any, bound: Any) -> Generator[pa.Table, None, None] | None:
    """A SELECT's rows as `batches` gives a relation's, when the fast path reads them
    (`fast_path.peek_counts`: one relation under map/filter/project) from an
    arrangement on Spark of over `FILE_ROWS` updates (a small arrangement of rows held
    many times each is collected, within `memory_limit`) and the query neither orders
    nor limits them; else None (the read collects its result). The rows are in the
    executors' copy when this returns; `Session.read`'s checks (a view in error) apply."""
    kernel = session.worker.kernel
    if (
        getattr(kernel, "name", "local") == "local"
        or not session.fast_path
        or bound.order
        or bound.limit is not None
        or bound.offset
        or bound.visible != len(bound.column_names)
    ):
        return None
    names = list(bound.column_names)

    def read(counts: Any, arranged: Any) -> Any:
        if isinstance(counts, pa.Table) or arranged.trace.rows <= FILE_ROWS:
            return None
        return _store(session, counts, names)

    frame = fast_path.peek_counts(session, bound, read)
    return None if frame is None else _files(session, frame)


def _files(session: Any, frame: Any) -> Generator[pa.Table, None, None]:
    """The rows of a stored copy, at most a file (`FILE_ROWS` rows) at a time in the
    driver, after an empty table of its columns; the copy released at the end."""
    kernel = session.worker.kernel
    spark_kernel = getattr(kernel, "remote", kernel)
    schema = spark_kernel.schema(frame)
    # pyarrow reads these types as Spark wrote them (not timestamps: Spark's settings
    # pick their Parquet form); others are read by Spark, a file at a time.
    plain = all(_plain(f.type) for f in schema)
    try:
        yield schema.empty_table()  # the columns, before any file is read
        for file in sorted(frame.inputFiles()):
            if plain and spark_kernel._driver_sees_files():  # noqa: SLF001 - a local master's disk
                import pyarrow.parquet as pq

                local = unquote(urlparse(file).path) if file.startswith("file:") else file
                for batch in pq.ParquetFile(local).iter_batches(FILE_ROWS):
                    yield pa.Table.from_batches([batch]).cast(schema)
            else:
                yield spark_kernel.to_arrow(spark_kernel.spark.read.parquet(file)).cast(schema)
    finally:
        release(session, frame)


def _plain(kind: pa.DataType) -> bool:
    return not (pa.types.is_timestamp(kind) or pa.types.is_nested(kind))


def _read(session: Any, name: str) -> pa.Table:
    """`SELECT * FROM name` in the driver."""
    from sqlglot import exp

    bound = session.plan(exp.select("*").from_(exp.to_table(name, quoted=True)))
    return session.read(bound)


def release(session: Any, frame: Any | None = None) -> None:
    """Delete the files of one stored copy (`frame`), or of every one the session made."""
    kernel = session.worker.kernel
    spark_kernel = getattr(kernel, "remote", kernel)
    for held in [frame] if frame is not None else list(session.exports):
        kept = [f for f in session.exports if f is not held]
        if len(kept) < len(session.exports):
            session.exports[:] = kept
            spark_kernel.release(held)


__all__ = ["FILE_ROWS", "batches", "release", "select_batches", "stored", "to_spark"]
