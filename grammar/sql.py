"""The bridge to sqlglot: query, expression and column-definition text to sqlglot trees.

Every SQL query or expression inside a statement is parsed here, by sqlglot's
PostgreSQL dialect, and only here; the grammar only finds where each one is. A piece
of text is passed with the absolute offset of its first character, so a sqlglot error
becomes a `ParseError` at the right (line, column) of the whole input.

Invariant: every function either returns a tree or raises `ParseError`, whatever the
text (sqlglot's own exceptions never escape).

>>> from dsql.grammar.source import Source
>>> fragment = Source("SELECT 1 +").statements()[0]
>>> parse_query(fragment, "SELECT 1 +", 0)
Traceback (most recent call last):
...
dsql.errors.ParseError: syntax error in query: Required keyword: 'expression' missing ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from dsql.grammar.ast import ColumnDef
from dsql.grammar.source import Fragment

T = TypeVar("T")

_CONTEXT = 1 << 30  # sqlglot quotes this much text before an error: all of it


def parse_query(fragment: Fragment, text: str, offset: int) -> exp.Query | exp.Values:
    """The query in `text` (at absolute `offset`): a sqlglot Query, or Values for VALUES."""
    tree = _parse(fragment, text, offset, "query", _parse_one)
    if not isinstance(tree, exp.Query | exp.Values):
        raise fragment.error_at(
            offset,
            f"expected a query, found {type(tree).__name__.upper()}",
            "a query is SELECT, VALUES, TABLE, WITH ... or a set operation of them",
        )
    return tree


def parse_expression(fragment: Fragment, text: str, offset: int) -> exp.Expression:
    """The one scalar expression in `text` (at absolute `offset`)."""
    return _parse(fragment, text, offset, "expression", _parse_condition)


def parse_expressions(fragment: Fragment, text: str, offset: int) -> tuple[exp.Expression, ...]:
    """The comma-separated expressions in `text`, the inside of a `( ... )` at `offset`."""
    tree = _parse(fragment, text, offset, "expression", _parse_condition, wrap=("(", ")"))
    match tree:
        case exp.Tuple():
            return tuple(tree.expressions)
        case exp.Paren():
            return (tree.this,)
    return (tree,)


@dataclass(frozen=True, slots=True)
class TableElements:
    """A CREATE TABLE's columns and its declared keys (column or table constraints).

    Invariant: `primary_key` and every `unique` key name columns of `columns`, and the
    primary key's columns are NOT NULL.
    """

    columns: tuple[ColumnDef, ...]
    primary_key: tuple[str, ...] = ()
    unique: tuple[tuple[str, ...], ...] = ()


def parse_columns(fragment: Fragment, text: str, offset: int) -> tuple[ColumnDef, ...]:
    """The column definitions `(name type [NOT NULL | NULL] [DEFAULT e], ...)` in `text`.

    `text` includes its parentheses and starts at absolute `offset`. Keys (PRIMARY KEY,
    UNIQUE) are refused: only a table has them (`parse_table_elements`).
    """
    elements = parse_table_elements(fragment, text, offset)
    if elements.primary_key or elements.unique:
        raise fragment.error_at(offset, "only a table has keys", _COLUMN_HINT)
    return elements.columns


def parse_table_elements(fragment: Fragment, text: str, offset: int) -> TableElements:
    """A table's columns and keys: column definitions (`PRIMARY KEY` and `UNIQUE` allowed
    after the type) and table constraints `[CONSTRAINT name] PRIMARY KEY (a, ...)` and
    `UNIQUE (a, ...)`. A primary key's columns become NOT NULL.

    >>> from dsql.grammar.source import Source
    >>> text = "(a int PRIMARY KEY, b text UNIQUE)"
    >>> t = parse_table_elements(Source(text).statements()[0], text, 0)
    >>> t.primary_key, t.unique, [c.not_null for c in t.columns]
    (('a',), (('b',),), [True, False])
    """
    wrap = ("CREATE TABLE t ", "")
    tree = _parse(fragment, text, offset, "column list", _parse_one, wrap=wrap)
    schema = tree.this if isinstance(tree, exp.Create) else None
    if not isinstance(schema, exp.Schema) or not schema.expressions:
        raise fragment.error_at(
            offset, "expected column definitions", "write (name type, ...), e.g. (a int, b text)"
        )
    base = offset - len(wrap[0])
    columns: list[ColumnDef] = []
    keys: list[tuple[str, tuple[str, ...]]] = []  # ("primary" | "unique", columns)
    for node in schema.expressions:
        key = _table_key(node)
        if key is not None:
            keys.append(key)
            continue
        column = _column(fragment, node, base)
        columns.append(column)
        keys.extend((kind, (column.name,)) for kind in _column_keys(node))
    return _with_keys(fragment, offset, tuple(columns), keys)


def _table_key(node: exp.Expression) -> tuple[str, tuple[str, ...]] | None:
    """A table constraint as (kind, column names), None if `node` is no key."""
    if isinstance(node, exp.Constraint) and len(node.expressions) == 1:
        node = node.expressions[0]
    match node:
        case exp.PrimaryKey():
            return "primary", tuple(_folded(i) for i in node.expressions)
        case exp.UniqueColumnConstraint(this=exp.Schema() as cols):
            return "unique", tuple(_folded(i) for i in cols.expressions)
    return None


def _column_keys(node: exp.Expression) -> list[str]:
    kinds = {exp.PrimaryKeyColumnConstraint: "primary", exp.UniqueColumnConstraint: "unique"}
    return [
        kinds[type(c.kind)] for c in node.args.get("constraints") or () if type(c.kind) in kinds
    ]


def _folded(ident: exp.Expression) -> str:
    if isinstance(ident, exp.Identifier):
        return ident.name if ident.quoted else ident.name.lower()
    return ident.sql("postgres").lower()


def _with_keys(
    fragment: Fragment,
    offset: int,
    columns: tuple[ColumnDef, ...],
    keys: list[tuple[str, tuple[str, ...]]],
) -> TableElements:
    names = [c.name for c in columns]
    primary = [cols for kind, cols in keys if kind == "primary"]
    if len(primary) > 1:
        raise fragment.error_at(
            offset,
            "multiple primary keys for a table are not allowed",
            "declare one PRIMARY KEY (a, b, ...) over all the key's columns",
        )
    for _, cols in keys:
        missing = [c for c in cols if c not in names]
        if missing:
            raise fragment.error_at(
                offset,
                f"column '{missing[0]}' named in a key does not exist",
                f"the table's columns are {', '.join(names)}",
            )
    pk = primary[0] if primary else ()
    columns = tuple(dataclasses.replace(c, not_null=True) if c.name in pk else c for c in columns)
    unique = tuple(cols for kind, cols in keys if kind == "unique")
    return TableElements(columns, pk, unique)


def string_value(text: str) -> str:
    """The value of one SQL string literal's source text (quotes and escapes resolved)."""
    (token,) = Postgres().tokenizer_class().tokenize(text)
    return token.text


def _column(fragment: Fragment, node: exp.Expression, base: int) -> ColumnDef:
    """One sqlglot ColumnDef as ours; `base` maps sqlglot offsets to the input."""
    ident = node if isinstance(node, exp.Identifier) else node.find(exp.Identifier)
    where = base + ident.meta["start"] if ident and "start" in ident.meta else fragment.start
    if isinstance(node, exp.Identifier):
        raise fragment.error_at(where, f"column {node.name} has no type", _COLUMN_HINT)
    if not isinstance(node, exp.ColumnDef):
        raise fragment.error_at(
            where, f"unsupported table element: {node.sql('postgres')}", _COLUMN_HINT
        )
    name = node.this
    if not isinstance(name, exp.Identifier):  # `f(x) int`: sqlglot accepts any expression
        raise fragment.error_at(where, f"{name.sql('postgres')} is not a column name", _COLUMN_HINT)
    if not isinstance(node.args.get("kind"), exp.DataType):
        raise fragment.error_at(where, f"column {name.name} has no type", "write `name type`")
    not_null, default = False, None
    for constraint in node.args.get("constraints") or ():
        match constraint.kind:
            case exp.NotNullColumnConstraint(args={"allow_null": True}):
                not_null = False
            case exp.NotNullColumnConstraint():
                not_null = True
            case exp.DefaultColumnConstraint():
                default = constraint.kind.this
            case exp.PrimaryKeyColumnConstraint() | exp.UniqueColumnConstraint():
                pass  # a key: read by parse_table_elements
            case _:
                raise fragment.error_at(
                    where,
                    f"unsupported constraint on column {name.name}: {constraint.sql('postgres')}",
                    _COLUMN_HINT,
                )
    folded = name.name if name.quoted else name.name.lower()
    return ColumnDef(folded, node.args["kind"], not_null, default)


_COLUMN_HINT = "a column is `name type [NOT NULL | NULL] [DEFAULT expr] [PRIMARY KEY | UNIQUE]`"


def _parse_one(sql: str) -> exp.Expression:
    tree = sqlglot.parse_one(sql, read="postgres", error_message_context=_CONTEXT)
    return _folded_names(cast(exp.Expression, tree))


def _parse_condition(sql: str) -> exp.Expression:
    tree = sqlglot.parse_one(
        sql, read="postgres", into=exp.Condition, error_message_context=_CONTEXT
    )
    return _folded_names(cast(exp.Expression, tree))


def _folded_names(tree: exp.Expression) -> exp.Expression:
    """`tree` with its unquoted names folded to lower case, as PostgreSQL folds them
    (quoted names keep their case), so the planner compares names exactly."""
    return cast(exp.Expression, normalize_identifiers(tree, dialect="postgres"))


def _parse(
    fragment: Fragment,
    text: str,
    offset: int,
    what: str,
    parse: Callable[[str], T],
    wrap: tuple[str, str] = ("", ""),
) -> T:
    """`parse(before + text + after)`, a failure raised as a ParseError at its input position.

    `text` starts at absolute `offset`; an error inside the added `wrap` text is reported
    at the nearest end of `text`.
    """
    before, after = wrap
    try:
        return parse(before + text + after)
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if e.errors else {}
        at = len(first["start_context"]) - len(before) if first else len(text.rstrip())
        at = min(max(at, 0), len(text))
        description = first.get("description") or str(e).splitlines()[0]
        highlight = first.get("highlight")
        hint = f"check the {what} near {highlight!r}" if highlight else f"check the {what}"
        error = fragment.error_at(offset + at, f"syntax error in {what}: {description}", hint)
    except Exception as e:  # noqa: BLE001 -- any sqlglot failure on user text is a parse error
        error = fragment.error_at(offset, f"cannot parse the {what}: {e}", f"check the {what}")
    raise error from None
