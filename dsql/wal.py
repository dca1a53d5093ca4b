"""The write-ahead log: a file of framed, checksummed records, each synced before it counts.

A record is a JSON header and Arrow IPC blobs (the rows of its writes). On disk each
record is one frame: `DWAL`, the payload's length (u64), its CRC-32 (u32), the CRC-32 of
those sixteen bytes (u32), the payload.
`append` writes a frame with one `write` call and `fsync`s it before returning, so a
record `append` returned for survives any crash.

Reading tells a torn tail from corruption: a frame cut short by the end of the file, or
one whose bytes up to the end are a failed write (its checksum fails and nothing valid
follows: the frame reaches the end, or only zeros do), is a write that never returned:
`read` reports where the good records end so the caller truncates there. Any other bad
frame is corruption, a `SourceError` naming the file and offset: recovery never skips a
record it cannot read.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "wal-00000001.log"
>>> log = LogFile(path)
>>> log.append({"entries": [{"sql": "CREATE TABLE t (a int)"}]}, [])
>>> log.close()
>>> records, end = read(path, last=True)
>>> records[0][0]["entries"], end == path.stat().st_size
([{'sql': 'CREATE TABLE t (a int)'}], True)
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa

from dsql.errors import SourceError

MAGIC = b"DWAL"
#: magic, payload length (u64: a record may hold a big load's rows), payload CRC-32,
#: CRC-32 of the three before it: a frame's length is trusted only when its header's
#: own CRC holds.
_FRAME = struct.Struct("<4sQII")
_HEAD = 16
_LENGTH = struct.Struct("<Q")

Record = tuple[dict[str, Any], list[pa.Table]]


def encode(header: dict[str, Any], tables: list[pa.Table]) -> bytes:
    """One record as a frame: the header as JSON, then each table as an Arrow IPC stream."""
    parts = [json.dumps(header, separators=(",", ":")).encode()]
    for table in tables:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        parts.append(sink.getvalue().to_pybytes())
    payload = b"".join(_LENGTH.pack(len(p)) + p for p in parts)
    head = struct.pack("<4sQI", MAGIC, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


def decode(payload: bytes) -> Record:
    """The header and tables of a frame's payload (checked by its CRC already)."""
    parts, at = [], 0
    while at < len(payload):
        (n,) = _LENGTH.unpack_from(payload, at)
        parts.append(payload[at + _LENGTH.size : at + _LENGTH.size + n])
        at += _LENGTH.size + n
    header = json.loads(parts[0])
    tables = [pa.ipc.open_stream(pa.py_buffer(p)).read_all() for p in parts[1:]]
    return header, tables


class LogFile:
    """A log file open for appending; each `append` is on disk when it returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        created = not path.exists()
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if created:
            sync_dir(path.parent)  # the file's name is durable too
        self.size = os.fstat(self.fd).st_size

    def append(self, header: dict[str, Any], tables: list[pa.Table]) -> None:
        frame = encode(header, tables)
        written = os.write(self.fd, frame)
        if written != len(frame):  # a full disk: the record is torn, and refused
            raise OSError(f"short write to {self.path}: {written} of {len(frame)} bytes")
        os.fsync(self.fd)
        self.size += written

    def close(self) -> None:
        os.close(self.fd)


def read(path: Path, last: bool) -> tuple[list[Record], int]:
    """Every record of a log file, and the offset where the good records end.

    `last`: the file is the newest log, the only one a crash can have left torn; a torn
    frame in an older file, or a bad frame anywhere with good data after it, is
    corruption (`SourceError`)."""
    data = path.read_bytes()
    records: list[Record] = []
    at = 0
    while at < len(data):
        problem = _frame_problem(data, at)
        if problem is None:
            length = _FRAME.unpack_from(data, at)[1]
            start = at + _FRAME.size
            records.append(decode(data[start : start + length]))
            at = start + length
            continue
        if last and _torn(data, at):
            return records, at
        raise SourceError(
            f"the write-ahead log {path} is corrupt at byte {at}: {problem}",
            hint="restore the data directory from a backup; dsql does not recover "
            "past a damaged record",
        )
    return records, at


def _frame_problem(data: bytes, at: int) -> str | None:
    """Why the frame at `at` is unreadable, or None when it is whole and both CRCs hold."""
    if len(data) - at < _FRAME.size:
        return "a record header cut short"
    magic, length, crc, header_crc = _FRAME.unpack_from(data, at)
    if magic != MAGIC or zlib.crc32(data[at : at + _HEAD]) != header_crc:
        return "no intact record header there"
    start = at + _FRAME.size
    if start + length > len(data):
        return "a record cut short"
    if zlib.crc32(data[start : start + length]) != crc:
        return "a record's checksum does not match"
    return None


def _torn(data: bytes, at: int) -> bool:
    """Whether the bad frame at `at` is the tail of a write that never completed: a
    prefix of a frame (its header cut, or its intact header promising more bytes than
    the file holds), or a damaged header or frame followed only by zeros (a crash can
    leave a file extended with zeros). A bad frame with data after it was written
    whole and damaged since."""
    if len(data) - at < _FRAME.size:
        return True
    magic, length, _, header_crc = _FRAME.unpack_from(data, at)
    if magic != MAGIC or zlib.crc32(data[at : at + _HEAD]) != header_crc:
        return not data[at + _FRAME.size :].strip(b"\0")  # nothing written after it
    end = at + _FRAME.size + length
    return end >= len(data) or not data[end:].strip(b"\0")


def truncate(path: Path, size: int) -> None:
    """Cut a torn tail off `path`, durably."""
    with open(path, "r+b") as f:
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())


def sync_dir(path: Path) -> None:
    """Make the names created or renamed in directory `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["LogFile", "decode", "encode", "read", "sync_dir", "truncate"]
