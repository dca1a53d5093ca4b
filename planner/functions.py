"""The functions dsql speaks: PostgreSQL's, and Materialize's where it extends them.

The function surface is this registry, not what an engine happens to know. A call binds
only if its name is listed with an arity that fits; anything else (an engine's own
functions: DuckDB's `read_text`, `getenv`, `current_setting`, Spark's `reflect`, ...) is
refused at bind time with a `SchemaError` naming the function. Each entry says:

- `names`: PostgreSQL's spellings (sqlglot parses several into one node: `ceil` and
  `ceiling` are both `exp.Ceil`);
- `node`: the sqlglot node those names parse into (`exp.Anonymous` for names sqlglot does
  not know, matched by name);
- `arity`: the fewest and most arguments (None: any number);
- `returns`: PostgreSQL's result type rule, as text (`"arg"`: the first argument's type,
  `"common"`: the arguments' common type, `"numeric|float8"`: numeric for a numeric
  argument, else double precision);
- `spell`: how every kernel spells it, where sqlglot's own rendering would make the
  kernels disagree with PostgreSQL or with each other: a rewrite of the bound call into a
  tree that DuckDB and Spark both evaluate as PostgreSQL does, or one spelling per kernel
  (`spellings.py`; None: sqlglot's rendering already does).

Functions dsql cannot make agree (`to_char`, `to_date`, ...) are refused by name
with what to write instead (`_NOT_SUPPORTED`).

`tests/test_functions.py` evaluates every scalar entry's `sample` on the in-process and
the Spark kernel and compares them; a function the kernels cannot be made to agree on is
not listed.

>>> lookup(sqlglot.parse_one("ceiling(x)", read="postgres")).names
('ceil', 'ceiling')
>>> lookup(sqlglot.parse_one("read_text('/etc/passwd')", read="postgres")) is None
True
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

import sqlglot  # noqa: F401 - the doctest parses with it
from sqlglot import exp

from dsql.errors import SchemaError, UnsupportedError
from dsql.planner import (
    numeric,
    regex_functions,
    regex_spellings,
    spellings,
    text_spellings,
    types,
)

#: A rewrite of a bound call (its argument types given) into every kernel's spelling.
Spelling = Callable[[exp.Func, Sequence[exp.DataType]], exp.Expr]


@dataclass(frozen=True, slots=True)
class Function:
    """One function dsql supports (module docstring: the fields)."""

    names: tuple[str, ...]
    node: type[exp.Expr]
    arity: tuple[int, int | None]
    returns: str
    sample: str = ""
    spell: Spelling | None = None
    kind: Literal["scalar", "table"] = "scalar"

    def __post_init__(self) -> None:
        low, high = self.arity
        if high is not None and high < low:
            raise ValueError(f"function {self.names[0]}: arity {self.arity} is empty")
        if self.kind == "scalar" and not self.sample:
            raise ValueError(f"function {self.names[0]}: a scalar function needs a sample")


def _float8_unless_numeric(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """PostgreSQL's `ceil`, `floor`, `sign`, `round(x)`, `trunc(x)`: a numeric of scale 0
    for a numeric argument, else double precision (Spark's ceil gives a bigint)."""
    first = arg_types[0] if arg_types else types.build("unknown")
    if first.is_type(exp.DataType.Type.DECIMAL):
        return exp.Cast(this=call, to=numeric.numeric_type(0))
    if types.is_unknown(first):
        return call
    return exp.Cast(this=call, to=types.build("double"))


def _digits(call: exp.Func, what: str) -> int:
    """The constant digit count `n` of `round(x, n)` or `trunc(x, n)`."""
    n = types.integer_literal(call.args["decimals"])
    if n is None:
        raise SchemaError(
            f"{what}(x, n) needs a constant n", hint=f"write n as an integer, e.g. {what}(x, 2)"
        )
    return n


def _numeric_only(call: exp.Func, first: exp.DataType, what: str) -> None:
    """`round(x, n)` or `trunc(x, n)` of a numeric `x`, an integer `x` made one (PostgreSQL
    casts it implicitly); refused for any other `x`, as PostgreSQL does."""
    if numeric.kind_of_type(first) == "integer":
        call.set("this", exp.Cast(this=call.this, to=numeric.numeric_type(0)))
        return
    if not first.is_type(exp.DataType.Type.DECIMAL):
        raise SchemaError(
            f"function {what}({first.sql('postgres').lower()}, integer) does not exist",
            hint=f"cast the value to numeric: {what}(x::numeric, n)",
        )


def _as_arg_type(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """The call's value cast to its first argument's type (`date_trunc`: Spark's gives a
    timestamp with local time zone)."""
    first = arg_types[0] if arg_types else types.build("unknown")
    return call if types.is_unknown(first) else exp.Cast(this=call, to=first.copy())


def _date_trunc(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`date_trunc(unit, x)` of x's type (`_as_arg_type`); a date is first a timestamp with
    time zone, the type PostgreSQL resolves `date_trunc(text, date)` to."""
    if arg_types and arg_types[0].is_type(exp.DType.DATE):
        zoned = types.build("timestamptz")
        call.set("this", exp.Cast(this=call.this, to=zoned))
        return _as_arg_type(call, [zoned, *arg_types[1:]])
    return _as_arg_type(call, arg_types)


def _log10(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`log(x)`, `log10(x)` and `log(b, x)`: PostgreSQL's one-argument `log` is base 10
    (Spark's is natural), so the base is made explicit; of numerics (or a numeric and
    an integer, and `log(b, x)` of integers, which PostgreSQL has only for numerics)
    PostgreSQL's numeric logarithm (`_transcendental`)."""
    if call.args.get("expression") is None:
        ten = exp.Literal.number(10)
        if numeric.kind_of_type(_first(arg_types)) == "numeric":
            return _transcendental(numeric.NUMERIC_LOG, ten, call.this, [_INTEGER, arg_types[0]])
        return exp.Log(this=ten, expression=call.this)
    kinds = {numeric.kind_of_type(t) for t in arg_types}
    if kinds <= {"numeric", "integer"}:
        return _transcendental(numeric.NUMERIC_LOG, call.this, call.expression, arg_types)
    return call


def _first(arg_types: Sequence[exp.DataType]) -> exp.DataType:
    return arg_types[0] if arg_types else types.build("unknown")


_INTEGER = exp.DataType.build("int")


def _transcendental(
    name: str, a: exp.Expr, b: exp.Expr, arg_types: Sequence[exp.DataType]
) -> exp.Expr:
    """`name` (`numeric.transcendental`) of `a` and `b`, whose types are `arg_types`;
    an `UnsupportedError` for an argument with more than `ROOT_SCALE` digits after the
    point (PostgreSQL's result keeps at least as many, more than dsql's column holds)."""
    scales = [numeric.type_scale(t, 0) for t in arg_types]
    if max(scales, default=0) > numeric.ROOT_SCALE:
        what = {"NUMERIC_LN": "ln", "NUMERIC_EXP": "exp", "NUMERIC_LOG": "log"}.get(name, "power")
        raise UnsupportedError(
            f"{what} of a numeric with more than {numeric.ROOT_SCALE} digits after the point",
            hint=f"cast the argument to numeric(38, {numeric.ROOT_SCALE}) or to double precision",
        )
    sb = scales[1] if len(scales) > 1 else 0
    return numeric.transcendental(name, a, b, scales[0], sb)


def _ln_exp(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`ln(x)` and `exp(x)`: of a numeric, PostgreSQL's numeric result
    (`_transcendental`); of any other number, double precision."""
    if numeric.kind_of_type(_first(arg_types)) != "numeric":
        return call
    name = numeric.NUMERIC_LN if isinstance(call, exp.Ln) else numeric.NUMERIC_EXP
    return _transcendental(name, call.this, exp.Literal.number(0), [arg_types[0], _INTEGER])


def _sqrt(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`sqrt(x)`: of a numeric, PostgreSQL's exact numeric root (`numeric.square_root`);
    of any other number, double precision."""
    first = arg_types[0] if arg_types else types.build("unknown")
    if numeric.kind_of_type(first) != "numeric":
        return call
    s = numeric.type_scale(first)
    if s > numeric.ROOT_SCALE:
        raise UnsupportedError(
            f"sqrt of a numeric with more than {numeric.ROOT_SCALE} digits after the point",
            hint=f"cast the argument to numeric(38, {numeric.ROOT_SCALE}) or to double precision",
        )
    return numeric.square_root(call.this, s)


def _numeric_argument(call: exp.Func, arg_types: Sequence[exp.DataType]) -> int | None:
    """The scale of the numeric (or integer) argument of `min_scale` or `trim_scale`
    (None: unknown); a `SchemaError` for any other type, as PostgreSQL's."""
    first = arg_types[0] if arg_types else types.build("unknown")
    if types.is_unknown(first):
        return None
    if numeric.kind_of_type(first) not in ("numeric", "integer"):
        name = call.name.lower()
        raise SchemaError(
            f"function {name}({first.sql('postgres').lower()}) does not exist",
            hint=f"cast the value to numeric: {name}(x::numeric)",
        )
    return numeric.type_scale(first)


def _min_scale(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`min_scale(x)`: the fewest digits after the point that represent `x` exactly
    (`6.2500` has 2): the first `k` with `x = round(x, k)`, exact on both kernels."""
    s = _numeric_argument(call, arg_types)
    x = call.expressions[0]
    ifs = [
        exp.If(
            this=exp.EQ(
                this=x.copy(), expression=exp.Round(this=x.copy(), decimals=exp.Literal.number(k))
            ),
            true=exp.Literal.number(k),
        )
        for k in range(s if s is not None else numeric.MAX_PRECISION)
    ]
    value = exp.Case(ifs=ifs, default=exp.Literal.number(s or 0)) if ifs else exp.Literal.number(0)
    null = exp.Is(this=x.copy(), expression=exp.Null())
    guarded = exp.Case(ifs=[exp.If(this=null, true=exp.Null())], default=value)
    return exp.Cast(this=guarded, to=types.build("int"))


def _scale(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`scale(x)`: the digits after the point of `x`, PostgreSQL's display scale. That is
    the type's scale, and for a numeric without a declared scale (stored with
    `types.DEFAULT_DECIMAL`'s, read back without trailing zeros) `min_scale(x)`: the
    digits dsql shows. Refused for an expression whose scale PostgreSQL picks per row
    (a quotient, a root, a logarithm, ...): its column's scale is not the row's."""
    s = _numeric_argument(call, arg_types)
    x = call.expressions[0]
    per_row = {n.name.upper() for n in x.find_all(exp.Anonymous)} & numeric.PER_ROW_SCALE
    if per_row or x.find(exp.Avg) is not None:
        raise UnsupportedError(
            "scale of a quotient, average, root, logarithm or power of numerics "
            "(PostgreSQL picks its scale per row)",
            hint="round it first: scale(round(x, 4))",
        )
    if s is None or (numeric.MAX_PRECISION, s) == types.DEFAULT_DECIMAL:
        return _min_scale(call, arg_types)
    null = exp.Is(this=x.copy(), expression=exp.Null())
    value = exp.Case(ifs=[exp.If(this=null, true=exp.Null())], default=exp.Literal.number(s))
    return exp.Cast(this=value, to=types.build("int"))


def _trim_scale(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`trim_scale(x)`: `x` without the zeros ending its fraction. A value of at most 10
    digits after the point becomes a numeric without precision (read back without
    trailing zeros, `dsql/results.py`); one with more keeps its column's scale (the
    same number, printed with that scale)."""
    s = _numeric_argument(call, arg_types)
    x = call.expressions[0]
    unbounded = types.DEFAULT_DECIMAL
    if s is not None and s > unbounded[1]:
        return x
    return exp.Cast(this=x, to=types.build(f"decimal({unbounded[0]}, {unbounded[1]})"))


def _power(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`power(a, b)` and `a ^ b`: double precision unless an operand is numeric and none
    a float, where PostgreSQL computes a numeric. For a constant whole exponent `n` from
    0 to `MAX_EXPONENT` that is `a` multiplied by itself, exact, rounded half away from
    zero at PostgreSQL's scale `max(16, scale of a)` (`power_var_int` in numeric.c),
    while its exact digits fit 38; any other exponent is PostgreSQL's numeric power
    per row (`_transcendental`)."""
    kinds = {numeric.kind_of_type(t) for t in arg_types}
    if "numeric" not in kinds or "float" in kinds:
        return call
    n = _whole_constant(call.expression)
    s = numeric.type_scale(arg_types[0], 0)
    if n is None or not 0 <= n <= MAX_EXPONENT or s * n > numeric.MAX_PRECISION:
        return _transcendental(numeric.NUMERIC_POWER, call.this, call.expression, arg_types)
    result = max(POWER_SCALE, s)
    base = call.this
    if n == 0:  # 1, of a NULL base NULL
        one = exp.Case(
            ifs=[exp.If(this=exp.Is(this=base.copy(), expression=exp.Null()), true=exp.Null())],
            default=exp.Literal.number(1),
        )
        return exp.Cast(this=one, to=numeric.numeric_type(result))
    product = base.copy()
    for k in range(1, n):
        product = numeric.product(product, base.copy(), s * k, s)
    if s * n > result:
        product = exp.Round(this=product, decimals=exp.Literal.number(result))
    return exp.Cast(this=product, to=numeric.numeric_type(result))


#: The largest whole exponent `power` of a numeric takes.
MAX_EXPONENT = 38
#: The fewest digits after the point PostgreSQL gives a numeric power.
POWER_SCALE = 16


def _whole_constant(e: exp.Expr) -> int | None:
    """The value of a constant number that is whole (`3`, `3.0`, `-2`, `2::numeric`),
    else None."""
    if isinstance(e, exp.Cast) and numeric.kind_of_type(e.to) is not None:
        e = e.this
    negative = isinstance(e, exp.Neg)
    literal = e.this if negative else e
    if not isinstance(literal, exp.Literal) or literal.is_string:
        return None
    try:
        value = Decimal(literal.this)
    except ArithmeticError:
        return None
    if not value.is_finite() or value != value.to_integral_value():
        return None
    return -int(value) if negative else int(value)


def _text_args(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`concat`'s arguments as text (Spark's rendering pads each with `''`, which fails
    for a number)."""
    args = [_as_text(a, t) for a, t in zip(call.expressions, arg_types, strict=False)]
    call.set("expressions", args)
    return call


def _as_text(arg: exp.Expression, t: exp.DataType) -> exp.Expression:
    """`arg` (of type `t`) as text, a float's as PostgreSQL writes it."""
    if t.is_type(*exp.DataType.TEXT_TYPES):
        return arg
    if t.is_type(exp.DType.DOUBLE, exp.DType.FLOAT):
        return spellings.float_text(arg, t)
    return exp.Cast(this=arg, to=types.build("text"))


def _round(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`round(x)`: a numeric half away from zero, a float half to even (PostgreSQL's
    `rint`; both engines round a float half away); `round(x, n)` for a numeric `x`,
    of scale n."""
    first = arg_types[0] if arg_types else types.build("unknown")
    if call.args.get("decimals") is None:
        if numeric.kind_of_type(first) == "float":
            return _half_even(call.this)
        return _float8_unless_numeric(call, arg_types)
    _numeric_only(call, first, "round")
    return exp.Cast(this=call, to=numeric.numeric_type(max(_digits(call, "round"), 0)))


def _half_even(x: exp.Expr) -> exp.Expr:
    """A float rounded to a whole number, ties to the even neighbour."""
    below = exp.Floor(this=x.copy())
    tie = exp.EQ(this=exp.Sub(this=x.copy(), expression=below), expression=exp.Literal.number(0.5))
    odd = exp.EQ(
        this=exp.Mod(this=below.copy(), expression=exp.Literal.number(2)),
        expression=exp.Literal.number(0),
    )
    even = exp.Case(
        ifs=[exp.If(this=odd, true=below.copy())],
        default=exp.Add(this=below.copy(), expression=exp.Literal.number(1)),
    )
    rounded = exp.Case(ifs=[exp.If(this=tie, true=even)], default=exp.Round(this=x.copy()))
    return exp.Cast(this=rounded, to=types.build("double"))


def _trunc(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """`trunc(x)` as `_float8_unless_numeric`; `trunc(x, n)` of a numeric: `x` other
    than 0 moved half a unit of the n-th digit towards zero, then rounded half away from
    zero (exact on both engines, where DuckDB's remainder of wide decimals is a double's;
    Spark has no `trunc(x, n)`)."""
    if call.args.get("decimals") is None:
        return _float8_unless_numeric(call, arg_types)
    first = arg_types[0] if arg_types else types.build("unknown")
    _numeric_only(call, first, "trunc")
    n = _digits(call, "trunc")
    half = exp.Literal.number(f"{Decimal(5).scaleb(-n - 1):f}")
    x = call.this
    negative = exp.LT(this=x.copy(), expression=exp.Literal.number(0))
    positive = exp.GT(this=x.copy(), expression=exp.Literal.number(0))
    # Zero stays: moved by half a unit it would round away from zero to a whole unit.
    inward = exp.Case(
        ifs=[
            exp.If(this=negative, true=exp.Add(this=x.copy(), expression=half.copy())),
            exp.If(this=positive, true=exp.Sub(this=x.copy(), expression=half)),
        ],
        default=x.copy(),
    )
    rounded = exp.Round(this=inward, decimals=exp.Literal.number(n))
    return exp.Cast(this=rounded, to=numeric.numeric_type(max(n, 0)))


_F = Function
_MATH = (
    _F(("abs",), exp.Abs, (1, 1), "arg", "abs(j) + abs(x)"),
    _F(
        ("ceil", "ceiling"),
        exp.Ceil,
        (1, 1),
        "numeric|float8",
        "ceil(x) + ceil(j)",
        _float8_unless_numeric,
    ),
    _F(("floor",), exp.Floor, (1, 1), "numeric|float8", "floor(n)", _float8_unless_numeric),
    _F(("round",), exp.Round, (1, 2), "numeric|float8", "round(n, 1) + round(n)", _round),
    _F(
        ("trunc",), exp.Trunc, (1, 2), "numeric|float8", "trunc(x) + trunc(j) + trunc(n, 1)", _trunc
    ),
    _F(("sign",), exp.Sign, (1, 1), "numeric|float8", "sign(j) + sign(x)", _float8_unless_numeric),
    _F(("sqrt",), exp.Sqrt, (1, 1), "numeric|float8", "sqrt(x) + sqrt(n)", _sqrt),
    _F(("cbrt",), exp.Cbrt, (1, 1), "float8", "cbrt(x)"),
    _F(("exp",), exp.Exp, (1, 1), "numeric|float8", "exp(y) + exp(n)", _ln_exp),
    _F(("ln",), exp.Ln, (1, 1), "numeric|float8", "ln(x) + ln(n + 1)", _ln_exp),
    _F(
        ("log", "log10"),
        exp.Log,
        (1, 2),
        "numeric|float8",
        "log(x) + log(2.0, x) + log10(x)",
        _log10,
    ),
    _F(
        ("power", "pow"),
        exp.Pow,
        (2, 2),
        "numeric|float8",
        "power(i, 2) + pow(x, 2) + power(n, 3) + n ^ 0",
        _power,
    ),
    _F(("mod",), exp.Mod, (2, 2), "arg", "mod(i, 3)"),
    _F(("min_scale",), exp.Anonymous, (1, 1), "int", "min_scale(n) + min_scale(i)", _min_scale),
    _F(("scale",), exp.Anonymous, (1, 1), "int", "scale(n) + scale(i) + scale(n * 2)", _scale),
    _F(("trim_scale",), exp.Anonymous, (1, 1), "numeric", "trim_scale(n * 10)", _trim_scale),
    _F(("gcd",), exp.Anonymous, (2, 2), "common", "gcd(i, 21) + gcd(j, -12)", spellings.gcd),
    _F(("lcm",), exp.Anonymous, (2, 2), "common", "lcm(i, 21) + lcm(j, -12)", spellings.lcm),
    _F(("greatest",), exp.Greatest, (1, None), "common", "greatest(i, j, 3)"),
    _F(("least",), exp.Least, (1, None), "common", "least(i, j, 3)"),
    _F(("pi",), exp.Pi, (0, 0), "float8", "pi()"),
    # Volatile: one-off reads only (planner/volatile.py refuses it where rows are maintained).
    _F(("random",), exp.Rand, (0, 0), "float8", "random() >= 0 AND random() < 1"),
    _F(("degrees",), exp.Degrees, (1, 1), "float8", "degrees(x)"),
    _F(("radians",), exp.Radians, (1, 1), "float8", "radians(x)"),
    _F(("sin",), exp.Sin, (1, 1), "float8", "sin(x)"),
    _F(("cos",), exp.Cos, (1, 1), "float8", "cos(x)"),
    _F(("tan",), exp.Tan, (1, 1), "float8", "tan(x)"),
    _F(("asin",), exp.Asin, (1, 1), "float8", "asin(y)"),
    _F(("acos",), exp.Acos, (1, 1), "float8", "acos(y)"),
    _F(("atan",), exp.Atan, (1, 1), "float8", "atan(x)"),
    _F(("atan2",), exp.Atan2, (2, 2), "float8", "atan2(x, y)"),
    _F(("cot",), exp.Cot, (1, 1), "float8", "cot(x)"),
)
_TEXT = (
    _F(("lower",), exp.Lower, (1, 1), "text", "lower(s)"),
    _F(("upper",), exp.Upper, (1, 1), "text", "upper(s)"),
    _F(
        ("length", "char_length", "character_length"),
        exp.Length,
        (1, 1),
        "int",
        "length(s) + char_length(s) + character_length(s)",
    ),
    _F(("bit_length",), exp.BitLength, (1, 1), "int", "bit_length(s)", spellings.bit_length),
    _F(
        ("octet_length",),
        exp.Anonymous,
        (1, 1),
        "int",
        "octet_length(s) + octet_length('héllo')",
        spellings.octet_length,
    ),
    _F(
        ("regexp_replace",),
        exp.RegexpReplace,
        (3, 4),
        "text",
        r"regexp_replace(s, 'o(.)', '<\1\&>') || regexp_replace(s, 'L+', '$', 'gi')",
        regex_spellings.regexp_replace,
    ),
    _F(
        ("regexp_match",),
        exp.Anonymous,
        (2, 3),
        "text[]",
        r"regexp_match(s, '([a-z])[[:space:]]*(\w*)') || regexp_match(s, 'L', 'i')",
        regex_spellings.regexp_match,
    ),
    _F(
        ("regexp_split_to_array",),
        exp.Anonymous,
        (2, 3),
        "text[]",
        r"array_cat(regexp_split_to_array(s, '[lo]+'), regexp_split_to_array(s, 'L', 'i'))",
        regex_functions.regexp_split_to_array,
    ),
    _F(
        ("regexp_count",),
        exp.RegexpCount,
        (2, 4),
        "int",
        r"regexp_count(s, 'l') + regexp_count(s, '\w+', 1, 'i')",
        regex_functions.regexp_count,
    ),
    _F(
        ("regexp_substr",),
        exp.RegexpSubstr,
        (2, 6),
        "text",
        r"regexp_substr(s, '\w+', 1, 2) || regexp_substr(s, '(l)(o)', 1, 1, 'i', 2)",
        regex_functions.regexp_substr,
    ),
    _F(
        ("regexp_instr",),
        exp.RegexpInstr,
        (2, 7),
        "int",
        r"regexp_instr(s, 'o') + regexp_instr(s, 'l+', 1, 2, 1, 'i')",
        regex_functions.regexp_instr,
    ),
    _F(("concat",), exp.Concat, (1, None), "text", "concat(s, i, NULL, p)", _text_args),
    _F(("concat_ws",), exp.ConcatWs, (2, None), "text", "concat_ws('-', s, p)"),
    _F(
        ("substr", "substring"),
        exp.Substring,
        (2, 3),
        "text",
        "substr(s, 2, 3) || substr(s, 2) || substring(s from 2 for 3)"
        r" || substring(s from 'o\y') || substring(s from '[lo]+(.)')",
        regex_spellings.substring,
    ),
    _F(("left",), exp.Left, (2, 2), "text", "left(s, 2)"),
    _F(("right",), exp.Right, (2, 2), "text", "right(s, 2)"),
    _F(
        ("lpad", "rpad"),
        exp.Pad,
        (2, 3),
        "text",
        "lpad(p, 5, 'x') || rpad(p, 5, 'x') || lpad(p, 3) || rpad(p, 3) || lpad(p, 2, '')"
        " || rpad(s, -1, '')",
        text_spellings.pad,
    ),
    _F(
        ("ltrim", "rtrim", "btrim", "trim"),
        exp.Trim,
        (1, 2),
        "text",
        "ltrim(s, 'H') || rtrim(s, 'd') || btrim(s, 'Hd') || ltrim(s) || rtrim(s) || btrim(s)"
        " || trim(both 'H' from s) || trim(s)",
    ),
    _F(("replace",), exp.Replace, (3, 3), "text", "replace(s, 'l', 'L')"),
    _F(("reverse",), exp.Reverse, (1, 1), "text", "reverse(s)"),
    _F(("repeat",), exp.Repeat, (2, 2), "text", "repeat(p, 3)"),
    _F(("strpos", "position"), exp.StrPosition, (2, 2), "int", "strpos(s, p) + position(p in s)"),
    _F(
        ("split_part",),
        exp.SplitPart,
        (3, 3),
        "text",
        "split_part(s, ' ', 2) || split_part(s, 'l', -1) || split_part(s, '', i)",
        text_spellings.split_part,
    ),
    _F(
        ("overlay",),
        exp.Overlay,
        (3, 4),
        "text",
        "overlay(s placing 'XY' from 2 for 1) || overlay(s placing p from i)",
        text_spellings.overlay,
    ),
    _F(("initcap",), exp.Initcap, (1, 1), "text", "initcap(s)"),
    _F(("ascii",), exp.Ascii, (1, 1), "int", "ascii(s)"),
    _F(("chr",), exp.Chr, (1, 1), "text", "chr(i + 60)", text_spellings.chr_),
    _F(("md5",), exp.MD5, (1, 1), "text", "md5(s)"),
    _F(("starts_with",), exp.StartsWith, (2, 2), "bool", "starts_with(s, 'He')"),
    _F(("translate",), exp.Translate, (3, 3), "text", "translate(s, 'lo', 'LO')"),
    _F(
        ("to_hex",),
        exp.Hex,
        (1, 1),
        "text",
        "to_hex(i) || to_hex(-i) || to_hex(j - 20)",
        text_spellings.to_hex,
    ),
)
_OTHER = (
    _F(("coalesce",), exp.Coalesce, (1, None), "common", "coalesce(j, 1)"),
    _F(("nullif",), exp.Nullif, (2, 2), "arg", "nullif(i, 7)"),
    _F(
        ("date_trunc",),
        exp.TimestampTrunc,
        (2, 2),
        "arg",
        "date_trunc('day', ts)",
        _date_trunc,
    ),
    _F(
        ("to_timestamp",),
        exp.UnixToTime,
        (1, 1),
        "timestamptz",
        "to_timestamp(x * 1000) < to_timestamp(1.5e9)",
        spellings.to_timestamp,
    ),
    _F(("make_date",), exp.Anonymous, (3, 3), "date", "make_date(2024, i, 5)"),
    _F(
        ("make_timestamp",),
        exp.TimestampFromParts,
        (6, 6),
        "timestamp",
        "make_timestamp(2024, 3, 5, 10, i, 12.5)",
    ),
    _F(
        ("array_length",),
        exp.ArraySize,
        (2, 2),
        "int",
        "array_length(ARRAY[i, j], 1) + coalesce(array_length(ARRAY[]::int[], 1), 5)",
        spellings.array_length,
    ),
    _F(("cardinality",), exp.Anonymous, (1, 1), "int", "cardinality(ARRAY[i, j])"),
    _F(
        ("array_append",),
        exp.ArrayAppend,
        (2, 2),
        "arg",
        "array_append(ARRAY[i], j) || array_append(NULL::int[], j)",
        spellings.array_append,
    ),
    _F(
        ("array_prepend",),
        exp.ArrayPrepend,
        (2, 2),
        "array",
        "array_prepend(j, ARRAY[i]) || array_prepend(i, NULL::int[])",
        spellings.array_prepend,
    ),
    _F(
        ("array_cat",),
        exp.ArrayConcat,
        (2, 2),
        "arg",
        "array_cat(ARRAY[i], ARRAY[j]) || array_cat(NULL, ARRAY[j]) || array_cat(ARRAY[i], NULL)",
        spellings.array_cat,
    ),
    _F(
        ("array_position",),
        exp.ArrayPosition,
        (2, 2),
        "int",
        "array_position(ARRAY[i, j, NULL, j], j)",
        spellings.array_position,
    ),
    _F(
        ("array_positions",),
        exp.Anonymous,
        (2, 2),
        "int[]",
        "array_positions(ARRAY[i, j, NULL, j], j)",
        spellings.array_positions,
    ),
    _F(
        ("array_remove",),
        exp.ArrayRemove,
        (2, 2),
        "arg",
        "array_remove(ARRAY[i, j, NULL, j], j)",
        spellings.array_remove,
    ),
    _F(
        ("array_to_string",),
        exp.ArrayToString,
        (2, 3),
        "text",
        "array_to_string(ARRAY[i, NULL, j], ',') || array_to_string(ARRAY[s, NULL, p], '-', '*')",
        spellings.array_to_string,
    ),
    _F(
        ("string_to_array",),
        exp.StringToArray,
        (2, 3),
        "text[]",
        "array_cat(string_to_array(s, 'o'), string_to_array(s, NULL, 'l'))",
        spellings.string_to_array,
    ),
    # Materialize's: the time a row is read at (temporal filters; `planner/temporal.py`).
    _F(("mz_now",), exp.Anonymous, (0, 0), "mz_timestamp", "mz_now() > 0"),
)
_TABLE = (
    _F(("generate_series",), exp.ExplodingGenerateSeries, (2, 3), "arg", kind="table"),
    _F(("generate_series",), exp.GenerateSeries, (2, 3), "arg", kind="table"),
    _F(("unnest",), exp.Unnest, (1, 1), "element", kind="table"),
    _F(("unnest",), exp.Explode, (1, 1), "element", kind="table"),
    _F(
        ("regexp_matches",),
        exp.Anonymous,
        (2, 3),
        "text[]",
        spell=regex_functions.regexp_matches,
        kind="table",
    ),
    _F(
        ("regexp_split_to_table",),
        exp.Anonymous,
        (2, 3),
        "text",
        spell=regex_functions.regexp_split_to_table,
        kind="table",
    ),
    # dsql's: each input row repeated by a count (`planner/bind_from.py`).
    _F(("repeat_row",), exp.Anonymous, (1, 1), "none", kind="table"),
)

#: Every function dsql supports.
FUNCTIONS: tuple[Function, ...] = _MATH + _TEXT + _OTHER + _TABLE

_BY_NODE = {f.node: f for f in FUNCTIONS if f.node is not exp.Anonymous}
_BY_NAME = {n: f for f in FUNCTIONS if f.node is exp.Anonymous for n in f.names}
_ALL_NAMES = sorted({n for f in FUNCTIONS for n in f.names})

#: Calls that are SQL syntax rather than functions (sqlglot models them as functions).
SYNTAX: tuple[type[exp.Expr], ...] = (
    exp.Cast,
    exp.Case,  # its WHEN branches (`exp.If`) bind with it: `expr_bind`
    exp.Array,
    exp.Exists,
    exp.Extract,
    exp.Binary,  # operators: `~`, `@>`, `->`, `^`, COLLATE
    exp.AggFunc,  # aggregates: `expr_bind.aggregate_calls` holds dsql's list
)


#: Calls whose value is the wall clock or the session: not a function of the rows, so a
#: view over them could not equal its query at every time.
_CLOCK_HINT = (
    "use mz_now(), the time a query reads at (a one-off SELECT) or a temporal filter's "
    "time (a view)"
)
_REFUSED: dict[type[exp.Expr], tuple[str, str]] = {
    exp.CurrentTimestamp: ("now()", _CLOCK_HINT),
    exp.CurrentDate: ("current_date", _CLOCK_HINT),
    exp.CurrentTime: ("current_time", _CLOCK_HINT),
    exp.Localtimestamp: ("localtimestamp", _CLOCK_HINT),
    exp.CurrentUser: ("current_user", "dsql has no users"),
    exp.SessionUser: ("session_user", "dsql has no users"),
}


#: PostgreSQL functions dsql refuses by name, each with what to write instead.
_NOT_SUPPORTED = {
    "to_char": "format with extract(...), date_trunc(...), lpad(...) and casts to text",
    "to_timestamp": "to_timestamp(seconds) is supported; to_timestamp(text, format) is not: "
    "cast ISO text with ::timestamp",
    "to_date": "cast ISO text with ::date, or build one with make_date(y, m, d)",
    "format": "build the text with || or concat(...)",
    "quote_literal": "pass values as query parameters (?) rather than quoting them",
    "quote_ident": "write identifiers in the query, in double quotes where needed",
    "quote_nullable": "pass values as query parameters (?) rather than quoting them",
}


def lookup(call: exp.Expr) -> Function | None:
    """The registry's entry for a call, None if dsql does not support it."""
    if isinstance(call, exp.Anonymous):
        return _BY_NAME.get(call.name.lower())
    return _BY_NODE.get(type(call))


def is_listed_call(e: exp.Expr) -> bool:
    """Whether `e` is a function call the registry decides on: every call but SQL syntax
    (sqlglot models some listed functions as operators: `array_position` is a Binary)."""
    return isinstance(e, exp.Func) and (not isinstance(e, SYNTAX) or lookup(e) is not None)


def call_name(call: exp.Expr) -> str:
    """A call's function name as the user wrote it (or as PostgreSQL spells its node)."""
    if isinstance(call, exp.Anonymous):
        return call.name.lower()
    # The arguments may hold plan nodes sqlglot cannot render (a bound subquery): the
    # name alone is wanted, so they are rendered as NULL.
    bare = call.copy()
    for arg in list(bare.iter_expressions()):
        arg.replace(exp.Null())
    head = bare.sql("postgres").split("(", 1)[0].strip().lower()
    if head.isidentifier():
        return head
    return call.sql_name().lower() if isinstance(call, exp.Func) else head


def check(call: exp.Func, arg_types: Sequence[exp.DataType]) -> exp.Expr:
    """The bound call in every kernel's spelling; a `SchemaError` naming the function
    (with the closest listed name as a hint) if dsql does not support it."""
    entry = lookup(call)
    name = call_name(call)
    if entry is None and type(call) in _REFUSED:
        what, hint = _REFUSED[type(call)]
        raise SchemaError(
            f"{what} is not supported: its value is not a function of the rows", hint=hint
        )
    if entry is None and name in _NOT_SUPPORTED:
        raise SchemaError(f"function {name}() is not supported", hint=_NOT_SUPPORTED[name])
    if entry is None:
        close = difflib.get_close_matches(name, _ALL_NAMES, n=1, cutoff=0.75)
        hint = f"perhaps you meant {close[0]}()" if close else "dsql speaks PostgreSQL's functions"
        raise SchemaError(f"function {name}() does not exist", hint=hint)
    if isinstance(call, exp.Anonymous):
        low, high = entry.arity
        count = len(call.expressions)
        if count < low or (high is not None and count > high):
            raise SchemaError(
                f"function {name}() does not take {count} argument{'s' * (count != 1)}",
                hint=f"{name} takes {_arity_text(entry.arity)}",
            )
    spelled = entry.spell(call, arg_types) if entry.spell is not None else call
    if entry.returns == "int" and not (
        isinstance(spelled, exp.Cast) and spelled.to.is_type(exp.DType.INT)
    ):
        # The declared type made explicit: the engines' own may be a bigint, or one the
        # planner cannot infer (it divides an integer as an integer, not as a float).
        return exp.Cast(this=spelled, to=types.build("int"))
    return spelled


def _arity_text(arity: tuple[int, int | None]) -> str:
    low, high = arity
    if high == low:
        return f"{low} argument{'s' * (low != 1)}"
    return f"{low} or more arguments" if high is None else f"{low} to {high} arguments"


__all__ = ["FUNCTIONS", "SYNTAX", "Function", "call_name", "check", "is_listed_call", "lookup"]
