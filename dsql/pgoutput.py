"""pgoutput: PostgreSQL's logical replication messages (protocol version 1), decoded.

A logical slot with the `pgoutput` plugin yields one binary message per change
(`pg_logical_slot_peek_binary_changes(slot, NULL, NULL, 'proto_version', '1',
'publication_names', 'p')`). `decode` reads one message into a value: `Begin`,
`Relation` (a table's columns, sent before the first change to it in a session of
decoding and again when it changes), `Insert`, `Update`, `Delete`, `Truncate`,
`Commit`; the others (origin, type, logical message) are `Skipped`. A tuple is the
columns' values in PostgreSQL's text output format: a `str`, `None` for SQL NULL,
or `UNCHANGED` for a TOASTed value the change did not touch.

Invariant: a transaction is Begin, its changes, Commit; `Commit.end_lsn` is the
position a slot advances to once the transaction is applied.

>>> decode(b"B" + (16).to_bytes(8, "big") + (0).to_bytes(8, "big") + (7).to_bytes(4, "big"))
Begin(final_lsn=16, xid=7)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final


class _Unchanged:
    """A TOASTed column an update or delete did not send ('u')."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()

Value = str | None | _Unchanged
Tuple = tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Begin:
    """A transaction starts; it commits at `final_lsn`."""

    final_lsn: int
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    """A transaction ends; `end_lsn` is past its commit record."""

    commit_lsn: int
    end_lsn: int


@dataclass(frozen=True, slots=True)
class Relation:
    """A table's shape as the changes that follow spell it."""

    oid: int
    namespace: str
    name: str
    #: `relreplident`: 'd' default (the key), 'n' nothing, 'f' full, 'i' an index.
    replica_identity: str
    columns: tuple[str, ...]
    type_oids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Insert:
    oid: int
    new: Tuple


@dataclass(frozen=True, slots=True)
class Update:
    """`old` is the whole old row under REPLICA IDENTITY FULL ('O'), the key columns
    when the key changed ('K'), else None."""

    oid: int
    old: Tuple | None
    old_kind: str | None
    new: Tuple


@dataclass(frozen=True, slots=True)
class Delete:
    oid: int
    old: Tuple
    old_kind: str


@dataclass(frozen=True, slots=True)
class Truncate:
    oids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Skipped:
    """A message dsql has no use for (origin, type, logical message)."""

    kind: str


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | Skipped


class DecodeError(ValueError):
    """A message that does not follow protocol version 1."""


class _Reader:
    """Big-endian reads off a message, failing on a short one."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise DecodeError(f"message ends at byte {len(self.data)}, reading {fmt}")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return int(value)

    def byte(self) -> str:
        return chr(self.take(">B"))

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise DecodeError("unterminated string")
        text = self.data[self.at : end].decode()
        self.at = end + 1
        return text

    def raw(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise DecodeError(f"value of {n} bytes passes the message's end")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def tuple(self) -> Tuple:
        values: list[Value] = []
        for _ in range(self.take(">h")):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED)
            elif kind == "t":
                values.append(self.raw(self.take(">i")).decode())
            else:
                raise DecodeError(f"column kind {kind!r} (binary values are not asked for)")
        return tuple(values)


def decode(data: bytes) -> Message:
    """The message `data` holds (module docstring)."""
    r = _Reader(bytes(data))
    kind = r.byte()
    match kind:
        case "B":
            lsn, _time, xid = r.take(">Q"), r.take(">q"), r.take(">I")
            return Begin(lsn, xid)
        case "C":
            _flags, commit, end = r.take(">B"), r.take(">Q"), r.take(">Q")
            return Commit(commit, end)
        case "R":
            oid, namespace, name, identity = r.take(">I"), r.string(), r.string(), r.byte()
            names, oids = [], []
            for _ in range(r.take(">h")):
                _flags, column = r.take(">B"), r.string()
                names.append(column)
                oids.append(r.take(">I"))
                r.take(">i")  # typmod: the catalog gave the column's type already
            return Relation(oid, namespace, name, identity, tuple(names), tuple(oids))
        case "I":
            oid = r.take(">I")
            if r.byte() != "N":
                raise DecodeError("insert without a new tuple")
            return Insert(oid, r.tuple())
        case "U":
            oid, marker = r.take(">I"), r.byte()
            old, old_kind = None, None
            if marker in ("K", "O"):
                old, old_kind = r.tuple(), marker
                marker = r.byte()
            if marker != "N":
                raise DecodeError(f"update with {marker!r} where its new tuple starts")
            return Update(oid, old, old_kind, r.tuple())
        case "D":
            oid, marker = r.take(">I"), r.byte()
            if marker not in ("K", "O"):
                raise DecodeError(f"delete with {marker!r} where its old tuple starts")
            return Delete(oid, r.tuple(), marker)
        case "T":
            count, _options = r.take(">i"), r.take(">B")
            return Truncate(tuple(r.take(">I") for _ in range(count)))
        case "O" | "Y" | "M":
            return Skipped(kind)
    raise DecodeError(f"unknown message kind {kind!r}")


__all__ = [
    "UNCHANGED",
    "Begin",
    "Commit",
    "DecodeError",
    "Delete",
    "Insert",
    "Message",
    "Relation",
    "Skipped",
    "Truncate",
    "Update",
    "decode",
]
