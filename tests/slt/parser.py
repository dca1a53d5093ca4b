"""Parse sqllogictest files (SQLite's format, Materialize's and DuckDB's extensions).

`parse(text, file)` returns the file's entries (`Record`s and the `Halt`/`Require`
controls) in order. A record ends at a blank line; `#` starts a comment line.

Supported:
- SQLite: `statement ok|error`, `query <types> [nosort|rowsort|valuesort] [label]`,
  `----`, `N values hashing to <md5>`, `skipif|onlyif <engine>` (trailing `# ...`
  ignored), `halt`, `hash-threshold N` (default 8, as SQLite's generator used).
- Materialize: `mode cockroach|standard` (cockroach: one row per line, columns split on
  whitespace, `␠` for a space), `statement error <regex>`, `query error <regex>`
  (an optional `pgcode XXXXX` is ignored), the query options `colnames`, `multiline`
  (the value runs to a line `EOF`), `partialsort(...)` (read as rowsort), `retry`,
  and `statement count N` (read as `ok`); `simple` records are not supported.
- DuckDB: tab-separated values within a row, `statement maybe`, an expected error
  message after `----` (a substring, `<REGEX>:` or `<!REGEX>:`), `require`,
  `loop`/`foreach`/`concurrentloop` ... `endloop` (expanded, `${var}` substituted),
  `mode skip|unskip` and `mode output_*`.

Directives the runner cannot honour (`load`, `restart`, `simple`, unknown words, ...)
make every later record skipped with a reason naming the directive and its line:
a record is never silently dropped.

>>> [type(r).__name__ for r in parse("statement ok\\nCREATE TABLE t(a INT)\\n\\n"
...                                  "query I nosort\\nSELECT a FROM t\\n----\\n", "x.test")]
['Statement', 'Query']
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .records import (
    Condition,
    Disposition,
    Entry,
    ExpectedError,
    Halt,
    Hashed,
    Location,
    Query,
    Require,
    SortMode,
    Statement,
    Values,
)

__all__ = ["parse", "parse_file", "SltSyntaxError"]

DEFAULT_HASH_THRESHOLD = 8
_HASH = re.compile(r"^\s*(\d+) values hashing to ([0-9a-fA-F]+)\s*$")
_PGCODE = re.compile(r"^pgcode [A-Za-z0-9]{5}\s*")
_LOOPS = ("loop", "foreach", "concurrentloop", "concurrentforeach")

Line = tuple[int, str]


class SltSyntaxError(ValueError):
    """A malformed sqllogictest file (the test data is wrong, not the engine)."""


def parse_file(path: str) -> tuple[Entry, ...]:
    """Parse the file at `path` (see `parse`)."""
    with open(path, encoding="utf-8") as f:
        return parse(f.read(), path)


def parse(text: str, file: str) -> tuple[Entry, ...]:
    """Parse sqllogictest `text`; `file` names it in every record's location."""
    lines = [(n, line.rstrip("\r")) for n, line in enumerate(text.split("\n"), start=1)]
    return tuple(_Parser(file, _expand_loops(lines, file)).entries())


def _expand_loops(lines: list[Line], file: str) -> list[Line]:
    """Unroll DuckDB's `loop var lo hi` and `foreach var v1 v2 ...` blocks."""
    out: list[Line] = []
    i = 0
    while i < len(lines):
        n, line = lines[i]
        words = line.split()
        if not words or words[0] not in _LOOPS:
            out.append(lines[i])
            i += 1
            continue
        depth, j = 1, i + 1
        while j < len(lines) and depth:
            first = lines[j][1].split()[:1]
            depth += first in ([w] for w in _LOOPS)
            depth -= first == ["endloop"]
            j += 1
        if depth:
            raise SltSyntaxError(f"{file}:{n}: `{words[0]}` without `endloop`")
        body = _expand_loops(lines[i + 1 : j - 1], file)
        if len(words) < 3:
            raise SltSyntaxError(f"{file}:{n}: `{line}` needs a variable and values")
        if words[0].endswith("loop"):
            values = [str(v) for v in range(int(words[2]), int(words[3]))]
        else:
            values = words[2:]
        for value in values:
            out.extend((k, s.replace("${" + words[1] + "}", value)) for k, s in body)
        i = j
    return out


def _strip_comment(line: str) -> str:
    return line.split("#", 1)[0].strip()


def _expected_error(inline: str) -> ExpectedError:
    """The Materialize-style regex after `statement error` / `query error`."""
    inline = _PGCODE.sub("", inline.strip())
    return ExpectedError(pattern=inline or None)


def _duckdb_error(message: str) -> ExpectedError | None:
    """The DuckDB-style message written after `----` in an error record."""
    message = message.strip()
    if not message:
        return None
    if message.startswith("<REGEX>:"):
        return ExpectedError(message[len("<REGEX>:") :], dialect="duckdb")
    if message.startswith("<!REGEX>:"):
        return ExpectedError(message[len("<!REGEX>:") :], negate=True, dialect="duckdb")
    return ExpectedError(re.escape(message), dialect="duckdb")


def _split_row(line: str, ncols: int, cockroach: bool) -> list[str]:
    """One expected result line as values: DuckDB tabs, cockroach whitespace, else whole."""
    if cockroach:
        cols = [line.strip()] if ncols == 1 else line.split()
        return [c.replace("␠", " ") for c in cols]
    return line.split("\t")


class _Parser:
    """Walks the (loop-expanded) lines once, keeping the file-level state."""

    def __init__(self, file: str, lines: list[Line]) -> None:
        self.file = file
        self.lines = lines
        self.pos = 0
        self.hash_threshold = DEFAULT_HASH_THRESHOLD
        self.cockroach = False
        self.conditions: list[Condition] = []
        self.skip_rest: str | None = None  # set by a directive nothing after can survive
        self.mode_skip: str | None = None  # DuckDB `mode skip` ... `mode unskip`

    def error(self, n: int, message: str) -> SltSyntaxError:
        return SltSyntaxError(f"{self.file}:{n}: {message}")

    def block(self) -> list[Line]:
        """The lines up to the next blank line (consumed), skipping `#` comment lines."""
        out: list[Line] = []
        while self.pos < len(self.lines):
            n, line = self.lines[self.pos]
            self.pos += 1
            if not line.strip():
                break
            out.append((n, line))
        return out

    def sql_and_rest(self, lines: list[Line]) -> tuple[str, list[Line] | None]:
        """Split a record body at `----`: the SQL text and the lines after (or None)."""
        for k, (_, line) in enumerate(lines):
            if line.rstrip() == "----":
                return self.sql_text(lines[:k]), lines[k + 1 :]
        return self.sql_text(lines), None

    @staticmethod
    def sql_text(lines: list[Line]) -> str:
        return "\n".join(line for _, line in lines if not line.lstrip().startswith("#"))

    def entries(self) -> Iterator[Entry]:
        while self.pos < len(self.lines):
            n, line = self.lines[self.pos]
            self.pos += 1
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            words = line.split()
            yield from self.directive(n, words, line)

    def directive(self, n: int, words: list[str], line: str) -> Iterator[Entry]:
        head = words[0]
        if head == "statement":
            yield self.statement(n, words, line)
        elif head == "query":
            yield self.query(n, words, line)
        elif head in ("skipif", "onlyif"):
            if len(words) < 2:
                raise self.error(n, f"`{head}` needs an engine name")
            self.conditions.append(Condition(_strip_comment(words[1]), only=head == "onlyif"))
        elif head == "halt":
            yield Halt(Location(self.file, n), self.take_conditions())
        elif head == "hash-threshold":
            self.hash_threshold = int(_strip_comment(line).split()[1])
        elif head == "require":
            yield Require(Location(self.file, n), " ".join(words[1:]), self.take_conditions())
        elif head == "mode":
            self.mode(n, words)
        elif head in ("subtest", "user", "kv-batch-size"):
            self.block()  # cockroach bookkeeping with no effect on results
        else:
            self.block()
            self.conditions.clear()
            self.skip_rest = self.skip_rest or f"unsupported directive `{head}` (line {n})"

    def mode(self, n: int, words: list[str]) -> None:
        what = words[1] if len(words) > 1 else ""
        if what == "cockroach":
            self.cockroach = True
        elif what in ("standard", "sqlite"):
            self.cockroach = False
        elif what == "skip":
            self.mode_skip = f"`mode skip` (line {n})"
        elif what == "unskip":
            self.mode_skip = None
        elif not what.startswith("output_") and what != "debug":
            raise self.error(n, f"unknown mode {what!r}")

    def take_conditions(self) -> tuple[Condition, ...]:
        conditions = tuple(self.conditions)
        self.conditions.clear()
        return conditions

    def skip_reason(self) -> str | None:
        return self.skip_rest or self.mode_skip

    def statement(self, n: int, words: list[str], line: str) -> Statement:
        kind = words[1] if len(words) > 1 else ""
        inline = line.split(None, 2)[2] if len(words) > 2 else ""
        disposition = {"ok": Disposition.OK, "OK": Disposition.OK, "count": Disposition.OK}
        disposition |= {"error": Disposition.ERROR, "maybe": Disposition.MAYBE}
        if kind not in disposition:
            raise self.error(n, f"invalid statement disposition {kind!r}")
        sql, rest = self.sql_and_rest(self.block())
        error = None
        if disposition[kind] is not Disposition.OK:
            error = _expected_error(inline) if inline.strip() else None
            if rest is not None and error is None:
                error = _duckdb_error("\n".join(text for _, text in rest))
        return Statement(
            Location(self.file, n),
            sql,
            disposition[kind],
            error,
            self.take_conditions(),
            self.skip_reason(),
        )

    def query(self, n: int, words: list[str], line: str) -> Query:
        location = Location(self.file, n)
        if len(words) > 1 and words[1] == "error":
            sql, _ = self.sql_and_rest(self.block())
            error = _expected_error(line.split(None, 2)[2] if len(words) > 2 else "")
            return Query(
                location,
                sql,
                "",
                SortMode.NOSORT,
                None,
                error=error,
                conditions=self.take_conditions(),
                skip_reason=self.skip_reason(),
            )
        types = words[1] if len(words) > 1 else ""
        sort, colnames, multiline = SortMode.NOSORT, False, False
        for option in (words[2] if len(words) > 2 else "").split(","):
            if option in ("nosort", "rowsort", "valuesort"):
                sort = SortMode(option)
            elif option.startswith("partialsort"):
                sort = SortMode.ROWSORT
            elif option in ("colnames", "multiline", "retry", ""):
                colnames |= option == "colnames"
                multiline |= option == "multiline"
            else:
                raise self.error(n, f"unknown query option {option!r}")
        label = words[3] if len(words) > 3 else None
        body = self.multiline_body() if multiline else self.block()
        sql, rest = self.sql_and_rest(body)
        column_names = None
        if colnames and rest:
            column_names = tuple(c.replace("␠", " ") for c in rest[0][1].split())
            rest = rest[1:]
        skip = self.skip_reason()
        expected: Hashed | Values
        texts = [text for _, text in rest or []]
        hashed = _HASH.match(texts[0]) if len(texts) == 1 else None
        if multiline:
            expected = Values(("\n".join(texts),))
        elif hashed:
            expected = Hashed(int(hashed.group(1)), hashed.group(2).lower())
        else:
            if any(text.startswith("<FILE>:") for text in texts):
                skip = skip or "expected result read from a file (`<FILE>:`)"
            values = [v for text in texts for v in _split_row(text, len(types), self.cockroach)]
            expected = Values(tuple(values))
        return Query(
            location,
            sql,
            types,
            sort,
            expected,
            label=label,
            hash_threshold=self.hash_threshold,
            column_names=column_names,
            multiline=multiline,
            conditions=self.take_conditions(),
            skip_reason=skip,
        )

    def multiline_body(self) -> list[Line]:
        """SQL up to `----`, then lines up to `EOF` (blank lines kept), then a blank line."""
        out: list[Line] = []
        seen_dashes = False
        while self.pos < len(self.lines):
            n, line = self.lines[self.pos]
            self.pos += 1
            if seen_dashes and line == "EOF":
                self.block()
                return out
            if not seen_dashes and not line.strip():
                return out
            seen_dashes |= line.rstrip() == "----"
            out.append((n, line))
        raise self.error(out[0][0] if out else 0, "multiline result without `EOF`")
