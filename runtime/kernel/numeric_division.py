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

The operands' weights are estimated in double precision: an operand within a few units
in the 16th digit of a power of 10000 may get the scale of its neighbour.

>>> from sqlglot import parse_one
>>> text = expand(parse_one("SELECT NUMERIC_DIV(x, 3, 1, 0) FROM t"), "duckdb").sql("duckdb")
>>> "NUMERIC_DIV" in text, "INT128" in text
(False, True)
"""

from __future__ import annotations

import functools

import sqlglot
from sqlglot import exp

#: The function the planner writes for a numeric quotient (`planner/numeric.py`).
NAME = "NUMERIC_DIV"

#: Digits after the point a quotient column holds at least (`planner/numeric.py`).
_QUOTIENT_SCALE = 20
_MAX_PRECISION = 38
#: Digits produced per step of the long division.
_CHUNK = 9


def expand(tree: exp.Expr, dialect: str) -> exp.Expr:
    """`tree` with every `NUMERIC_DIV(...)` call written out for `dialect` (a copy where
    there is one; `tree` itself where there is none)."""
    if not any(_is_call(node) for node in tree.find_all(exp.Anonymous)):
        return tree

    def rewrite(node: exp.Expression) -> exp.Expression:
        if not _is_call(node):
            return node
        a, b, sa, sb = node.expressions
        template = _template(dialect, int(sa.this), int(sb.this))

        def fill(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and n.name == "__dsql_a":
                return a.copy()
            if isinstance(n, exp.Column) and n.name == "__dsql_b":
                return b.copy()
            return n

        return template.copy().transform(fill)

    return tree.transform(rewrite)


def _is_call(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.name).upper() == NAME


@functools.cache
def _template(dialect: str, sa: int, sb: int) -> exp.Expr:
    """The quotient of `__dsql_a` (scale `sa`) by `__dsql_b` (scale `sb`) in `dialect`."""
    spark = dialect == "spark"
    integer = "DECIMAL(38, 0)" if spark else "HUGEINT"
    div = "div" if spark else "//"
    s = max(sa, sb)
    big = min(max(_QUOTIENT_SCALE, s), _MAX_PRECISION)

    def scaled(name: str, own: int) -> str:
        value = f"ABS(CAST({name} AS DECIMAL(38, {own})))"
        return f"CAST({value} * {10**s} AS {integer})" if s else f"CAST({value} AS {integer})"

    na, nb = scaled("__dsql_a", sa), scaled("__dsql_b", sb)
    # Long division: the integer part, then `big` digits after the point in chunks.
    remainder = f"({na} % {nb})"
    truncated = f"CAST(({na} {div} {nb}) AS {integer}) * {10**big}"
    left = big
    while left > 0:
        step = min(_CHUNK, left)
        shifted = f"({remainder} * {10**step})"
        left -= step
        truncated += f" + CAST(({shifted} {div} {nb}) AS {integer}) * {10**left}"
        remainder = f"({shifted} % {nb})"
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
    magnitude_value = f"(({truncated}) - {tail} + CASE WHEN {up} THEN {drop} ELSE 0 END)"
    signed = (
        f"CASE WHEN (__dsql_a < 0) <> (__dsql_b < 0) "
        f"THEN -{magnitude_value} ELSE {magnitude_value} END"
    )
    if spark:  # Spark's decimal product would cut the scale: the digits are read back
        value = f"CAST(CONCAT(CAST({signed} AS STRING), 'E-{big}') AS DECIMAL(38, {big}))"
    else:
        unit = f"CAST('1e-{big}' AS DECIMAL(38, {big}))"
        value = f"CAST(CAST({signed} AS DECIMAL(38, 0)) * {unit} AS DECIMAL(38, {big}))"
    text = (
        f"CASE WHEN __dsql_b = 0 AND NOT __dsql_a IS NULL "
        f"THEN CAST(RAISE_ERROR('division by zero') AS DECIMAL(38, {big})) ELSE {value} END"
    )
    return sqlglot.parse_one(text, read=dialect)


__all__ = ["NAME", "expand"]
