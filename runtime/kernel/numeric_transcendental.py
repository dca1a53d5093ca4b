"""PostgreSQL's `ln`, `log`, `exp`, `power`, `gcd` and `lcm` of numerics, digit for digit.

PostgreSQL computes these in its own numeric arithmetic (numeric.c) and picks each
row's result scale from the argument (`rscale`): at least 16 significant digits
(`NUMERIC_MIN_SIG_DIGITS`), never fewer digits after the point than an argument's
scale (its `dscale`; dsql's is the column's scale):

- `ln(x)`: `16 - ln_dweight(x)`, where `ln_dweight` estimates the decimal weight of
  `ln(x)` from the leading base-10000 digits of `x` (`estimate_ln_dweight`; between 0.9
  and 1.1 it is the weight of `x - 1`);
- `log(b, x)`: `16 - (ln_dweight(x) - ln_dweight(b))`; `log(x)` is `log(10, x)`;
- `exp(x)`: `16 - trunc(x·0.434294481903252)`, the estimated weight of the result;
- `power(b, e)` of a whole `e` (within 32 bits): `max(16, dscale(b))`
  (`power_var_int`); of another `e`: `16 - trunc(w)`, `w` the weight estimated from
  `e·ln(b)` computed to about 8 significant digits, and at least both dscales.

`gcd` and `lcm` are exact, of the larger scale.

`value(op, a, sa, b, sb)` is one row's result as text, rounded half away from zero at
that scale from a value computed with guard digits (Python's `decimal`, whose `ln`,
`exp` and `**` are correctly rounded), or `!code` for an error (`MESSAGES`). The
kernels call it as the function `dsql_numeric_fn` they register (a vectorized DuckDB
function over Arrow, a Spark pandas UDF: `register_duckdb`, `register_spark`);
`expression(op, dialect, sa, sb)` is the call that reads its text back as dsql's
numeric of scale `SCALE`.

dsql keeps a numeric in 38 digits: a result PostgreSQL writes with more than `SCALE`
digits after the point or with 18 or more before it is refused per row (`!range`).

>>> value("ln", "2.0", 1, "0", 0), value("exp", "1.0", 1, "0", 0)
('0.6931471805599453', '2.7182818284590452')
>>> value("log", "2.0", 1, "64.0", 1), value("power", "2.0", 1, "0.5", 1)
('6.0000000000000000', '1.4142135623730950')
>>> value("ln", "0", 0, "0", 0)
'!zero'
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any

#: The name each kernel registers the function under.
NAME = "dsql_numeric_fn"
#: Digits after the point of dsql's result column (every row's PostgreSQL scale in range).
SCALE = 20
#: Digits before the point the result column holds (38 in all).
WHOLE = 38 - SCALE

#: PostgreSQL's constants (numeric.c).
_MIN_SIG_DIGITS = 16
_MAX_RESULT_SCALE = 2000
_MAX_DISPLAY_SCALE = 1000
_LOG10_E = 0.434294481903252
_LN_10 = 2.302585092994046
#: Digits computed past a row's scale before rounding at it.
_GUARD = 12

#: The errors, by the code `value` answers: PostgreSQL's words, and dsql's for a result
#: its 38-digit numeric does not hold (no quote in any: they are SQL strings on every
#: kernel).
MESSAGES: dict[str, str] = {
    "zero": "cannot take logarithm of zero",
    "negative": "cannot take logarithm of a negative number",
    "division": "division by zero",
    "zero_power": "zero raised to a negative power is undefined",
    "complex": "a negative number raised to a non-integer power yields a complex result",
    "overflow": "value overflows numeric format",
    "wide": "a numeric result of more than 38 digits (the most a dsql numeric holds)",
    "range": (
        f"ln, log, exp and power of a numeric are supported where the result PostgreSQL "
        f"gives has at most {SCALE} digits after the point and fewer than {WHOLE} before it "
        "(cast to double precision for others)"
    ),
}


class _Refused(Exception):
    """A row's error, by its code in `MESSAGES`."""


def _nbase_digits(x: Decimal) -> tuple[int, int, int | None]:
    """PostgreSQL's view of a positive `x`: its weight in base-10000 digits, its first
    base-10000 digit, and its second (None where `x` has no other non-zero digit)."""
    weight = x.adjusted() // 4
    scaled = x.scaleb(-4 * weight)
    first = int(scaled)
    rest = scaled - first
    if rest == 0:
        return weight, first, None
    return weight, first, int(rest.scaleb(4))


def ln_dweight(x: Decimal) -> int:
    """PostgreSQL's estimate of the decimal weight of `ln(x)` (`estimate_ln_dweight`)."""
    if x <= 0:
        return 0
    if Decimal("0.9") <= x <= Decimal("1.1"):
        below = x - 1
        return 0 if below == 0 else below.adjusted()
    weight, first, second = _nbase_digits(x)
    digits, dweight = first, weight * 4
    if second is not None:
        digits, dweight = digits * 10000 + second, dweight - 4
    ln_x = math.log(digits) + dweight * _LN_10
    return int(math.log10(abs(ln_x)))  # C's (int) truncates toward zero


def _rounded(compute: Callable[[], Decimal], rscale: int, weight: int) -> Decimal:
    """`compute()` evaluated with `_GUARD` digits past `rscale` (its result about
    10^`weight`), rounded half away from zero at `rscale` digits after the point."""
    with localcontext() as context:
        context.prec = max(weight, 0) + rscale + _GUARD + 2
        context.Emax, context.Emin = 10**6, -(10**6)
        result = compute()
        return result.quantize(Decimal(1).scaleb(-rscale), rounding=ROUND_HALF_UP)


def _ln(x: Decimal, sx: int) -> Decimal:
    if x == 0:
        raise _Refused("zero")
    if x < 0:
        raise _Refused("negative")
    rscale = max(_MIN_SIG_DIGITS - ln_dweight(x), sx, 0)
    return _check(_rounded(x.ln, rscale, 3), rscale)


def _log(b: Decimal, sb: int, x: Decimal, sx: int) -> Decimal:
    for v in (b, x):
        if v == 0:
            raise _Refused("zero")
        if v < 0:
            raise _Refused("negative")
    if b == 1:
        raise _Refused("division")
    dweight = ln_dweight(x) - ln_dweight(b)
    rscale = max(_MIN_SIG_DIGITS - dweight, sb, sx, 0)

    def quotient() -> Decimal:
        return x.ln() / b.ln()

    return _check(_rounded(quotient, rscale, dweight + 1), rscale)


def _exp(x: Decimal, sx: int) -> Decimal:
    estimate = min(max(float(x) * _LOG10_E, -_MAX_RESULT_SCALE), _MAX_RESULT_SCALE)
    rscale = max(_MIN_SIG_DIGITS - int(estimate), sx, 0)
    if abs(float(x)) >= _MAX_RESULT_SCALE * 3:
        if x > 0:
            raise _Refused("overflow")
        return _zero(rscale)
    return _check(_rounded(x.exp, rscale, int(estimate) + 1), rscale)


def _power(b: Decimal, sb: int, e: Decimal, se: int) -> Decimal:
    if b == 0 and e < 0:
        raise _Refused("zero_power")
    if e == e.to_integral_value() and abs(e) <= 2**31 - 1:
        return _whole_power(b, sb, int(e))
    if b == 0:
        return _zero(_MIN_SIG_DIGITS)
    if b < 0:
        raise _Refused("complex")
    # The weight estimate from e·ln(b) to about 8 significant digits, as PostgreSQL's.
    local = max(8 - ln_dweight(b), 0)
    with localcontext() as context:
        context.prec = 60
        ln_b = b.ln().quantize(Decimal(1).scaleb(-local), rounding=ROUND_HALF_UP)
        product = (ln_b * e).quantize(Decimal(1).scaleb(-local), rounding=ROUND_HALF_UP)
    estimate = float(product)
    if abs(estimate) > _MAX_RESULT_SCALE * 3.01:
        if estimate > 0:
            raise _Refused("overflow")
        return _zero(_MAX_DISPLAY_SCALE)
    weight = int(estimate * _LOG10_E)
    rscale = max(_MIN_SIG_DIGITS - weight, sb, se, 0)
    return _check(_rounded(lambda: b**e, rscale, weight + 1), rscale)


def _whole_power(b: Decimal, sb: int, n: int) -> Decimal:
    """`b` to the whole power `n` (`power_var_int`): rounded at `max(16, dscale(b))`."""
    rscale = max(_MIN_SIG_DIGITS, sb)
    if n == 0:
        return Decimal(1).quantize(Decimal(1).scaleb(-rscale))
    if b == 0:
        return Decimal(0).quantize(Decimal(1).scaleb(-rscale))
    weight = math.ceil(n * float(b.copy_abs().log10())) + 1
    if weight > 32768 * 4:
        raise _Refused("overflow")
    if weight < -(2 * _MAX_RESULT_SCALE):
        return _zero(_MAX_DISPLAY_SCALE)
    return _check(_rounded(lambda: b**n, rscale, weight), rscale)


def _divisor(op: str, x: Decimal, y: Decimal, scale: int) -> Decimal:
    """`gcd(x, y)` or `lcm(x, y)` of numerics, of the larger scale `scale` (PostgreSQL's
    `numeric_gcd`, `numeric_lcm`): the integers `x·10^scale` and `y·10^scale`'s, never
    negative, 0 where either operand is (`lcm`) or both are (`gcd`)."""
    nx, ny = int(x.scaleb(scale)), int(y.scaleb(scale))
    whole = math.gcd(nx, ny) if op == "gcd" else math.lcm(nx, ny)
    result = Decimal(whole).scaleb(-scale)
    if result.adjusted() >= 38 - scale:
        raise _Refused("wide")
    return result.quantize(Decimal(1).scaleb(-scale))


def _zero(rscale: int) -> Decimal:
    """PostgreSQL's zero result of scale `rscale`, with the digits dsql's column keeps."""
    return Decimal(0).quantize(Decimal(1).scaleb(-min(rscale, SCALE)))


def _check(result: Decimal, rscale: int) -> Decimal:
    """`result` where dsql's column holds it exactly, else the row's `range` error."""
    if result == 0:
        return result.copy_abs()  # PostgreSQL has no negative zero
    if rscale > SCALE or result.copy_abs().adjusted() >= WHOLE:
        raise _Refused("range")
    return result


def value(op: str, a: str, sa: int, b: str, sb: int) -> str:
    """The text of one row's `op` (`ln`, `exp`: of `a`; `log`: base `a` of `b`;
    `power`: `a` to the `b`), the operands of scales `sa` and `sb`; `!code` for an error."""
    x, y = Decimal(a), Decimal(b)
    with localcontext() as context:
        # Exact steps (the weight, `x - 1`) on operands of up to 38 digits.
        context.prec = 100
        try:
            match op:
                case "ln":
                    result = _ln(x, sa)
                case "log":
                    result = _log(x, sa, y, sb)
                case "exp":
                    result = _exp(x, sa)
                case "power":
                    result = _power(x, sa, y, sb)
                case "gcd" | "lcm":
                    result = _divisor(op, x, y, max(sa, sb))
                case _:
                    raise ValueError(f"no numeric function {op!r}")
        except _Refused as refused:
            return f"!{refused.args[0]}"
    return f"{result:f}"


def values(
    ops: Sequence[Any], a: Sequence[Any], sa: Sequence[Any], b: Sequence[Any], sb: Sequence[Any]
) -> list[str | None]:
    """`value` of each row of the columns (None where an operand is NULL)."""
    return [
        None if x is None or y is None else value(o, x, int(s), y, int(t))
        for o, x, s, y, t in zip(ops, a, sa, b, sb, strict=True)
    ]


def register_duckdb(con: Any) -> None:
    """Define `NAME` on a DuckDB connection: a vectorized function over Arrow columns."""
    import pyarrow as pa
    from duckdb import sqltypes

    # DuckDB reads the parameters and evaluates the annotations (so `Any`, a global).
    def call(ops: Any, a: Any, sa: Any, b: Any, sb: Any) -> Any:
        columns = (c.to_pylist() for c in (ops, a, sa, b, sb))
        return pa.array(values(*columns), type=pa.string())

    text, integer = sqltypes.VARCHAR, sqltypes.INTEGER
    parameters = [text, text, integer, text, integer]
    con.create_function(NAME, call, parameters, text, type="arrow", null_handling="special")


def register_spark(spark: Any) -> None:
    """Define `NAME` on a Spark session: a pandas UDF, evaluated by the executors."""
    from pyspark.sql.functions import pandas_udf
    from pyspark.sql.types import StringType

    spark.udf.register(NAME, pandas_udf(spark_function(), StringType()))  # type: ignore[call-overload]


def spark_function() -> Callable[..., Any]:
    """The pandas function behind `NAME` on Spark, pickled with this module's code by
    value: executors of a cluster need no dsql installed to run it."""
    import pandas as pd
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def call(ops: Any, a: Any, sa: Any, b: Any, sb: Any) -> Any:
        columns = ([None if pd.isna(v) else v for v in c.tolist()] for c in (ops, a, sa, b, sb))
        return pd.Series(values(*columns), dtype=object)

    # PySpark reads the kind of pandas UDF from the hints, evaluated: real objects.
    call.__annotations__ = {name: pd.Series for name in ("ops", "a", "sa", "b", "sb", "return")}
    return call


def result_scale(op: str, sa: int, sb: int) -> int:
    """The scale of dsql's column of `op` of numerics of scales `sa` and `sb`."""
    return max(sa, sb) if op in ("gcd", "lcm") else SCALE


def expression(op: str, dialect: str, sa: int, sb: int) -> str:
    """The call of `op` on `__dsql_a` and `__dsql_b` (numerics of scales `sa` and `sb`)
    in `dialect`, as dsql's numeric of scale `result_scale`: each error code raised as
    its message."""
    text = "STRING" if dialect == "spark" else "VARCHAR"
    decimal = f"DECIMAL(38, {result_scale(op, sa, sb)})"
    call = f"{NAME}('{op}', CAST(__dsql_a AS {text}), {sa}, CAST(__dsql_b AS {text}), {sb})"
    errors = " ".join(
        f"WHEN __dsql_r = '!{code}' THEN CAST(RAISE_ERROR('{message}') AS {decimal})"
        for code, message in MESSAGES.items()
    )
    body = f"CASE {errors} ELSE CAST(__dsql_r AS {decimal}) END"
    if dialect == "spark":
        return f"TRANSFORM(ARRAY({call}), __dsql_r -> {body})[0]"
    return f"LIST_TRANSFORM([{call}], LAMBDA __dsql_r: {body})[1]"


__all__ = [
    "MESSAGES",
    "NAME",
    "SCALE",
    "expression",
    "ln_dweight",
    "register_duckdb",
    "register_spark",
    "result_scale",
    "value",
    "values",
]
