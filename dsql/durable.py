"""Durable state: a session's catalog and table writes kept in a data directory.

`Durable` owns a directory holding a write-ahead log (`dsql.wal`) and at most one
checkpoint. Every statement that changes what a later session must see is logged
before it returns: DDL (CREATE TABLE/VIEW/INDEX/SINK/CONNECTION, CREATE TABLE AS,
DROP) as its text, a PostgreSQL source as a definition naming its slot (a Delta
source as one naming its absolute path), table writes
as their rows and diffs with the ticks they were stamped at, ADVANCE as the millisecond
reached, a poll of the sources with their progress (files read, upstream position, Delta
version).
A transaction's statements are one record, written at COMMIT
(or at the ROLLBACK dsql refuses, after which the writes stay), as are an
`executemany`'s (`batch`); a crash before loses all of them and nothing else. A
statement that fails logs nothing.

A checkpoint (`checkpoint-N/`) holds the catalog (the statements that create what
exists now, in creation order) and each table's rows (Parquet; Arrow IPC for a table
with a column Parquet has no type for, such as interval) at one tick. It is written
into `checkpoint-N.tmp/` and renamed, then the logs before `wal-N.log` are deleted:
recovery reads the newest checkpoint and the logs from its number on. Checkpoints
are taken between statements once the current log outgrows `checkpoint_bytes`.

Recovery replays all of that into a fresh session: the DDL through the executor, the
writes at their original ticks, so views are built from the same inputs at the same
times; the clock resumes past the last tick the log records, in its millisecond (as
after a read there: later writes in that millisecond join it, as they would have
without the crash). A relation's history (`RETAIN HISTORY`) is read
back AS OF any time since the checkpoint it was recovered from. One process owns a
directory at a time: `LOCK` is held with `flock` while the connection is open.

Invariant: after `recover`, the session's tables hold exactly the writes of every
statement that returned, and its views equal their queries over them.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

from dsql import grammar, sinks, wal
from dsql.errors import (
    DsqlError,
    DsqlWarning,
    OperationalError,
    SourceError,
    UnsupportedError,
)
from dsql.relation import create_table_sql
from dsql.timeout import interrupts_deferred

if TYPE_CHECKING:
    from dsql.execute import Executor

#: The log size past which a checkpoint is taken (bytes).
CHECKPOINT_BYTES = 64 * 2**20

#: Called during recovery with the bytes read so far and the total.
Progress = Callable[[int, int], None]

_CHECKPOINT = "checkpoint-"
#: The kinds of relation whose rows are logged and checkpointed (a source's come from
#: its files, read once).
_WRITTEN = ("table", "source")
_LOG = "wal-"


class Durable:
    """A session's data directory: its lock, log and checkpoint (module docstring)."""

    def __init__(self, path: str | os.PathLike[str], checkpoint_bytes: int | None = None) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise OperationalError(
                f"data directory {self.path} is a file", hint="give a directory's path"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        #: The folder SQL may read and write files in (COPY, sources) without
        #: `allowed_paths`: the log and checkpoints beside it stay out of SQL's reach.
        self.files = self.path / "files"
        self.files.mkdir(exist_ok=True)
        self.checkpoint_bytes = checkpoint_bytes or CHECKPOINT_BYTES
        self._lock_fd = _lock(self.path)
        #: The statement that creates each catalog object that exists, by name, in
        #: creation order (a checkpoint's catalog).
        self.catalog: dict[str, str] = {}
        #: A transaction's entries and row blobs, logged together at COMMIT.
        self.pending: list[dict[str, Any]] = []
        self.blobs: list[pa.Table] = []
        self.replaying = False
        #: Open `batch`es: while any is, `settle` waits.
        self.held = 0
        self.log: wal.LogFile | None = None
        #: The log appended to: `wal-{log_number}.log`.
        self.log_number = 1
        self.executor: Executor | None = None
        try:
            self._scan()
        except BaseException:
            os.close(self._lock_fd)
            raise

    # --- logging ---------------------------------------------------------------------------
    def names(self) -> set[str]:
        """The names of the session's catalog objects now."""
        s = self._session()
        return set(s.relations) | set(s.indexes.by_name) | sinks.kept(s) | s.pg.names()

    def statement(
        self, stmt: Any, writes: list[tuple[str, pa.Table, int, int]], before: set[str], tick: int
    ) -> None:
        """Log what statement `stmt`, which started at `tick` with catalog `before` and
        made `writes`, changed; returns once it is on disk (unless a transaction is
        open: then at COMMIT)."""
        mark = len(self.pending), len(self.blobs)
        try:
            self._statement(stmt, writes, before, tick)
        except BaseException:
            # Not logged: the statement's entries go (a transaction's earlier ones stay),
            # as its writes are taken back.
            del self.pending[mark[0] :], self.blobs[mark[1] :]
            raise

    def _statement(
        self, stmt: Any, writes: list[tuple[str, pa.Table, int, int]], before: set[str], tick: int
    ) -> None:
        s = self._session()
        match stmt:
            case grammar.CreateTableAs() if stmt.name not in before:
                self._entry({"sql": create_table_sql(s.relations[stmt.name]), "tick": tick})
            case grammar.CreateTable() | grammar.CreateView() | grammar.CreateIndex():
                self._entry({"sql": stmt.text, "tick": tick})
            case grammar.CreateSource() if stmt.name in s.sources.spark:
                self._entry({"sql": s.sources.spark.definition(stmt.name, stmt), "tick": tick})
                before = before | {f"{stmt.name}_quarantine"}
            case grammar.CreateSource() if stmt.name not in before:
                self._entry({"sql": stmt.text, "tick": tick})
                before = before | {f"{stmt.name}_quarantine"}  # made again by the source
            case grammar.CreateDeltaSource() if stmt.name not in before:
                self._entry({"sql": s.delta.definition(stmt.name), "tick": tick})
            case (
                grammar.CreateConnection()
                | grammar.DropConnection()
                | grammar.CreateSecret()
                | grammar.DropSecret()
            ):
                self._entry({"sql": stmt.text, "tick": tick})
            case grammar.CreatePgSource() if stmt.name in s.pg and not before & set(
                self._pg_relations(stmt.name)
            ):
                self._entry({"sql": s.pg.definition(stmt.name), "tick": tick})
            case grammar.CreateSink() if stmt.name in self.names() - before:
                self._entry({"sql": sinks.definition(s.sinks[stmt.name]), "tick": tick})
            case grammar.Drop():  # with what CASCADE took: replayed, it takes the same
                self._entry({"sql": stmt.text, "tick": tick})
            case grammar.DropSink() if before & set(stmt.names):  # a callback's is not kept
                names = ", ".join(_quoted(n) for n in stmt.names if n in before)
                self._entry({"sql": f"DROP SINK IF EXISTS {names}", "tick": tick})
            case grammar.Advance():
                self._entry({"advance": s.clock.now_ms()})
        self._writes(writes)
        replaced = stmt.name if isinstance(stmt, grammar.CreateView) and stmt.or_replace else None
        self._follow_catalog(before, lambda name: self._definition(stmt, name), replaced)
        self.settle()

    def polled(
        self,
        writes: list[tuple[str, pa.Table, int, int]],
        progress: Mapping[str, Mapping[str, Any]],
        spark_loads: Sequence[tuple[str, int, int, int]] = (),
    ) -> None:
        """Log the rows a poll of the sources wrote, with each source kind's progress
        (by its log key: the files each file source has read, the upstream position
        each PostgreSQL source reached, the last version each Delta source read), as
        one record: recovered, each file, upstream transaction and version stays applied
        once. `spark_loads`: the staged batches each Spark file source loaded (source,
        first, last, tick), logged by id: recovery loads them again from the staged
        files."""
        self._writes(writes)
        for name, first, last, tick in spark_loads:
            self._entry({"spark_source": name, "batches": [first, last], "tick": tick})
        for key, value in progress.items():
            self._entry({key: dict(value)})
        self.settle()

    def _pg_relations(self, name: str) -> list[str]:
        source = self._session().pg.by_name.get(name)
        return [] if source is None else [t.local for t in source.tables.values()]

    def table_loaded(
        self, name: str, writes: list[tuple[str, pa.Table, int, int]], before: set[str], tick: int
    ) -> None:
        """Log a table made from data (`Connection.create_table`), replacing any of its name."""
        rel = self._session().relations[name]
        if name in before:
            self._entry({"sql": f"DROP TABLE {_quoted(name)}", "tick": tick})
        self._entry({"sql": create_table_sql(rel), "tick": tick})
        self._writes(writes)
        self.catalog.pop(name, None)
        self._follow_catalog(before - {name}, lambda _: create_table_sql(rel))
        self.settle()

    def settle(self) -> None:
        """Write the pending entries as one record once no transaction is open; take a
        checkpoint when the log has grown past `checkpoint_bytes`."""
        s = self._session()
        if s.clock.in_transaction or self.replaying or self.held or not self.pending:
            return
        # The record and what follows from it (the sinks, a checkpoint's switch of logs)
        # are not cut short by Ctrl-C: a record half-handled leaves a session unlike the
        # log it describes.
        with interrupts_deferred():
            header = {"entries": self.pending, "tick": s.clock.tick}
            assert self.log is not None
            try:
                self.log.append(header, self.blobs)
            except OSError as error:
                raise OperationalError(
                    f"cannot write the log {self.log.path}: {error}",
                    hint="the statement did not take effect durably; free disk space and retry",
                ) from None
            finally:
                self.pending, self.blobs = [], []
            # Every write is in the log: the sinks may show them, and a checkpoint, which
            # folds history into one snapshot, finds them written (`dsql.sinks`).
            sinks.flush(s)
            if self.log.size >= self.checkpoint_bytes:
                try:
                    self.checkpoint()
                except (OSError, DsqlError, pa.ArrowException) as error:
                    # The statement is on disk already: it must not fail now. The log keeps
                    # growing and the next statement tries again.
                    warnings.warn(
                        f"checkpoint of {self.path} failed (the log keeps every write): {error}",
                        DsqlWarning,
                        stacklevel=2,
                    )

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Inside: statements' entries wait, and are logged as one record on leaving
        (`executemany`: one sync for all its rows, acknowledged together)."""
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1
            self.settle()

    def _entry(self, entry: dict[str, Any]) -> None:
        if not self.replaying:
            self.pending.append(entry)

    def _writes(self, writes: list[tuple[str, pa.Table, int, int]]) -> None:
        for name, rows, diff, tick in writes:
            self._entry({"write": name, "diff": diff, "tick": tick, "rows": len(self.blobs)})
            if not self.replaying:
                self.blobs.append(rows)

    def _follow_catalog(
        self, before: set[str], definition: Callable[[str], str], replaced: str | None = None
    ) -> None:
        """Keep `catalog` equal to the objects that exist: drop the gone, add the new
        (and a replaced view, moved to the end) with their definitions."""
        now = self.names()
        for name in [n for n in self.catalog if n not in now]:
            del self.catalog[name]
        for name in sorted(now - before) + ([replaced] if replaced in now else []):
            self.catalog.pop(name, None)
            self.catalog[name] = definition(name)

    def _definition(self, stmt: Any, name: str) -> str:
        """The statement that creates catalog object `name`, made by `stmt`."""
        s = self._session()
        if isinstance(stmt, grammar.CreateTableAs):
            return create_table_sql(s.relations[name])
        if isinstance(stmt, grammar.CreateSink):
            return sinks.definition(s.sinks[name])
        if isinstance(stmt, grammar.CreatePgSource):
            return s.pg.definition(stmt.name)
        if isinstance(stmt, grammar.CreateDeltaSource):
            return s.delta.definition(stmt.name)
        if isinstance(stmt, grammar.CreateSource) and name in s.sources.spark:
            return s.sources.spark.definition(name, stmt)
        if isinstance(stmt, grammar.CreateIndex) and stmt.name is None:
            index = s.indexes.by_name[name]  # a default name, written out
            keys = ", ".join(_quoted(k) for k in index.key_names)
            return f"CREATE INDEX {_quoted(name)} ON {_quoted(index.on)} ({keys})"
        return str(stmt.text)

    # --- checkpoints ----------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Write every table's rows and the catalog as `checkpoint-N`, N the log that
        follows it, then delete what it supersedes."""
        s = self._session()
        assert self.log is not None
        number = self.log_number + 1
        tmp = self.path / f"{_CHECKPOINT}{number:08d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        tables = []
        kept = (r for r in s.relations.values() if r.kind in _WRITTEN)
        # A Spark source's rows stay in its staged files: the manifest names its batches.
        for i, rel in enumerate(r for r in kept if r.name not in s.sources.spark):
            rows = s.read(s.plan(exp.select("*").from_(exp.to_table(_quoted(rel.name)))))
            tables.append([rel.name, _write_rows(rows, tmp / str(i))])
        manifest = {
            "log": number,
            "tick": s.clock.tick,
            "catalog": list(self.catalog.items()),
            "tables": tables,
            **{key: dict(value) for key, value in s.source_kinds.progress().items()},
            "spark_sources": s.sources.spark.progress(),
        }
        with open(tmp / "manifest.json", "w", encoding="utf-8") as f:
            json.dump(manifest, f)
            f.flush()
            os.fsync(f.fileno())
        wal.sync_dir(tmp)
        self.log.close()
        self.log = wal.LogFile(self._log_path(number))
        self.log_number = number
        tmp.rename(self.path / f"{_CHECKPOINT}{number:08d}")
        wal.sync_dir(self.path)
        self._delete_before(number)

    def _delete_before(self, number: int) -> None:
        for path in self.path.iterdir():
            kind, n = _numbered(path.name)
            if kind is not None and n < number:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        wal.sync_dir(self.path)

    # --- recovery --------------------------------------------------------------------------
    def _scan(self) -> None:
        """Read the newest checkpoint's manifest and every log after it (torn tails cut
        off), checking that nothing is missing; sets `start_tick`, the earliest tick
        they record (a recovered session's clock starts there)."""
        for leftover in self.path.glob(f"{_CHECKPOINT}*.tmp"):  # a checkpoint cut short
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        names = os.listdir(self.path)
        checkpoints = sorted(n for kind, n in map(_numbered, names) if kind == "checkpoint")
        self.first = checkpoints[-1] if checkpoints else 1
        numbers = sorted(
            n for kind, n in map(_numbered, names) if kind == "log" and n >= self.first
        )
        if numbers and numbers != list(range(self.first, self.first + len(numbers))):
            raise SourceError(
                f"the write-ahead log in {self.path} has a gap: logs {numbers} after "
                f"checkpoint {self.first}",
                hint="restore the data directory from a backup",
            )
        self.manifest = self._manifest(self.first) if checkpoints else None
        self.logs: list[tuple[Path, int, list[wal.Record]]] = []
        for n in numbers:
            path = self._log_path(n)
            records, end = wal.read(path, last=n == numbers[-1])
            if end < path.stat().st_size:  # a torn last record: never acknowledged
                wal.truncate(path, end)
            self.logs.append((path, end, records))
        self.log_number = numbers[-1] if numbers else self.first
        ticks = [
            e["tick"] for _, _, rs in self.logs for h, _ in rs for e in h["entries"] if "tick" in e
        ]
        if self.manifest is not None:
            ticks.append(int(self.manifest["tick"]))
        self.start_tick = min(ticks, default=0)

    def recover(self, executor: Executor, progress: Progress | None = None) -> None:
        """Rebuild the session of `executor` (started at `start_tick`) from what `_scan`
        read (module docstring), then open the log for appending."""
        self.executor = executor
        s = executor.session
        total, done = sum(size for _, size, _ in self.logs), 0
        last_tick = s.clock.tick
        with self.replay(s):
            if self.manifest is not None:
                last_tick = max(last_tick, self._load_checkpoint(self.manifest))
            for path, size, records in self.logs:
                for i, (header, tables) in enumerate(records):
                    for entry in header["entries"]:
                        self._apply(entry, tables, path)
                    last_tick = max(last_tick, header["tick"])
                    if progress is not None:
                        progress(done + size * (i + 1) // len(records), total)
                done += size
        self.logs, self.manifest = [], None
        self.log = wal.LogFile(self._log_path(self.log_number))
        self._delete_before(self.first)
        self._at(last_tick + 1)  # past every logged tick, in the same millisecond
        s.close_time(force=True)
        executor.deliver()
        sinks.flush(s)

    @contextmanager
    def replay(self, s: Any) -> Iterator[None]:
        """Inside: nothing is logged, writes take the ticks the log gives them
        (`Clock.replaying`), and the files logged statements name are reached as when
        they were first run (`Sandbox.recovering`)."""
        s.clock.replaying = self.replaying = s.sandbox.recovering = True
        try:
            yield
        finally:
            s.clock.replaying = self.replaying = s.sandbox.recovering = False

    def _manifest(self, number: int) -> dict[str, Any]:
        folder = self.path / f"{_CHECKPOINT}{number:08d}"
        try:
            manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise SourceError(
                f"the checkpoint {folder} is unreadable: {error}",
                hint="restore the data directory from a backup",
            ) from None
        manifest["folder"] = str(folder)
        return dict(manifest)

    def _load_checkpoint(self, manifest: dict[str, Any]) -> int:
        """Create the checkpoint's catalog and load its tables; returns its tick."""
        s = self._session()
        folder = Path(manifest["folder"])
        self._at(manifest["tick"])
        for _, sql in manifest["catalog"]:
            self._run(sql, folder / "manifest.json")
        for name, file in manifest["tables"]:
            try:
                rows = _read_rows(folder / file)
            except (OSError, pa.ArrowException) as error:
                raise SourceError(
                    f"the checkpoint file {folder / file} is unreadable: {error}",
                    hint="restore the data directory from a backup",
                ) from None
            s.write(name, rows, 1, kinds=_WRITTEN)
        s.source_kinds.resume(manifest)
        s.sources.spark.restore(manifest.get("spark_sources", {}))
        return int(manifest["tick"])

    def _apply(self, entry: dict[str, Any], tables: list[pa.Table], path: Path) -> None:
        s = self._session()
        if "advance" in entry:
            s.clock.advance_to(entry["advance"])
            return
        if s.source_kinds.logs(entry):  # a poll's progress (`polled`)
            s.source_kinds.resume(entry)
            return
        self._at(entry["tick"])
        if "spark_source" in entry:
            s.sources.spark.replay(entry["spark_source"], *entry["batches"])
        elif "sql" in entry:
            self._run(entry["sql"], path)
        else:
            s.write(entry["write"], tables[entry["rows"]], entry["diff"], kinds=_WRITTEN)

    def _run(self, sql: str, path: Path) -> None:
        assert self.executor is not None
        try:
            (stmt,) = grammar.parse(sql)
            self.executor.execute(stmt, deliver=False)
        except DsqlError as error:
            raise SourceError(
                f"cannot replay {sql!r} from {path}: {error.message}",
                hint="the data directory does not match this version of dsql, or is damaged",
            ) from None

    def _at(self, tick: int) -> None:
        clock = self._session().clock
        if tick > clock.tick:
            clock.tick = tick

    # --- the rest --------------------------------------------------------------------------
    def refuse_spark_load(self) -> None:
        """Rows Spark reads straight into a table never reach the log: refused."""
        raise UnsupportedError(
            "a table loaded by Spark's executors is not kept in the data directory",
            hint="load it with kernel='local', or connect without data_dir",
        )

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None
        os.close(self._lock_fd)  # releases the flock

    def _session(self) -> Any:
        assert self.executor is not None
        return self.executor.session

    def _log_path(self, number: int) -> Path:
        return self.path / f"{_LOG}{number:08d}.log"


def _lock(path: Path) -> int:
    """Hold `path/LOCK` exclusively (flock) for this process; refuse if another holds it."""
    fd = os.open(path / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise OperationalError(
            f"data directory {path} is in use by another connection"
            + (f" (process {holder})" if holder else ""),
            hint="close that connection first: one process owns a data directory",
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _numbered(name: str) -> tuple[str | None, int]:
    """("checkpoint" | "log", N) for a checkpoint folder or log file name, else (None, 0)."""
    for kind, prefix, suffix in (("checkpoint", _CHECKPOINT, ""), ("log", _LOG, ".log")):
        digits = name.removeprefix(prefix).removesuffix(suffix)
        if name.startswith(prefix) and name.endswith(suffix) and digits.isdigit():
            return kind, int(digits)
    return None, 0


def _write_rows(rows: pa.Table, stem: Path) -> str:
    """Write a table's rows as `stem.parquet` (or `stem.arrow` for types Parquet lacks),
    synced; returns the file's name."""
    try:
        path = stem.with_suffix(".parquet")
        pq.write_table(rows, path)
    except pa.ArrowNotImplementedError:
        path = stem.with_suffix(".arrow")
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
            writer.write_table(rows)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    return path.name


def _read_rows(path: Path) -> pa.Table:
    if path.suffix == ".parquet":
        return pq.read_table(path)
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def _quoted(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql("postgres")


__all__ = ["CHECKPOINT_BYTES", "Durable"]
