"""PostgreSQL's numbers: which kind an expression is, and a numeric's scale.

PostgreSQL has three kinds of number: integers (smallint, int, bigint), `numeric`
(exact decimal; a literal with a point or an exponent is one) and floats (real, double
precision). An operator's result is of the widest kind of its operands (float over
numeric over integer), and a numeric's scale (digits after the point) follows the
operator: the larger of the operands' for `+` and `-`, their sum for `*`.

dsql stores a numeric as a 38-digit decimal whose scale is fixed per expression and
computed here as PostgreSQL would (PostgreSQL keeps a scale per value: for a column
and an operator over columns both agree). A quotient of numerics is
`NUMERIC_DIV(a, b, scale_a, scale_b)`, evaluated exactly by each kernel
(`runtime/kernel/numeric_division.py`) and rounded per row to PostgreSQL's scale; a
remainder is `NUMERIC_MOD(a, b, scale_a, scale_b)`, likewise exact, a product
`NUMERIC_MUL(a, b, scale_a, scale_b)`, and a sum or difference of a scale over 6
`NUMERIC_ADD` / `NUMERIC_SUB(a, b, scale_a, scale_b)` (Spark rounds it otherwise); the
square root of a quotient (stddev's) is `NUMERIC_SQRT_DIV(a, b, scale_a, scale_b)`: the
quotient rounded at its scale for the row, then its square root rounded at that scale,
as PostgreSQL's `stddev` rounds it; `sqrt` of a numeric is `NUMERIC_SQRT(a, 1,
scale_a, 0)`, exact and rounded per row at PostgreSQL's scale for a root.

>>> import sqlglot
>>> kind(sqlglot.parse_one("1.5 + _c0"), [exp.DataType.build("int")])
'numeric'
>>> scale(sqlglot.parse_one("1.5 * 0.25"), [])
3
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Literal

from sqlglot import exp

Kind = Literal["integer", "numeric", "float"]

T = exp.DType

#: The functions kernels expand into exact decimal division and remainder
#: (`runtime/kernel/numeric_division.py`).
NUMERIC_DIV = "NUMERIC_DIV"
NUMERIC_MOD = "NUMERIC_MOD"
NUMERIC_SQRT_DIV = "NUMERIC_SQRT_DIV"
NUMERIC_SQRT = "NUMERIC_SQRT"
NUMERIC_MUL = "NUMERIC_MUL"
#: `ln`, `log`, `exp` and `power` of numerics (`runtime/kernel/numeric_transcendental.py`).
NUMERIC_LN = "NUMERIC_LN"
NUMERIC_LOG = "NUMERIC_LOG"
NUMERIC_EXP = "NUMERIC_EXP"
NUMERIC_POWER = "NUMERIC_POWER"
_TRANSCENDENTAL = frozenset({NUMERIC_LN, NUMERIC_LOG, NUMERIC_EXP, NUMERIC_POWER})
#: `gcd` and `lcm` of numerics, exact, of the larger scale (the same kernel function).
NUMERIC_GCD = "NUMERIC_GCD"
NUMERIC_LCM = "NUMERIC_LCM"
_DIVISORS = frozenset({NUMERIC_GCD, NUMERIC_LCM})
#: The functions whose scale PostgreSQL picks per row (dsql's column holds the widest).
PER_ROW_SCALE = frozenset({NUMERIC_DIV, NUMERIC_SQRT_DIV, NUMERIC_SQRT} | _TRANSCENDENTAL)
NUMERIC_ADD = "NUMERIC_ADD"
NUMERIC_SUB = "NUMERIC_SUB"

#: The scale a numeric square root is stored with: every row's PostgreSQL scale (at most
#: 19 over the values whose roots dsql takes; `runtime/kernel/numeric_sqrt.py`).
ROOT_SCALE = 20

#: The most digits a stored numeric has (DuckDB's and Spark's widest decimal).
MAX_PRECISION = 38

#: Digits after the point Spark keeps at least where a decimal result needs more than 38
#: digits (`spark.sql.decimalOperations.allowPrecisionLoss`): below it, Spark's sums
#: and products of numerics are exact.
SPARK_KEPT_SCALE = 6

#: Digits after the point a quotient keeps at least: PostgreSQL's 16 significant digits
#: for quotients from 0.0001 on (its scale for smaller ones is larger).
QUOTIENT_SCALE = 20

_FUNCTIONS = frozenset(
    {NUMERIC_DIV, NUMERIC_MOD, NUMERIC_SQRT_DIV, NUMERIC_SQRT, NUMERIC_MUL, NUMERIC_ADD}
    | {NUMERIC_SUB}
    | _TRANSCENDENTAL
    | _DIVISORS
)
_FLOATS = frozenset({T.FLOAT, T.DOUBLE})
_DECIMALS = frozenset({T.DECIMAL, T.BIGDECIMAL})
_RANK: dict[Kind, int] = {"integer": 0, "numeric": 1, "float": 2}


def kind_of_type(dtype: exp.DataType) -> Kind | None:
    """The kind of number a type holds, None for a type that is not a number."""
    if dtype.this in exp.DataType.INTEGER_TYPES:
        return "integer"
    if dtype.this in _DECIMALS:
        return "numeric"
    if dtype.this in _FLOATS:
        return "float"
    return None


def literal_scale(text: str) -> int | None:
    """The scale of a number as written (`'1e3'` 0, `'1.50'` 2), None if not a number."""
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        return None
    if not number.is_finite():
        return None
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)
    return max(-exponent, 0)


def is_numeric_literal(e: exp.Expr) -> bool:
    """Whether `e` is a number literal PostgreSQL reads as numeric (a point or exponent)
    and dsql stores as one (38 digits at most; a longer one is a double)."""
    return isinstance(e, exp.Literal) and not e.is_string and not e.this.isdigit() and _fits(e.this)


def _fits(text: str) -> bool:
    """Whether a number's digits, written out, fit a 38-digit decimal."""
    try:
        number = Decimal(text)
    except InvalidOperation:
        return False
    written = literal_scale(text) or 0
    return number.is_finite() and number.adjusted() < MAX_PRECISION - written


#: The largest integer literal that is a bigint; a larger one is numeric, as in PostgreSQL.
BIGINT_MAX = 2**63 - 1


def is_wide_integer_literal(e: exp.Expr) -> bool:
    """Whether `e` is an integer literal past bigint, which PostgreSQL reads as numeric."""
    return (
        isinstance(e, exp.Literal)
        and not e.is_string
        and e.this.isdigit()
        and (int(e.this) > BIGINT_MAX)
    )


def is_overflowing_literal(e: exp.Expr) -> bool:
    """Whether `e` is a number literal whose digits, written out, exceed dsql's 38-digit
    numeric (PostgreSQL's numeric holds it)."""
    return isinstance(e, exp.Literal) and not e.is_string and not _fits(e.this)


def kind(e: exp.Expr, inputs: Sequence[exp.DataType]) -> Kind | None:
    """The kind of number `e` is over columns `_c0.._cN` of types `inputs` (None: not a
    number, or not known here).

    Read from the expression's shape where that tells; otherwise "integer" where the
    expression's inferred type is an integer (`length(s)`, `d1 - d2`), since PostgreSQL
    divides those as integers whatever function produced them.
    """
    found = _shape_kind(e, inputs)
    if found is None and isinstance(e, exp.Expr):
        from dsql.planner import types

        if types.is_integer(types.annotated(e.copy(), inputs)):
            return "integer"
    return found


def _shape_kind(e: exp.Expr, inputs: Sequence[exp.DataType]) -> Kind | None:
    """`kind` as the expression's shape tells it (None where it does not)."""
    match e:
        case exp.Literal() if not e.is_string:
            if e.this.isdigit() and int(e.this) <= BIGINT_MAX:
                return "integer"
            return "numeric" if _fits(e.this) else "float"
        case exp.Column() if e.name.startswith("_c") and e.name[2:].isdigit():
            i = int(e.name[2:])
            return kind_of_type(inputs[i]) if i < len(inputs) else None
        case exp.Cast() | exp.TryCast():
            return kind_of_type(e.to)
        case exp.Paren() | exp.Neg() | exp.Abs() | exp.Min() | exp.Max():
            return kind(e.this, inputs)
        case exp.Sum():
            inner = e.this.expressions[0] if isinstance(e.this, exp.Distinct) else e.this
            return kind(inner, inputs)
        case exp.Count():
            return "integer"
        case exp.Extract():
            # PostgreSQL's extract is a numeric with a fraction (`epoch`, `second`), which
            # the engines give as whole numbers or floats: never divided as integers.
            return "float"
        case exp.Avg():
            return "float" if kind(e.this, inputs) == "float" else "numeric"
        case exp.Add() | exp.Sub() | exp.Mul() | exp.Div() | exp.Mod() | exp.IntDiv():
            return _widest(kind(e.this, inputs), kind(e.expression, inputs))
        case exp.Anonymous() if e.name.upper() in _FUNCTIONS:
            return "numeric"
        case exp.Coalesce() | exp.Greatest() | exp.Least() | exp.Case() | exp.Nullif():
            found = {kind(b, inputs) for b in branches(e) if not isinstance(b, exp.Null)}
            widest: Kind | None = "integer" if found else None
            for k in found:
                widest = _widest(widest, k)
            return widest
    return None


def branches(e: exp.Expr) -> list[exp.Expr]:
    """The values a conditional expression may take (CASE's arms, COALESCE's arguments)."""
    if isinstance(e, exp.Case):
        arms = [i.args["true"] for i in e.args.get("ifs") or []]
        default = e.args.get("default")
        return arms + ([default] if default is not None else [])
    if isinstance(e, exp.Nullif):
        return [e.this]
    return [e.this, *e.expressions]


def _widest(a: Kind | None, b: Kind | None) -> Kind | None:
    if a is None or b is None:
        return None
    return a if _RANK[a] >= _RANK[b] else b


def scale(e: exp.Expr, inputs: Sequence[exp.DataType], default: int = 10) -> int:
    """The scale PostgreSQL gives a numeric expression (0 for an integer one); `default`
    where the type says no scale (an unbounded numeric's stored scale)."""
    match e:
        case exp.Literal() if not e.is_string:
            return literal_scale(e.this) or 0
        case exp.Column() if e.name.startswith("_c") and e.name[2:].isdigit():
            i = int(e.name[2:])
            return type_scale(inputs[i], default) if i < len(inputs) else default
        case exp.Cast() | exp.TryCast():
            return type_scale(e.to, default)
        case exp.Paren() | exp.Neg() | exp.Abs() | exp.Min() | exp.Max():
            return scale(e.this, inputs, default)
        case exp.Sum():
            inner = e.this.expressions[0] if isinstance(e.this, exp.Distinct) else e.this
            return scale(inner, inputs, default)
        case exp.Add() | exp.Sub() | exp.Mod():
            return max(scale(e.this, inputs, default), scale(e.expression, inputs, default))
        case exp.Mul():
            both = scale(e.this, inputs, default) + scale(e.expression, inputs, default)
            return min(both, MAX_PRECISION)
        case exp.Anonymous() if e.name.upper() in (NUMERIC_DIV, NUMERIC_SQRT_DIV):
            return quotient_scale(int(e.expressions[2].this), int(e.expressions[3].this))
        case exp.Anonymous() if e.name.upper() == NUMERIC_SQRT or e.name.upper() in _TRANSCENDENTAL:
            return ROOT_SCALE
        case exp.Anonymous() if e.name.upper() == NUMERIC_MUL:
            both = int(e.expressions[2].this) + int(e.expressions[3].this)
            return min(both, MAX_PRECISION)
        case exp.Anonymous() if e.name.upper() in (NUMERIC_MOD, NUMERIC_ADD, NUMERIC_SUB) or (
            e.name.upper() in _DIVISORS
        ):
            return max(int(e.expressions[2].this), int(e.expressions[3].this))
        case exp.Count():
            return 0
        case exp.Coalesce() | exp.Greatest() | exp.Least() | exp.Case() | exp.Nullif():
            values = [b for b in branches(e) if not isinstance(b, exp.Null)]
            return max((scale(b, inputs, default) for b in values), default=default)
    return default


def type_scale(dtype: exp.DataType, default: int = 10) -> int:
    """The scale of a type: a decimal's own, 0 for integers, `default` for the rest."""
    if dtype.this in exp.DataType.INTEGER_TYPES:
        return 0
    if dtype.this in _DECIMALS and len(dtype.expressions) == 2:
        value = dtype.expressions[1].this
        if isinstance(value, exp.Literal):
            return int(value.this)
    return default


def quotient_scale(scale_a: int, scale_b: int) -> int:
    """The scale a quotient of numerics of these scales is stored with: every row's
    PostgreSQL scale up to `QUOTIENT_SCALE` (quotients from 0.0001 on)."""
    return min(max(QUOTIENT_SCALE, scale_a, scale_b), MAX_PRECISION)


def numeric_type(scale_: int) -> exp.DataType:
    """`decimal(38, scale)`: how dsql stores a numeric of that scale."""
    return exp.DataType.build(f"decimal({MAX_PRECISION}, {min(scale_, MAX_PRECISION)})")


def divide(a: exp.Expr, b: exp.Expr, scale_a: int, scale_b: int) -> exp.Expr:
    """`a / b` of numerics (or a numeric and an integer) of these scales: exact, to
    PostgreSQL's scale, an error for a zero `b`."""
    scales = [exp.Literal.number(scale_a), exp.Literal.number(scale_b)]
    return exp.Anonymous(this=NUMERIC_DIV, expressions=[a, b, *scales])


def root_of_quotient(a: exp.Expr, b: exp.Expr, scale_a: int, scale_b: int) -> exp.Expr:
    """√(a / b) of non-negative numerics (or integers) of these scales, as PostgreSQL's
    stddev computes it: the quotient rounded at its scale for the row, then its root
    rounded at that scale. Exact where the quotient column's scale is `QUOTIENT_SCALE`
    (operands of at most 20 digits after the point)."""
    scales = [exp.Literal.number(scale_a), exp.Literal.number(scale_b)]
    return exp.Anonymous(this=NUMERIC_SQRT_DIV, expressions=[a, b, *scales])


def product(a: exp.Expr, b: exp.Expr, scale_a: int, scale_b: int) -> exp.Expr:
    """`a * b` of numerics (or a numeric and an integer) of these scales: exact, of the
    sum of the scales, an overflow past 38 digits (`NUMERIC_MUL`: DuckDB multiplies
    decimals of up to 18 digits in 64 bits and overflows past them, so its kernel
    widens the operands to 38 digits)."""
    scales = [exp.Literal.number(scale_a), exp.Literal.number(scale_b)]
    return exp.Anonymous(this=NUMERIC_MUL, expressions=[a, b, *scales])


def sum_or_difference(e: exp.Add | exp.Sub, scale_a: int, scale_b: int) -> exp.Expr:
    """`a + b` or `a - b` of numerics (or a numeric and an integer) of these scales, of
    the larger scale: `NUMERIC_ADD` or `NUMERIC_SUB` where Spark would round it (it keeps
    `max(scale - 1, 6)` digits after the point of a sum of 38-digit decimals), else `e`."""
    if max(scale_a, scale_b) <= SPARK_KEPT_SCALE:
        return e
    name = NUMERIC_ADD if isinstance(e, exp.Add) else NUMERIC_SUB
    scales = [exp.Literal.number(scale_a), exp.Literal.number(scale_b)]
    return exp.Anonymous(this=name, expressions=[e.this, e.expression, *scales])


def square_root(a: exp.Expr, scale_a: int) -> exp.Expr:
    """√a of a numeric of scale `scale_a` (at most `ROOT_SCALE`) as PostgreSQL's
    `sqrt(numeric)`: exact, rounded half away from zero at its scale for the row, an
    error for a negative `a` (and, dsql's, for one outside 0 and [1e-8, 1e18))."""
    scales = [exp.Literal.number(scale_a), exp.Literal.number(0)]
    return exp.Anonymous(this=NUMERIC_SQRT, expressions=[a, exp.Literal.number(1), *scales])


def transcendental(name: str, a: exp.Expr, b: exp.Expr, scale_a: int, scale_b: int) -> exp.Expr:
    """`ln(a)`, `exp(a)` (`b` is 0), `log(a, b)` (base `a`) or `power(a, b)` of numerics
    (or a numeric and an integer) of these scales, `name` one of `NUMERIC_LN`,
    `NUMERIC_EXP`, `NUMERIC_LOG`, `NUMERIC_POWER`: PostgreSQL's digits at its scale for
    the row, stored with `ROOT_SCALE` digits after the point; PostgreSQL's errors, and
    dsql's for a row whose result the column does not hold. `NUMERIC_GCD` and
    `NUMERIC_LCM`: exact, of the larger scale."""
    assert name in _TRANSCENDENTAL | _DIVISORS, name
    scales = [exp.Literal.number(scale_a), exp.Literal.number(scale_b)]
    return exp.Anonymous(this=name, expressions=[a, b, *scales])


def remainder(a: exp.Expr, b: exp.Expr, scale_a: int, scale_b: int) -> exp.Expr:
    """`a % b` of numerics (or a numeric and an integer) of these scales: exact, of the
    larger scale, an error for a zero `b`."""
    scales = [exp.Literal.number(scale_a), exp.Literal.number(scale_b)]
    return exp.Anonymous(this=NUMERIC_MOD, expressions=[a, b, *scales])


def exact_literal(e: exp.Literal) -> exp.Expr:
    """A number literal with an exponent (`1e3`, `2.5E-3`) as the numeric it is in
    PostgreSQL: its digits written out, of the scale they have (a double where they do
    not fit 38 digits)."""
    if not _fits(e.this):
        return exp.Cast(this=e, to=exp.DataType.build("double"))
    written = literal_scale(e.this) or 0
    return exp.Cast(this=exp.Literal.number(f"{Decimal(e.this):f}"), to=numeric_type(written))


def zero_guard(divisor: exp.Expr, dividend: exp.Expr, value: exp.Expr) -> exp.Expr:
    """`value` (a quotient or remainder), or PostgreSQL's "division by zero" error where
    the divisor is zero and the dividend is not NULL (a NULL operand gives NULL)."""
    from dsql.planner.expr import RaiseError

    if isinstance(divisor, exp.Literal) and not divisor.is_string and float(divisor.this) != 0:
        return value
    zero = exp.and_(
        exp.EQ(this=divisor.copy(), expression=exp.Literal.number(0)),
        exp.Not(this=exp.Is(this=dividend.copy(), expression=exp.Null())),
    )
    error = RaiseError(this=exp.Literal.string(DIVISION_BY_ZERO))
    guarded = exp.Case(ifs=[exp.If(this=zero, true=error)], default=value)
    guarded.meta[ZERO_GUARD] = True  # not a CASE of the user's (set-returning calls may be in it)
    return guarded


#: The `meta` key marking a CASE that `zero_guard` wrote.
ZERO_GUARD = "zero_guard"


#: PostgreSQL's message for a zero divisor (of `/`, `%` and `mod`, on every number kind).
DIVISION_BY_ZERO = "division by zero"


__all__ = [
    "BIGINT_MAX",
    "DIVISION_BY_ZERO",
    "NUMERIC_DIV",
    "NUMERIC_EXP",
    "NUMERIC_GCD",
    "NUMERIC_LCM",
    "NUMERIC_LN",
    "NUMERIC_LOG",
    "NUMERIC_POWER",
    "NUMERIC_MOD",
    "NUMERIC_ADD",
    "NUMERIC_MUL",
    "NUMERIC_SUB",
    "SPARK_KEPT_SCALE",
    "NUMERIC_SQRT",
    "NUMERIC_SQRT_DIV",
    "PER_ROW_SCALE",
    "ROOT_SCALE",
    "ZERO_GUARD",
    "divide",
    "exact_literal",
    "is_numeric_literal",
    "is_overflowing_literal",
    "is_wide_integer_literal",
    "kind",
    "kind_of_type",
    "literal_scale",
    "numeric_type",
    "product",
    "quotient_scale",
    "remainder",
    "root_of_quotient",
    "scale",
    "square_root",
    "transcendental",
    "sum_or_difference",
    "type_scale",
    "zero_guard",
]
