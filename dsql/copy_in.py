"""The rows a script sends after `COPY ... FROM STDIN`, as psql sends them.

In a script (and the shell), the lines after a `COPY t FROM STDIN ...;` line are the
COPY's data, up to a line holding only `\\.` (or the end of the input); the script
goes on after it. `chunks(text)` cuts a script there: each chunk is SQL whose last
statement may be such a COPY, with the data that followed it. A chunk is padded with
the line breaks before it, so positions in it are positions in the script.

>>> [(c.strip(), d) for c, d in chunks("COPY t FROM STDIN;\\n1\\t2\\n\\\\.\\nSELECT 1;")]
[('COPY t FROM STDIN;', '1\\t2\\n'), ('SELECT 1;', None)]
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

from dsql import grammar

#: A line starting a `COPY ... FROM STDIN` statement, through the end of its line.
_COPY_STDIN = re.compile(r"^[ \t]*copy\b[^;']*?\bfrom\s+stdin\b[^;]*;[^\n]*(?:\n|$)", re.I | re.M)
#: The line ending a COPY's data.
_END = re.compile(r"^\\\.[ \t]*\r?$", re.M)

#: What the shell says before it reads a COPY's rows (psql's words).
PROMPT = (
    "Enter data to be copied followed by a newline.\n"
    "End with a backslash and a period on a line by itself."
)


def chunks(text: str) -> Iterator[tuple[str, str | None]]:
    """The script `text` as (SQL, data of the COPY FROM STDIN that ends it, or None)."""
    lines_before = 0
    while True:
        found = _COPY_STDIN.search(text)
        if found is None:
            yield "\n" * lines_before + text, None
            return
        sql, rest = text[: found.end()], text[found.end() :]
        end = _END.search(rest)
        data, text = (rest, "") if end is None else (rest[: end.start()], rest[end.end() :])
        if text.startswith("\n"):
            text = text[1:]
        yield "\n" * lines_before + sql, data
        lines_before += sql.count("\n") + data.count("\n") + (0 if end is None else 1)


def wants_data(text: str) -> bool:
    """Whether a complete statement text ends with a `COPY ... FROM STDIN`."""
    return _COPY_STDIN.search(text) is not None


def with_data(stmt: Any, data: str | None) -> Any:
    """`stmt` carrying `data` if it is a `COPY ... FROM STDIN` (else as it is)."""
    if isinstance(stmt, grammar.Copy) and stmt.direction == "from" and stmt.path is None:
        return dataclasses.replace(stmt, data=data if data is not None else "")
    return stmt


__all__ = ["PROMPT", "chunks", "wants_data", "with_data"]
