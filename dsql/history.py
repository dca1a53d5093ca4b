"""History: what times each arrangement can still be read at, and reads `AS OF` a past time.

Arrangements compact: times not beyond the compaction frontier are advanced to it, so
a trace accumulated at an older time is wrong. Each catalog object holding an
arrangement (table, materialized view, index) has a *since*: the later of its creation
and its trace's compaction frontier. A read `AS OF t` is exact when `t` is not behind
the since of any input it reads, and refused otherwise (Materialize: "Timestamp (t) is
not valid for all inputs"), never answered with wrong rows.

`RETAIN HISTORY FOR '<interval>'` (on CREATE TABLE, MATERIALIZED VIEW and INDEX) keeps
a hold on the trace that lags the clock by the interval, so every time within the
window stays readable: the since is then at most `now - interval`.

A read AS OF a past time imports each input's trace accumulated at that time (`AsOfImport`:
one batch, stamped at the read's own time) and evaluates the query over those
snapshots; `mz_now()` in the query and in the plain views it reads is that time. Of a
relation's arrangements (its own and its indexes') the read uses the one holding the
most history, so an index with RETAIN HISTORY keeps its relation readable.

>>> retention_ms("1 hour"), retention_ms("10s"), retention_ms("1500 ms")
(3600000, 10000, 1500)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dsql.clock import TICKS_PER_MS, tick_of
from dsql.errors import TimeError, TypeMismatchError, UnsupportedError
from dsql.planner.plan import Plan
from dsql.planner.stateful import LetRec, expressions_of, walk_deep
from dsql.planner.temporal import is_mz_now, mentions_mz_now
from dsql.runtime import relational as rel
from dsql.runtime.arrangement import ImportNode, TraceHandle
from dsql.runtime.collection import Arrangement, Collection, import_arrangement
from dsql.runtime.dataflow import Batch, Round
from dsql.runtime.lattice import DIFF, TIME, Antichain

if TYPE_CHECKING:
    from dsql.session import Session


def retention_ms(interval: str) -> int:
    """Milliseconds of a `RETAIN HISTORY FOR` interval ('1h', '30 minutes', '10s')."""
    import duckdb

    from dsql.runtime.kernel import duckdb_sandbox

    con = duckdb_sandbox.connect()
    try:  # the text is a parameter, never SQL
        value = con.execute("SELECT CAST(? AS INTERVAL)", [interval]).fetchone()[0]  # type: ignore[index]
    except duckdb.Error:
        value = None
    finally:
        con.close()
    if not isinstance(value, dt.timedelta) or value < dt.timedelta(0):
        raise TypeMismatchError(
            f"invalid RETAIN HISTORY interval '{interval}'",
            hint="give an interval such as '1h', '30 minutes' or '10s'",
        )
    return int(value.total_seconds() * 1000)


@dataclass
class _Kept:
    """One catalog object's arrangement: when it was created, and its retention hold."""

    arrangement: Arrangement
    created: int
    window_ms: int | None = None
    hold: TraceHandle | None = None


class History:
    """The sinces of a session's arrangements and their retention (module docstring)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._kept: dict[str, _Kept] = {}

    def register(self, name: str, arrangement: Arrangement, window_ms: int | None) -> None:
        """Track the arrangement of object `name`, created now, keeping `window_ms` of
        history (None: none beyond what compaction leaves)."""
        hold = arrangement.trace_handle() if window_ms is not None else None
        self._kept[name] = _Kept(arrangement, self.session.clock.tick, window_ms, hold)

    def forget(self, name: str) -> None:
        """Object `name` is dropped: release its retention hold."""
        kept = self._kept.pop(name, None)
        if kept is not None and kept.hold is not None:
            kept.hold.release()

    def advance(self) -> None:
        """Let retained traces compact up to `now - window` (called as the clock moves)."""
        now = self.session.clock.now_ms()
        for kept in self._kept.values():
            if kept.hold is None or kept.window_ms is None:
                continue
            tick = max(kept.created, (now - kept.window_ms) * TICKS_PER_MS)
            if tick > _first(kept.hold.frontier):
                kept.hold.advance(Antichain([(tick,)]))

    def since(self, name: str) -> int:
        """The earliest tick at which object `name` still reads exactly."""
        kept = self._kept[name]
        return max(kept.created, _first(kept.arrangement.trace.compaction))

    def _since_or_zero(self, name: str) -> int:
        return self.since(name) if name in self._kept else 0

    def check(self, name: str, as_of_ms: int) -> None:
        """Refuse a read of `name` AS OF a time behind its since."""
        if name not in self._kept:
            return
        since = self.since(name)
        if tick_of(as_of_ms) < since:
            earliest = since // TICKS_PER_MS
            raise TimeError(
                f"Timestamp ({as_of_ms}) is not valid for all inputs: "
                f"'{name}' can be read AS OF {earliest} or later",
                hint=f"read AS OF {earliest} or later; to read older times keep history, "
                f"e.g. CREATE TABLE ... WITH (RETAIN HISTORY FOR '1h') (also on "
                f"MATERIALIZED VIEW and INDEX)",
            )

    # --- reads AS OF a past time ------------------------------------------------------
    def source(self, as_of_ms: int) -> Callable[[str], Collection]:
        """The renderer's `source` for a read AS OF `as_of_ms`: each arranged input
        accumulated at that time (its since checked), plain views rendered over those."""
        s = self.session
        tick = tick_of(as_of_ms)

        def source(name: str) -> Collection:
            arrangement = self._oldest(name, as_of_ms)
            if arrangement is None:
                return s._render(at_time(s, s.relations[name], as_of_ms), source)
            return Arrangement(AsOfImport(arrangement.trace_handle(), tick)).as_collection()

        return source

    def changes_since(self, plan: Plan, as_of_ms: int) -> Collection:
        """`plan` as a dataflow whose first batch is its result AS OF `as_of_ms`, followed
        by every later change at its own time (SUBSCRIBE ... AS OF a past time).

        Each input's trace is replayed with the times up to `as_of_ms` advanced to it and
        later times kept, so the operators see a batch of many times at once; a loop
        would compact those times to the round's frontier, so recursion is refused.
        """
        s = self.session
        frontier = Antichain([(tick_of(as_of_ms),)])

        def refuse_loops(plan: Plan) -> None:
            if any(isinstance(node, LetRec) for node in walk_deep(plan)):
                raise UnsupportedError(
                    "SUBSCRIBE AS OF a past time of a recursive query is not supported",
                    hint="subscribe AS OF the current time, or materialize the recursive "
                    "view (WITH (RETAIN HISTORY ...)) and subscribe to it",
                )

        def source(name: str) -> Collection:
            arrangement = self._oldest(name, as_of_ms)
            if arrangement is None:
                view = s.relations[name].plan
                assert view is not None
                refuse_loops(view)
                return s._render(view, source)
            handle = arrangement.trace_handle()
            handle.advance(frontier)  # replay from AS OF: the since check allows it
            return import_arrangement(handle).as_collection()

        refuse_loops(plan)
        return s._render(plan, source)

    def _oldest(self, name: str, as_of_ms: int) -> Arrangement | None:
        """Of relation `name`'s arrangements (its own, then its indexes') the one holding
        the most history, its since checked against `as_of_ms`; None for a plain view."""
        s = self.session
        relation = s.relations[name]
        s._check_failed(relation, tick_of(as_of_ms))
        held = [(i.name, i.arrangement) for i in s.indexes.on(name)]
        if relation.arrangement is not None:
            held.insert(0, (name, relation.arrangement))
        if not held:
            return None
        known = [(owner, a) for owner, a in held if owner in self._kept]
        owner, arrangement = min(known or held, key=lambda h: self._since_or_zero(h[0]))
        self.check(owner, as_of_ms)
        return arrangement


def _first(frontier: Antichain) -> int:
    """The (outer) time of a top-level frontier; 0 when it is empty."""
    return max((t[0] for t in frontier), default=0)


class AsOfImport(ImportNode):
    """An import that replays its trace accumulated at tick `as_of`, stamped at the
    frontier the handle was taken at (the read's time), and follows no later batch."""

    def __init__(self, handle: TraceHandle, as_of: int) -> None:
        self.as_of = as_of
        self._started: bool = False
        super().__init__(handle)

    def history(self) -> list[Any]:
        return []

    def rewind(self) -> None:
        if self.current is not None:  # the round of the snapshot was undone
            self._started = False
            self.current = None

    def step(self, rnd: Round) -> Batch | None:
        if self._started:
            return None
        self._started = True
        source = self.handle.source
        frames = source.history() + ([source.current.frame] if source.current else [])
        if not frames:
            return None
        columns = (*self.columns, TIME, DIFF)
        upto = exp.LTE(this=rel.col(TIME), expression=rel.lit(self.as_of))
        snapshot = rel.select("h", rel.passthrough(columns), where=upto)
        query = rel.advance(snapshot, self.columns, self.depth, self.handle.frontier)
        self.current = Batch(self.kernel.query(query, {"h": self.kernel.union(frames)}))
        return self.current

    def finish(self, rnd: Round) -> None:
        self.current = None

    def describe(self) -> str:
        return f"Import(as of {self.as_of // TICKS_PER_MS}, keys={', '.join(self.keys) or '()'})"


def at_time(session: Session, relation: Any, ms: int) -> Plan:
    """A plain view's plan with `mz_now()` read as the time `ms` (for a read AS OF it)."""
    plan: Plan = relation.plan
    if not any(mentions_mz_now(e) for node in walk_deep(plan) for e in expressions_of(node)):
        return plan
    from dsql import grammar
    from dsql.relation import _view_plan

    (statement,) = grammar.parse(relation.sql)
    assert isinstance(statement, grammar.CreateView)  # a view's text is its CREATE VIEW
    return _view_plan(session.plan(replace_mz_now(statement.query, ms)))


def replace_mz_now(query: Any, ms: int) -> Any:
    """`query` with every `mz_now()` replaced by the time `ms` (a read AS OF `ms`)."""
    if not isinstance(query, exp.Expression):
        return query
    return query.transform(lambda n: exp.Literal.number(ms) if is_mz_now(n) else n)


__all__ = ["AsOfImport", "History", "at_time", "replace_mz_now", "retention_ms"]
