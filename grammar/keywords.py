"""PostgreSQL's reserved words: the keywords that cannot name a table, view, index,
column or cursor unless quoted.

PostgreSQL classes its keywords (`pg_get_keywords()`): reserved ("R") and those that
may name only functions and types ("T") are refused as unquoted names
(`CREATE TABLE select (order int)` is `syntax error at or near "select"`); the others
("U", "C": `view`, `data`, `int`, ...) name objects freely, except the few that
sqlglot, which parses dsql's queries, cannot read as a name (`UNREADABLE`: `between`,
`values`, ...): dsql refuses those unquoted too, rather than create a table whose
queries could not name it. A quoted keyword (`"select"`) is an ordinary name everywhere.

>>> is_reserved("Having"), is_reserved("view"), is_reserved("between")
(True, False, True)
"""

from __future__ import annotations

#: PostgreSQL 15's reserved keywords ("R") and type/function-name keywords ("T").
RESERVED = frozenset(
    """
    all analyse analyze and any array as asc asymmetric both case cast check collate column
    constraint create current_catalog current_date current_role current_time
    current_timestamp current_user default deferrable desc distinct do else end except
    false fetch for foreign from grant group having in initially intersect into lateral
    leading limit localtime localtimestamp not null offset on only or order placing primary
    references returning select session_user some symmetric table then to trailing true
    union unique user using variadic when where window with
    authorization binary collation concurrently cross current_schema freeze full ilike
    inner is isnull join left like natural notnull outer overlaps right similar tablesample
    verbose
    """.split()
)


#: PostgreSQL's other keywords that sqlglot does not read as a table or column name in a
#: query (`SELECT between FROM t`): unquoted, dsql refuses them as names.
UNREADABLE = frozenset(
    {"alter", "between", "drop", "exclude", "if", "insert", "revoke", "rollback", "values"}
)


def is_reserved(word: str) -> bool:
    """Whether unquoted `word` cannot be a name (PostgreSQL's reserved words, and
    `UNREADABLE`)."""
    return word.lower() in RESERVED or word.lower() in UNREADABLE


def reserved_message(word: str) -> tuple[str, str]:
    """The error for reserved `word` used as a name (PostgreSQL's), and the hint."""
    low = word.lower()
    why = "a reserved word" if low in RESERVED else "a keyword dsql's queries cannot read as a name"
    return (f'syntax error at or near "{word}"', f'"{low}" is {why}; quote it to name: "{low}"')


__all__ = ["RESERVED", "UNREADABLE", "is_reserved", "reserved_message"]
