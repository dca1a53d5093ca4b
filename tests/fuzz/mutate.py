"""Mutations of SQL text: each turns a valid statement into a plausible malformed one.

A statement is split into tokens (`tokens`); a mutation picks its spot with the
`random.Random` it is given, so a seeded run produces the same statements on every
machine. The mutations are the classes the issue names: truncation, swapped, dropped
and duplicated tokens, wrong types, huge literals, deep nesting, unknown functions and
names, garbage bytes, unicode, stray keywords, and splices of two statements.

>>> import random
>>> tokens("SELECT a+1 FROM t1")
['SELECT', ' ', 'a', '+', '1', ' ', 'FROM', ' ', 't1']
>>> mutate(random.Random(0), "SELECT a FROM t1", "SELECT 1")[0] in MUTATIONS
True
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

_TOKEN = re.compile(
    r"""'(?:[^']|'')*'?|"(?:[^"]|"")*"?|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\w+|\s+"""
    r"""|<=|>=|<>|!=|\|\||::|."""
)

KEYWORDS = (
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP BY",
    "HAVING",
    "ORDER BY",
    "LIMIT",
    "OFFSET",
    "UNION",
    "UNION ALL",
    "EXCEPT",
    "INTERSECT",
    "JOIN",
    "LEFT JOIN",
    "CROSS JOIN",
    "ON",
    "USING",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "IS",
    "IN",
    "EXISTS",
    "BETWEEN",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "AS",
    "DISTINCT",
    "ALL",
    "WITH",
    "RECURSIVE",
    "MUTUALLY",
    "VALUES",
    "INSERT INTO",
    "UPDATE",
    "SET",
    "DELETE",
    "CREATE",
    "TABLE",
    "VIEW",
    "MATERIALIZED",
    "INDEX",
    "DROP",
    "SUBSCRIBE",
    "AS OF",
    "UP TO",
    "ADVANCE",
    "CAST(",
    "mz_now()",
    "*",
    "(",
    ")",
    ",",
    ";",
    "=",
    "'",
    '"',
    "--",
    "/*",
    "?",
    "$1",
    "::int",
    "[",
    "]",
)
WRONG_TYPES = (
    "'x'",
    "NULL",
    "TRUE",
    "1.5",
    "DATE '2024-01-01'",
    "ARRAY[1, 2]",
    "INTERVAL '1 day'",
    "'2024-13-45'",
    "X'FF'",
    "TIMESTAMP 'nope'",
    "(1, 2)",
    "-0.0",
    "'NaN'::float",
)
HUGE = (
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "99999999999999999999999999999999999999",
    "1e308",
    "1e309",
    "-1e400",
    "0.00000000000000000000000000000000000001",
    "2147483648",
    "4294967296",
    "123456789012345678901234567890.123456789",
)
UNICODE = (
    "é",
    "ß",
    "Ω",
    "😀",
    "\u202e",
    "\u200b",
    "\ufeff",
    "\u0301",
    "中文",
    "\U0010ffff",
    "\ud800",
    "ﬁ",
    "İ",
    "\u2028",
    "𝔘𝔫𝔦",
)
FUNCTIONS = ("nosuch_fn", "mz_nothing", "abs", "coalesce", "generate_series", "count", "sum")


def tokens(text: str) -> list[str]:
    """The text split into tokens whose concatenation is the text."""
    return _TOKEN.findall(text)


def _words(toks: list[str]) -> list[int]:
    return [i for i, t in enumerate(toks) if t.strip()]


def _pick(rng: random.Random, toks: list[str], test: Callable[[str], bool]) -> int | None:
    spots = [i for i, t in enumerate(toks) if test(t)]
    return rng.choice(spots) if spots else None


def _is_number(t: str) -> bool:
    return t[:1].isdigit()


def _is_name(t: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_]\w*", t))


def truncate(rng: random.Random, text: str, other: str) -> str:
    return text[: rng.randrange(len(text) + 1)]


def swap(rng: random.Random, text: str, other: str) -> str:
    toks = tokens(text)
    words = _words(toks)
    if len(words) < 2:
        return text
    i = rng.randrange(len(words) - 1)
    a, b = words[i], words[i + 1] if rng.random() < 0.7 else rng.choice(words)
    toks[a], toks[b] = toks[b], toks[a]
    return "".join(toks)


def drop(rng: random.Random, text: str, other: str) -> str:
    toks = tokens(text)
    words = _words(toks)
    if words:
        del toks[rng.choice(words)]
    return "".join(toks)


def duplicate(rng: random.Random, text: str, other: str) -> str:
    toks = tokens(text)
    words = _words(toks)
    if words:
        i = rng.choice(words)
        toks.insert(i, toks[i] + rng.choice(("", " ")))
    return "".join(toks)


def wrong_type(rng: random.Random, text: str, other: str) -> str:
    toks = tokens(text)
    i = _pick(rng, toks, lambda t: _is_number(t) or t.startswith("'"))
    if i is None:
        i = _pick(rng, toks, _is_name)
    if i is not None:
        toks[i] = rng.choice(WRONG_TYPES)
    return "".join(toks)


def huge(rng: random.Random, text: str, other: str) -> str:
    toks = tokens(text)
    i = _pick(rng, toks, lambda t: _is_number(t) or t.startswith("'"))
    if i is None:
        return text + " LIMIT " + rng.choice(HUGE)
    if toks[i].startswith("'") and rng.random() < 0.5:
        toks[i] = "'" + "x" * rng.choice((1000, 100_000)) + "'"
    else:
        toks[i] = rng.choice(HUGE)
    return "".join(toks)


def nest(rng: random.Random, text: str, other: str) -> str:
    toks = tokens(text)
    depth = rng.choice((20, 200, 1000, 5000))
    i = _pick(rng, toks, lambda t: _is_number(t) or _is_name(t))
    shape = rng.randrange(5)
    if shape == 0 and i is not None:
        toks[i] = "(" * depth + toks[i] + ")" * depth
    elif shape == 1 and i is not None:
        toks[i] = "NOT " * depth + toks[i]
    elif shape == 2 and i is not None:
        toks[i] = "- " * depth + toks[i]
    elif shape == 3:
        inner = "SELECT 1"
        for _ in range(min(depth, 300)):
            inner = f"SELECT * FROM ({inner}) AS s"
        return inner
    else:
        expr = "1"
        for k in range(min(depth, 500)):
            expr = f"CASE WHEN {k} > 0 THEN {expr} ELSE {k} END"
        return f"SELECT {expr}"
    return "".join(toks)


def unknown_function(rng: random.Random, text: str, other: str) -> str:
    toks = tokens(text)
    i = _pick(rng, toks, lambda t: _is_number(t) or _is_name(t))
    if i is None:
        return text
    name = rng.choice(FUNCTIONS)
    args = rng.choice(("", toks[i], f"{toks[i]}, {toks[i]}", "*", f"DISTINCT {toks[i]}"))
    toks[i] = f"{name}({args})"
    return "".join(toks)


def unknown_name(rng: random.Random, text: str, other: str) -> str:
    toks = tokens(text)
    i = _pick(rng, toks, _is_name)
    if i is not None:
        toks[i] = rng.choice(("zz_none", "t1.zz", "a.b.c.d", '"quoted name"', "__time__", "_c0"))
    return "".join(toks)


def garbage(rng: random.Random, text: str, other: str) -> str:
    at = rng.randrange(len(text) + 1)
    junk = "".join(chr(rng.randrange(256)) for _ in range(rng.randrange(1, 8)))
    return text[:at] + junk + text[at:]


def unicode(rng: random.Random, text: str, other: str) -> str:
    toks = tokens(text)
    i = _pick(rng, toks, lambda t: bool(t.strip()))
    if i is None:
        return rng.choice(UNICODE)
    toks[i] = rng.choice((toks[i] + rng.choice(UNICODE), rng.choice(UNICODE)))
    return "".join(toks)


def keyword(rng: random.Random, text: str, other: str) -> str:
    toks = tokens(text)
    toks.insert(rng.randrange(len(toks) + 1), f" {rng.choice(KEYWORDS)} ")
    return "".join(toks)


def splice(rng: random.Random, text: str, other: str) -> str:
    return text[: rng.randrange(len(text) + 1)] + other[rng.randrange(len(other) + 1) :]


MUTATIONS: dict[str, Callable[[random.Random, str, str], str]] = {
    f.__name__: f
    for f in (
        truncate,
        swap,
        drop,
        duplicate,
        wrong_type,
        huge,
        nest,
        unknown_function,
        unknown_name,
        garbage,
        unicode,
        keyword,
        splice,
    )
}


def mutate(rng: random.Random, text: str, other: str) -> tuple[str, str]:
    """One mutation chosen at random (its name) and the mutated text (`other`: for splices)."""
    name = rng.choice(sorted(MUTATIONS))
    return name, MUTATIONS[name](rng, text, other)
