"""Row constructor comparisons, `(a, b) < (c, d)`, as comparisons of their fields.

PostgreSQL compares rows field by field from the left: `=` holds when every pair is
equal, `<>` when some pair differs, and `<`, `<=`, `>`, `>=` are decided by the first
pair that is unequal or holds a NULL (a NULL there makes the result NULL; all pairs equal
makes `<=` and `>=` true). `IS [NOT] DISTINCT FROM` compares pair by pair without NULLs,
and `(a, b) IN ((1, 2), ...)` is an OR of row equalities. The engines compare rows as
structs, where a NULL field is a value that sorts, so `(NULL, 'B') > (1, 'a')` would be
true; `expanded` writes such a comparison out as the scalar comparisons that carry
PostgreSQL's three-valued logic:

>>> import sqlglot
>>> expanded(sqlglot.parse_one("(a, b) > (1, 2)", read="postgres")).sql()
'(a > 1 OR a = 1 AND (b > 2))'
>>> expanded(sqlglot.parse_one("(a, b) <> (1, 2)", read="postgres")).sql()
'(a <> 1 OR b <> 2)'
"""

from __future__ import annotations

from sqlglot import exp

from dsql.errors import SchemaError, UnsupportedError

_ORDERINGS = (exp.LT, exp.LTE, exp.GT, exp.GTE)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.NullSafeNEQ, *_ORDERINGS)


def _row(e: exp.Expr | None) -> exp.Tuple | None:
    while isinstance(e, exp.Paren):
        e = e.this
    return e if isinstance(e, exp.Tuple) else None


def is_row_comparison(e: exp.Expr) -> bool:
    """Whether `e` compares a row constructor: a comparison with a row on either side, or
    a row IN a list."""
    if isinstance(e, _COMPARISONS):
        return _row(e.this) is not None or _row(e.expression) is not None
    if isinstance(e, exp.In) and e.args.get("query") is None and e.expressions:
        return _row(e.this) is not None
    return False


def expanded(e: exp.Expr) -> exp.Expression:
    """The row comparison `e` (`is_row_comparison`) as comparisons of the rows' fields,
    in parentheses; an error for rows of unequal length or a row compared with anything
    but a row."""
    if isinstance(e, exp.In):
        left = e.this
        alternatives = [_compared(exp.EQ, left, right) for right in e.expressions]
        return exp.Paren(this=_joined(alternatives, exp.Or))
    return exp.Paren(this=_compared(type(e), e.this, e.expression))


def _joined(parts: list[exp.Expr], connector: type[exp.Connector]) -> exp.Expr:
    """`parts` joined by AND or OR, left to right."""
    out: exp.Expr = parts[0]
    for part in parts[1:]:
        out = connector(this=out, expression=part)
    return out


def _compared(op: type[exp.Expr], left: exp.Expr, right: exp.Expr) -> exp.Expr:
    a, b = _row(left), _row(right)
    if a is None or b is None:
        raise UnsupportedError(
            "comparing a row constructor with anything but a row constructor is not supported",
            hint="compare the fields one by one: (a, b) = (x, y) is a = x AND b = y",
        )
    if len(a.expressions) != len(b.expressions):
        raise SchemaError("unequal number of entries in row expressions")
    pairs = list(zip(a.expressions, b.expressions, strict=True))
    compared: list[exp.Expr] = [op(this=x.copy(), expression=y.copy()) for x, y in pairs]
    if op in (exp.EQ, exp.NullSafeEQ):
        return _joined(compared, exp.And)
    if op in (exp.NEQ, exp.NullSafeNEQ):
        return _joined(compared, exp.Or)
    # An ordering: the first pair decides unless equal; the last pair takes the operator
    # as written (`<=` holds for equal rows), the others its strict form.
    stricter: dict[type[exp.Expr], type[exp.Expr]] = {exp.LTE: exp.LT, exp.GTE: exp.GT}
    strict = stricter.get(op, op)
    decided = compared[-1]
    for x, y in reversed(pairs[:-1]):
        equal_then = exp.And(
            this=exp.EQ(this=x.copy(), expression=y.copy()), expression=exp.Paren(this=decided)
        )
        decided = exp.Or(this=strict(this=x.copy(), expression=y.copy()), expression=equal_then)
    return decided
