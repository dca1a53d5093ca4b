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
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokens import TokenType

from dsql.errors import DataError, ParseError
from dsql.grammar.ast import ColumnDef
from dsql.grammar.keywords import is_reserved, reserved_message
from dsql.grammar.source import Fragment
from dsql.planner import interval

T = TypeVar("T")

_CONTEXT = 1 << 30  # sqlglot quotes this much text before an error: all of it

#: The deepest expression tree (sqlglot nodes from the root) a statement may hold. Every
#: later stage (binding, optimizing, rendering) recurses over the tree; past this depth
#: the statement is refused here, with a hint, instead of exhausting Python's stack.
MAX_DEPTH = 400
#: Python frames that parsing, binding, optimizing and rendering a statement may use:
#: sqlglot's recursive descent takes about twenty per level of nesting, so the default
#: limit (1000) would refuse 50 nested parentheses, and the later stages recurse over
#: the tree (`MAX_DEPTH` levels) too. Python 3.11 runs Python-to-Python calls without
#: growing the C stack, so this is safe.
_FRAMES = 20_000
#: A chain of more AND (or OR) operands than this is rebuilt as a balanced tree.
_CHAIN = 8


def _placeholder(parser: Any) -> exp.Expression:
    """A `?` placeholder that remembers its offset in the parsed text (`meta["start"]`),
    so parameters bind in the order the placeholders are written."""
    node = parser.expression(exp.Placeholder(jdbc=True))
    node.meta["start"] = parser._prev.start
    return cast(exp.Expression, node)


def _interval_literal(
    value: str, first: str | None = None, last: str | None = None, precision: int | None = None
) -> exp.Cast:
    """`INTERVAL [(p)] 'value' [first [TO last]]` as the cast of its canonical text, which
    every kernel reads back as exactly PostgreSQL's value (`planner/interval.py`)."""
    parts = interval.parse(value, first, last, precision)
    return exp.cast(exp.Literal.string(interval.canonical(parts)), exp.DType.INTERVAL)


def _interval_casts(tree: exp.Expression) -> exp.Expression:
    """`tree` with every cast of a string literal to interval read as PostgreSQL reads it."""

    def read(node: exp.Expression) -> exp.Expression:
        if (
            isinstance(node, exp.Cast)
            and node.to.is_type(exp.DType.INTERVAL)
            and isinstance(node.this, exp.Literal)
            and node.this.is_string
        ):
            digits = [p.this.this for p in node.to.expressions if isinstance(p.this, exp.Literal)]
            if len(digits) == len(node.to.expressions) <= 1:
                precision = int(digits[0]) if digits else None
                return _interval_literal(node.this.this, precision=precision)
        return node

    return tree.transform(read, copy=False)


_READ_DATE_PART = Postgres.Parser.FUNCTION_PARSERS["DATE_PART"]


def _date_part(node: exp.Expression) -> exp.Expression:
    """`date_part(field, x)`, which sqlglot reads as `extract`, marked as such: PostgreSQL's
    `date_part` answers a double precision, `extract` a numeric."""
    node.meta["date_part"] = True
    return node


class _Dialect(Postgres):
    """PostgreSQL as sqlglot reads it, with `?` placeholders located and interval
    literals read whole (sqlglot keeps only the first field of `'1 day 02:03:04'`)."""

    class Parser(Postgres.Parser):  # type: ignore[misc,valid-type]
        PLACEHOLDER_PARSERS = {  # noqa: RUF012 - sqlglot's class-level table
            **Postgres.Parser.PLACEHOLDER_PARSERS,
            TokenType.PLACEHOLDER: _placeholder,
        }
        FUNCTION_PARSERS = {  # noqa: RUF012 - sqlglot's class-level table
            **Postgres.Parser.FUNCTION_PARSERS,
            "DATE_PART": lambda self: _date_part(
                Postgres.Parser.FUNCTION_PARSERS["DATE_PART"](self)
            ),
        }

        def _parse_interval(
            self, require_interval: bool = True, parse_function_unit: bool = True
        ) -> exp.Expression | None:
            """`INTERVAL 'text' [qualifier]` read by PostgreSQL's rules; other forms
            (`INTERVAL 5 DAY`) as sqlglot reads them."""
            index = self._index
            if not (require_interval and self._match(TokenType.INTERVAL)):
                return super()._parse_interval(require_interval, parse_function_unit)
            precision = self._precision()
            if not self._match(TokenType.STRING):
                self._retreat(index)
                return super()._parse_interval(require_interval, parse_function_unit)
            value = self._prev.text
            first = self._field()
            last = self._field() if first and self._match_text_seq("TO") else None
            if (last or first) == "second":
                precision = self._precision() if precision is None else precision
            return _interval_literal(value, first, last, precision)

        def _parse_type(
            self, parse_interval: bool = True, fallback_to_identifier: bool = False
        ) -> exp.Expression | None:
            """A primary; a typed literal (`timestamp 'text'`) is whole before a `::t`
            that follows it applies, as in PostgreSQL's grammar: `timestamp '...'::date`
            is a date (sqlglot would cast the text to a date, then to a timestamp)."""
            node = super()._parse_type(parse_interval, fallback_to_identifier)
            if self._typed_literal_done:
                self._typed_literal_done = False
                node = self._parse_column_ops(node)
            return node

        def _parse_column_ops(self, this: exp.Expression | None) -> exp.Expression | None:
            """`this` with its `::t`, `[i]`, `.f` operators, none yet on the text of a
            typed literal (`_parse_type` applies them to the typed literal)."""
            if (
                isinstance(this, exp.Literal)
                and this.is_string
                and self._index >= 2
                and self._tokens[self._index - 2].token_type in self.TYPE_TOKENS
                and self._prev.token_type == TokenType.STRING
            ):
                self._typed_literal_done = True
                return this
            return super()._parse_column_ops(this)

        #: Whether a typed literal's text was read without its operators, which the
        #: `_parse_type` reading it then applies.
        _typed_literal_done = False

        def _field(self) -> str | None:
            """The next token as a qualifier field (`YEAR` ... `SECOND`), consumed, or None."""
            if self._curr and self._curr.text.lower() in interval.QUALIFIER_FIELDS:
                self._advance()
                return self._prev.text.lower()
            return None

        def _precision(self) -> int | None:
            """A `(p)` of fractional-second digits, consumed, or None."""
            index = self._index
            if self._match(TokenType.L_PAREN) and self._match(TokenType.NUMBER):
                digits = self._prev.text
                if digits.isdigit() and self._match(TokenType.R_PAREN):
                    return int(digits)
            self._retreat(index)
            return None


_DIALECT = _Dialect()


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
    _refuse_reserved_columns(fragment, text, offset)
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


#: Reserved words that begin a table constraint rather than name a column.
_CONSTRAINT_WORDS = frozenset({"check", "constraint", "foreign", "primary", "unique"})


def _refuse_reserved_columns(fragment: Fragment, text: str, offset: int) -> None:
    """Refuse an element of a column list `(...)` that starts with an unquoted reserved
    word (`(order int)`) as PostgreSQL does, before sqlglot reads it some other way."""
    depth, starts = 0, False
    for token in Postgres().tokenizer_class().tokenize(text):
        if token.token_type in (TokenType.L_PAREN, TokenType.R_PAREN):
            depth += 1 if token.token_type == TokenType.L_PAREN else -1
            starts = depth == 1 and token.token_type == TokenType.L_PAREN
            continue
        if starts and token.token_type not in (TokenType.IDENTIFIER, TokenType.STRING):
            word = token.text
            if is_reserved(word) and word.lower() not in _CONSTRAINT_WORDS:
                raise fragment.error_at(offset + token.start, *reserved_message(word))
        starts = depth == 1 and token.token_type == TokenType.COMMA


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
    if not name.quoted and is_reserved(name.name):
        raise fragment.error_at(where, *reserved_message(name.name))
    folded = name.name if name.quoted else name.name.lower()
    return ColumnDef(folded, node.args["kind"], not_null, default)


_COLUMN_HINT = "a column is `name type [NOT NULL | NULL] [DEFAULT expr] [PRIMARY KEY | UNIQUE]`"


def _parse_one(sql: str) -> exp.Expression:
    tree = sqlglot.parse_one(sql, read=_DIALECT, error_message_context=_CONTEXT)
    return _folded_names(cast(exp.Expression, tree))


def _parse_condition(sql: str) -> exp.Expression:
    tree = sqlglot.parse_one(sql, read=_DIALECT, into=exp.Condition, error_message_context=_CONTEXT)
    return _folded_names(cast(exp.Expression, tree))


def _folded_names(tree: exp.Expression) -> exp.Expression:
    """`tree` with its unquoted names folded to lower case, as PostgreSQL folds them
    (quoted names keep their case), so the planner compares names exactly."""
    return cast(exp.Expression, normalize_identifiers(tree, dialect="postgres"))


@contextmanager
def nesting_room() -> Iterator[None]:
    """Room on Python's stack for recursion over a statement's trees (`_FRAMES`)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, _FRAMES))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def balance_connectives(tree: exp.Expression) -> exp.Expression:
    """`tree` with each long chain of AND (or OR) rebuilt as a balanced tree of the same
    operands in the same order, so a 5,000-term WHERE nests 13 deep, not 5,000.

    AND and OR are associative in SQL's three-valued logic, so the value is unchanged.

    >>> balance_connectives(sqlglot.parse_one(" AND ".join("abcdefghij"))).sql()
    'a AND b AND c AND d AND e AND f AND g AND h AND i AND j'
    """
    roots = [
        node
        for node in tree.find_all(exp.And, exp.Or)
        if type(node.parent) is not type(node) and not _short_chain(node)
    ]
    for node in roots:
        operands = list(node.flatten(unnest=False))
        balanced = _join(type(node), operands)
        if node is tree:
            tree = balanced
        else:
            node.replace(balanced)
    return tree


def _short_chain(node: Any) -> bool:
    """Whether a chain of connectives is at most `_CHAIN` deep (left or right)."""
    depth, left, right = 0, node, node
    while depth <= _CHAIN and (type(left) is type(node) or type(right) is type(node)):
        left = left.this if type(left) is type(node) else left
        right = right.expression if type(right) is type(node) else right
        depth += 1
    return depth <= _CHAIN


def _join(kind: Any, operands: list[Any]) -> exp.Expression:
    """`operands` joined by `kind` (And or Or) as a balanced tree."""
    if len(operands) == 1:
        return operands[0]
    middle = len(operands) // 2
    joined = kind(this=_join(kind, operands[:middle]), expression=_join(kind, operands[middle:]))
    return cast(exp.Expression, joined)


def depth(tree: exp.Expression) -> int:
    """The number of nodes on the longest path from `tree` down to a leaf (iteratively).

    >>> depth(sqlglot.parse_one("1 + (2 * 3)"))
    4
    """
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in node.iter_expressions())
    return deepest


def _too_deep(fragment: Fragment, offset: int, what: str) -> ParseError:
    return fragment.error_at(
        offset,
        f"{what} too deeply nested (more than {MAX_DEPTH} levels)",
        "simplify it: a long list of alternatives reads better as IN (...), a long sum "
        "as SUM over rows, and nested subqueries as a chain of WITH queries",
    )


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
        with nesting_room():
            return _shaped(fragment, offset - len(before), what, parse(before + text + after))
    except RecursionError:
        error = _too_deep(fragment, offset, what)
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if e.errors else {}
        at = len(first["start_context"]) - len(before) if first else len(text.rstrip())
        at = min(max(at, 0), len(text))
        description = first.get("description") or str(e).splitlines()[0]
        highlight = first.get("highlight")
        hint = f"check the {what} near {highlight!r}" if highlight else f"check the {what}"
        error = fragment.error_at(offset + at, f"syntax error in {what}: {description}", hint)
    except ParseError:
        raise
    except DataError as e:
        # A literal's value PostgreSQL rejects (an interval's text): located at that text.
        if e.position is None:
            quoted = re.search(r': "(.*)"$', e.message)
            at = text.find(quoted.group(1)) if quoted else -1
            located = fragment.error_at(offset + max(at, 0), e.message, e.hint)
            e.position, e.statement, e.origin = located.position, located.statement, located.origin
        raise
    except Exception as e:  # noqa: BLE001 -- any sqlglot failure on user text is a parse error
        error = fragment.error_at(offset, f"cannot parse the {what}: {e}", f"check the {what}")
    raise error from None


def _shaped(fragment: Fragment, base: int, what: str, tree: T) -> T:
    """A parsed tree as later stages take it: connective chains balanced, its depth checked,
    and its placeholders' offsets counted in the whole input (`base`: where the parsed
    text starts)."""
    if not isinstance(tree, exp.Expression):
        return tree
    tree = cast(T, _interval_casts(balance_connectives(tree)))
    if depth(cast(exp.Expression, tree)) > MAX_DEPTH:
        raise _too_deep(fragment, base, what)
    for node in cast(exp.Expression, tree).find_all(exp.Placeholder):
        if "start" in node.meta:
            node.meta["start"] += base
    return tree
