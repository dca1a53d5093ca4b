"""SUBSCRIBE: a view's changes as a stream of `(mz_timestamp, mz_diff, columns...)` rows.

As in Materialize: the snapshot comes first, stamped with the AS OF time (the
time the subscription started, by default); then the updates in time order,
consolidated within each millisecond. AS OF is inclusive, UP TO exclusive. A
subscribed query is maintained as a view of it is: `ORDER BY ... LIMIT k` keeps the
top k rows at every time, and ORDER BY alone orders nothing.
With PROGRESS, a row with `mz_progressed = true` (data columns NULL) says that
every update before its timestamp has been emitted. While a materialized view it
reads is in error, `poll` raises that error and the subscription stays open; after
the view heals, the updates stamped inside the error period arrive at its end, with
the view's correction (`dsql.heal`). A failure of the subscription's own dataflow
(a row its query cannot compute) ends it with the error.

A snapshot Spark holds (a view placed on Spark) never comes into the driver whole: the
first run's big Spark batches stay stored (`CaptureNode.spilled`), and Spark's executors
stamp, consolidate and order them with the driver's few updates, writing files of at
most `Session.fetch_rows` rows that are read back one at a time as the reader asks
(`FETCH n`, a cursor's `fetchmany`, each `next` of `Connection.subscribe`'s iterator).
Those batches hold updates at every time, final or not (a temporal view's retractions
at future times): each poll streams only the updates at times the worker's frontier
has passed, and the rest stay stored until it passes them, as the capture holds back
the driver's. Later updates are collected each round, as a round's changes are.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from dsql import exports
from dsql.clock import TICKS_PER_MS
from dsql.errors import DataError, DsqlError, ExecutionError
from dsql.planner.plan import Query
from dsql.relation import _view_plan
from dsql.results import negative_multiplicity
from dsql.runtime.capture import consolidate_table
from dsql.runtime.kernel.base import Capability
from dsql.runtime.lattice import DIFF, TIME, Antichain

if TYPE_CHECKING:
    from dsql.session import Session


class Subscription:
    """One running SUBSCRIBE: `poll()` returns the updates that became final since the last poll."""

    def __init__(
        self,
        session: Session,
        bound: Query,
        snapshot: bool = True,
        progress: bool = False,
        as_of: int | None = None,
        up_to: int | None = None,
        sql: str = "",
    ) -> None:
        """`sql`: the statement (or target) subscribed, as SHOW SUBSCRIPTIONS lists it."""
        self.session = session
        self.sql = sql
        #: The name of the cursor it was declared as (`DECLARE c CURSOR FOR SUBSCRIBE`).
        self.cursor: str | None = None
        # The query maintained exactly as a view of it would be: its LIMIT/OFFSET a top-k
        # of the plan (a one-off read applies them to the result instead), ORDER BY
        # columns outside the select list dropped.
        view = _view_plan(bound)
        session.refuse_volatile(view, "SUBSCRIBE")
        self.bound = bound = Query(view, view.arity)
        self.snapshot = snapshot
        self.progress = progress
        session.close_time()
        self.as_of = session.clock.now_ms() if as_of is None else as_of
        self.up_to = up_to
        self.names = [c.name for c in bound.columns]
        self.closed = False
        self._start = len(session.worker.nodes)
        self._first = True
        #: Updates polled but not yet fetched (FETCH n returns at most n).
        self._pending: pa.Table | None = None
        self._last_progress = -1
        #: The snapshot's pieces stored by Spark (module docstring), read as asked.
        self._stream: Iterator[pa.Table] | None = None
        #: The snapshot's stored batches (`CaptureNode.spilled`), which hold updates at
        #: every time: kept until the frontier passes them all, each poll streaming the
        #: updates at the times it completed since `_since` (ticks; None: none yet).
        self._later: list[Any] = []
        self._since: int | None = None
        #: The least time of an update in `_later` not streamed yet (None: none is left).
        self._next: int | None = None
        self._capture = None
        try:
            if self.as_of < session.clock.now_ms():  # the snapshot then, then each change
                collection = session.history.changes_since(bound.plan, self.as_of)
            else:
                collection = session._render(bound.plan)
            self.schema = collection.schema
            self._capture = collection.capture(spill=session.worker.kernel.can(Capability.STORAGE))
            session.worker.wake()
            session.worker.run()
            self._capture.spill = False  # the snapshot is taken: later rounds are collected
        except DsqlError:  # a failed SUBSCRIBE leaves no dataflow behind
            self._release_spilled()
            session.worker.drop(session.worker.nodes[self._start :])
            raise
        self._nodes = session.worker.nodes[self._start :]
        session.subscriptions.append(self)
        self.id = len(session.subscriptions)  # ids are never reused in a session

    @property
    def columns(self) -> list[str]:
        return [
            "mz_timestamp",
            *(["mz_progressed"] if self.progress else []),
            "mz_diff",
            *self.names,
        ]

    @property
    def streaming(self) -> bool:
        """Whether pieces of a snapshot Spark stored are still to be read."""
        return self._stream is not None

    def poll(self) -> pa.Table:
        """Updates not yet returned whose time is final (closes the current time first):
        every piece of a stored snapshot still unread, then what is new."""
        parts: list[pa.Table] = []
        while self.streaming or not parts:
            parts.append(self.next_batch())
        if len(parts) > 1:  # the snapshot read: what came since follows it
            parts.append(self.next_batch())
        return pa.concat_tables(parts)

    def next_batch(self) -> pa.Table:
        """The next piece of a stored snapshot (at most `Session.fetch_rows` rows) while
        one is left, else the updates not yet returned whose time is final."""
        if self._stream is None:
            fresh = self._fresh()
            if self._stream is None:
                return fresh
        piece = next(self._stream, None)
        if piece is None:
            self._stream = None
            return self._empty()
        return piece

    def backlog(self) -> Generator[pa.Table, None, None]:
        """The pieces of a stored snapshot still unread, one at a time (`Result.batches`)."""
        while self._stream is not None:
            yield self.next_batch()

    def _fresh(self) -> pa.Table:
        """Updates not yet returned whose time is final; on the first call, where the
        snapshot is stored off the driver, none: its pieces are then in `_stream`."""
        if self.closed:
            return self._empty()
        self.session.close_time(force=True)
        # While a view it reads is in error the subscription reports the error; its
        # updates wait, and come after healing restamped to it (`dsql.heal`).
        self.session.healing.check_plan(self.bound.plan)
        failed = self.session.worker.failed
        own = next((failed[n.id] for n in self._nodes if n is not None and n.id in failed), None)
        if own is not None:  # its own dataflow failed: it ends with the error, as in Materialize
            self.close()
            raise ExecutionError(f"SUBSCRIBE failed: {own.message}", hint=own.hint)
        assert self._capture is not None
        raw = self._capture.poll()
        if self._first and self._capture.spilled:
            self._later, self._capture.spilled = self._capture.spilled, []
        if self._later:
            upto = _least_time(self.session.worker.frontier)
            due = self._next is not None and (upto is None or upto > self._next)
            if self._since is None or due:
                first, self._first = self._first, False
                self._stream = self._stored_updates(raw, upto, first)
                return self._empty()
        if raw.num_rows:
            raw = raw.set_column(
                raw.column_names.index(TIME),
                TIME,
                self.session.healing.restamp(self.bound.plan, raw[TIME]),
            )
        arity = self.bound.visible
        cols = [f"_c{i}" for i in range(arity)]
        ms = pc.divide(raw[TIME], TICKS_PER_MS) if raw.num_rows else pa.array([], pa.int64())
        table = (
            pa.table({**{c: raw[c] for c in cols}, "ms": ms, DIFF: raw[DIFF]})
            if raw.num_rows
            else None
        )
        first = self._first
        if table is not None and self._first:
            at = pc.max_element_wise(table["ms"], pa.scalar(self.as_of, pa.int64()))
            table = table.set_column(table.column_names.index("ms"), "ms", at)
            if not self.snapshot:
                table = table.filter(pc.greater(ms, self.as_of))
        self._first = False
        if table is not None and self.up_to is not None:
            table = table.filter(pc.less(table["ms"], self.up_to))
        now = self.session.clock.now_ms()
        if self.up_to is not None and now >= self.up_to:
            self.close()
        if table is None or table.num_rows == 0:
            out = self._empty()
        else:
            out = consolidate_table(table, tuple(cols), ("ms",))
            if first:
                try:
                    _check_snapshot(out, self.as_of)
                except DataError:
                    self.close()  # its first updates are spent: it cannot go on
                    raise
            out = self._shape(out)
        if self.progress and now > self._last_progress:
            self._last_progress = now
            out = pa.concat_tables([out, self._progress_row(now)])
        return out

    def fetch(self, count: int | None) -> pa.Table:
        """At most `count` updates (all when None); the rest wait for the next fetch. A
        stored snapshot is read only as far as `count` needs (one piece past it at most)."""
        if count is None:
            parts = [self.poll()]
        else:
            parts, have = [], 0 if self._pending is None else self._pending.num_rows
            while have < count and (self.streaming or not parts):
                parts.append(self.next_batch())
                have += parts[-1].num_rows
        if self._pending is not None:
            parts.insert(0, self._pending)
        table = pa.concat_tables(parts) if parts else self._empty()
        self._pending = None
        if count is not None and table.num_rows > count:
            self._pending = table.slice(count)
            table = table.slice(0, count)
        return table

    def _stored_updates(self, raw: pa.Table, upto: int | None, first: bool) -> Iterator[pa.Table]:
        """The updates of the stored batches (`_later`) at the times completed since the
        last call, from `_since` up to `upto` (ticks; None: all), with the driver's `raw`,
        stamped, consolidated and ordered by Spark as `_fresh` does in the driver, and
        read back a file at a time (`exports.streamed`). `first`: these are the
        subscription's first updates (the snapshot). Updates at later times stay stored
        for a later poll, as the capture holds back the driver's: a temporal view's
        future retractions come when the frontier passes their time, never before."""
        from pyspark.sql import functions as F  # noqa: N812

        since, self._since = self._since, upto
        done: list[Any] = []
        if upto is None:  # every time is complete: the batches are spent once written
            done, self._later = self._later, []
        cols = [f"_c{i}" for i in range(self.bound.visible)]
        window = F.lit(True)
        if since is not None:
            window = window & (F.col(TIME) >= since)
        if upto is not None:
            window = window & (F.col(TIME) < upto)
        parts = [frame.where(window) for frame in (done or self._later)]
        try:
            union = exports.on_spark(self.session, [*parts, raw]).select(*cols, TIME, DIFF)
            tick = F.col(TIME)
            for start, end in self.session.healing.closed_periods(self.bound.plan):
                tick = F.when((tick >= start) & (tick < end), F.lit(end)).otherwise(tick)
            ms = F.expr(f"`{TIME}` div {TICKS_PER_MS}")
            stamped = union.withColumn(TIME, tick).withColumn("ms", ms)
            if first and not self.snapshot:
                stamped = stamped.where(F.col("ms") > self.as_of)
            stamped = stamped.withColumn("ms", F.greatest(F.col("ms"), F.lit(self.as_of)))
            if self.up_to is not None:
                stamped = stamped.where(F.col("ms") < self.up_to)
            total = F.sum(F.col(DIFF)).cast("bigint").alias(DIFF)
            summed = stamped.groupBy(*cols, "ms").agg(total).where(F.col(DIFF) != 0)
            refused = F.lit(first) & (F.col("ms") == self.as_of) & (F.col(DIFF) < 0)
            checked = F.when(refused, F.raise_error(F.lit(_NEGATIVE))).otherwise(F.col(DIFF))
            shape = self._schema()
            named = [F.col("ms").alias("mz_timestamp")]
            if self.progress:
                named.append(F.lit(False).alias("mz_progressed"))
            named += [checked.alias("mz_diff"), *(F.col(c) for c in cols)]
            order = [F.col("ms"), *(F.col(c).asc_nulls_last() for c in cols)]
            ordered = summed.orderBy(*order).select(*named)
            pieces = exports.streamed(self.session, ordered, shape)
            self._next = None
            if self._later and upto is not None:  # where the next stored update is
                least = F.min(F.col(TIME)).alias("least")
                later = exports.on_spark(self.session, self._later).where(F.col(TIME) >= upto)
                self._next = later.agg(least).collect()[0]["least"]
            if self._next is None:  # none is left: the batches are spent
                done, self._later = done + self._later, []
        except DsqlError as error:
            negative = self._least(summed) if _NEGATIVE in str(error) else None
            self.close()  # its first updates are spent: it cannot go on
            if negative is not None:  # read before `close` deletes the stored batches
                raise negative from None
            raise
        finally:
            for frame in done:
                self.session.worker.kernel.release(frame)
        next(pieces)  # the columns, before any file
        return pieces

    def _least(self, summed: Any) -> DataError:
        """The error of a stored snapshot holding a row a negative number of times, with
        the least count (as `_check_snapshot` says it)."""
        from pyspark.sql import functions as F  # noqa: N812

        at = summed.where(F.col("ms") == self.as_of).agg(F.min(DIFF).alias("least"))
        return negative_multiplicity(int(at.collect()[0]["least"]), "snapshot")

    def _release_spilled(self) -> None:
        """Release the stored batches of the snapshot still held."""
        held, self._later = self._later, []
        if self._capture is not None:
            held += self._capture.spilled
            self._capture.spilled = []
        for frame in held:
            self.session.worker.kernel.release(frame)

    def _shape(self, t: pa.Table) -> pa.Table:
        arrays: dict[str, Any] = {"mz_timestamp": t["ms"].cast(pa.int64())}
        if self.progress:
            arrays["mz_progressed"] = pa.array([False] * t.num_rows)
        arrays["mz_diff"] = t[DIFF].cast(pa.int64())
        for i, name in enumerate(self.names):
            arrays[name] = t[f"_c{i}"]
        return pa.table(arrays, schema=self._schema())

    def _progress_row(self, ms: int) -> pa.Table:
        schema = self._schema()
        values = {"mz_timestamp": [ms], "mz_progressed": [True], "mz_diff": [None]}
        return pa.table(
            {f.name: pa.array(values.get(f.name, [None]), f.type) for f in schema}, schema=schema
        )

    def _schema(self) -> pa.Schema:
        fields = [pa.field("mz_timestamp", pa.int64())]
        if self.progress:
            fields.append(pa.field("mz_progressed", pa.bool_()))
        fields.append(pa.field("mz_diff", pa.int64()))
        fields += [pa.field(n, self.schema.field(i).type) for i, n in enumerate(self.names)]
        return pa.schema(fields)

    def _empty(self) -> pa.Table:
        return self._schema().empty_table()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if isinstance(self._stream, Generator):
                self._stream.close()  # deletes the rest of the stored snapshot
            self._stream = None
            self._release_spilled()
            self.session.worker.drop(self._nodes)


def subscription_rows(subscriptions: list[Subscription]) -> dict[str, list[Any]]:
    """SHOW SUBSCRIPTIONS: the session's running subscriptions (not closed, not past their
    UP TO) in the order they started: id, cursor (None unless declared), the statement,
    AS OF and UP TO in milliseconds."""
    running = [sub for sub in subscriptions if not sub.closed]
    return {
        "id": [sub.id for sub in running],
        "cursor": [sub.cursor for sub in running],
        "sql": [sub.sql for sub in running],
        "as_of": [sub.as_of for sub in running],
        "up_to": pa.array([sub.up_to for sub in running], pa.int64()),
    }


#: What Spark's write of a stored snapshot fails with on a negative count (`_least`).
_NEGATIVE = str(negative_multiplicity(-1, "snapshot")).split(" (")[0]


def _least_time(frontier: Antichain) -> int | None:
    """The least time of a top-level `frontier` (times before it are complete); None when
    it is empty (every time is)."""
    return min((t[0] for t in frontier), default=None)


def _check_snapshot(updates: pa.Table, as_of: int) -> None:
    """Refuse a snapshot holding a row with a negative count (updates at `as_of` are the
    contents then, consolidated): no valid collection has one, as in a SELECT's result."""
    at = updates.filter(pc.equal(updates["ms"], as_of))
    least = pc.min(at[DIFF]).as_py() if at.num_rows else 0
    if least < 0:
        raise negative_multiplicity(least, "snapshot")


__all__ = ["Subscription", "subscription_rows"]
