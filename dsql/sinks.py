"""Sinks: a relation's changes written out, one closed millisecond at a time, exactly once.

A sink follows a table or view as SUBSCRIBE does (`dsql.subscribe`) and hands each
millisecond's consolidated changes to its target once that millisecond is closed: the
clock has moved past it, so no later write can join it. Targets:

- `FileTarget` (`CREATE SINK k FROM v INTO FILES 'dir'`): one Parquet file per flush
  that has changes, named `<first ms>-<last ms>.parquet` for the closed range it covers
  (ranges are disjoint and follow each other). A file is written under a temporary name,
  fsynced and renamed, so a file either exists whole or not at all, and its name is its
  progress: after a restart the sink continues after the last range written.
- `DeltaTarget` (`INTO DELTA 'path'`, `dsql.delta_sink`): one Delta commit per flush that
  has changes, its progress an application transaction in the same commit.
- `CallbackTarget` (`Connection.sink(v, callback)`): `callback(ms, table)` once per
  millisecond with changes, for as long as the connection lives.

Envelopes. `diff` (the default; Materialize's SUBSCRIBE format): columns `mz_timestamp`,
`mz_diff`, then the relation's. `upsert` (`KEY (k, ...) ENVELOPE UPSERT`; Materialize's
`SUBSCRIBE ... ENVELOPE UPSERT`): per millisecond one row per key that changed:
`mz_timestamp`, `mz_state` ('upsert' with the key's one row after that millisecond,
'delete' with NULL values when it has none, 'key_violation' when it has several), then
the relation's columns; the sink keeps the relation's rows by key (`KeyState`) to tell.

Exactly once across restarts (`dsql.durable`). Sinks flush only after the log holds
every write they could see, so a file never shows a write a crash could lose. Recovery
replays the sink with everything else; its stream is then the original one, except that
a checkpoint folds the history before it into one snapshot. Both cases are met by one
rule: the recovered sink skips the milliseconds its files cover, and emits, at the first
millisecond after them (or the snapshot's, if later), the difference between what it
replayed up to there and what its files accumulate to. Without a checkpoint that
difference is empty; after one it turns the snapshot into that millisecond's changes.
"""

from __future__ import annotations

import os
import re
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlglot import exp

from dsql import wal
from dsql.errors import DsqlError, DsqlWarning, SchemaError, SourceError, UnsupportedError
from dsql.runtime.capture import consolidate_table
from dsql.runtime.lattice import DIFF
from dsql.subscribe import Subscription

if TYPE_CHECKING:
    from dsql.session import Session

#: A file a `FileTarget` wrote: `<first ms>-<last ms>.parquet`.
_FILE = re.compile(r"^(\d{20})-(\d{20})\.parquet$")

#: `Connection.sink`'s callback: the millisecond and its changes.
Callback = Callable[[int, pa.Table], None]


class Target(Protocol):
    """Where a sink's changes go."""

    def progress(self) -> int | None:
        """The last millisecond written (None: nothing yet, or not kept)."""

    def contents(self, columns: list[str], key: tuple[str, ...] | None) -> pa.Table:
        """What the written changes accumulate to, as `mz_diff` plus columns."""

    kept: bool

    def write(self, first: int, last: int, changes: pa.Table) -> None:
        """Write the changes of milliseconds `first`..`last` (every one of them closed)."""

    def into(self) -> str:
        """The INTO clause of the CREATE SINK that makes this target again (kept ones)."""

    def describe(self) -> str:
        """For SHOW SINKS."""

    def close(self) -> None:
        """Release what the target holds open (a connection)."""


class FileTarget:
    """A directory of Parquet files, one per flushed range of milliseconds."""

    #: Logged in the data directory and recovered with it.
    kept = True

    def __init__(self, path: str, format: str = "parquet") -> None:
        if format != "parquet":
            raise UnsupportedError(
                f"sink format {format!r} is not supported", hint="use FORMAT = 'parquet'"
            )
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".dsql-probe.tmp"
            probe.write_bytes(b"")
            probe.unlink()
            for leftover in self.path.glob(".*.parquet.tmp"):  # a write cut short
                leftover.unlink()
        except OSError as error:
            raise SourceError(
                f"sink directory {path} is not writable: {error.strerror or error}",
                hint="give a directory this process may create files in",
            ) from None

    def ranges(self) -> list[tuple[int, int, Path]]:
        """The files written, in order: (first ms, last ms, path)."""
        found = []
        for path in self.path.iterdir():
            match = _FILE.match(path.name)
            if match:
                found.append((int(match[1]), int(match[2]), path))
        return sorted(found)

    def progress(self) -> int | None:
        ranges = self.ranges()
        return ranges[-1][1] if ranges else None

    def contents(self, columns: list[str], key: tuple[str, ...] | None) -> pa.Table:
        tables = [pq.read_table(path) for _, _, path in self.ranges()]
        if not tables:
            return pa.table({DIFF: pa.array([], pa.int64())})
        changes = pa.concat_tables(tables)
        if key is None:
            return accumulated(changes, columns)
        latest: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in changes.to_pylist():  # files are in time order, rows within one too
            k = tuple(_hashable(row[c]) for c in key)
            if row["mz_state"] == "upsert":
                latest[k] = row
            else:
                latest.pop(k, None)
        rows = list(latest.values())
        return pa.table(
            {
                DIFF: pa.array([1] * len(rows), pa.int64()),
                **{
                    c: pa.array([r[c] for r in rows], changes.schema.field(c).type) for c in columns
                },
            }
        )

    def write(self, first: int, last: int, changes: pa.Table) -> None:
        name = f"{first:020d}-{last:020d}.parquet"
        tmp = self.path / f".{name}.tmp"
        try:
            pq.write_table(changes, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            tmp.rename(self.path / name)
            wal.sync_dir(self.path)
        except (OSError, pa.ArrowException) as error:
            tmp.unlink(missing_ok=True)
            raise SourceError(f"cannot write sink file {self.path / name}: {error}") from None

    def into(self) -> str:
        return f"INTO FILES {exp.Literal.string(str(self.path.resolve())).sql('postgres')}"

    def describe(self) -> str:
        return str(self.path)

    def close(self) -> None:
        pass


class CallbackTarget:
    """A Python function called once per millisecond with changes."""

    #: Lives with the connection: never logged.
    kept = False

    def __init__(self, callback: Callback) -> None:
        self.callback = callback
        #: The last millisecond the callback returned from (a failed call is retried
        #: from the millisecond it failed on, never before).
        self.last = -1

    def progress(self) -> int | None:
        return None

    def contents(self, columns: list[str], key: tuple[str, ...] | None) -> pa.Table:
        raise AssertionError("a callback sink is never recovered")

    def write(self, first: int, last: int, changes: pa.Table) -> None:
        times = changes["mz_timestamp"]
        for ms in pc.unique(times).to_pylist():
            if ms <= self.last:
                continue
            try:
                self.callback(ms, changes.filter(pc.equal(times, ms)))
            except Exception as error:  # the user's code: reported, and retried
                raise SourceError(
                    f"the sink callback failed at {ms}: {type(error).__name__}: {error}",
                    hint="the same changes are offered again at the next statement",
                ) from error
            self.last = ms

    def into(self) -> str:
        raise AssertionError("a callback sink is never logged")

    def describe(self) -> str:
        return f"callback {getattr(self.callback, '__qualname__', repr(self.callback))}"

    def close(self) -> None:
        pass


class Sink:
    """One sink: a subscription to `source` and the closed milliseconds it has written.

    Invariant: the target holds each millisecond up to `through` exactly once, and the
    changes after it are in the subscription or `held`.
    """

    def __init__(
        self,
        session: Session,
        name: str,
        source: str,
        target: Target,
        key: tuple[str, ...] | None = None,
        sql: str = "",
    ) -> None:
        self.session, self.name, self.source, self.target, self.sql = (
            session,
            name,
            source,
            target,
            sql,
        )
        session.columns(source)  # an unknown relation is refused here
        bound = session.plan(exp.select("*").from_(exp.to_table(source)))
        self.columns = [c.name for c in bound.columns]
        self.key = key
        check_key(self.columns, key, source)
        #: The upsert envelope's current rows by key.
        self._state: KeyState = {}
        self.subscription = Subscription(session, bound, sql=sql)
        session.subscriptions.remove(self.subscription)  # SHOW SINKS lists it instead
        done = target.progress()
        #: The last millisecond the target holds.
        self.through = self.subscription.as_of - 1 if done is None else done
        self._resumed = done
        #: Replayed changes the target already holds, minus what it holds (recovery).
        self._correction: pa.Table | None = None
        if done is not None:
            held = target.contents(self.columns, key)
            self._correction = self._stamped(held, -1)
            if key is not None:  # the files' state, which the correction brings up to date
                upserts(self._stamped(held, 1), key, self._state)
        self._held = self.subscription._empty()
        self._busy = False

    def flush(self) -> None:
        """Write the changes of every millisecond closed since the last flush (a callback
        running statements on its connection does not flush it again from inside)."""
        if self._busy:
            return
        self._busy = True
        try:
            self._flush()
        finally:
            self._busy = False

    def _flush(self) -> None:
        fresh = self.subscription.poll()
        now = self.session.clock.now_ms()
        table = pa.concat_tables([self._held, fresh])
        times = table["mz_timestamp"]
        self._held = table.filter(pc.greater_equal(times, now))
        closed = table.filter(pc.less(times, now))
        if self._resumed is not None:  # replayed: held already, kept for the correction
            replayed = pc.less_equal(closed["mz_timestamp"], self._resumed)
            assert self._correction is not None
            self._correction = pa.concat_tables([self._correction, closed.filter(replayed)])
            closed = closed.filter(pc.invert(replayed))
            at = max(self._resumed + 1, self.subscription.as_of)
            if at < now:
                restamped = self._correction.set_column(
                    0, "mz_timestamp", pa.array([at] * self._correction.num_rows, pa.int64())
                )
                closed = pa.concat_tables([restamped, closed])
                self._resumed = self._correction = None
        if now - 1 <= self.through:
            return
        changes = self._consolidated(closed)
        if changes.num_rows:
            before = self._keys_before(changes)
            try:
                out = changes if self.key is None else upserts(changes, self.key, self._state)
                self.target.write(self.through + 1, now - 1, out)
            except DsqlError:  # offered again at the next flush, to the state before it
                self._state.update(before)
                for k in [k for k in before if not before[k]]:
                    del self._state[k]
                self._held = pa.concat_tables([changes, self._held])
                raise
        self.through = now - 1

    def _keys_before(self, changes: pa.Table) -> KeyState:
        """The upsert state of the keys `changes` touch (an empty Counter: no rows), to
        restore if their write fails."""
        if self.key is None:
            return {}
        at = [self.columns.index(k) for k in self.key]
        keys = zip(*(map(_hashable, changes.column(2 + i).to_pylist()) for i in at), strict=True)
        return {k: Counter(self._state.get(k, Counter())) for k in keys}

    def _stamped(self, accumulated: pa.Table, sign: int) -> pa.Table:
        """`accumulated` (mz_diff, columns) as changes in the subscription's schema."""
        schema = self.subscription._schema()
        diffs = pc.multiply(accumulated[DIFF], sign) if accumulated.num_rows else []
        arrays = {
            "mz_timestamp": pa.array([0] * accumulated.num_rows, pa.int64()),
            "mz_diff": pa.array(diffs, pa.int64()),
        }
        for field in schema:
            if field.name not in arrays:
                arrays[field.name] = (
                    accumulated[field.name].cast(field.type)
                    if accumulated.num_rows
                    else pa.array([], field.type)
                )
        return pa.table(arrays, schema=schema)

    def _consolidated(self, changes: pa.Table) -> pa.Table:
        """Equal rows of one millisecond summed, zeros dropped, in time order."""
        if changes.num_rows == 0:
            return changes
        inner = [f"_c{i}" for i in range(len(self.columns))]
        renamed = changes.rename_columns(["ms", DIFF, *inner])
        out = consolidate_table(renamed, tuple(inner), ("ms",))
        return pa.table(
            [out["ms"], out[DIFF], *(out[c] for c in inner)],
            schema=self.subscription._schema(),
        )

    def close(self) -> None:
        self.subscription.close()
        self.target.close()


#: An upsert sink's relation by key: each key's rows and their counts.
KeyState = dict[tuple[Any, ...], Counter[tuple[Any, ...]]]


def upserts(changes: pa.Table, key: tuple[str, ...], state: KeyState) -> pa.Table:
    """Consolidated diff-envelope changes (in time order) as the upsert envelope,
    applied to `state`: per millisecond and changed key, the key's one row after that
    millisecond ('upsert'), no row ('delete', values NULL) or several
    ('key_violation', values NULL)."""
    columns = changes.column_names[2:]
    at = [columns.index(k) for k in key]
    out: list[dict[str, Any]] = []
    changed: dict[tuple[Any, ...], None] = {}  # this millisecond's keys, in order

    def emit(ms: int) -> None:
        for k in changed:
            rows = +state.pop(k)  # counts of zero dropped
            if rows:
                state[k] = rows
            one = next(iter(rows)) if sum(rows.values()) == 1 else None
            kind = "delete" if not rows else "upsert" if one is not None else "key_violation"
            values = {c: k[at.index(i)] if i in at else None for i, c in enumerate(columns)}
            if one is not None:
                values = dict(zip(columns, one, strict=True))
            out.append({"mz_timestamp": ms, "mz_state": kind, **values})
        changed.clear()

    last: int | None = None
    for ms, diff, *row in zip(*(changes[c].to_pylist() for c in changes.column_names), strict=True):
        if ms != last and last is not None:
            emit(last)
        last = ms
        row = [_hashable(v) for v in row]
        k = tuple(row[i] for i in at)
        state.setdefault(k, Counter())[tuple(row)] += diff
        changed[k] = None
    if last is not None:
        emit(last)
    schema = pa.schema(
        [
            pa.field("mz_timestamp", pa.int64()),
            pa.field("mz_state", pa.string()),
            *(changes.schema.field(c) for c in columns),
        ]
    )
    return pa.Table.from_pylist(out, schema=schema)


def accumulated(changes: pa.Table, columns: list[str]) -> pa.Table:
    """What diff-envelope `changes` (`mz_timestamp`, `mz_diff`, columns) add up to, as
    `mz_diff` plus columns, zeros dropped."""
    total = consolidate_table(
        changes.rename_columns([*changes.column_names[:1], DIFF, *columns]), tuple(columns), ()
    )
    return total.select([DIFF, *columns])


def _hashable(value: Any) -> Any:
    """`value` with its arrays as tuples (Arrow takes either back for a list column), so
    a row with one can be counted."""
    return tuple(map(_hashable, value)) if isinstance(value, list) else value


def check_key(columns: list[str], key: tuple[str, ...] | None, source: str) -> None:
    """Refuse a sink key naming a column `source` does not have."""
    missing = [k for k in key or () if k not in columns]
    if missing:
        raise SchemaError(
            f"sink key column '{missing[0]}' is not a column of '{source}'",
            hint=f"its columns: {', '.join(columns)}",
        )


def check_name(session: Session, name: str, if_not_exists: bool = False) -> bool:
    """Whether sink `name` is to be made: False if it exists and `if_not_exists`; a
    SchemaError if another object has the name."""
    taken = name in session.sinks or name in session.relations or name in session.indexes.by_name
    if taken:
        if if_not_exists and name in session.sinks:
            return False
        raise SchemaError(f"'{name}' already exists", hint="choose another name, or DROP SINK it")
    return True


def create(
    session: Session,
    name: str,
    source: str,
    target: Target,
    key: tuple[str, ...] | None = None,
    sql: str = "",
    if_not_exists: bool = False,
) -> bool:
    """Start sink `name` (False: it exists and `if_not_exists`); its first flush is at
    the next statement boundary."""
    if not check_name(session, name, if_not_exists):
        return False
    session.sinks[name] = Sink(session, name, source, target, key, sql)
    return True


def drop(session: Session, names: tuple[str, ...], if_exists: bool) -> None:
    """Stop the named sinks; their files stay."""
    for name in names:
        sink = session.sinks.pop(name, None)
        if sink is None and not if_exists:
            raise SchemaError(f"sink '{name}' does not exist", hint="SHOW SINKS lists them")
        if sink is not None:
            sink.close()


def flush(session: Session) -> None:
    """Flush every sink. A sink whose relation is in error, or whose target fails, waits
    for the next flush (with a warning for a failing target): the statement that ran is
    done and durable, and must not fail now."""
    for sink in list(session.sinks.values()):
        try:
            sink.flush()
        except SourceError as error:
            warnings.warn(f"sink {sink.name}: {error.message}", DsqlWarning, stacklevel=2)
        except DsqlError:
            continue


def definition(sink: Sink) -> str:
    """The CREATE SINK statement that makes `sink` again, its place absolute (a data
    directory's log replays it from whatever directory the next process runs in)."""
    quoted = [exp.to_identifier(n, quoted=True).sql("postgres") for n in (sink.name, sink.source)]
    sql = f"CREATE SINK {quoted[0]} FROM {quoted[1]} {sink.target.into()}"
    if sink.key is not None:
        keys = ", ".join(exp.to_identifier(k, quoted=True).sql("postgres") for k in sink.key)
        sql += f" KEY ({keys}) ENVELOPE UPSERT"
    return sql


def kept(session: Session) -> set[str]:
    """The sinks a data directory logs and recovers (those SQL created)."""
    return {name for name, sink in session.sinks.items() if sink.target.kept}


def rows(session: Session) -> dict[str, list[Any]]:
    """SHOW SINKS: name, relation, envelope, target, and the last millisecond written."""
    sinks = sorted(session.sinks.values(), key=lambda s: s.name)
    return {
        "name": [s.name for s in sinks],
        "from": [s.source for s in sinks],
        "envelope": ["upsert" if s.key is not None else "diff" for s in sinks],
        "target": [s.target.describe() for s in sinks],
        "through": pa.array([s.through for s in sinks], pa.int64()),
    }


__all__ = [
    "CallbackTarget",
    "accumulated",
    "FileTarget",
    "check_key",
    "check_name",
    "Sink",
    "create",
    "drop",
    "flush",
    "kept",
    "rows",
    "upserts",
]
