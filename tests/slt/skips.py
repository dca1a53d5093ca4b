"""The checked-in list of records skipped on purpose (`skips.toml`).

Each entry names a file (a path suffix, `/`-separated; ending in `/`, a folder the
file is in), optionally the record's first line (`line`, or `lines` for several
records with one reason) and/or a regex searched in its SQL, optionally the engines
and modes it applies to, and always a reason. A reason starting with `BUG:` marks a
known failure: a portable record dsql fails today, counted apart in the report.
An entry matches a record when every given field matches.
The runner reports skipped records per reason and lists entries that matched nothing,
so a fixed engine or an edited file cannot leave a stale skip behind silently.

>>> entry = SkipEntry(file="evidence/in1.test", reason="x", line=22)
>>> entry.matches("/s/sqlite/evidence/in1.test", 22, "SELECT 1", "duckdb", "direct")
True
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SkipEntry", "SkipList", "DEFAULT_SKIPS"]

DEFAULT_SKIPS = Path(__file__).with_name("skips.toml")


@functools.lru_cache(maxsize=64)
def _posix(path: str) -> str:
    """`path` with forward slashes (asked once per record and entry: kept)."""
    return Path(path).as_posix()


@dataclass(frozen=True, slots=True)
class SkipEntry:
    """One skip: where it applies and why."""

    file: str
    reason: str
    line: int | None = None
    sql: str | None = None
    engines: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.reason.strip():
            raise ValueError(f"skip entry for {self.file} has no reason")

    def covers(self, path: str) -> bool:
        """Whether the entry's `file` names this file (or, ending in `/`, its folder)."""
        posix = _posix(path)
        if self.file.endswith("/"):
            return f"/{self.file}" in f"/{posix}"
        return posix.endswith(self.file)

    def matches(self, path: str, line: int, sql: str, engine: str, mode: str) -> bool:
        """Whether this entry skips the record at `path:line` with text `sql`."""
        return (
            self.covers(path)
            and (self.line is None or self.line == line)
            and (self.sql is None or re.search(self.sql, sql, re.IGNORECASE) is not None)
            and (not self.engines or engine in self.engines)
            and (not self.modes or mode in self.modes)
        )


@dataclass
class SkipList:
    """Skip entries plus which of them matched something in this run."""

    entries: tuple[SkipEntry, ...] = ()
    used: set[int] = field(default_factory=set)

    @staticmethod
    def load(path: Path | None = DEFAULT_SKIPS) -> SkipList:
        """Read a skips file (`[[skip]]` tables); None or a missing file gives no skips."""
        if path is None or not path.exists():
            return SkipList()
        with open(path, "rb") as f:
            data = tomllib.load(f)
        entries = []
        for item in data.get("skip", []):
            item = dict(item)
            item["engines"] = tuple(item.get("engines", ()))
            item["modes"] = tuple(item.get("modes", ()))
            lines = item.pop("lines", None)
            if lines is None:
                entries.append(SkipEntry(**item))
            else:  # one entry per line, so each line that stops matching is reported
                entries.extend(SkipEntry(**item, line=line) for line in lines)
        return SkipList(tuple(entries))

    @staticmethod
    def known_failures(reasons: Counter[str]) -> int:
        """How many of the skipped records (`reasons` as the runner counts them) are
        known dsql bugs: skip-list entries whose reason starts with `BUG:`."""
        return sum(n for reason, n in reasons.items() if reason.startswith("skip list: BUG:"))

    def reason(self, path: str, line: int, sql: str, engine: str, mode: str) -> str | None:
        """The reason of the first entry matching the record, or None."""
        for k, entry in enumerate(self.entries):
            if entry.matches(path, line, sql, engine, mode):
                self.used.add(k)
                return f"skip list: {entry.reason}"
        return None

    def unused(self, engine: str, mode: str) -> list[SkipEntry]:
        """Entries for this engine and mode that matched no record so far."""
        return [
            e
            for k, e in enumerate(self.entries)
            if k not in self.used
            and (not e.engines or engine in e.engines)
            and (not e.modes or mode in e.modes)
        ]
