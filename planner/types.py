"""SQL column types: sqlglot `DataType`s, their Arrow counterparts, and inference.

dsql speaks PostgreSQL's types. A column's type is a sqlglot `exp.DataType`; the
runtime stores Arrow, so every SQL type has one Arrow type (`to_arrow`) and back
(`from_arrow`). Expression types are inferred with sqlglot's `annotate_types`
over the input columns; an expression sqlglot cannot type is `UNKNOWN`, and the
runtime's schema (evaluated over empty inputs) is then authoritative.

>>> to_arrow(exp.DataType.build("int"))
DataType(int32)
>>> from_arrow(pa.int64()).sql("postgres")
'BIGINT'
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types

from dsql.errors import DataError, TypeMismatchError, UnsupportedError
from dsql.planner import numeric

T = exp.DType  # `exp.DataType.Type`, under the name type checkers take as a type

_TO_ARROW: dict[T, pa.DataType] = {
    T.BOOLEAN: pa.bool_(),
    T.TINYINT: pa.int16(),
    T.SMALLINT: pa.int16(),
    T.INT: pa.int32(),
    T.BIGINT: pa.int64(),
    T.FLOAT: pa.float32(),
    T.DOUBLE: pa.float64(),
    T.TEXT: pa.string(),
    T.VARCHAR: pa.string(),
    T.CHAR: pa.string(),
    T.NCHAR: pa.string(),
    T.NVARCHAR: pa.string(),
    T.DATE: pa.date32(),
    T.TIMESTAMP: pa.timestamp("us"),
    T.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    T.INTERVAL: pa.month_day_nano_interval(),  # planner/interval.py
    T.BINARY: pa.binary(),
    T.VARBINARY: pa.binary(),
    T.UNKNOWN: pa.null(),
    T.NULL: pa.null(),
}

#: NUMERIC without precision: PostgreSQL's is unbounded; 38 digits, 10 after the point here.
DEFAULT_DECIMAL = (38, 10)


def build(text: str | exp.DataType) -> exp.DataType:
    """A sqlglot type from PostgreSQL type text (or a type, unchanged)."""
    if isinstance(text, exp.DataType):
        return text
    return exp.DataType.build(text, dialect="postgres")


def one_dimensional(dtype: exp.DataType) -> exp.DataType:
    """An array type without its declared extra dimensions: PostgreSQL reads `int[][]`
    as `int[]` (a declared number of dimensions is documentation only).

    >>> one_dimensional(exp.DataType.build("int[][]", dialect="postgres")).sql("postgres")
    'INT[]'
    """
    element = dtype
    while element.this == T.ARRAY and element.expressions:
        element = element.expressions[0]
    if element is dtype:
        return dtype
    return exp.DataType(this=T.ARRAY, expressions=[element.copy()], nested=True)


def to_arrow(dtype: exp.DataType) -> pa.DataType:
    """The Arrow type dsql stores a SQL type as; a TypeMismatchError if there is none."""
    kind = dtype.this
    if kind == T.INTERVAL and dtype.expressions:
        raise _interval_precision()
    if kind in _TO_ARROW:
        return _TO_ARROW[kind]
    if kind in (T.DECIMAL, T.BIGDECIMAL):
        params = [int(p.this.this) for p in dtype.expressions if isinstance(p.this, exp.Literal)]
        precision, scale = (params + list(DEFAULT_DECIMAL[len(params) :]))[:2]
        if not params:
            precision, scale = DEFAULT_DECIMAL
        return pa.decimal128(precision, scale)
    if kind == T.ARRAY and dtype.expressions:
        return pa.list_(to_arrow(one_dimensional(dtype).expressions[0]))
    raise TypeMismatchError(
        f"type {dtype.sql('postgres')} is not supported",
        hint="use integer, bigint, double precision, numeric(p,s), text, boolean, date, "
        "timestamp or interval",
    )


#: Types a value may be cast to beyond those stored (`_TO_ARROW`, numeric, arrays).
_CAST_ONLY = frozenset({T.TIME, T.UUID})

#: JSON types: PostgreSQL's jsonb normalizes its text (key order, spacing, numbers) and
#: has its own operators; dsql has neither, so a cast to one is refused.
JSON_TYPES = frozenset({T.JSON, T.JSONB})

JSON_HINT = "keep JSON as text; dsql has no json or jsonb type, operators or functions"


def check_cast_target(dtype: exp.DataType) -> None:
    """Refuse a cast to a type dsql does not know (`::regclass`, `::pg_lsn`, a user type):
    the kernels would resolve the name in their own catalogs."""
    kind = dtype.this
    if kind == T.ARRAY and dtype.expressions:
        check_cast_target(dtype.expressions[0])
        return
    if kind == T.INTERVAL and dtype.expressions:
        raise _interval_precision()
    if kind in _TO_ARROW or kind in _CAST_ONLY or kind in (T.DECIMAL, T.BIGDECIMAL):
        return
    if kind in JSON_TYPES:
        raise UnsupportedError(f"type {kind.value.lower()} is not supported", hint=JSON_HINT)
    raise TypeMismatchError(
        f"type {dtype.sql('postgres').lower()} does not exist",
        hint="use integer, bigint, double precision, numeric(p,s), text, boolean, date, "
        "timestamp, interval or an array of one",
    )


def _interval_precision() -> TypeMismatchError:
    """The refusal of `interval(p)` as a column type or the cast of a value (an interval
    literal's `(p)` rounds: `planner/interval.py`)."""
    return TypeMismatchError(
        "type interval(p) is not supported",
        hint="use interval, and round the seconds where they are written: "
        "interval(2) '1.234 seconds'",
    )


def from_arrow(dtype: pa.DataType) -> exp.DataType:
    """The SQL type of an Arrow type."""
    if pa.types.is_boolean(dtype):
        return build("boolean")
    if pa.types.is_int8(dtype) or pa.types.is_int16(dtype):
        return build("smallint")
    if pa.types.is_int32(dtype):
        return build("int")
    if pa.types.is_integer(dtype):
        return build("bigint")
    if pa.types.is_float32(dtype):
        return build("real")
    if pa.types.is_floating(dtype):
        return build("double precision")
    if pa.types.is_decimal(dtype):
        return build(f"numeric({dtype.precision}, {dtype.scale})")
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return build("text")
    if pa.types.is_date(dtype):
        return build("date")
    if pa.types.is_timestamp(dtype):
        return build("timestamptz" if dtype.tz else "timestamp")
    if pa.types.is_interval(dtype):
        return build("interval")
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return build("bytea")
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        inner = from_arrow(dtype.value_type)
        return exp.DataType(this=T.ARRAY, expressions=[inner], nested=True)
    if pa.types.is_null(dtype):
        return exp.DataType.build("unknown")
    return exp.DataType.build("unknown")


def is_integer(dtype: exp.DataType) -> bool:
    return dtype.this in exp.DataType.INTEGER_TYPES


def is_numeric(dtype: exp.DataType) -> bool:
    return dtype.this in exp.DataType.NUMERIC_TYPES


def is_unknown(dtype: exp.DataType) -> bool:
    return dtype.this in (T.UNKNOWN, T.NULL)


def infer(expression: exp.Expr, inputs: Sequence[exp.DataType]) -> exp.DataType:
    """The type of an expression over columns `_c0.._cN` of the given types.

    The expression is annotated in place (sqlglot caches types on nodes), which
    the binder relies on to rewrite integer division.
    """
    literal = integer_literal(expression)
    if literal is not None and not -(2**31) <= literal < 2**31:
        # sqlglot types every integer literal as int; PostgreSQL widens those that do not fit.
        return build("bigint" if -(2**63) <= literal < 2**63 else "decimal(38, 0)")
    if numeric.is_numeric_literal(expression):  # sqlglot says double; PostgreSQL numeric
        return numeric.numeric_type(numeric.literal_scale(expression.this) or 0)
    key = _leaf_key(expression)
    if key is not None and key in _LEAF_TYPES:  # a literal: typed once per spelling
        expression.type = _LEAF_TYPES[key].copy()
        return _LEAF_TYPES[key].copy()
    dtype = annotated(expression, inputs)
    if isinstance(expression, exp.Sub) and dtype.this in (T.TIMESTAMP, T.TIMESTAMPTZ):
        # sqlglot types `ts - ts` as a timestamp; PostgreSQL's is an interval.
        operands = (
            infer(expression.this.copy(), inputs),
            infer(expression.expression.copy(), inputs),
        )
        if all(o.this in (T.TIMESTAMP, T.TIMESTAMPTZ) for o in operands):
            return build("interval")
    if isinstance(expression, exp.Sub) and dtype.this == T.DATE:
        # sqlglot types `date - date` as a date; PostgreSQL's is the days between.
        operands = (
            infer(expression.this.copy(), inputs),
            infer(expression.expression.copy(), inputs),
        )
        if all(o.this == T.DATE for o in operands):
            return build("int")
    if (
        dtype.this not in (T.DECIMAL, T.BIGDECIMAL)
        and numeric.kind(expression, inputs) == "numeric"
    ):
        # sqlglot types a numeric literal as a double, and so what reads one.
        return numeric.numeric_type(numeric.scale(expression, inputs))
    if key is not None:
        _LEAF_TYPES[key] = dtype.copy()
    return dtype


#: The types of leaf literals seen so far, by `_leaf_key` (a VALUES list of thousands of
#: rows types each literal in microseconds instead of one sqlglot annotation each).
_LEAF_TYPES: dict[tuple[str, str], exp.DataType] = {}


def _leaf_key(e: exp.Expr) -> tuple[str, str] | None:
    """What a leaf literal's type depends on: its kind and, for numbers, its spelling's
    shape (digits only, or with a point or exponent); strings are all alike."""
    if isinstance(e, exp.Null):
        return ("null", "")
    if isinstance(e, exp.Boolean):
        return ("boolean", "")
    if isinstance(e, exp.Literal):
        if e.is_string:
            return ("string", "")
        text = e.this
        shape = "int" if text.isdigit() else "".join(sorted({c for c in text if not c.isdigit()}))
        return ("number", shape)
    return None


def annotated(expression: exp.Expr, inputs: Sequence[exp.DataType]) -> exp.DataType:
    """The type sqlglot's annotation gives `expression` over columns `_c0.._cN` of types
    `inputs`, where PostgreSQL's differs corrected: `date - date` is an int (the days
    between), not a date. Numeric literals stay sqlglot's doubles (`infer` corrects
    those)."""
    dtype = _annotate(expression, inputs)
    if isinstance(expression, exp.Sub) and dtype.this == T.DATE:
        sides = (expression.this, expression.expression)
        if all(_annotate(side.copy(), inputs).this == T.DATE for side in sides):
            expression.type = build("int")
            return build("int")
    return dtype


def _annotate(expression: exp.Expr, inputs: Sequence[exp.DataType]) -> exp.DataType:
    """`infer` by sqlglot's type annotation (the expression is annotated in place)."""
    # sqlglot's schema costs per column (wide joins have hundreds): only the columns the
    # expression reads, or the first one (the table must have a column), typed as before.
    read = {column.name for column in expression.find_all(exp.Column)}
    kept = [i for i in range(len(inputs)) if f"_c{i}" in read] or list(range(len(inputs)))[:1]
    schema: dict[str, object] = {
        "_in": {f"_c{i}": inputs[i].sql("postgres") for i in kept} or {"_": "int"}
    }
    holder = exp.select(expression).from_("_in")
    expression = holder.expressions[0]
    for column in expression.find_all(exp.Column):
        if not column.table:
            column.set("table", exp.to_identifier("_in"))
    try:
        annotate_types(holder, schema=schema, dialect="postgres")
    except Exception:  # sqlglot could not type it: the runtime's schema decides
        return exp.DataType.build("unknown")
    finally:
        for column in expression.find_all(exp.Column):
            if column.table == "_in":
                column.set("table", None)
    return expression.type or exp.DataType.build("unknown")


def integer_literal(e: exp.Expr) -> int | None:
    """The value of an integer literal (possibly negated), else None."""
    sign = 1
    while isinstance(e, exp.Neg | exp.Paren):
        sign = -sign if isinstance(e, exp.Neg) else sign
        e = e.this
    if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
        return sign * int(e.this)
    return None


def common_type(a: exp.DataType, b: exp.DataType, where: str) -> exp.DataType:
    """The type two union branches (or CASE arms) share; a TypeMismatchError if none."""
    if a == b or is_unknown(b):
        return a
    if is_unknown(a):
        return b
    if a.this in (T.DECIMAL, T.BIGDECIMAL) and b.this in (T.DECIMAL, T.BIGDECIMAL):
        # Each side's digits kept: the larger scale (PostgreSQL's numeric has no scale).
        return numeric.numeric_type(max(numeric.type_scale(a), numeric.type_scale(b)))
    if is_numeric(a) and is_numeric(b):
        order = [T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.DECIMAL, T.FLOAT, T.DOUBLE]
        rank = {k: i for i, k in enumerate(order)}
        return a if rank.get(a.this, 99) >= rank.get(b.this, 99) else b
    text = {T.TEXT, T.VARCHAR, T.CHAR, T.NCHAR, T.NVARCHAR}
    if a.this in text and b.this in text:
        return build("text")
    if {a.this, b.this} <= {T.TIMESTAMP, T.TIMESTAMPTZ, T.DATE}:
        return a if a.this != T.DATE else b
    if a.this == b.this == T.ARRAY and a.expressions and b.expressions:
        # Element by element: ARRAY['x'] (varchar[]) and ARRAY[]::text[] are both text[].
        element = common_type(a.expressions[0], b.expressions[0], where)
        return exp.DataType(this=T.ARRAY, expressions=[element], nested=True)
    raise TypeMismatchError(
        f"{where}: types {a.sql('postgres')} and {b.sql('postgres')} cannot be matched",
        hint="cast one side, e.g. CAST(x AS text)",
    )


__all__ = [
    "annotated",
    "build",
    "common_type",
    "from_arrow",
    "infer",
    "integer_literal",
    "is_integer",
    "is_numeric",
    "is_unknown",
    "read_bytea",
    "to_arrow",
]


def read_bytea(text: str) -> bytes:
    """The bytes PostgreSQL's bytea input reads from `text`: `\\x` and hex digits, or
    the escape form (`\\\\` one backslash, `\\ooo` an octal byte, other characters
    their UTF-8 bytes).

    >>> read_bytea("\\\\x0aFF"), read_bytea("a\\\\\\\\b\\\\001")
    (b'\\n\\xff', b'a\\\\b\\x01')
    """
    if text.startswith("\\x"):
        try:
            return bytes.fromhex(text[2:])
        except ValueError:
            raise DataError(f'invalid hexadecimal data: "{text}"') from None
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] != "\\":
            out += text[i].encode()
            i += 1
        elif text[i + 1 : i + 2] == "\\":
            out.append(0x5C)
            i += 2
        elif re.fullmatch("[0-3][0-7][0-7]", text[i + 1 : i + 4]):
            out.append(int(text[i + 1 : i + 4], 8))
            i += 4
        else:
            raise DataError("invalid input syntax for type bytea")
    return bytes(out)
