"""How results look: rich tables on a terminal, one plain deterministic format otherwise.

The plain format is psql's aligned format (header, a rule, rows, `(n rows)`), with
NULL written `NULL`, numbers right-aligned, and a blank line after each block; it
depends only on the rows, so `dsql run` output can be compared to a golden file.
Errors go to the error stream as `error: message`, the statement with a caret, the
hint, and where the statement is (`file:line`).

>>> import io, pyarrow as pa
>>> out = io.StringIO()
>>> Printer(out, out, rich=False).table(pa.table({"a": [1, None], "name": ["x", "yz"]}))
>>> print(out.getvalue(), end="")
  a   | name
------+------
    1 | x
 NULL | yz
(2 rows)
<BLANKLINE>
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any, TextIO

import pyarrow as pa

from dsql.errors import DsqlError
from dsql.planner import interval
from dsql.results import python_values
from dsql.runtime.kernel import float_text as float_texts


def one_line(text: str, width: int = 72) -> str:
    """`text` with its whitespace collapsed, cut to `width` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def format_value(value: Any) -> str:
    """One value as the plain format prints it: psql's text (`t`/`f`, arrays `{a,b}`).

    >>> format_value([["a b", None], ["", "x,y"]]), format_value(True), format_value(float("inf"))
    ('{{"a b",NULL},{"","x,y"}}', 't', 'Infinity')
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, dt.datetime | dt.time):
        return _time_text(value)
    if isinstance(value, dt.date | decimal.Decimal):
        return str(value)
    if isinstance(value, list):
        return "{" + ",".join(_array_element(v) for v in value) + "}"
    if isinstance(value, pa.MonthDayNano):
        return interval.text(value.months, value.days, value.nanoseconds // 1000)
    return str(value)


def float_text(value: float, single: bool = False) -> str:
    """A float as PostgreSQL writes it (`runtime.kernel.float_text.text`): the fewest
    digits that read back as the same value (of a `real` where `single`), in exponent
    form from 10^15 (10^6 for a real) or below 10^-4, without a trailing `.0`.

    >>> float_text(2.0), float_text(1e20), float_text(0.1), float_text(1e-7)
    ('2', '1e+20', '0.1', '1e-07')
    >>> float_text(0.1, single=True), float_text(1234567.0, single=True)
    ('0.1', '1.234567e+06')
    """
    return float_texts.text(value, single)


def column_texts(column: pa.ChunkedArray | pa.Array) -> list[str]:
    """A result column's cells as the plain format prints them (a `real` with a real's
    digits)."""
    if pa.types.is_float32(column.type):
        return ["NULL" if v is None else float_text(v, single=True) for v in column.to_pylist()]
    if pa.types.is_interval(column.type):  # its text, never the Python value's
        return [format_value(v) for v in column.to_pylist()]
    return [format_value(v) for v in python_values(column)]


def _time_text(value: dt.datetime | dt.time) -> str:
    """A timestamp or time as PostgreSQL writes it: no trailing zeros in the fraction, a
    whole-hour zone as `+00`."""
    text = str(value)
    zone = ""
    if value.utcoffset() is not None and text[-6] in "+-":
        text, zone = text[:-6], text[-6:]
        zone = zone[:3] if zone.endswith(":00") else zone
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text + zone


def _array_element(value: Any) -> str:
    """An array element as PostgreSQL's array text writes it: quoted where it is empty,
    spells NULL, or holds blanks, commas, braces, quotes or backslashes."""
    if value is None or isinstance(value, list):
        return format_value(value)
    text = format_value(value)
    if text == "" or text.upper() == "NULL" or any(c in _ARRAY_SPECIAL for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


_ARRAY_SPECIAL = frozenset('{},"\\ \t\n\r\x0b\x0c')


def _is_number(dtype: pa.DataType) -> bool:
    """Whether a column holds numbers, which psql aligns to the right."""
    return pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype)


def plain_table(table: pa.Table) -> str:
    """A table in psql's aligned format, with its `(n rows)` footer."""
    names = table.column_names
    cells = [column_texts(column) for column in table.columns]
    numeric = [_is_number(f.type) for f in table.schema]
    widths = [max([len(n), *(len(c) for c in col)]) for n, col in zip(names, cells, strict=True)]
    lines = [
        (" " + " | ".join(n.center(w) for n, w in zip(names, widths, strict=True))).rstrip(),
        "-" + "-+-".join("-" * w for w in widths) + "-",
    ]
    for r in range(table.num_rows):
        row = []
        for c, w in enumerate(widths):
            cell = cells[c][r]
            row.append(cell.rjust(w) if numeric[c] else cell.ljust(w))
        lines.append((" " + " | ".join(row)).rstrip())
    n = table.num_rows
    lines.append(f"({n} row{'' if n == 1 else 's'})")
    return "\n".join(lines)


class Printer:
    """Writes results, subscription updates, plans and errors to two streams."""

    def __init__(self, out: TextIO, err: TextIO, rich: bool | None = None) -> None:
        self.out = out
        self.err = err
        self.rich = out.isatty() if rich is None else rich
        self._console: Any = None
        self._after_blank = True  # nothing written yet: no separating line needed

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.out, highlight=False)
        return self._console

    def _write(self, text: str, stream: TextIO | None = None) -> None:
        stream = stream or self.out
        stream.write(text + "\n")
        stream.flush()
        if stream is self.out:
            self._after_blank = text == "" or text.endswith("\n")

    def echo(self, statement: str) -> None:
        """The statement as typed, set off from the previous result by a blank line."""
        if not self._after_blank:
            self._write("")
        self._write(statement.strip() + ";")

    def result(self, result: Any) -> None:
        """A statement's result: its rows (or plan), COPY TO STDOUT's data as it is, else
        its status line."""
        if getattr(result, "output", None) is not None:
            self.out.write(result.output)
            self.out.flush()
        elif result.status == "EXPLAIN" and result.table is not None:
            self.plan(None, "\n".join(result.table.column(0).to_pylist()))
        elif result.table is not None:
            rows = result.table
            if result.batches is not None:  # streamed from Spark: a table shows every row
                rows = pa.concat_tables([rows, *result.batches])
            self.table(rows)
        else:
            self._write(result.status)

    def table(self, table: pa.Table, title: str | None = None) -> None:
        if not self.rich:
            self._write(plain_table(table) + "\n")
            return
        from rich.table import Table

        view = Table(title=title, title_justify="left", show_edge=True)
        for field in table.schema:
            numeric = _is_number(field.type)
            view.add_column(field.name, justify="right" if numeric else "left")
        for row in zip(*(column_texts(c) for c in table.columns), strict=True):
            view.add_row(*row)
        self.console.print(view)
        n = table.num_rows
        self.console.print(f"[dim]({n} row{'' if n == 1 else 's'})[/dim]")

    def updates(self, label: str, table: pa.Table) -> None:
        """New updates of a running subscription."""
        if self.rich:
            self.table(table, title=label)
        else:
            self._write(f"-- {label}")
            self.table(table)

    def plan(self, label: str | None, text: str) -> None:
        if label is not None:
            self._write(f"-- {label}")
        self._write(text + "\n")

    def note(self, text: str) -> None:
        self._write(text, self.err)

    def error(self, error: DsqlError, where: str | None) -> None:
        """`error: ...` with caret and hint, and where the statement is."""
        text = f"error: {error}"
        if where:
            text += f"\n  at {where}"
        self._write(text, self.err)

    def internal_error(self, error: BaseException) -> None:
        self._write(
            f"error: internal error: {type(error).__name__}: {error}\n"
            "hint: this is a dsql bug; please report it (DSQL_TRACEBACK=1 shows the traceback)",
            self.err,
        )


__all__ = ["Printer", "format_value", "one_line", "plain_table"]
