"""Exact numeric division as PostgreSQL computes it, in each kernel's integer arithmetic.

The planner writes `a / b` of numerics as `NUMERIC_DIV(a, b, sa, sb)` (`sa`, `sb`: the
operands' scales; `planner/numeric.py`). Neither engine divides decimals as PostgreSQL
does (DuckDB answers a double; Spark cuts the scale to 6 digits for 38-digit operands),
so `expand` rewrites each call, before a query is rendered, into long division over
integers (DuckDB's HUGEINT, Spark's decimal(38, 0)):

- both operands scaled to integers `na = |a|·10^s`, `nb = |b|·10^s` (`s = max(sa, sb)`);
- the integer part `na div nb`, then the digits after the point, nine at a time, each
  from the remainder times 10^9 (so no intermediate needs more than 38 digits while
  `nb < 10^29`);
- rounded half away from zero at PostgreSQL's scale for the row: `max(16 - 4·qweight,
  s)`, where `qweight` estimates the quotient's weight in base-10000 digits from the
  operands' leading digits (`select_div_scale` in PostgreSQL's numeric.c), up to the
  column's scale `numeric.quotient_scale(sa, sb)`;
- a zero divisor (with a dividend that is not NULL) is PostgreSQL's "division by zero".

`NUMERIC_MOD(a, b, sa, sb)`, a remainder of numerics, is the remainder of the same
integers, of scale `s` (DuckDB's remainder of 38-digit decimals goes through a double).
`NUMERIC_MUL(a, b, sa, sb)`, a product, is the engine's product, DuckDB's of the
operands widened to 38 digits (it multiplies decimals of up to 18 digits in 64 bits,
which overflow where the product has more); Spark's, where it would round the product
to 6 digits after the point (scales summing to more than 6), the product of the
operands' digits as 38-digit integers read back at the sum of the scales.
`NUMERIC_WEIGHTED_SUM(x, n, s, 0)`, a reduce's sum of numerics `x` of scale `s` each
counted `n` times, is a decimal(38, s): DuckDB's `SUM(x * n)`; on Spark, which keeps 6
digits after the point of `x * n`, the sum of `x`'s digits times `n` as integers, read
back at scale `s`. `NUMERIC_ADD` and `NUMERIC_SUB(a, b, sa, sb)`, a sum and a difference
of a scale `s` over 6, are the engine's; Spark's of the operands as decimal(37, s), whose
sum it keeps exact (of 38-digit decimals it rounds away the last digit after the point).

`NUMERIC_SQRT_DIV(a, b, sa, sb)` (stddev: `a` the spread, `b` the pairs) is the square
root of the same rounded quotient, rounded at the row's scale (`numeric_sqrt.py`);
`NUMERIC_SQRT(a, 1, sa, 0)` is `sqrt(a)` of a numeric (`numeric_sqrt.square_root`).
`NUMERIC_LN(a, 0, sa, 0)`, `NUMERIC_EXP(a, 0, sa, 0)`, `NUMERIC_LOG(base, x, sa, sb)` and
`NUMERIC_POWER(a, b, sa, sb)`, `NUMERIC_GCD` and `NUMERIC_LCM` are the kernel's
`dsql_numeric_fn` read back as a numeric (`numeric_transcendental.py`).

The operands' weights are estimated in double precision: an operand within a few units
in the 16th digit of a power of 10000 may get the scale of its neighbour.

>>> from sqlglot import parse_one
>>> text = expand(parse_one("SELECT NUMERIC_DIV(x, 3, 1, 0) FROM t"), "duckdb").sql("duckdb")
>>> "NUMERIC_DIV" in text, "INT128" in text
(False, True)
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import sqlglot
from sqlglot import exp

from dsql.runtime.kernel import numeric_sqrt, numeric_transcendental

#: The functions the planner writes for a numeric quotient and remainder (`planner/numeric.py`).
NAME = "NUMERIC_DIV"
REMAINDER = "NUMERIC_MOD"
#: The square root of a quotient (stddev's: `planner/numeric.py`).
ROOT = "NUMERIC_SQRT_DIV"
#: The square root of a numeric (`sqrt`'s: `planner/numeric.py`).
SQRT = "NUMERIC_SQRT"
#: A product of numerics (`planner/numeric.py`).
PRODUCT = "NUMERIC_MUL"
#: A sum and a difference of numerics (`planner/numeric.py`).
SUM = "NUMERIC_ADD"
DIFFERENCE = "NUMERIC_SUB"
#: A sum of numerics each counted a number of times (a reduce's `sum(x * __diff__)`).
WEIGHTED_SUM = "NUMERIC_WEIGHTED_SUM"

#: Digits after the point a quotient column holds at least (`planner/numeric.py`).
_QUOTIENT_SCALE = 20
_MAX_PRECISION = 38
#: Digits produced per step of the long division.
_CHUNK = 9
#: Digits after the point Spark keeps at least in a product whose exact type would need
#: more than 38 digits (`spark.sql.decimalOperations.allowPrecisionLoss`).
_SPARK_KEPT_SCALE = 6


def expand(tree: exp.Expr, dialect: str) -> exp.Expr:
    """`tree` with every `NUMERIC_DIV(...)` and `NUMERIC_MOD(...)` call written out for
    `dialect` (a copy where there is one; `tree` itself where there is none)."""
    if not any(_is_call(node) for node in tree.find_all(exp.Anonymous)):
        return tree

    def rewrite(node: exp.Expression) -> exp.Expression:
        if not _is_call(node):
            return node
        a, b = (expand(operand, dialect) for operand in node.expressions[:2])  # nested calls
        assert isinstance(a, exp.Expression) and isinstance(b, exp.Expression)
        sa, sb = node.expressions[2:]
        build = _BUILDERS[str(node.name).upper()]
        template = build(dialect, int(sa.this), int(sb.this))

        def fill(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and n.name == "__dsql_a":
                return a.copy()
            if isinstance(n, exp.Column) and n.name == "__dsql_b":
                return b.copy()
            return n

        return template.copy().transform(fill)

    return tree.transform(rewrite)


def _is_call(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.name).upper() in _BUILDERS


def _integer(dialect: str) -> str:
    """The kernel's exact integer type of 38 digits."""
    return "DECIMAL(38, 0)" if dialect == "spark" else "HUGEINT"


def scaled(
    name: str, own: int, scale: int, dialect: str, absolute: bool = True, wide: bool = False
) -> str:
    """The operand `name` (of scale `own`) times 10^scale (`scale >= own`), as an exact
    integer (an overflow past 38 digits is the engine's error).

    DuckDB's product would need the digits of both factors in one decimal(38): the
    operand's digits are read as an integer from its text instead (`-1.50` is -150).
    Spark's product keeps 32 digits before the point: `wide`, for integers of up to 38
    digits, scales the operand's integer part and fraction apart (a longer expression).
    """
    integer = _integer(dialect)
    value = f"CAST({name} AS DECIMAL(38, {own}))"
    value = f"ABS({value})" if absolute else value
    if dialect == "spark" and not wide:
        return f"CAST({value} * {10**scale} AS {integer})"
    if dialect == "spark":
        # Spark rounds a product of 38-digit decimals to 6 digits after the point,
        # leaving 32 before it: the integer part and the fraction (`% 1`, of `own + 1`
        # digits) are scaled apart, so each product is an integer of at most 38 digits.
        whole = f"CAST({value} - {value} % 1 AS DECIMAL({_MAX_PRECISION - own}, 0))"
        fraction = f"CAST(({value} % 1) * {10**scale} AS {integer})"
        return f"(CAST({whole} * {10**scale} AS {integer}) + {fraction})"
    digits = f"CAST(REPLACE(CAST({value} AS VARCHAR), '.', '') AS {integer})"
    return f"({digits} * {10 ** (scale - own)})"


def unscaled(integer_value: str, scale: int, dialect: str) -> str:
    """An exact integer times 10^-scale, as a decimal(38, scale)."""
    if dialect == "spark":  # Spark's decimal product would cut the scale: the digits are read
        return f"CAST(CONCAT(CAST({integer_value} AS STRING), 'E-{scale}') AS DECIMAL(38, {scale}))"
    unit = f"CAST('1e-{scale}' AS DECIMAL(38, {scale}))"
    return f"CAST(CAST({integer_value} AS DECIMAL(38, 0)) * {unit} AS DECIMAL(38, {scale}))"


def _guarded(value: str, scale: int, dialect: str) -> exp.Expr:
    """`value`, or PostgreSQL's "division by zero" where the divisor is zero."""
    text = (
        f"CASE WHEN __dsql_b = 0 AND NOT __dsql_a IS NULL "
        f"THEN CAST(RAISE_ERROR('division by zero') AS DECIMAL(38, {scale})) ELSE {value} END"
    )
    return sqlglot.parse_one(text, read=dialect)


@functools.cache
def _remainder(dialect: str, sa: int, sb: int) -> exp.Expr:
    """`__dsql_a % __dsql_b` of numerics: exact (DuckDB's remainder of 38-digit decimals
    is a double's), of the larger scale, with the dividend's sign."""
    s = max(sa, sb)
    na = scaled("__dsql_a", sa, s, dialect, absolute=False)
    nb = scaled("__dsql_b", sb, s, dialect, absolute=False)
    return _guarded(unscaled(f"({na} % {nb})", s, dialect), s, dialect)


def long_division(a: str, b: str, places: int, chunk: int, dialect: str) -> tuple[str, str]:
    """floor(`a`·10^`places` / `b`) of non-negative integers, and the remainder, never
    holding `a`·10^`places`: the integer part `a div b`, then the digits after it
    `chunk` at a time, each from the remainder times 10^chunk (which must stay within
    38 digits). Past 38 places only a quotient below 1 fits: its integer part is taken
    to be 0."""
    integer = _integer(dialect)
    div = "div" if dialect == "spark" else "//"
    remainder = f"({a} % {b})"
    if places > _MAX_PRECISION:
        truncated = f"CAST(0 AS {integer})"
    else:
        truncated = f"CAST(({a} {div} {b}) AS {integer}) * {10**places}"
    left = places
    while left > 0:
        step = min(chunk, left)
        shifted = f"({remainder} * {10**step})"
        left -= step
        truncated += f" + CAST(({shifted} {div} {b}) AS {integer}) * {10**left}"
        remainder = f"({shifted} % {b})"
    return truncated, remainder


def _rounded_quotient(dialect: str, sa: int, sb: int) -> tuple[str, str, int, str, str]:
    """|`__dsql_a` / `__dsql_b`| (scales `sa`, `sb`) rounded half away from zero at
    PostgreSQL's scale for the row, as an exact integer of scale `big`; that row scale;
    `big`, the column's scale (`numeric.quotient_scale`); and the operands as the
    integers divided."""
    integer = _integer(dialect)
    s = max(sa, sb)
    big = min(max(_QUOTIENT_SCALE, s), _MAX_PRECISION)
    na, nb = (scaled(name, own, s, dialect) for name, own in (("__dsql_a", sa), ("__dsql_b", sb)))
    truncated, remainder = long_division(na, nb, big, _CHUNK, dialect)
    # PostgreSQL's scale for the row, from the operands' base-10000 weights and leading
    # digits; `m` digits of the `big` computed are rounded away.
    weights = []
    for name in ("__dsql_a", "__dsql_b"):
        magnitude = f"CAST(ABS({name}) AS DOUBLE)"
        weight = f"CASE WHEN {name} = 0 THEN 0 ELSE FLOOR(FLOOR(LOG10({magnitude})) / 4) END"
        first = f"FLOOR({magnitude} / POWER(10000, {weight}))"
        weights.append((weight, first))
    (wa, fa), (wb, fb) = weights
    qweight = f"({wa} - {wb} - CASE WHEN {fa} <= {fb} THEN 1 ELSE 0 END)"
    row_scale = f"LEAST(GREATEST(16 - 4 * {qweight}, {s}), {big})"
    drop = f"CAST(POWER(10, {big} - {row_scale}) AS {integer})"
    tail = f"(({truncated}) % {drop})"
    up = (
        f"CASE WHEN {drop} = 1 THEN {remainder} >= {nb} - {remainder} ELSE {tail} * 2 >= {drop} END"
    )
    rounded = f"(({truncated}) - {tail} + CASE WHEN {up} THEN {drop} ELSE 0 END)"
    return rounded, row_scale, big, na, nb


@functools.cache
def _quotient(dialect: str, sa: int, sb: int) -> exp.Expr:
    """The quotient of `__dsql_a` (scale `sa`) by `__dsql_b` (scale `sb`) in `dialect`."""
    magnitude_value, _, big, _, _ = _rounded_quotient(dialect, sa, sb)
    signed = (
        f"CASE WHEN (__dsql_a < 0) <> (__dsql_b < 0) "
        f"THEN -{magnitude_value} ELSE {magnitude_value} END"
    )
    return _guarded(unscaled(signed, big, dialect), big, dialect)


@functools.cache
def _root_of_quotient(dialect: str, sa: int, sb: int) -> exp.Expr:
    """The square root of the quotient `__dsql_a / __dsql_b` rounded at its row scale,
    itself rounded at that scale (`numeric_sqrt.py`), in `dialect`."""
    magnitude_value, row_scale, big, na, nb = _rounded_quotient(dialect, sa, sb)
    fine, _ = long_division(na, nb, 2 * big, _CHUNK, dialect)
    root = numeric_sqrt.rounded_root(magnitude_value, row_scale, big, dialect, fine)
    return _guarded(unscaled(root, big, dialect), big, dialect)


#: Each function's template builder: (dialect, scale_a, scale_b) -> expression.
@functools.cache
def _product(dialect: str, sa: int, sb: int) -> exp.Expr:
    """`__dsql_a * __dsql_b` of numerics of scales `sa` and `sb`, in `dialect`."""
    if dialect == "spark" and sa + sb > _SPARK_KEPT_SCALE:
        # Spark's product of 38-digit decimals keeps 6 digits after the point: the
        # product of the operands' digits as integers, read back at PostgreSQL's scale.
        a = scaled("__dsql_a", sa, sa, dialect, absolute=False, wide=True)
        b = scaled("__dsql_b", sb, sb, dialect, absolute=False, wide=True)
        return sqlglot.parse_one(unscaled(f"({a} * {b})", sa + sb, dialect), read=dialect)
    if dialect == "spark":
        return sqlglot.parse_one("__dsql_a * __dsql_b", read=dialect)
    text = f"CAST(__dsql_a AS DECIMAL(38, {sa})) * CAST(__dsql_b AS DECIMAL(38, {sb}))"
    return sqlglot.parse_one(text, read=dialect)


@functools.cache
def _sum(dialect: str, sa: int, sb: int) -> exp.Expr:
    """`__dsql_a + __dsql_b` of numerics of scales `sa` and `sb`, in `dialect`."""
    return _sum_or_difference(dialect, sa, sb, "+")


@functools.cache
def _difference(dialect: str, sa: int, sb: int) -> exp.Expr:
    """`__dsql_a - __dsql_b` of numerics of scales `sa` and `sb`, in `dialect`."""
    return _sum_or_difference(dialect, sa, sb, "-")


def _sum_or_difference(dialect: str, sa: int, sb: int, op: str) -> exp.Expr:
    """`__dsql_a op __dsql_b`: on Spark, of operands of 37 digits, whose sum Spark keeps
    exact as a decimal(38, s) (of 38-digit operands it drops a digit after the point;
    an operand of 38 - s digits before the point is Spark's overflow error)."""
    s = max(sa, sb)
    if dialect == "spark" and s < _MAX_PRECISION - 1:
        narrow = f"DECIMAL({_MAX_PRECISION - 1}, {s})"
        text = f"CAST(__dsql_a AS {narrow}) {op} CAST(__dsql_b AS {narrow})"
    else:
        text = f"__dsql_a {op} __dsql_b"
    return sqlglot.parse_one(text, read=dialect)


@functools.cache
def _weighted_sum(dialect: str, sa: int, sb: int) -> exp.Expr:
    """`SUM(__dsql_a * __dsql_b)` of a numeric of scale `sa` times an integer count, a
    decimal(38, sa) in `dialect` (`sb` is 0)."""
    if dialect == "spark" and sa > _SPARK_KEPT_SCALE:
        digits = scaled("__dsql_a", sa, sa, dialect, absolute=False, wide=True)
        total = f"SUM({digits} * CAST(__dsql_b AS DECIMAL(20, 0)))"
        return sqlglot.parse_one(unscaled(total, sa, dialect), read=dialect)
    text = f"SUM(CAST(__dsql_a AS DECIMAL(38, {sa})) * __dsql_b)"
    return sqlglot.parse_one(text, read=dialect)


@functools.cache
def _square_root(dialect: str, sa: int, sb: int) -> exp.Expr:
    """`sqrt(__dsql_a)` of a numeric of scale `sa` (`__dsql_b` is 1), in `dialect`."""
    return sqlglot.parse_one(numeric_sqrt.square_root(dialect, sa), read=dialect)


def _transcendental(op: str) -> Callable[[str, int, int], exp.Expr]:
    """The builder of `op` of numerics of scales `sa` and `sb` (`numeric_transcendental`)."""

    @functools.cache
    def build(dialect: str, sa: int, sb: int) -> exp.Expr:
        text = numeric_transcendental.expression(op, dialect, sa, sb)
        return sqlglot.parse_one(text, read=dialect)

    return build


#: The planner's name of each function of numerics the kernels take from Python
#: (`planner/numeric.py`), and the operation `numeric_transcendental.value` computes.
TRANSCENDENTAL = {
    "NUMERIC_LN": "ln",
    "NUMERIC_LOG": "log",
    "NUMERIC_EXP": "exp",
    "NUMERIC_POWER": "power",
    "NUMERIC_GCD": "gcd",
    "NUMERIC_LCM": "lcm",
}

_BUILDERS: dict[str, Callable[[str, int, int], exp.Expr]] = {
    NAME: _quotient,
    REMAINDER: _remainder,
    ROOT: _root_of_quotient,
    SQRT: _square_root,
    PRODUCT: _product,
    **{name: _transcendental(op) for name, op in TRANSCENDENTAL.items()},
    WEIGHTED_SUM: _weighted_sum,
    SUM: _sum,
    DIFFERENCE: _difference,
}


__all__ = [
    "DIFFERENCE",
    "NAME",
    "PRODUCT",
    "REMAINDER",
    "ROOT",
    "SQRT",
    "TRANSCENDENTAL",
    "SUM",
    "WEIGHTED_SUM",
    "expand",
    "long_division",
    "scaled",
    "unscaled",
]
