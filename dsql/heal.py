"""Errors that heal: a materialized view is in error exactly while its query fails.

As in Materialize, a row that makes a view's query fail (division by zero, integer
overflow, a failing cast, a loop past its recursion limit) puts the view in error
only while the row is there; the write itself succeeds. dsql gets there by rebuilding
rather than by an error stream through every operator:

- A view's result passes a `SwitchNode` into its arrangement. When a node of the
  view's dataflow fails in a round, the switch emits nothing that round; after the
  round the view is marked in error (`ErrorPeriod`, from the first time not known
  good), its dataflow is dropped, and the statement gets a notice.
- While a view is in error, reads of it (SELECT, SUBSCRIBE polls, AS OF a time in the
  error period, views and indexes reading it) raise `ExecutionError` naming the view
  and the cause.
- Once a table the view reads has changed, the next statement boundary rebuilds the
  view's dataflow from the inputs' current contents (as CREATE does) and attaches it
  to the switch. If the rebuilt dataflow runs through the current time without
  failing, the view is healthy again: the switch's first batch retracts what the
  arrangement held and adds the new result, one correction at the healing time, so
  views, indexes and subscriptions over the view follow exactly. Otherwise the
  rebuilt dataflow is dropped and the view stays in error.
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
from dsql.planner.plan import Get, Plan, walk
from dsql.planner.stateful import expressions_of
from dsql.planner.temporal import mentions_mz_now

if TYPE_CHECKING:
    from dsql.relation import Relation
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
        #: Indexes whose own dataflow failed (they do not heal: `Indexes.check`).
        self._frozen: set[str] = set()

    # --- state ------------------------------------------------------------------------
    def error(self, name: str) -> ErrorPeriod | None:
        """The open error period of view `name` (None: it is healthy)."""
        periods = self.periods.get(name)
        return periods[-1] if periods and periods[-1].end is None else None

    def check(self, relation: Relation, tick: int | None = None) -> None:
        """Raise the error of `relation`, or of a relation it reads, when it is in error
        now (`tick` None) or was at `tick`."""
        s = self.session
        for period in self.periods.get(relation.name, ()):
            if period.covers(s.clock.tick if tick is None else tick):
                raise view_error(relation.name, period.error)
        for index in s.indexes.on(relation.name):
            s.indexes.check(index)
        for name in relation.depends_on:
            if name in s.relations:
                self.check(s.relations[name], tick)

    def check_plan(self, plan: Plan, tick: int | None = None) -> None:
        """`check` of every relation `plan` reads."""
        s = self.session
        for name in sorted({n.name for n in walk(plan) if isinstance(n, Get)}):
            if name in s.relations:
                self.check(s.relations[name], tick)

    def take_notices(self) -> list[str]:
        notices, self.notices = self.notices, []
        return notices

    def forget(self, name: str) -> None:
        """View `name` is dropped."""
        self.periods.pop(name, None)
        self._tried.pop(name, None)
        self._frozen.discard(name)

    # --- failures ---------------------------------------------------------------------
    def record(self, good_until: int) -> None:
        """Mark each view whose dataflow failed in the rounds just run as in error (since
        `good_until`, the first tick those rounds computed) and drop its dataflow."""
        failed = self.session.worker.failed
        if not failed:
            return
        for rel in list(self.session.relations.values()):
            if rel.switch is None:
                continue
            cause = next((failed[i] for i in rel.switch.watched if i in failed), None)
            if cause is not None:
                self._fail(rel, cause, good_until)
        for index in self.session.indexes.by_name.values():
            if index.name in self._frozen:
                continue
            cause = self.session.indexes.failure(index)
            if cause is not None:  # an indexed plain view's query: reads refuse it from now
                self._frozen.add(index.name)
                self.notices.append(f"index '{index.name}' is in error: {cause.message}")

    def _fail(self, rel: Relation, cause: DsqlError, start: int) -> None:
        s = self.session
        rel.switch.detach()
        s.worker.drop(rel.computation)
        rel.computation = []
        self._tried[rel.name] = self._versions(rel)
        period = self.error(rel.name)
        if period is not None:  # a retry failed: the view stays in error, maybe anew
            period.error = cause
            return
        self.periods.setdefault(rel.name, []).append(ErrorPeriod(start, cause))
        self.notices.append(f"materialized view '{rel.name}' is in error: {cause.message}")

    # --- healing ----------------------------------------------------------------------
    def retry(self) -> None:
        """Rebuild each view in error whose tables changed since its last try (between
        statements: the rebuilt dataflow belongs to no statement)."""
        s = self.session
        if s.clock.in_transaction:  # the rebuild closes the time the transaction writes at
            return
        due = [
            rel
            for name in list(self.periods)
            if (period := self.error(name)) is not None
            and is_data_error(period.error)
            and (rel := s.relations.get(name)) is not None
            and self._tried.get(name) != self._versions(rel)
        ]
        if not due:
            return
        s.close_time()  # the writes first: the rebuild reads the tables as they are now
        for rel in sorted(due, key=lambda r: r.switch.id):  # the views they read first
            if self.error(rel.name) is not None:
                self._rebuild(rel)

    def _rebuild(self, rel: Relation) -> None:
        s, worker = self.session, self.session.worker
        self._tried[rel.name] = self._versions(rel)
        assert rel.plan is not None
        start = len(worker.nodes)
        try:
            with worker.ranked_before(rel.switch):
                collection = s._render(rel.plan, s._unindexed_source)
            rel.computation = worker.nodes[start:]
            healed_at = max(t[0] for t in worker.frontier)  # where the correction lands
            rel.switch.attach(collection.node, [n.id for n in rel.computation if n is not None])
            # Through the current time, as CREATE runs it: a failure is recorded (`record`).
            s.close_time(force=True)
        except DsqlError as error:  # a view it reads is still in error: try again later
            rel.switch.detach()
            worker.drop(worker.nodes[start:])
            rel.computation = []
            period = self.error(rel.name)
            if period is not None and not is_data_error(error):
                period.error = error  # dsql's own: no more retries, the statement goes on
            return
        except BaseException:
            rel.switch.detach()
            worker.drop(worker.nodes[start:])
            rel.computation = []
            raise
        period = self.error(rel.name)
        if period is not None and rel.switch.inputs:
            period.end = healed_at

    def _versions(self, rel: Relation) -> tuple[int, ...]:
        """The write counts of the tables `rel` reads, directly or through views."""
        s = self.session
        tables: dict[str, int] = {}
        todo = [rel.name]
        while todo:
            r = s.relations.get(todo.pop())
            if r is None:
                continue
            if r.kind == "table":
                tables[r.name] = r.version
            elif r.plan is not None and _mentions_mz_now(r.plan):  # time alone may heal it
                tables[""] = s.clock.now_ms()
            todo.extend(r.depends_on)
        return tuple(v for _, v in sorted(tables.items()))

    # --- subscriptions ----------------------------------------------------------------
    def restamp(self, plan: Plan, times: pa.Array) -> pa.Array:
        """Times of updates of a subscription to `plan`, each inside an error period of a
        relation it reads moved to the period's end."""
        s = self.session
        names: set[str] = set()
        todo = [n.name for n in walk(plan) if isinstance(n, Get)]
        while todo:
            name = todo.pop()
            if name not in names and name in s.relations:
                names.add(name)
                todo.extend(s.relations[name].depends_on)
        for name in names:
            for period in self.periods.get(name, ()):
                if period.end is None:
                    continue
                inside = pc.and_(pc.greater_equal(times, period.start), pc.less(times, period.end))
                times = pc.if_else(inside, pa.scalar(period.end, times.type), times)
        return times


def _mentions_mz_now(plan: Plan) -> bool:
    return any(mentions_mz_now(e) for node in walk(plan) for e in expressions_of(node))


def view_error(name: str, cause: DsqlError) -> ExecutionError:
    """The error a read of view `name` raises while the view is in error."""
    if is_data_error(cause):
        hint = (
            "rows of its inputs make its query fail; delete or fix them and the view "
            "recovers by itself"
        )
    else:
        hint = (
            "an internal error (a bug in dsql: please report it); DROP the view and create it again"
        )
    return ExecutionError(f"materialized view '{name}' is in error: {cause.message}", hint=hint)


__all__ = ["ErrorPeriod", "Healing", "is_data_error", "view_error"]
