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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from dsql.clock import TICKS_PER_MS
from dsql.errors import DataError, DsqlError, ExecutionError
from dsql.planner.plan import Query
from dsql.relation import _view_plan
from dsql.results import negative_multiplicity
from dsql.runtime.capture import consolidate_table
from dsql.runtime.lattice import DIFF, TIME

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
        try:
            if self.as_of < session.clock.now_ms():  # the snapshot then, then each change
                collection = session.history.changes_since(bound.plan, self.as_of)
            else:
                collection = session._render(bound.plan)
            self.schema = collection.schema
            self._capture = collection.capture()
            session.worker.wake()
            session.worker.run()
        except DsqlError:  # a failed SUBSCRIBE leaves no dataflow behind
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

    def poll(self) -> pa.Table:
        """Updates not yet returned whose time is final (closes the current time first)."""
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
        raw = self._capture.poll()
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
        """At most `count` updates (all when None); the rest wait for the next fetch."""
        fresh = self.poll()
        table = fresh if self._pending is None else pa.concat_tables([self._pending, fresh])
        self._pending = None
        if count is not None and table.num_rows > count:
            self._pending = table.slice(count)
            table = table.slice(0, count)
        return table

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


def _check_snapshot(updates: pa.Table, as_of: int) -> None:
    """Refuse a snapshot holding a row with a negative count (updates at `as_of` are the
    contents then, consolidated): no valid collection has one, as in a SELECT's result."""
    at = updates.filter(pc.equal(updates["ms"], as_of))
    least = pc.min(at[DIFF]).as_py() if at.num_rows else 0
    if least < 0:
        raise negative_multiplicity(least, "snapshot")


__all__ = ["Subscription", "subscription_rows"]
