"""The source interface: what a kind of source (files, PostgreSQL, ...) gives the session.

A *source kind* owns the sources of one CREATE SOURCE statement (`SourceKind`): it
creates them (each a relation of kind "source" that only the source writes), polls
them at statement boundaries and while a FETCH waits (each poll a write stamped by
the clock, under the executor's lock, never inside a transaction), reports its
progress as a JSON value that the data directory logs with the poll's rows, resumes
from that progress on recovery, confirms upstream what the log holds, and drops a
source with what it made. `SourceKinds` is the session's ordered set of kinds; the
executor and `dsql.durable` talk to it alone, except `Durable.statement`, which logs
each kind's CREATE SOURCE. A new kind (Kafka, say) is therefore one module that
implements `SourceKind`, registered in `Session.__init__`, plus its statement in the
grammar and its case in `Durable.statement`.

Invariant: a source's rows reach the relation only through `poll`; `progress()`
after a poll covers exactly what that poll wrote, so a recovered session that resumes
from the logged progress reads nothing twice and misses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class SourceKind(Protocol):
    """One kind of source and its sources in a session (module docstring)."""

    #: The CREATE SOURCE statement (a `dsql.grammar` class) this kind makes sources of.
    statement: type
    #: The name its progress is logged under (a data directory's log and checkpoints).
    log_key: str

    def __contains__(self, name: object) -> bool:
        """Whether `name` is one of its sources."""
        ...

    def create(self, stmt: Any) -> None:
        """Make the source `stmt` declares: its relations, and what it reads from."""
        ...

    def drop(self, name: str, cascade: bool) -> list[str]:
        """Drop source `name`: its relations (with CASCADE, what reads them) and what it
        made upstream; the names of the relations dropped."""
        ...

    def poll(self) -> list[str]:
        """Write what arrived since the last poll; the notices of what failed."""
        ...

    def progress(self) -> Mapping[str, Any]:
        """Each source's progress (JSON-able), by source name."""
        ...

    def resume(self, progress: Mapping[str, Any]) -> None:
        """Resume from logged progress (names of sources dropped since are skipped)."""
        ...

    def confirm(self) -> list[str]:
        """Tell upstream that what the polls wrote is kept (the log holds it)."""
        ...

    def close(self) -> None:
        """Release connections; the sources' upstream state stays for a restart."""
        ...


class SourceKinds:
    """The session's source kinds, in polling order (module docstring)."""

    def __init__(self, kinds: tuple[SourceKind, ...]) -> None:
        self.kinds = kinds
        self._by_statement = {k.statement: k for k in kinds}

    def creates(self, stmt: object) -> bool:
        """Whether `stmt` is some kind's CREATE SOURCE."""
        return type(stmt) in self._by_statement

    def create(self, stmt: Any) -> None:
        self._by_statement[type(stmt)].create(stmt)

    def owner(self, name: str) -> SourceKind | None:
        """The kind whose source `name` is, or None."""
        return next((k for k in self.kinds if name in k), None)

    def poll(self) -> list[str]:
        """Poll every kind, in order; their notices."""
        return [notice for kind in self.kinds for notice in kind.poll()]

    def progress(self) -> dict[str, Mapping[str, Any]]:
        """Every kind's progress, by its log key."""
        return {kind.log_key: kind.progress() for kind in self.kinds}

    def logs(self, entry: Mapping[str, Any]) -> bool:
        """Whether a log entry holds some kind's progress."""
        return any(kind.log_key in entry for kind in self.kinds)

    def resume(self, logged: Mapping[str, Any]) -> None:
        """Resume each kind whose log key `logged` holds."""
        for kind in self.kinds:
            if kind.log_key in logged:
                kind.resume(logged[kind.log_key])

    def confirm(self) -> list[str]:
        return [notice for kind in self.kinds for notice in kind.confirm()]

    def close(self) -> None:
        for kind in self.kinds:
            kind.close()


__all__ = ["SourceKind", "SourceKinds"]
