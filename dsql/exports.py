"""Exports: results and relations Spark holds, handed out without collecting them whole.

A relation whose arrangement has a batch on Spark (kernel="spark", or "auto" once it
outgrew the placement threshold), and a SELECT whose result is on Spark, are written
out by Spark's executors: the rows at the current time (or the AS OF time), each
repeated by its count, sorted, offset and limited as a query asks, as Parquet files of
at most `Session.fetch_rows` rows (`SET fetch_rows`, default `FETCH_ROWS`) under the
kernel's storage. That copy is

- the DataFrame `to_spark` returns (`con.table(name).to_spark()`): it reads those files,
  so it stays valid while the trace's own batches merge and compact, until the
  connection closes (`release`); the user may write it anywhere with Spark's writers;
- the source that `batches` (`con.table(name).batches()`) and a cursor's SELECT
  (`select`: joins, aggregates, ORDER BY, LIMIT, AS OF alike) stream from: the files in
  name order, which is the sort's order, at most `fetch_rows` rows in the driver at a
  time (read by pyarrow where the driver sees the files, else one Spark read per file;
  the same over Spark Connect), so a result of any size reaches the client in bounded
  memory. The copy is deleted once read, or when the cursor moves on.

A relation held in the driver (or without an arrangement: a plain view) is read as any
SELECT is, and handed out from Arrow; so is a result whose updates are all in the driver
(under "auto", batches of at most the placement threshold's rows).

>>> FETCH_ROWS
100000
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pyarrow as pa

from dsql import fast_path
from dsql.runtime.kernel.base import Capability
from dsql.runtime.lattice import DIFF, TIME

#: The default of `Session.fetch_rows`: rows per file of a stored copy, and so at most
#: per batch that a streamed result yields.
FETCH_ROWS = 100_000


def stored(session: Any, name: str) -> Any | None:
    """Relation `name`'s rows now as a Spark DataFrame over files Spark's executors
    wrote (module docstring), columns named as the relation's; None when no batch of its
    arrangement is on Spark. Released with the session's other exports (`release`)."""
    relation = session.relations[name]
    kernel = session.worker.kernel
    if not kernel.can(Capability.STORAGE) or relation.arrangement is None:
        return None
    names = [c.name for c in relation.columns]
    arranged = relation.arrangement.node

    def write(tick: int) -> Any | None:
        counts = fast_path.count_frame(kernel, arranged, (), tick, [])
        if not kernel.takes(Capability.STORAGE, (counts,)):  # every batch in the driver
            return None
        from pyspark.sql import functions as F  # noqa: N812

        rows = _repeated(counts, [f"_c{i}" for i in range(len(names))])
        named = [F.col(f"_c{i}").alias(n) for i, n in enumerate(names)]
        return _store(session, rows.select(*named))

    return fast_path.held(session, name, arranged, write)


def _store(session: Any, rows: Any) -> Any:
    """A Spark frame written out by the executors in files of at most
    `Session.fetch_rows` rows, in its partitions' order (file names sort so), verified
    as the kernel's own writes are (`SparkKernel.store`: a lost file is an error); the
    frame reading them, kept in the session's exports."""
    stored = session.worker.kernel.store(rows, session.fetch_rows)
    session.exports.append(stored.frame)
    return stored.frame


def _repeated(counts: Any, columns: list[str]) -> Any:
    """The rows (`columns`) of a frame of counts (`__diff__`), each repeated by its
    count, by the executors; a negative count fails the job, as a read refuses it
    (`results.repeat_rows`)."""
    from pyspark.sql import functions as F  # noqa: N812

    from dsql.results import negative_multiplicity

    count = F.col(DIFF)
    message = str(negative_multiplicity(-1, "result")).split(" (")[0]
    checked = F.when(count < 0, F.raise_error(F.lit(message))).otherwise(count)
    copies = F.explode(F.sequence(F.lit(1).cast("bigint"), checked))
    return counts.select(*columns, copies.alias("__copy__")).select(*columns)


def to_spark(session: Any, name: str, spark: Any = None) -> Any:
    """Relation `name`'s rows now as a Spark DataFrame: the executors' stored copy when
    it is on Spark, else its rows shipped from the driver (`interop.to_spark`)."""
    frame = stored(session, name)
    if frame is not None:
        return frame
    from dsql.interop import to_spark as ship

    return ship(_read(session, name), session, spark)


def batches(session: Any, name: str) -> Iterator[pa.Table]:
    """Relation `name`'s rows now, as Arrow tables of at most `Session.fetch_rows` rows
    each, the driver holding one at a time when the relation is on Spark (module
    docstring)."""
    frame = stored(session, name)
    if frame is None:
        yield from _read(session, name).to_batches(session.fetch_rows)
        return
    yield from (part for part in _files(session, frame) if part.num_rows)


def select(
    session: Any, bound: Any, as_of: int | None = None
) -> pa.Table | Generator[pa.Table, None, None]:
    """A SELECT's rows: a table when they are in the driver, else (a result Spark holds)
    a generator of Arrow tables of at most `Session.fetch_rows` rows, the first one
    empty (the columns), read from a copy the executors wrote (`_files`) in the query's
    order, with LIMIT and OFFSET applied by Spark. The rows are in that copy when this
    returns; `Session.read`'s checks (a view in error) apply.

    Where the rows come from: a fast-path read (`fast_path.peek_counts`: one relation
    under map/filter/project) of an arrangement on Spark of over `fetch_rows` updates
    is finished by Spark (a small arrangement of rows held many times each is
    collected, within `memory_limit`); any other read runs its dataflow with a capture
    that leaves a big Spark batch stored (`CaptureNode.spilled`), whose updates Spark
    accumulates and finishes. A result whose updates are all in the driver (under
    "auto", at most the placement threshold's rows per batch) is finished there."""
    from dsql.results import accumulate, present, reads_nothing, repeat_rows

    kernel = session.worker.kernel
    local = not kernel.can(Capability.STORAGE)
    # A result of no visible columns is empty whatever its rows (`results.present`).
    if local or not bound.visible or (as_of is None and reads_nothing(bound.plan)):
        return session.read(bound, as_of)
    if as_of is None and session.fast_path:

        def finish(counts: Any, arranged: Any) -> pa.Table | Generator[pa.Table, None, None]:
            if (
                not kernel.takes(Capability.STORAGE, (counts,))
                or arranged.trace.rows <= session.fetch_rows
            ):
                table = repeat_rows(kernel.to_arrow(counts), DIFF, session.memory_limit)
                return present(table, bound)
            return _files(session, _store(session, _presented(counts, bound)), _names(bound))

        peeked = fast_path.peek_counts(session, bound, finish)
        if peeked is not None:
            return peeked
    updates, spilled, tick = session.read_updates(bound, as_of, spill=True)
    if not spilled:
        return present(accumulate(updates, tick, bound.plan.arity, session.memory_limit), bound)
    try:
        counts = _accumulated(session, [*spilled, updates], tick, bound.plan.arity)
        copy = _store(session, _presented(counts, bound))
    finally:
        for frame in spilled:
            kernel.release(frame)
    typed = pa.schema(updates.schema.field(i) for i in range(bound.visible))
    return _files(session, copy, _names(bound), typed)


def _accumulated(session: Any, parts: list[Any], tick: int, arity: int) -> Any:
    """A read's updates (Spark frames and Arrow tables of `_c0..`, time, diff) summed
    at `tick` on Spark: each row with its count (`__diff__`), rows of count 0 left out,
    as `results.accumulate` does in the driver."""
    from pyspark.sql import functions as F  # noqa: N812

    union = on_spark(session, parts)
    data = [f"_c{i}" for i in range(arity)]
    total = F.sum(F.col(DIFF)).cast("bigint").alias(DIFF)
    summed = union.where(F.col(TIME) <= tick).groupBy(*data).agg(total)
    return summed.where(F.col(DIFF) != 0)


def on_spark(session: Any, parts: list[Any]) -> Any:
    """The union of `parts` (Spark frames, and Arrow tables shipped to Spark) as one Spark
    frame; at least one part is a Spark frame."""
    spark_kernel = _spark_kernel(session)
    frames = [
        spark_kernel.from_arrow(p) if isinstance(p, pa.Table) else p
        for p in parts
        if not isinstance(p, pa.Table) or p.num_rows
    ]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def streamed(session: Any, frame: Any, schema: pa.Schema) -> Generator[pa.Table, None, None]:
    """A Spark frame's rows in its order (`schema`: their names and types), written out
    by the executors and read back at most `Session.fetch_rows` at a time (`_files`;
    first an empty table of the columns). The write happens before this returns (its
    errors are raised here); the copy is deleted once read or when the generator closes."""
    return _files(session, _store(session, frame), schema.names, schema)


def _presented(counts: Any, bound: Any) -> Any:
    """A frame of counts' rows, each repeated by its count, ordered, offset and limited as
    the query asks (by Spark's sort: ranges of rows in order, one partition after
    another), its visible columns positional (`_c0..`: a result's names may repeat)."""
    from pyspark.sql import functions as F  # noqa: N812

    data = [f"_c{i}" for i in range(bound.plan.arity)]
    rows = _repeated(counts, data)
    if bound.order:
        keys = []
        for o in bound.order:
            c = F.col(f"_c{o.column}")
            if o.desc:
                keys.append(c.desc_nulls_first() if o.nulls_first else c.desc_nulls_last())
            else:
                keys.append(c.asc_nulls_first() if o.nulls_first else c.asc_nulls_last())
        rows = rows.orderBy(*keys)
    if bound.offset:
        rows = rows.offset(bound.offset)
    if bound.limit is not None:
        rows = rows.limit(bound.limit)
    return rows.select(*data[: bound.visible])


def _names(bound: Any) -> list[str]:
    return list(bound.column_names)[: bound.visible]


def _files(
    session: Any, frame: Any, names: list[str] | None = None, schema: pa.Schema | None = None
) -> Generator[pa.Table, None, None]:
    """The rows of a stored copy in order, at most `Session.fetch_rows` at a time in the
    driver (`SparkKernel.read`: a file's row groups a batch at a time), after an empty
    table of its columns (`names`, typed as `schema`, else as Spark wrote them); the copy
    released at the end."""
    kernel = session.worker.kernel
    schema = kernel.schema(frame) if schema is None else schema
    if names is not None:
        schema = pa.schema([f.with_name(n) for f, n in zip(schema, names, strict=True)])
    try:
        yield schema.empty_table()  # the columns, before any file is read
        for part in kernel.read(frame, session.fetch_rows):
            yield part.rename_columns(schema.names).cast(schema)
    finally:
        release(session, frame)


def _read(session: Any, name: str) -> pa.Table:
    """`SELECT * FROM name` in the driver."""
    from sqlglot import exp

    bound = session.plan(exp.select("*").from_(exp.to_table(name, quoted=True)))
    return session.read(bound)


def _spark_kernel(session: Any) -> Any:
    """The session's Spark kernel (under "auto", the one it places big relations on)."""
    kernel = session.worker.kernel
    return getattr(kernel, "remote", kernel)


def release(session: Any, frame: Any | None = None) -> None:
    """Delete the files of one stored copy (`frame`), or of every one the session made."""
    kernel = session.worker.kernel
    for held in [frame] if frame is not None else list(session.exports):
        kept = [f for f in session.exports if f is not held]
        if len(kept) < len(session.exports):
            session.exports[:] = kept
            kernel.release(held)


__all__ = ["FETCH_ROWS", "batches", "release", "select", "stored", "to_spark"]
