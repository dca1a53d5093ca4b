"""The session's clock: which time writes are stamped with, and when a time closes.

User-facing time is milliseconds (`mz_timestamp`). The runtime counts in ticks,
`TICKS_PER_MS` per millisecond, so that a read can *close* the current time
(advance the runtime's frontier past it and see every write so far) without
moving the millisecond: writes after the read go to the next tick of the same
millisecond, and every output is reported at `tick // TICKS_PER_MS`, where the
updates of one millisecond consolidate together.

- manual clock: the millisecond moves only by `advance_to`/`advance_by`;
- wall clock: each write (or transaction) gets `max(now, last + 1)`.

>>> c = Clock("manual")
>>> c.write_tick(), c.close(), c.write_tick(), c.now_ms()
(0, 1, 1, 0)
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterator
from contextlib import contextmanager

from dsql.errors import TimeError

TICKS_PER_MS = 1_000_000
#: The last millisecond whose ticks fit the runtime's signed 64-bit times (with room for
#: the ticks of that millisecond).
MAX_MS = (2**63 - 1) // TICKS_PER_MS - 1


def tick_of(ms: int) -> int:
    """The last tick of millisecond `ms` (a read AS OF `ms` sees every write in it)."""
    return (ms + 1) * TICKS_PER_MS - 1


class Clock:
    """Manual or wall clock over runtime ticks (see module docstring)."""

    def __init__(
        self, kind: str = "manual", start_ms: int = 0, start_tick: int | None = None
    ) -> None:
        """`start_tick`: a recovered session's first logged tick; the clock starts there
        `replaying`, whatever its kind (`dsql.durable`)."""
        if kind not in ("manual", "wall"):
            raise TimeError(f"unknown clock {kind!r}", hint="use clock='manual' or clock='wall'")
        self.kind = kind
        start = start_ms if kind == "manual" else int(_time.time() * 1000)
        #: The tick writes go to now; every tick before it is closed (final).
        self.tick = start * TICKS_PER_MS if start_tick is None else start_tick
        self.dirty = False
        self.in_transaction = False
        #: While true, writes go to the tick set (a recovery replays logged ticks) and
        #: the wall clock does not move it.
        self.replaying = start_tick is not None

    def now_ms(self) -> int:
        return self.tick // TICKS_PER_MS

    def write_tick(self) -> int:
        """The tick the next write is stamped with."""
        wall = self.kind == "wall" and not self.replaying
        if wall and not self.in_transaction and self.dirty:
            self.close()
        if wall:
            now = int(_time.time() * 1000) * TICKS_PER_MS
            if now > self.tick:
                self.tick = now
        self.dirty = True
        return self.tick

    @contextmanager
    def one_time(self) -> Iterator[int]:
        """Inside: every write goes to one tick, the one a write would take on entering
        (an upstream transaction's changes to several tables share it, under the wall
        clock too)."""
        tick, replaying = self.write_tick(), self.replaying
        self.replaying = True  # neither the wall clock nor a read moves the writes' tick
        try:
            yield tick
        finally:
            self.replaying = replaying

    def close(self) -> int:
        """Close the current tick; returns the new frontier (the next open tick)."""
        self.tick += 1
        if self.tick % TICKS_PER_MS == 0:
            raise TimeError(
                "too many reads after writes within one millisecond",
                hint="ADVANCE the clock between batches of statements",
            )
        self.dirty = False
        return self.tick

    def advance_to(self, ms: int) -> int:
        """Move to millisecond `ms` (not backwards); returns the new tick."""
        if ms > MAX_MS:
            raise TimeError(
                f"cannot advance to {ms}: times end at {MAX_MS} ms (in the year 2262)",
                hint="give milliseconds since the Unix epoch",
            )
        if ms * TICKS_PER_MS < self.tick and ms < self.now_ms():
            raise TimeError(
                f"cannot advance to {ms}: the clock is at {self.now_ms()}",
                hint="time only moves forward",
            )
        if ms > self.now_ms():
            self.tick = ms * TICKS_PER_MS
            self.dirty = False
        return self.tick


def to_ms(tick: int) -> int:
    return tick // TICKS_PER_MS


__all__ = ["TICKS_PER_MS", "Clock", "tick_of", "to_ms"]
