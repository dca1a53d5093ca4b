"""Syntax errors a user reads: a lark failure as a `ParseError` with position and hint.

The hint names what the grammar expected, in words ("a table name", "a query",
"IF EXISTS"), and what came just before ("after 'DROP TABLE'"). An unknown first
word of a statement lists the words a statement may start with.

>>> from dsql.grammar import parse
>>> try:
...     parse("DROP TABLE")
... except Exception as e:
...     print(e.position, e.hint)
(1, 11) expected a table name or IF [NOT] EXISTS after 'DROP TABLE'
"""

from __future__ import annotations

import re

from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from dsql.errors import ParseError
from dsql.grammar.source import Fragment

STATEMENT_KEYWORDS = (
    "SELECT, WITH, VALUES, TABLE, CREATE, INSERT, UPDATE, DELETE, DROP, SUBSCRIBE, DECLARE, "
    "FETCH, CLOSE, EXPLAIN, SHOW, ADVANCE, BEGIN, START, COMMIT, END, ROLLBACK, ABORT, SET, COPY"
)

_WORDS = {
    "QUERY": "a query",
    "WITH_MUTUALLY_RECURSIVE": "a query",
    "EXPR": "an expression",
    "VALUE": "an expression",
    "REST": "a value",
    "GROUP": "a parenthesized list",
    "WITH_OPTIONS": "WITH (...)",
    "INT": "a whole number",
    "NUMBER": "a number",
    "STRING": "a string",
    "WORD": "an option name",
    "EQUAL": "'='",
    "COMMA": "','",
    "DOT": "'.'",
    "$END": "the end of the statement",
    "IF": "IF [NOT] EXISTS",
}
_NAMES = frozenset({"NAME", "QUOTED_NAME"})
# The kind of name expected after a keyword, for "expected a table name".
_NAME_AFTER = {
    "TABLE": "a table name",
    "VIEW": "a view name",
    "INDEX": "an index name",
    "ON": "a table or view name",
    "INTO": "a table name",
    "UPDATE": "a table name",
    "FROM": "a table or view name",
    "IN": "a table or view name",
    "DECLARE": "a cursor name",
    "CLOSE": "a cursor name",
    "FETCH": "a cursor name",
    "ALL": "a cursor name",
    "SUBSCRIBE": "a view name",
    "TO": "a view name",
}


def syntax_error(fragment: Fragment, error: UnexpectedInput, start: str) -> ParseError:
    """The ParseError for lark's `error` while reading `fragment` as `start`."""
    masked = fragment.masked
    offset = _offset(fragment, error)
    before = fragment.source.text[fragment.statement[0] : offset]
    if start == "statement" and not masked[: offset - fragment.start].strip():
        word = _word_at(fragment, offset)
        return fragment.error_at(
            offset, f"unknown statement {word!r}", f"a statement starts with {STATEMENT_KEYWORDS}"
        )
    expected = _expected(error, before)
    at_end = offset >= _end(fragment)
    message = (
        "unexpected end of statement" if at_end else f"unexpected {_word_at(fragment, offset)!r}"
    )
    if start != "statement":
        message += {"query": " in a query", "names": " in a name list"}.get(start, f" in {start}")
    after = " ".join(before.split())
    if len(after) > 40:
        after = "..." + after[-37:]
    hint = f"expected {expected}" + (f" after {after!r}" if after else "")
    return fragment.error_at(offset, message, hint)


def _offset(fragment: Fragment, error: UnexpectedInput) -> int:
    """The absolute offset lark's error points at (the end of text for a missing token)."""
    if isinstance(error, UnexpectedToken) and error.token.type == "$END":
        return _end(fragment)
    pos = getattr(error, "pos_in_stream", None)
    if isinstance(error, UnexpectedToken) and error.token.start_pos is not None:
        pos = error.token.start_pos
    return fragment.start + (pos if isinstance(pos, int) else 0)


def _end(fragment: Fragment) -> int:
    return fragment.start + len(fragment.masked.rstrip())


def _word_at(fragment: Fragment, offset: int) -> str:
    """The word (or character) of the original text at `offset`."""
    match = re.match(r"\w+|\S", fragment.source.text[offset:])
    return match.group(0) if match else ""


def _expected(error: UnexpectedInput, before: str) -> str:
    """The expected terminals of `error`, in words, as "a, b or c"."""
    if isinstance(error, UnexpectedToken):
        names = set(error.expected)
    elif isinstance(error, UnexpectedCharacters):
        names = set(error.allowed or ())
    else:
        names = set(getattr(error, "expected", ()) or ())
    previous = before.split()[-1].upper() if before.split() else ""
    words: list[str] = []
    for name in sorted(names, key=lambda n: (n not in _NAMES, n)):
        if name in _NAMES:
            word = _NAME_AFTER.get(previous, "a name")
        else:
            word = _WORDS.get(name, name)
        if word not in words:
            words.append(word)
    if not words:
        return "something else"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
