"""PostgreSQL's COPY formats: the options, and its text and CSV records read and written.

`CopyFormat.of(options)` checks a COPY's `(option value, ...)` as PostgreSQL does
(`FORMAT text | csv | parquet | json`, `HEADER`, `DELIMITER`, `NULL`, `QUOTE`,
`ESCAPE`, `ENCODING`). `records(text, fmt)` yields each record's line number and fields
(None for NULL); `render(columns, fmt)` writes columns back in the same format. The rules:

- text: fields split at the delimiter (a tab); `\\N` is NULL; a backslash escapes the
  next character (`\\t`, `\\n`, `\\r`, `\\b`, `\\f`, `\\v`, `\\\\`, octal `\\123`, hex
  `\\x4F`); a line `\\.` ends the data.
- csv: fields split at the delimiter (a comma); a field in quotes may hold delimiters,
  line breaks and doubled quotes (or quotes after ESCAPE); an unquoted field equal to
  the NULL string (empty by default) is NULL, a quoted one never is.

Line numbers count physical lines from 1, the header included, as PostgreSQL's
`COPY t, line 3` does; a record spanning lines has the number of its first.

>>> fmt = CopyFormat.of((("format", "csv"),))
>>> list(records('1,"a,b"\\n2,\\n', fmt))
[(1, ['1', 'a,b']), (2, ['2', None])]
>>> render([pa.array(["1", "2"]), pa.array(["a,b", None])], fmt)
'1,"a,b"\\n2,\\n'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from dsql.errors import DataError, SchemaError, UnsupportedError

#: The formats a COPY reads and writes; parquet and json are dsql's (Arrow's) own.
FORMATS = ("text", "csv", "parquet", "json")
_TRUE = frozenset({"true", "on", "1", "yes", "t"})
_FALSE = frozenset({"false", "off", "0", "no", "f"})
_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
#: PostgreSQL's line ends (not Python's `splitlines`, which also breaks at \v, \f, ...).
_LINE_BREAK = re.compile("\r\n|\n|\r")
_TEXT_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.S)


@dataclass(frozen=True, slots=True)
class CopyFormat:
    """A COPY's format and its options, checked (PostgreSQL's defaults filled in)."""

    format: str = "text"
    header: bool = False
    delimiter: str = "\t"
    null: str = "\\N"
    quote: str = '"'
    escape: str = '"'

    @staticmethod
    def of(options: Iterable[tuple[str, str]]) -> CopyFormat:
        """The format `options` ((name, value) pairs) ask for; a DsqlError as
        PostgreSQL's for an unknown, repeated or conflicting option."""
        given: dict[str, str] = {}
        for name, value in options:
            if name in given:
                raise SchemaError("conflicting or redundant options", hint=f"{name} is given twice")
            given[name] = value
        fmt = given.pop("format", "text").lower()
        if fmt not in FORMATS:
            raise SchemaError(
                f'COPY format "{fmt}" not recognized', hint="use text, csv, parquet or json"
            )
        csv = fmt == "csv"
        defaults = {"delimiter": "," if csv else "\t", "null": "" if csv else "\\N"}
        header = _boolean(given.pop("header", "false"), "header")
        delimiter = given.pop("delimiter", defaults["delimiter"])
        null = given.pop("null", defaults["null"])
        quote = given.pop("quote", None)
        escape = given.pop("escape", None)
        encoding = given.pop("encoding", "utf8").lower().replace("-", "").replace("_", "")
        if encoding not in ("utf8", "unicode"):
            raise UnsupportedError(
                f'COPY encoding "{encoding}" is not supported', hint="files are read as UTF8"
            )
        for name in given:
            if name in ("force_quote", "force_not_null", "force_null", "freeze", "default"):
                raise UnsupportedError(f"COPY option {name} is not supported")
            raise SchemaError(
                f'option "{name}" not recognized',
                hint="COPY takes FORMAT, HEADER, DELIMITER, NULL, QUOTE, ESCAPE and ENCODING",
            )
        if fmt in ("parquet", "json"):
            if header or "delimiter" in dict(options) or "null" in dict(options):
                raise SchemaError(f"COPY {fmt} takes no HEADER, DELIMITER or NULL")
        if not csv and (quote is not None or escape is not None):
            raise SchemaError(
                f"COPY {'quote' if quote is not None else 'escape'} available only in CSV mode"
            )
        quote = '"' if quote is None else quote
        escape = quote if escape is None else escape
        if len(delimiter) != 1 or len(delimiter.encode()) != 1:
            raise SchemaError("COPY delimiter must be a single one-byte character")
        if delimiter in "\r\n" or (
            not csv and delimiter in "\\.abcdefghijklmnopqrstuvwxyz0123456789"
        ):
            raise SchemaError(f'COPY delimiter cannot be "{delimiter}"')
        if csv and (len(quote) != 1 or len(quote.encode()) != 1):
            raise SchemaError("COPY quote must be a single one-byte character")
        if csv and (len(escape) != 1 or len(escape.encode()) != 1):
            raise SchemaError("COPY escape must be a single one-byte character")
        if csv and delimiter == quote:
            raise SchemaError("COPY delimiter and quote must be different")
        if "\r" in null or "\n" in null:
            raise SchemaError("COPY null representation cannot use newline or carriage return")
        if delimiter in null:
            raise SchemaError("COPY delimiter must not appear in the NULL specification")
        return CopyFormat(fmt, header, delimiter, null, quote, escape)


def _boolean(value: str, name: str) -> bool:
    text = value.lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise SchemaError(f"{name} requires a Boolean value")


# --- reading ---------------------------------------------------------------------------------
class RecordError(DataError):
    """A record PostgreSQL's COPY refuses to read, at line `line`."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


def records(text: str, fmt: CopyFormat) -> Iterator[tuple[int, list[str | None]]]:
    """Each record of `text` (a text or CSV COPY's data): its first line's number and
    its fields; the header line, when the format has one, is skipped. Every line ends
    as the first does (`\\n`, `\\r\\n` or `\\r`), as PostgreSQL requires; another line
    break outside a quoted CSV field is a `RecordError`."""
    lines, eol = _lines(text)
    i = 1 if fmt.header else 0
    while i < len(lines):
        if fmt.format == "text" and lines[i] == "\\.":
            return
        if fmt.format == "csv" and lines[i] == "\\." and i == len(lines) - 1:
            return
        start = i
        try:
            if fmt.format == "text":
                fields, i = _text_record(lines, i, fmt)
            else:
                fields, i = _csv_record(lines, i, fmt, eol)
        except DataError as error:
            raise RecordError(error.message, start + 1) from None
        yield start + 1, fields


def _lines(text: str) -> tuple[list[str], str]:
    """`text` split at the line break its first line ends with, and that break."""
    first = _LINE_BREAK.search(text)
    eol = "\n" if first is None else first.group()
    lines = text.split(eol)
    if lines and lines[-1] == "":  # the break ending the last line starts no record
        lines.pop()
    return lines, eol


def _stray_break(line: str, kind: str) -> None:
    """Refuse a line break left inside a line (not the data's line break)."""
    for char, name in (("\r", "carriage return"), ("\n", "newline")):
        if char in line:
            raise DataError(
                f"{kind} {name} found in data",
                hint="end every line alike; write a line break in a value as \\n (text) "
                "or inside quotes (CSV)",
            )


def _text_record(lines: list[str], i: int, fmt: CopyFormat) -> tuple[list[str | None], int]:
    """The fields of text-format line `i` (a record is one line), and the next line; a
    delimiter after a backslash is part of its field."""
    line = lines[i]
    _stray_break(line, "literal")
    if "\\" not in line:
        raw = line.split(fmt.delimiter)
    else:
        raw, start, j = [], 0, 0
        while j < len(line):
            if line[j] == "\\":
                j += 2
                continue
            if line[j] == fmt.delimiter:
                raw.append(line[start:j])
                start = j + 1
            j += 1
        raw.append(line[start:])
    return [None if f == fmt.null else _unescape(f) for f in raw], i + 1


def _unescape(field: str) -> str:
    if "\\" not in field:
        return field

    def one(m: re.Match[str]) -> str:
        octal, hexa, char = m.groups()
        if octal is not None:
            return chr(int(octal, 8) & 0xFF)
        if hexa is not None:
            return chr(int(hexa, 16))
        return _ESCAPES.get(char, char)

    return _TEXT_ESCAPE.sub(one, field)


def _csv_record(
    lines: list[str], i: int, fmt: CopyFormat, eol: str
) -> tuple[list[str | None], int]:
    """The fields of the CSV record starting at line `i`, and the line after it; a
    quoted field may run over line breaks (`eol`, kept in its value)."""
    line = lines[i]
    if fmt.quote not in line:  # the common case: no quoting, a plain split
        _stray_break(line, "unquoted")
        return [None if f == fmt.null else f for f in line.split(fmt.delimiter)], i + 1
    fields: list[str | None] = []
    field: list[str] = []
    quoted = in_quotes = False
    j = 0
    while True:
        if j >= len(line):
            if not in_quotes:
                break
            i += 1  # a line break inside quotes is part of the field
            if i >= len(lines):
                raise DataError("unterminated CSV quoted field")
            field.append(eol)
            line, j = lines[i], 0
            continue
        c = line[j]
        if in_quotes:
            if (
                c == fmt.escape
                and j + 1 < len(line)
                and line[j + 1] in (fmt.quote, fmt.escape)
                and (fmt.escape != fmt.quote or line[j + 1] == fmt.quote)
            ):
                field.append(line[j + 1])
                j += 2
                continue
            if c == fmt.quote:
                in_quotes = False
            else:
                field.append(c)
        elif c in "\r\n":
            _stray_break(c, "unquoted")
        elif c == fmt.quote:
            in_quotes = quoted = True
        elif c == fmt.delimiter:
            text = "".join(field)
            fields.append(None if not quoted and text == fmt.null else text)
            field, quoted = [], False
        else:
            field.append(c)
        j += 1
    text = "".join(field)
    fields.append(None if not quoted and text == fmt.null else text)
    return fields, i + 1


def plain_columns(text: str, fmt: CopyFormat, width: int) -> list[pa.Array] | None:
    """The `width` string columns of `text` split by Arrow, when a split is all reading
    takes: every record one line of `width` fields, no quote (CSV) and no backslash but
    in NULL markers (text), no end marker; None otherwise (`records` reads it)."""
    if (fmt.format == "csv" and fmt.quote in text) or "\\.\n" in text or text.endswith("\\."):
        return None
    lines, eol = _lines(text)
    if text.count("\r") + text.count("\n") != len(eol) * text.count(eol):
        return None  # a stray line break, which `records` refuses
    fields = pc.split_pattern(
        pa.array(lines[1:] if fmt.header else lines, pa.string()), fmt.delimiter
    )
    if pc.any(pc.not_equal(pc.list_value_length(fields), width)).as_py():
        return None
    columns = []
    for k in range(width):
        column = pc.list_element(fields, k)
        null = pc.equal(column, fmt.null)
        if (
            fmt.format == "text"
            and pc.any(pc.and_(pc.invert(null), pc.match_substring(column, "\\"))).as_py()
        ):
            return None
        columns.append(pc.if_else(null, pa.scalar(None, pa.string()), column))
    return columns


# --- writing ---------------------------------------------------------------------------------
def render(columns: Sequence[pa.Array], fmt: CopyFormat, names: Sequence[str] = ()) -> str:
    """`columns` (string columns: values in PostgreSQL's text, nulls for NULL) as a text
    or CSV COPY's data, a header of `names` first when the format asks for one; each
    field escaped (text) or quoted (CSV) so that it reads back as itself."""
    header = ""
    if fmt.header:
        header = fmt.delimiter.join(_fields(pa.array(list(names), pa.string()), fmt).to_pylist())
        header += "\n"
    fields = [_fields(c, fmt) for c in columns]
    if not fields or not len(fields[0]):
        return header
    lines = pc.binary_join_element_wise(*fields, fmt.delimiter) if len(fields) > 1 else fields[0]
    return header + "".join(line + "\n" for line in lines.to_pylist())


def _fields(column: pa.Array, fmt: CopyFormat) -> pa.Array:
    """A string column's fields escaped or quoted, NULL as the NULL string."""
    if fmt.format == "text":
        for plain, escaped in (("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
            column = pc.replace_substring(column, plain, escaped)
        if fmt.delimiter != "\t":
            column = pc.replace_substring(column, fmt.delimiter, "\\" + fmt.delimiter)
        return pc.fill_null(column, fmt.null)
    special = pc.or_(
        pc.match_substring_regex(
            column, "[" + re.escape(fmt.delimiter + fmt.quote + fmt.escape) + "\r\n]"
        ),
        pc.is_in(column, pa.array([fmt.null, "\\."])),  # reads as NULL, or as the end
    )
    doubled = column
    if fmt.escape != fmt.quote:
        doubled = pc.replace_substring(doubled, fmt.escape, fmt.escape * 2)
    doubled = pc.replace_substring(doubled, fmt.quote, fmt.escape + fmt.quote)
    quoted = pc.binary_join_element_wise(fmt.quote, doubled, fmt.quote, "")
    return pc.fill_null(pc.if_else(special, quoted, column), fmt.null)


__all__ = ["FORMATS", "CopyFormat", "RecordError", "plain_columns", "records", "render"]
