"""The square root of a numeric as PostgreSQL computes it, in 38-digit integer arithmetic.

PostgreSQL's `stddev` of integers and numerics is the square root of the numeric
variance, computed at the variance's own scale `r` (`numeric_stddev_internal` and
`sqrt_var` in its numeric.c): the root is truncated at least one digit past `r`, then
rounded half away from zero at `r`, which is the exact root rounded at `r`.

`rounded_root(n, r, big, dialect)` writes that for a value `v = n·10^-big` held as the
exact non-negative integer `n < 10^38` (DuckDB's HUGEINT, Spark's decimal(38, 0)):

- `y = isqrt(n·10^(big+2)) = floor(√v·10^(big+1))`, the root one digit past `big`,
  without ever holding `n·10^(big+2)` (up to 60 digits): every `floor(n·10^(big+2) / d)`
  is a long division of `n` by `d`, the digits after `n div d` a chunk at a time;
- from a double estimate `y0 = √n·10^((big+2)/2)` (relative error near 2·10^-16), one
  integer Newton step `y1 = (y0 + floor(M / y0)) div 2`: never below `isqrt(M)`, and
  above it by at most one while `y` has at most 30 digits (the error after the step is
  about `y·ε²/2`); then `y1 - 1` where `y1 > floor(M / y1)` (that is, `y1² > M`);
- rounded half up at `r` digits (`r ≤ big`), as an integer of scale `big`.

`square_root(dialect, sa)` is PostgreSQL's `sqrt(numeric)` (`numeric_sqrt` in numeric.c):
the root rounded at `r = max(15 - 2·w, sa)` digits after the point, `w` the value's
weight in base-10000 digits (0 for 0), read exactly from the scaled integer. Its
domain is 0 and [10^-8, 10^18): below it PostgreSQL keeps more than `SCALE` digits after
the point, above it the value times 10^20 passes 38 digits; both are refused per row. On
Spark the domain ends at 10^(18 - min(scale, 6)) (Spark's decimal product of |a| and
10^20 keeps that many digits after the point).

Each value used many times is bound once by a one-element list transformed by a lambda
(DuckDB's `LIST_TRANSFORM`, Spark's `TRANSFORM`), so the text grows with the steps, not
with the number of uses.

>>> "LIST_TRANSFORM" in rounded_root("n", "r", 20, "duckdb")
True
"""

from __future__ import annotations

# The module, not its names: it imports this one (`expand` builds roots with it).
from dsql.runtime.kernel import numeric_division as division

#: The scale of the values whose roots are exact here: `y` then has at most 30 digits,
#: so one Newton step from the double estimate leaves it at most one above the root,
#: and a remainder times 10^8 stays within 38 digits.
SCALE = 20
#: Digits of `M / d` produced per step of the long division (see `SCALE`).
_CHUNK = 8


def rounded_root(n: str, r: str, big: int, dialect: str, fine: str | None = None) -> str:
    """The integer of scale `big` of √(`n`·10^-`big`) rounded half away from zero at `r`
    digits after the point (`n`: an exact non-negative integer; `r`: at most `big`).

    `fine`, the same value to `2·big` places (truncated), is the root's input below
    10^-4: there `n` has too few digits for a root exact to `big` places (PostgreSQL's
    value there has more than `big` digits; its root is rounded at `big`)."""
    assert big == SCALE, "the root is exact for values of scale 20 (see SCALE)"
    body = _root("__dsql_n", big, big, dialect)
    if fine is not None:
        small = _let(fine, "__dsql_f", _root("__dsql_f", 2 * big, big, dialect), dialect)
        body = f"CASE WHEN __dsql_n < {10 ** (big - 4)} THEN {small} ELSE {body} END"
    return _let(n, "__dsql_n", _let(r, "__dsql_r", body, dialect), dialect)


#: PostgreSQL's error for the square root of a negative numeric.
NEGATIVE = "cannot take square root of a negative number"


def out_of_domain(upper: int) -> str:
    """dsql's error for a numeric outside `square_root`'s domain, [1e-8, 10^`upper`)."""
    return (
        f"sqrt of a numeric is supported for 0 and values from 1e-8 to below 1e{upper} "
        "(cast to double precision for others)"
    )


def square_root(dialect: str, sa: int) -> str:
    """`sqrt(__dsql_a)` of a numeric of scale `sa` (at most `SCALE`) as PostgreSQL
    computes it, a decimal(38, `SCALE`): rounded half away from zero at PostgreSQL's
    scale for the row (module docstring); its error for a negative value, dsql's for
    one outside the domain."""
    assert sa <= SCALE, "the planner refuses sqrt of a numeric of scale above 20"
    n = division.scaled("__dsql_a", sa, SCALE, dialect)
    # The base-10000 weight from n = |a|·10^20 (n ≥ 10^12 in the domain).
    ladder = " ".join(
        f"WHEN __dsql_n < {10 ** (SCALE + 4 * (w + 1))} THEN {w}" for w in range(-2, 4)
    )
    weight = f"CASE WHEN __dsql_n = 0 THEN 0 {ladder} ELSE 4 END"
    r = f"GREATEST(15 - 2 * ({weight}), {sa})"
    root = _let(
        n,
        "__dsql_n",
        _let(r, "__dsql_r", _root("__dsql_n", SCALE, SCALE, dialect), dialect),
        dialect,
    )
    value = division.unscaled(root, SCALE, dialect)
    decimal = f"DECIMAL(38, {SCALE})"
    # Spark's product |a|·10^20 keeps min(sa, 6) digits after the point, so at most
    # 38 - min(sa, 6) before it.
    upper = 18 - min(sa, 6) if dialect == "spark" else 18
    # A value of scale 20 is below 10^18 (and its common type with 10^18 would overflow).
    large = f"__dsql_a >= {10**upper} OR " if sa < SCALE or upper < 18 else ""
    return (
        f"CASE WHEN __dsql_a IS NULL THEN CAST(NULL AS {decimal}) "
        f"WHEN __dsql_a < 0 THEN CAST(RAISE_ERROR('{NEGATIVE}') AS {decimal}) "
        f"WHEN {large}(__dsql_a > 0 AND __dsql_a < 0.00000001) "
        f"THEN CAST(RAISE_ERROR('{out_of_domain(upper)}') AS {decimal}) ELSE {value} END"
    )


def _root(n: str, scale: int, big: int, dialect: str) -> str:
    """`rounded_root` of the integer `n` of scale `scale` (`big` or `2·big`) at
    `__dsql_r` digits, as an integer of scale `big`."""
    r = "__dsql_r"
    integer = "DECIMAL(38, 0)" if dialect == "spark" else "HUGEINT"
    shift = 2 * (big + 1) - scale  # M = n·10^shift, √M = √v·10^(big+1)

    def quotient(d: str) -> str:
        """floor(M / d), `d` a positive integer of at most 30 digits."""
        return f"({division.long_division(n, d, shift, _CHUNK, dialect)[0]})"

    estimate = (
        f"GREATEST(CAST(SQRT(CAST({n} AS DOUBLE)) * 1e{shift // 2} AS {integer}), "
        f"CAST(1 AS {integer}))"
    )
    newton = _let(
        estimate, "__dsql_y0", _halved(f"(__dsql_y0 + {quotient('__dsql_y0')})", dialect), dialect
    )
    checked = _let(
        f"GREATEST({newton}, CAST(1 AS {integer}))",
        "__dsql_y1",
        f"__dsql_y1 - CASE WHEN __dsql_y1 > {quotient('__dsql_y1')} THEN 1 ELSE 0 END",
        dialect,
    )
    # n = 0: the check's divisor is 1 and the root 0.
    dropped = f"CAST(POWER(10, {big + 1} - {r}) AS {integer})"
    half = f"CAST(5 * POWER(10, {big} - {r}) AS {integer})"
    kept = f"CAST(POWER(10, {big} - {r}) AS {integer})"
    rounded = f"{_exact_div(f'(__dsql_y + {half})', dropped, dialect)} * {kept}"
    return _let(checked, "__dsql_y", rounded, dialect)


def _let(value: str, name: str, body: str, dialect: str) -> str:
    """`body` with `name` bound to `value`, which is evaluated once."""
    if dialect == "spark":
        return f"TRANSFORM(ARRAY({value}), {name} -> {body})[0]"
    return f"LIST_TRANSFORM([{value}], LAMBDA {name}: {body})[1]"


def _halved(value: str, dialect: str) -> str:
    """floor(`value` / 2) of a non-negative integer of up to 31 digits."""
    return _exact_div(value, "2", dialect)


def _exact_div(value: str, divisor: str, dialect: str) -> str:
    """floor(`value` / `divisor`) of non-negative integers, the quotient of up to 32
    digits (Spark's `div` answers a 64-bit integer; its decimal quotient of a multiple
    is exact)."""
    if dialect == "spark":
        return f"CAST(({value} - {value} % {divisor}) / {divisor} AS DECIMAL(38, 0))"
    return f"({value} // {divisor})"


__all__ = ["NEGATIVE", "SCALE", "out_of_domain", "rounded_root", "square_root"]
