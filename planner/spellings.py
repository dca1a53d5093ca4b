"""Spellings of PostgreSQL functions the kernels name or define differently.

Each function here is a `functions.Spelling`: it rewrites a bound call into a tree that
gives PostgreSQL's value on every kernel. Where no one tree does, the result is a
`DSQL_PER_KERNEL(duckdb, spark)` call holding the in-process kernel's spelling and
Spark's; the kernel renders its own (`runtime/kernel/base.py`, `per_kernel`). A spelling
is written as SQL text in its kernel's dialect, with `__0`, `__1`, ... standing for the
call's arguments; lambda variables start with `__` so that no column they capture is
shadowed.

>>> call = sqlglot.parse_one("gcd(_c0, 6)", read="postgres")
>>> gcd(call, ()).sql("postgres")[:29]
'DSQL_PER_KERNEL(GCD(_c0, 6), '
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence

import sqlglot
from sqlglot import exp

from dsql.errors import SchemaError
from dsql.planner import numeric, types
from dsql.planner.expr import arguments, as_expression

#: The name the kernels know a per-kernel call by (`runtime.kernel.base.PER_KERNEL`).
PER_KERNEL = "DSQL_PER_KERNEL"


@functools.cache
def _parsed(text: str, dialect: str) -> exp.Expression:
    return as_expression(sqlglot.parse_one(text, read=dialect))


def fill(text: str, dialect: str, args: Sequence[exp.Expression]) -> exp.Expression:
    """`text` (in `dialect`) with `__k` replaced by a copy of `args[k]`."""

    def place(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and re.fullmatch(r"__\d+", node.name):
            return args[int(node.name[2:])].copy()
        return node

    return _parsed(text, dialect).copy().transform(place)


def per_kernel(duckdb: str, spark: str, args: Sequence[exp.Expression]) -> exp.Expression:
    """One value spelled for each kernel: `duckdb` and `spark` are SQL texts over `__k`."""
    return exp.Anonymous(
        this=PER_KERNEL, expressions=[fill(duckdb, "duckdb", args), fill(spark, "spark", args)]
    )


def epoch_ms(x: exp.Expression, t: exp.DataType) -> exp.Expr:
    """Milliseconds since the Unix epoch of a timestamp, timestamptz or date `x` (of type
    `t`), as a bigint: what `mz_now()` counts in."""
    at = "CAST(__0 AS TIMESTAMP)" if t.is_type(exp.DType.DATE) else "__0"
    return _typed(types.build("bigint"), f"epoch_ms({at})", f"unix_millis({at})", [x])


def _typed(t: exp.DataType, duckdb: str, spark: str, args: Sequence[exp.Expression]) -> exp.Expr:
    """`per_kernel(duckdb, spark, args)` cast to PostgreSQL's result type `t` (unless
    unknown), so that the planner knows it."""
    value = per_kernel(duckdb, spark, args)
    return value if types.is_unknown(t) else exp.Cast(this=value, to=t.copy())


def _element(t: exp.DataType) -> exp.DataType | None:
    """An array type's element type (None: not known to be an array)."""
    if t.is_type(exp.DataType.Type.ARRAY) and t.expressions:
        element = t.expressions[0]
        return element if isinstance(element, exp.DataType) else None
    return None


# --- integers ------------------------------------------------------------------------------


def gcd(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`gcd(a, b)`, never negative (`gcd(-12, 18)` is 6): DuckDB's `gcd`; on Spark,
    Euclid's algorithm as a fold (92 steps bound it for 64-bit integers). Of numerics,
    PostgreSQL's exact numeric `gcd` (`_of_numerics`)."""
    numeric_call = _of_numerics(call, arg_types, numeric.NUMERIC_GCD)
    if numeric_call is not None:
        return numeric_call
    return _as_common(
        call,
        arg_types,
        per_kernel(
            "GCD(__0, __1)",
            "AGGREGATE(ARRAY_REPEAT(0, 92), NAMED_STRUCT('a', ABS(CAST(__0 AS BIGINT)),"
            " 'b', ABS(CAST(__1 AS BIGINT))), "
            "(__acc, __i) -> IF(__acc.b = 0, __acc,"
            " NAMED_STRUCT('a', __acc.b, 'b', __acc.a % __acc.b)), __acc -> __acc.a)",
            arguments(call),
        ),
    )


def lcm(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`lcm(a, b)` of integers, never negative, 0 where either is 0; of numerics,
    PostgreSQL's exact numeric `lcm` (`_of_numerics`)."""
    numeric_call = _of_numerics(call, arg_types, numeric.NUMERIC_LCM)
    if numeric_call is not None:
        return numeric_call
    a, b = arguments(call)
    divisor = gcd(exp.Anonymous(this="gcd", expressions=[a, b]), arg_types)
    spelled = per_kernel(
        "LCM(__0, __1)",
        "CASE WHEN __0 = 0 OR __1 = 0 THEN 0 * __0 * __1 ELSE ABS(__0 DIV __2 * __1) END",
        [a, b, divisor.this.expressions[1]],
    )
    return _as_common(call, arg_types, spelled)


def _of_numerics(call: exp.Func, arg_types: Sequence[exp.DataType], name: str) -> exp.Expr | None:
    """`gcd` or `lcm` (`name`: `numeric.NUMERIC_GCD` or `NUMERIC_LCM`) where an argument
    is a numeric: exact, of the larger scale, as PostgreSQL's (None where both are
    integers); PostgreSQL's `SchemaError` for a float argument."""
    kinds = {numeric.kind_of_type(t) for t in arg_types if not types.is_unknown(t)}
    function = call.name.lower() if isinstance(call, exp.Anonymous) else call.sql_name().lower()
    if kinds - {"integer", "numeric"}:
        shown = ", ".join(t.sql("postgres").lower() for t in arg_types)
        raise SchemaError(
            f"function {function}({shown}) does not exist",
            hint=f"cast the arguments to numeric: {function}(a::numeric, b::numeric)",
        )
    if "numeric" not in kinds:
        return None
    a, b = arguments(call)
    sa, sb = (numeric.type_scale(t, 0) for t in arg_types)
    return numeric.transcendental(name, a, b, sa, sb)


def _as_common(call: exp.Func, arg_types: Sequence[exp.DataType], value: exp.Expr) -> exp.Expr:
    """`value` cast to the arguments' common integer type (Spark's folds widen it)."""
    known = [t for t in arg_types if not types.is_unknown(t)]
    if not known or not all(types.is_integer(t) for t in known):
        return value
    common = known[0]
    for t in known[1:]:
        common = types.common_type(common, t, call.sql_name())
    return exp.Cast(this=value, to=common.copy())


# --- text ----------------------------------------------------------------------------------


def octet_length(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`octet_length(s)`: the bytes of `s` in UTF-8."""
    return exp.Cast(
        this=per_kernel("STRLEN(__0)", "OCTET_LENGTH(__0)", arguments(call)), to=types.build("int")
    )


def bit_length(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`bit_length(s)`: eight bits per byte of `s` in UTF-8."""
    return exp.Mul(this=octet_length(call, arg_types), expression=exp.Literal.number(8))


#: The function each kernel writes a float's text with, as PostgreSQL writes it, from the
#: engine's text of it read back as a double (`runtime.kernel.float_text`).
_FLOAT_TEXT = "DSQL_FLOAT_TEXT(CAST(CAST(__0 AS DOUBLE) AS {text}), {single})"


def float_text(x: exp.Expression, t: exp.DataType) -> exp.Expression:
    """PostgreSQL's text of the float `x` (a `real` where `t` is one): the fewest digits
    that read back as the value, in exponent form from 10^15 (10^6 for a real) or below
    10^-4, no trailing `.0`; `-0`, `NaN`, `Infinity`, `-Infinity`
    (`runtime.kernel.float_text.text`: neither engine's own text has those digits)."""
    single = "TRUE" if t.is_type(exp.DType.FLOAT) else "FALSE"
    return per_kernel(
        _FLOAT_TEXT.format(text="VARCHAR", single=single),
        _FLOAT_TEXT.format(text="STRING", single=single),
        [x],
    )


# --- time ----------------------------------------------------------------------------------


def to_timestamp(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`to_timestamp(seconds)`: the instant that many seconds after the Unix epoch, to
    the microsecond."""
    return exp.Cast(
        this=per_kernel(
            "TO_TIMESTAMP(ROUND(__0 * 1000000) / 1000000)",
            "TIMESTAMP_MICROS(CAST(ROUND(__0 * 1000000) AS BIGINT))",
            arguments(call),
        ),
        to=types.build("timestamptz"),
    )


#: `extract` fields PostgreSQL answers with a fraction, from a date or timestamp's
#: microseconds (`__0`, a bigint): each field's scale and the microseconds a unit holds.
_FRACTIONAL_FIELDS = {
    "epoch": (6, 1_000_000),
    "second": (6, 1_000_000),
    "millisecond": (3, 1_000),
}
#: PostgreSQL's names of those fields, as sqlglot keeps them.
_FIELD_NAMES = {"seconds": "second", "milliseconds": "millisecond"}
#: The fields of a time of day, which a date does not have.
_TIME_FIELDS = frozenset(
    {"hour", "minute", "second", "millisecond", "microsecond", "timezone", "timezone_hour"}
    | {"timezone_minute", "hours", "minutes", "seconds", "milliseconds", "microseconds"}
)


def extract(call: exp.Extract, t: exp.DataType) -> exp.Expr:
    """`extract(field from x)` of a date or timestamp `x` (of type `t`): `epoch`,
    `second` and `millisecond` the exact numeric PostgreSQL answers, of scale 6, 6 and
    3 (`1.500000`; the engines give whole seconds or a double), computed from the
    microseconds; `date_part` of them a double precision. A time field of a date is
    PostgreSQL's error."""
    field = call.this.name.lower()
    if t.is_type(exp.DType.DATE) and field in _TIME_FIELDS:
        raise SchemaError(f'unit "{field}" not supported for type date')
    found = _FRACTIONAL_FIELDS.get(_FIELD_NAMES.get(field, field))
    if found is None:
        return call
    scale, per_unit = found
    if t.is_type(exp.DType.DATE):  # whole days: PostgreSQL's epoch of a date is whole
        scale = 0
    x = call.expression
    at = exp.Cast(this=x, to=types.build("timestamp")) if t.is_type(exp.DType.DATE) else x
    if field == "epoch":
        micros = per_kernel("EPOCH_US(__0)", "UNIX_MICROS(__0)", [at])
    else:  # the microseconds within the minute
        spark = "CAST(EXTRACT(SECOND FROM __0) * 1000000 AS BIGINT)"
        micros = per_kernel("MICROSECOND(__0)", spark, [at])
    # Exact on both kernels: a decimal product keeps every digit where a quotient is a double.
    step = f"CAST('{1 / per_unit:.6f}' AS DECIMAL(7, 6))"
    value = fill(
        f"CAST(CAST(__0 AS DECIMAL(20, 0)) * {step} AS DECIMAL(38, {scale}))", "duckdb", [micros]
    )
    if call.meta.get("date_part"):  # PostgreSQL's date_part is a double precision
        return exp.Cast(this=value, to=types.build("double"))
    return value


# --- arrays --------------------------------------------------------------------------------


def array_length(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`array_length(a, 1)`: NULL for an empty array, as for any other dimension."""
    a, dim = arguments(call)
    return per_kernel(
        "CASE WHEN __1 = 1 THEN CAST(NULLIF(LEN(__0), 0) AS INT) END",
        "CASE WHEN __1 = 1 THEN CAST(NULLIF(SIZE(__0), 0) AS INT) END",
        [a, dim],
    )


def array_position(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`array_position(a, x)`: the first place of an element not distinct from `x`
    (NULL finds a NULL), else NULL."""
    return exp.Cast(
        this=per_kernel(
            "LIST_POSITION(__0, __1)",
            "NULLIF(ARRAY_POSITION(TRANSFORM(__0, __e -> __e <=> __1), TRUE), 0)",
            arguments(call)[:2],
        ),
        to=types.build("int"),
    )


def array_positions(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`array_positions(a, x)`: every place of an element not distinct from `x`."""
    return exp.Cast(
        this=per_kernel(
            "LIST_FILTER(LIST_TRANSFORM(__0, LAMBDA __e, __i: CASE WHEN __e IS NOT DISTINCT"
            " FROM __1 THEN __i END), LAMBDA __p: __p IS NOT NULL)",
            "FILTER(TRANSFORM(__0, (__e, __i) -> IF(__e <=> __1, __i + 1, NULL)),"
            " __p -> __p IS NOT NULL)",
            arguments(call),
        ),
        to=types.build("int[]"),
    )


def array_remove(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`array_remove(a, x)`: `a` without its elements not distinct from `x`."""
    return _typed(
        arg_types[0] if arg_types else types.build("unknown"),
        "LIST_FILTER(__0, LAMBDA __e: __e IS DISTINCT FROM __1)",
        "FILTER(__0, __e -> NOT __e <=> __1)",
        arguments(call),
    )


def _null_is_empty(call: exp.Func, arrays: Sequence[exp.Expression], alone: exp.Expr) -> exp.Expr:
    """`call`, where a NULL among its `arrays` counts as an empty array (PostgreSQL's
    array_cat, array_append, array_prepend; Spark's give NULL): `alone` where the first
    is NULL, the second (if any) where the other is."""
    ifs = [exp.If(this=exp.Is(this=arrays[0].copy(), expression=exp.Null()), true=alone)]
    if len(arrays) == 2:
        second = exp.Is(this=arrays[1].copy(), expression=exp.Null())
        ifs.append(exp.If(this=second, true=arrays[0].copy()))
    return exp.Case(ifs=ifs, default=call)


def array_cat(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`array_cat(a, b)`: a NULL array counts as empty (NULL only if both are)."""
    a, b = arguments(call)
    # A bare NULL has no array type to concatenate on Spark: the other array is the value.
    if isinstance(b, exp.Null):
        return a.copy()
    if isinstance(a, exp.Null):
        return b.copy()
    return _null_is_empty(call, [a, b], b.copy())


def array_append(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`array_append(a, x)`: `ARRAY[x]` for a NULL `a`."""
    a, x = arguments(call)
    return _null_is_empty(call, [a], exp.Array(expressions=[x.copy()]))


def array_prepend(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`array_prepend(x, a)`: `ARRAY[x]` for a NULL `a`."""
    x, a = call.args["expression"], call.this
    return _null_is_empty(call, [a], exp.Array(expressions=[x.copy()]))


def array_agg_filtered(
    call: exp.Expression, condition: exp.Expression, array_type: exp.DataType
) -> exp.Expression:
    """A bound `array_agg(x [ORDER BY ...]) FILTER (WHERE condition)`: array_agg keeps
    NULLs, so each value is collected as a one-element array where the condition holds
    (NULL elsewhere), and the NULLs dropped and the arrays flattened after aggregating;
    NULL where no row passes. `array_type` is the call's type (unknown: not cast)."""
    collected = call.copy()
    # The value sits under ORDER BY and DISTINCT, if any (a distinct one-element array
    # is a distinct value).
    holder: exp.Expression = collected
    while isinstance(holder.this, exp.Order | exp.Distinct):
        holder = holder.this
    key = "expressions" if isinstance(holder, exp.Distinct) else "this"
    value = holder.expressions[0] if key == "expressions" else holder.this
    wrapped = exp.Case(
        ifs=[exp.If(this=condition.copy(), true=exp.Array(expressions=[value.copy()]))]
    )
    holder.set(key, [wrapped] if key == "expressions" else wrapped)
    if key == "expressions" and isinstance(collected.this, exp.Order):
        # DISTINCT orders by the value itself (PostgreSQL's rule).
        for ordered in collected.this.expressions:
            if bool(ordered.args.get("nulls_first")) != bool(ordered.args.get("desc")):
                # A one-element array [NULL] sorts as its element would by default only.
                raise SchemaError(
                    "array_agg(DISTINCT ... ORDER BY ... NULLS FIRST|LAST) FILTER (WHERE ...)"
                    " is not supported",
                    hint="leave out NULLS FIRST/LAST, or filter the rows in a subquery",
                )
            if ordered.this == value:
                # DuckDB orders by the argument itself; Spark (whose arrays sort a NULL
                # element first) by the value where the condition holds.
                passing_value = exp.Case(ifs=[exp.If(this=condition.copy(), true=value.copy())])
                ordered.set(
                    "this",
                    exp.Anonymous(this=PER_KERNEL, expressions=[wrapped.copy(), passing_value]),
                )
    passing = exp.Count(this=exp.Case(ifs=[exp.If(this=condition, true=exp.Literal.number(1))]))
    values = _typed(
        array_type,
        "FLATTEN(LIST_FILTER(__0, LAMBDA __e: __e IS NOT NULL))",
        "FLATTEN(FILTER(__0, __e -> __e IS NOT NULL))",
        [collected],
    )
    none = exp.EQ(this=passing, expression=exp.Literal.number(0))
    return exp.Case(ifs=[exp.If(this=none, true=exp.Null())], default=values)


def quantified(comparison: exp.Expression, array: exp.Expression, every: bool) -> exp.Expression:
    """`x op ANY (array)` (`every`: `x op ALL (array)`), where `comparison` is `x op
    __e` over the element `__e`: TRUE if some (every) comparison holds, FALSE if none
    does (one fails), else NULL; ANY of an empty array is FALSE, ALL TRUE."""
    # Each comparison as 1 (TRUE), 0 (FALSE) or 2 (NULL).
    decided, otherwise = ("0", "TRUE") if every else ("1", "FALSE")
    duck = "LIST_POSITION(LIST_TRANSFORM(__0, LAMBDA __e: COALESCE(CAST(__1 AS INT), 2)), {}) > 0"
    spark = "ARRAY_CONTAINS(TRANSFORM(__0, __e -> COALESCE(CAST(__1 AS INT), 2)), {})"
    found = "FALSE" if every else "TRUE"
    template = (
        "CASE WHEN __0 IS NULL THEN NULL WHEN {d} THEN "
        + found
        + " WHEN {n} THEN NULL ELSE "
        + otherwise
        + " END"
    )
    return per_kernel(
        template.format(d=duck.format(decided), n=duck.format("2")),
        template.format(d=spark.format(decided), n=spark.format("2")),
        [array, comparison],
    )


#: Element types whose text both kernels write as PostgreSQL does.
_TEXT_ALIKE = (*exp.DataType.TEXT_TYPES, *exp.DataType.INTEGER_TYPES)


def array_to_string(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`array_to_string(a, sep [, null_text])`: the elements' text joined by `sep`,
    NULLs skipped (or written as `null_text`)."""
    args = arguments(call)
    element = _element(arg_types[0]) if arg_types else None
    if element is not None and not element.is_type(*_TEXT_ALIKE):
        raise SchemaError(
            f"array_to_string() of {element.sql('postgres').lower()} elements is not supported",
            hint="array_to_string() joins arrays of text or integers",
        )
    if len(args) == 2:
        args.append(exp.Null())
    return per_kernel(
        # DuckDB's is NULL where every element is: PostgreSQL's is ''.
        "CASE WHEN __0 IS NOT NULL AND __1 IS NOT NULL THEN COALESCE(ARRAY_TO_STRING("
        "LIST_TRANSFORM(__0, LAMBDA __e: COALESCE(CAST(__e AS TEXT), __2)), __1), '') END",
        "ARRAY_JOIN(TRANSFORM(__0, __e -> COALESCE(CAST(__e AS STRING), __2)), __1)",
        args,
    )


def array_text(array: exp.Expression, array_type: exp.DataType) -> exp.Expression:
    """`array::text` as PostgreSQL writes it: `{1,2,NULL}`, an element quoted (with `\\`
    before a quote or backslash) where it is empty, spells NULL, or holds blanks, commas,
    braces, quotes or backslashes. Arrays of text, integers and booleans."""
    element = _element(array_type)
    if element is None or not element.is_type(*_TEXT_ALIKE, exp.DataType.Type.BOOLEAN):
        shown = array_type.sql("postgres").lower()
        raise SchemaError(
            f"a cast of {shown} to text is not supported",
            hint="arrays of text, integers and booleans convert to text",
        )
    boolean = element.is_type(exp.DataType.Type.BOOLEAN)
    duck = _quoted_element(
        "CASE WHEN __e THEN 't' WHEN NOT __e THEN 'f' END" if boolean else "CAST(__e AS TEXT)",
        "REGEXP_MATCHES({t}, '[{{}},\"\\\\[:space:]]')",
        escape=lambda text: text,
    )
    spark = _quoted_element(
        "CASE WHEN __e THEN 't' WHEN NOT __e THEN 'f' END" if boolean else "CAST(__e AS STRING)",
        "{t} RLIKE '[{{}},\"\\\\\\\\\\\\s]'",
        escape=lambda text: text.replace("\\", "\\\\"),
    )
    return as_expression(
        _typed(
            types.build("text"),
            f"'{{' || ARRAY_TO_STRING(LIST_TRANSFORM(__0, LAMBDA __e: {duck}), ',') || '}}'",
            f"CONCAT('{{', ARRAY_JOIN(TRANSFORM(__0, __e -> {spark}), ','), '}}')",
            [array],
        )
    )


def _quoted_element(text: str, special: str, escape: Callable[[str], str]) -> str:
    """SQL for one array element's text `text` as PostgreSQL's array text writes it;
    `special` matches text that needs quotes, `escape` writes a backslash in a literal."""
    bs = escape("\\")
    quoted = f"'\"' || REPLACE(REPLACE({text}, '{bs}', '{bs}{bs}'), '\"', '{bs}\"') || '\"'"
    return (
        f"CASE WHEN {text} IS NULL THEN 'NULL' WHEN {text} = '' OR UPPER({text}) = 'NULL'"
        f" OR {special.format(t=text)} THEN {quoted} ELSE {text} END"
    )


def string_to_array(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`string_to_array(s, sep [, null_text])`: `s` split at each `sep` (a NULL `sep`:
    into characters; an empty one: not at all; an empty `s`: no elements), pieces equal
    to `null_text` as NULLs."""
    args = arguments(call)
    if len(args) == 2:
        args.append(exp.Null())
    return _typed(
        types.build("text[]"),
        "CASE WHEN __0 IS NULL THEN NULL WHEN __0 = '' THEN CAST([] AS TEXT[])"
        " WHEN __1 = '' THEN [NULLIF(__0, __2)] ELSE"
        " LIST_TRANSFORM(STRING_SPLIT(__0, COALESCE(__1, '')), LAMBDA __e: NULLIF(__e, __2)) END",
        "CASE WHEN __0 IS NULL THEN NULL WHEN __0 = '' THEN CAST(ARRAY() AS ARRAY<STRING>)"
        " WHEN __1 = '' THEN"
        " ARRAY(NULLIF(__0, __2)) ELSE"
        " TRANSFORM(IF(__1 IS NULL, SPLIT(__0, '(?s)(?<=.)(?=.)', -1),"
        " SPLIT(__0, REGEXP_REPLACE(__1, '([^a-zA-Z0-9])', '\\\\\\\\$1'), -1)),"
        " __e -> NULLIF(__e, __2)) END",
        args,
    )


__all__ = [
    "PER_KERNEL",
    "array_agg_filtered",
    "array_append",
    "array_cat",
    "array_prepend",
    "extract",
    "float_text",
    "array_length",
    "array_position",
    "array_positions",
    "array_remove",
    "array_text",
    "array_to_string",
    "fill",
    "bit_length",
    "gcd",
    "lcm",
    "octet_length",
    "per_kernel",
    "quantified",
    "string_to_array",
    "to_timestamp",
]
