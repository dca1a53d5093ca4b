"""Query parameters: a parsed statement's `?` placeholders replaced by typed literal nodes.

Parameters are bound in the statement's AST, never spliced into its text: the grammar
parses the statement with its placeholders (each sqlglot `Placeholder` remembers where
it was written), and `bind` puts, in their order, one literal node per Python value. So
a string holding `'`, `--`, `$$`, `?` or a backslash is a string, and a float keeps all
its digits (`inf` and `nan` included).

| Python | SQL |
|---|---|
| `None` | `NULL` |
| `bool` | `TRUE` / `FALSE` |
| `int` | an integer literal |
| `float` | `CAST('<repr>' AS DOUBLE PRECISION)` (`'Infinity'`, `'NaN'`) |
| `decimal.Decimal` | a numeric literal |
| `str` | a string literal |
| `bytes`, `bytearray`, `memoryview` | `X'<hex>'` (dsql reads it as bytea) |
| `datetime.datetime` | `CAST('<iso>' AS TIMESTAMP)` (`TIMESTAMPTZ` when aware) |
| `datetime.date`, `datetime.time` | `CAST('<iso>' AS DATE)`, `TIME` |
| `datetime.timedelta` | `CAST('<n> microseconds' AS INTERVAL)` |

>>> from dsql import grammar
>>> (stmt,) = grammar.parse("SELECT ? AS a, '?' AS b WHERE ? -- ?")
>>> bind(stmt, ("it's", True)).query.sql("postgres")
"SELECT 'it''s' AS a, '?' AS b WHERE TRUE"
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
from collections.abc import Iterator, Sequence
from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from dsql import grammar
from dsql.errors import ParameterError
from dsql.grammar.source import Source


def bind(stmt: Any, parameters: Sequence[Any] | None) -> Any:
    """`stmt` with its i-th `?` (in the order written) replaced by `parameters[i]`'s literal.

    The statement itself is left as it was (its trees are copied where they change), so
    one parse serves every row of `executemany`. Too many or too few parameters, or a `?`
    where the grammar takes no expression, is a `ParameterError`.
    """
    text = getattr(stmt, "text", None)
    placeholders = sorted(
        (p.meta["start"], p)
        for tree in _trees(stmt)
        for p in tree.find_all(exp.Placeholder)
        if "start" in p.meta
    )
    given = () if parameters is None else parameters
    if isinstance(given, str | bytes) or not isinstance(given, Sequence):
        raise ParameterError(
            f"parameters must be a sequence (a tuple or list), not {type(given).__name__}",
            statement=text,
            hint="dsql's paramstyle is qmark: execute('... ?', (value,))",
        )
    written = _question_marks(text) if text is not None else len(placeholders)
    if written != len(placeholders):
        raise ParameterError(
            "a ? placeholder stands where the statement takes no expression",
            statement=text,
            hint="parameters stand for values inside queries and expressions",
        )
    if len(given) != len(placeholders):
        raise ParameterError(
            f"the statement has {len(placeholders)} ? placeholders but "
            f"{len(given)} parameters were given",
            statement=text,
            hint="pass one parameter per ?",
        )
    if not placeholders:
        return stmt
    if isinstance(stmt, _DEFINITIONS):
        raise ParameterError(
            f"parameters are not allowed in {type(stmt).__name__} statements: the "
            "definition is kept as its text",
            statement=text,
            hint="write the values into the statement as literals",
        )
    literals = {
        start: literal(value, text) for (start, _), value in zip(placeholders, given, strict=True)
    }
    return _map_trees(stmt, lambda tree: _substituted(tree, literals))


#: Statements whose text is kept as the object's definition (SHOW CREATE shows it), so a
#: `?` in them would outlive its value; PostgreSQL refuses parameters there too.
_DEFINITIONS = (grammar.CreateView, grammar.CreateIndex)


def literal(value: Any, statement: str | None = None) -> exp.Expression:
    """The SQL literal node of one Python value (see the module's table).

    >>> literal(float("nan")).sql("postgres"), literal(b"\\x00A").sql("duckdb")
    ("CAST('NaN' AS DOUBLE PRECISION)", "UNHEX('0041')")
    """
    match value:
        case None:
            return exp.Null()
        case bool():
            return exp.Boolean(this=value)
        case int():
            return exp.Literal.number(value)
        case float():
            return exp.cast(exp.Literal.string(_float_text(value)), exp.DataType.Type.DOUBLE)
        case decimal.Decimal() if value.is_finite():
            return exp.Literal.number(format(value, "f"))
        case decimal.Decimal():
            return exp.cast(exp.Literal.string(_float_text(float(value))), "numeric")
        case str():
            return exp.Literal.string(value)
        case bytes() | bytearray() | memoryview():
            return exp.HexString(this=bytes(value).hex())
        case dt.datetime():
            kind = "timestamp" if value.tzinfo is None else "timestamptz"
            return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), kind)
        case dt.date():
            return exp.cast(exp.Literal.string(value.isoformat()), "date")
        case dt.time():
            return exp.cast(exp.Literal.string(value.isoformat()), "time")
        case dt.timedelta():
            micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
            return exp.cast(exp.Literal.string(f"{micros} microseconds"), "interval")
    raise ParameterError(
        f"cannot bind a parameter of type {type(value).__name__}",
        statement=statement,
        hint="pass None, bool, int, float, Decimal, str, bytes, or a datetime "
        "date, time, datetime or timedelta",
    )


def _float_text(value: float) -> str:
    """A float as PostgreSQL reads it back exactly (`repr` is the shortest exact text)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _question_marks(text: str) -> int:
    """How many `?` placeholders the statement's text holds, outside strings and comments
    (by the tokenizer the grammar reads it with)."""
    return sum(t.token_type == TokenType.PLACEHOLDER for t in Source(text).tokens)


def _substituted(tree: exp.Expression, literals: dict[int, exp.Expression]) -> exp.Expression:
    if tree.find(exp.Placeholder) is None:
        return tree
    copy = tree.copy()
    for node in list(copy.find_all(exp.Placeholder)):
        if "start" not in node.meta:
            continue  # `:name`: not a qmark placeholder
        value = literals[node.meta["start"]].copy()
        if node is copy:
            return value
        node.replace(value)
    return copy


def _trees(value: Any) -> Iterator[exp.Expression]:
    """Every sqlglot tree a statement holds (in its fields, tuples and nested parts)."""
    if isinstance(value, exp.Expression):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _trees(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _trees(getattr(value, field.name))


def _map_trees(value: Any, change: Any) -> Any:
    """`value` with each sqlglot tree `t` in it replaced by `change(t)`."""
    if isinstance(value, exp.Expression):
        return change(value)
    if isinstance(value, tuple):
        return tuple(_map_trees(item, change) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: _map_trees(getattr(value, f.name), change)
            for f in dataclasses.fields(value)
            if f.init
        }
        return dataclasses.replace(value, **changes)
    return value


__all__ = ["bind", "literal"]
