"""Errors that heal: a materialized view is in error exactly while its query fails.

As in Materialize, a row that makes a view's query fail (division by zero, integer
overflow, a failing cast, a loop past its recursion limit) puts the view in error
only while the row is there; the write itself succeeds. An index on a plain view
maintains the view, and is in error and heals alike. dsql gets there by rebuilding
rather than by an error stream through every operator:

- A view's result passes a `SwitchNode` into its arrangement (an indexed plain view's,
  into the index's). When a node of the view's dataflow fails in a round, the switch
  emits nothing that round; after the round the view is marked in error
  (`ErrorPeriod`, from the first time not known good) and its dataflow is dropped.
- A write (INSERT, UPDATE, DELETE; a transaction's at COMMIT) is delivered to the
  views before the statement returns (`deliver`), so the write that puts a view in
  error carries the notice "materialized view 'v' is in error: ...", and the write
  that heals it "materialized view 'v' is no longer in error". A view created over
  rows that fail its query is created in error (`begin_in_error`), with the notice.
- While a view is in error, reads of it (SELECT, SUBSCRIBE polls, AS OF a time in the
  error period, views and indexes reading it) raise `ExecutionError` naming the view
  and the cause.
- Once a table the view reads has changed, the statement's end (or the next
  statement's start) rebuilds the view's dataflow from the inputs' current contents
  (as CREATE does) and attaches it to the switch. If the rebuilt dataflow runs
  through the current time without failing, the view is healthy again: the switch's
  first batch retracts what the arrangement held and adds the new result, one
  correction at the healing time, so views, indexes and subscriptions over the view
  follow exactly. Otherwise the rebuilt dataflow is dropped and the view stays in
  error.
- Only data errors (`ExecutionError`, `DataError`) heal. Any other failure of a kept
  view is a bug in dsql: the view stays in error, with the cause marked as internal,
  until it is dropped. A canceled statement or Ctrl-C is no view's error (the worker
  never records them against a kept view).

A subscription reports the error at each poll while a view it reads is in error,
then continues: the updates stamped inside an error period are restamped to its end,
where they sum with the correction to the exact change across the period.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from dsql.errors import DataError, DsqlError, ExecutionError
from dsql.planner.plan import Get, Plan
from dsql.planner.stateful import expressions_of, walk_deep
from dsql.planner.temporal import mentions_mz_now
from dsql.relation import Relation

if TYPE_CHECKING:
    from dsql.indexes import Index
    from dsql.runtime.collection import Collection
    from dsql.runtime.switch import SwitchNode
    from dsql.session import Session


@dataclass
class ErrorPeriod:
    """Ticks `[start, end)` in which a materialized view was in error (`end` None: still)."""

    start: int
    error: DsqlError
    end: int | None = None

    def covers(self, tick: int) -> bool:
        return self.start <= tick and (self.end is None or tick < self.end)


def is_data_error(error: DsqlError) -> bool:
    """Whether `error` is the data's (the engine refused a value), which deleting the
    value cures, rather than dsql's own."""
    return isinstance(error, ExecutionError | DataError)


class Healing:
    """A session's materialized views in error: their periods, retries and notices."""

    def __init__(self, session: Session) -> None:
        self.session = session
        #: Each view's error periods, oldest first; the last is open while it is in error.
        self.periods: dict[str, list[ErrorPeriod]] = {}
        #: Messages for the statement that ran the round: a view went into error.
        self.notices: list[str] = []
        #: The versions of a view's tables at its latest failure or retry.
        self._tried: dict[str, tuple[int, ...]] = {}

    # --- state ------------------------------------------------------------------------
    def error(self, name: str) -> ErrorPeriod | None:
        """The open error period of view `name` (None: it is healthy)."""
        periods = self.periods.get(name)
        return periods[-1] if periods and periods[-1].end is None else None

    def check(self, relation: Relation, tick: int | None = None) -> None:
        """Raise the error of `relation`, of an index on it, or of a relation it reads,
        when it is in error now (`tick` None) or was at `tick`."""
        s = self.session
        s.lost_state.check(relation.name)
        self._raise_if_in_error(relation.name, tick, f"materialized view '{relation.name}'")
        for index in s.indexes.on(relation.name):
            self._raise_if_in_error(index.name, tick, f"index '{index.name}' on '{index.on}'")
        for name in relation.depends_on:
            if name in s.relations:
                self.check(s.relations[name], tick)

    def _raise_if_in_error(self, name: str, tick: int | None, label: str) -> None:
        now = self.session.clock.tick if tick is None else tick
        for period in self.periods.get(name, ()):
            if period.covers(now):
                raise view_error(name, period.error, label)

    def check_plan(self, plan: Plan, tick: int | None = None) -> None:
        """`check` of every relation `plan` reads."""
        s = self.session
        for name in sorted({n.name for n in walk_deep(plan) if isinstance(n, Get)}):
            if name in s.relations:
                self.check(s.relations[name], tick)

    def take_notices(self) -> list[str]:
        notices, self.notices = self.notices, []
        return notices

    def forget(self, name: str) -> None:
        """View `name` is dropped."""
        self.periods.pop(name, None)
        self._tried.pop(name, None)

    # --- failures ---------------------------------------------------------------------
    def record(self, good_until: int) -> None:
        """Mark each view (or indexed plain view) whose dataflow failed in the rounds just
        run as in error (since `good_until`, the first tick those rounds computed) and
        drop its dataflow."""
        failed = self.session.worker.failed
        if not failed:
            return
        interrupted = self.session.worker.interrupted
        for kept in self._kept():
            watched = _switch(kept).watched
            cause = next((failed[i] for i in watched if i in failed), None)
            if cause is not None:
                cut = any(i in interrupted for i in watched)
                self._fail(kept, cause, good_until)
                if cut:  # no row failed it: it is rebuilt at the next statement boundary
                    self._tried.pop(kept.name, None)

    def _kept(self) -> list[Relation | Index]:
        """What heals: each materialized view, and each index on a plain view (the index
        maintains the view), each with its switch."""
        s = self.session
        views: list[Relation | Index] = [r for r in s.relations.values() if r.switch is not None]
        return views + [i for i in s.indexes.by_name.values() if i.switch is not None]

    def _fail(self, kept: Relation | Index, cause: DsqlError, start: int) -> None:
        s = self.session
        _switch(kept).detach()
        s.worker.drop(kept.computation)
        kept.computation.clear()
        self._tried[kept.name] = self._versions(kept)
        period = self.error(kept.name)
        if period is not None:  # a retry failed: the view stays in error, maybe anew
            period.error = cause
            return
        self.periods.setdefault(kept.name, []).append(ErrorPeriod(start, cause))
        self.notices.append(f"{_kind(kept)} '{kept.name}' is in error: {cause.message}")

    def begin_in_error(self, kept: Relation | Index, cause: DsqlError, start: int) -> None:
        """Keep a new view (or index on a plain view), whose first evaluation failed on the
        data at tick `start`, in error from its creation: its switch and arrangement stay,
        empty, and it heals as any view in error does once its tables change."""
        self._fail(kept, cause, start)

    def deliver(self) -> None:
        """Run the round of the writes just made, then the rebuilds they allow, so the
        statement that writes carries the notice of each view it puts in error or heals.

        Inside a transaction the writes wait for COMMIT (they share its time); with no
        materialized view nor index, nothing kept can fail, and the writes wait for the
        next read, as they do when the session's `deliver_writes` is off. Each delivered
        write costs a round of every view over its table.
        """
        s = self.session
        if not s.deliver_writes or s.clock.in_transaction or not s.clock.dirty:
            return
        if self._kept() or any(i.nodes for i in s.indexes.by_name.values()):
            s.close_time()
            self.retry()

    # --- healing ----------------------------------------------------------------------
    def retry(self) -> None:
        """Rebuild each view in error whose tables changed since its last try (between
        statements: the rebuilt dataflow belongs to no statement)."""
        s = self.session
        if s.clock.in_transaction:  # the rebuild closes the time the transaction writes at
            return
        due = [
            kept
            for name in list(self.periods)
            if (period := self.error(name)) is not None
            and is_data_error(period.error)
            and (kept := self._holder(name)) is not None
            and self._tried.get(name) != self._versions(kept)
        ]
        if not due:
            return
        s.close_time()  # the writes first: the rebuild reads the tables as they are now
        for kept in sorted(due, key=lambda k: _switch(k).id):  # the views they read first
            if self.error(kept.name) is not None:
                self._rebuild(kept)

    def _holder(self, name: str) -> Relation | Index | None:
        """The materialized view or index named `name`, if it is kept."""
        s = self.session
        kept = s.relations.get(name) or s.indexes.by_name.get(name)
        return kept if kept is not None and kept.switch is not None else None

    def _rebuild(self, kept: Relation | Index) -> None:
        s, worker, switch = self.session, self.session.worker, _switch(kept)
        self._tried[kept.name] = self._versions(kept)
        start = len(worker.nodes)
        try:
            with worker.ranked_before(switch):
                collection = self._render(kept)
            kept.computation[:] = worker.nodes[start:]
            healed_at = max(t[0] for t in worker.frontier)  # where the correction lands
            ids = [n.id for n in kept.computation if n is not None]
            switch.attach(collection.node, ids)
            # Through the current time, as CREATE runs it: a failure is recorded (`record`).
            s.close_time(force=True)
        except DsqlError as error:  # a view it reads is still in error: try again later
            switch.detach()
            worker.drop(worker.nodes[start:])
            kept.computation.clear()
            period = self.error(kept.name)
            if period is not None and not is_data_error(error):
                period.error = error  # dsql's own: no more retries, the statement goes on
            return
        except BaseException:  # interrupted: it is tried again at the next boundary
            switch.detach()
            worker.drop(worker.nodes[start:])
            kept.computation.clear()
            self._tried.pop(kept.name, None)
            raise
        period = self.error(kept.name)
        if period is not None and switch.inputs:
            period.end = healed_at
            self.notices.append(f"{_kind(kept)} '{kept.name}' is no longer in error")

    def _render(self, kept: Relation | Index) -> Collection:
        """The query of a view in error (an index's: of its plain view) as a new dataflow,
        from its inputs' contents, reading no index (one may be younger than the view)."""
        s = self.session
        view = kept if isinstance(kept, Relation) else s.relations[kept.on]
        assert view.plan is not None
        return s._render(view.plan, s._unindexed_source)

    def _versions(self, kept: Relation | Index) -> tuple[int, ...]:
        """The write counts of the tables `kept` reads, directly or through views."""
        s = self.session
        tables: dict[str, int] = {}
        todo = [kept.name if isinstance(kept, Relation) else kept.on]
        while todo:
            r = s.relations.get(todo.pop())
            if r is None:
                continue
            if r.kind in ("table", "source"):  # rows written, not computed
                tables[r.name] = r.version
            elif r.plan is not None and _mentions_mz_now(r.plan):  # time alone may heal it
                tables[""] = s.clock.now_ms()
            todo.extend(r.depends_on)
        return tuple(v for _, v in sorted(tables.items()))

    # --- subscriptions ----------------------------------------------------------------
    def restamp(self, plan: Plan, times: pa.Array) -> pa.Array:
        """Times of updates of a subscription to `plan`, each inside an error period of a
        relation it reads moved to the period's end."""
        for start, end in self.closed_periods(plan):
            inside = pc.and_(pc.greater_equal(times, start), pc.less(times, end))
            times = pc.if_else(inside, pa.scalar(end, times.type), times)
        return times

    def closed_periods(self, plan: Plan) -> list[tuple[int, int]]:
        """The ended error periods `[start, end)` (ticks) of the relations `plan` reads,
        directly or through views, in the order `restamp` applies them."""
        s = self.session
        names: set[str] = set()
        todo = [n.name for n in walk_deep(plan) if isinstance(n, Get)]
        while todo:
            name = todo.pop()
            if name not in names and name in s.relations:
                names.add(name)
                todo.extend(s.relations[name].depends_on)
        return [
            (period.start, period.end)
            for name in names
            for period in self.periods.get(name, ())
            if period.end is not None
        ]


def _mentions_mz_now(plan: Plan) -> bool:
    return any(mentions_mz_now(e) for node in walk_deep(plan) for e in expressions_of(node))


def view_error(name: str, cause: DsqlError, label: str | None = None) -> ExecutionError:
    """The error a read of view `name` (described by `label`, by default as a materialized
    view) raises while the view is in error."""
    if is_data_error(cause):
        hint = (
            "rows of its inputs make its query fail; delete or fix them and the view "
            "recovers by itself"
        )
    else:
        hint = (
            "an internal error (a bug in dsql: please report it); DROP the view and create it again"
        )
    if cause.hint:  # what the failure says of itself (a limit of dsql's, say) comes first
        hint = f"{cause.hint}; {hint}"
    label = label or f"materialized view '{name}'"
    return ExecutionError(f"{label} is in error: {cause.message}", hint=hint)


def _switch(kept: Relation | Index) -> SwitchNode:
    """The switch of a kept view (`Healing._kept`: each has one)."""
    assert kept.switch is not None
    return kept.switch


def _kind(kept: Relation | Index) -> str:
    return "materialized view" if isinstance(kept, Relation) else "index"


__all__ = ["ErrorPeriod", "Healing", "is_data_error", "view_error"]
