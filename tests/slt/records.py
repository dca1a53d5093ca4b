"""Sqllogictest records: the values a parsed `.slt`/`.test` file is made of.

A file parses to a tuple of `Record`s in file order. Each record carries its
`Location` (file and 1-based line of its first line) so every message can point at it.
Records that must not run on a given engine are still records: `conditions` holds the
`skipif`/`onlyif` lines before them and `skip_reason` says why the parser already knows
they cannot run (after `halt`, an unmet `require`, `mode skip`, ...). Nothing is
silently dropped: the runner counts every record as passed, failed or skipped.

>>> Location("a.test", 3)
Location(file='a.test', line=3)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class Location:
    """Where a record starts: a file path and a 1-based line number."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class SortMode(Enum):
    """How a query's result values are ordered before comparison (SQLite's three modes).

    NOSORT keeps the engine's order, ROWSORT sorts whole rows (as formatted strings),
    VALUESORT sorts every value independently of its row.
    """

    NOSORT = "nosort"
    ROWSORT = "rowsort"
    VALUESORT = "valuesort"


class Disposition(Enum):
    """What a statement record expects: success, an error, or either (DuckDB's `maybe`)."""

    OK = "ok"
    ERROR = "error"
    MAYBE = "maybe"


@dataclass(frozen=True, slots=True)
class Condition:
    """A `skipif <engine>` (only=False) or `onlyif <engine>` (only=True) guard."""

    engine: str
    only: bool

    def excludes(self, names: frozenset[str]) -> bool:
        """Whether this guard keeps the record from running on an engine with these names.

        >>> Condition("sqlite", only=True).excludes(frozenset({"duckdb"}))
        True
        """
        return (self.engine in names) != self.only

    def __str__(self) -> str:
        return f"{'onlyif' if self.only else 'skipif'} {self.engine}"


@dataclass(frozen=True, slots=True)
class ExpectedError:
    """What an error record expects the message to look like.

    `pattern` is a regular expression searched in the message (None: any error).
    `negate` inverts the match (DuckDB's `<!REGEX>:`). `dialect` names the engine
    whose messages the pattern was written for ("duckdb" for DuckDB's text after
    `----`); None means the pattern is portable (Materialize's inline regex) and is
    always checked.
    """

    pattern: str | None = None
    negate: bool = False
    dialect: str | None = None


@dataclass(frozen=True, slots=True)
class Hashed:
    """An expected result given as `N values hashing to <md5>`."""

    count: int
    md5: str


@dataclass(frozen=True, slots=True)
class Values:
    """An expected result given value by value (already split into single values)."""

    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Statement:
    """`statement ok|error|maybe`: SQL whose rows, if any, are ignored."""

    location: Location
    sql: str
    disposition: Disposition
    error: ExpectedError | None = None
    conditions: tuple[Condition, ...] = ()
    skip_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Query:
    """`query <types> [sort] [label]`: SQL whose result is compared with `expected`.

    `types` has one letter per column (I integer, T text, R real, B bool, ...).
    `error` is set instead of an expected result for `query error <regex>`.
    `hash_threshold` is the file's threshold when the record was read (0: never hash).
    `column_names` is set by Materialize's `colnames` option.
    """

    location: Location
    sql: str
    types: str
    sort: SortMode
    expected: Hashed | Values | None
    label: str | None = None
    error: ExpectedError | None = None
    hash_threshold: int = 8
    column_names: tuple[str, ...] | None = None
    multiline: bool = False
    conditions: tuple[Condition, ...] = ()
    skip_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Halt:
    """`halt`: stop the file here (unless `conditions` exclude the running engine)."""

    location: Location
    conditions: tuple[Condition, ...] = ()


@dataclass(frozen=True, slots=True)
class Require:
    """DuckDB's `require <what>`: the rest of the file needs `what` of the engine."""

    location: Location
    what: str
    conditions: tuple[Condition, ...] = ()


Record = Statement | Query
Control = Halt | Require
Entry = Record | Control
