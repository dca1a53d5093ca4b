"""Operator precedence made explicit: a tree whose operators render as the tree says.

sqlglot renders a binary operator's operands without parentheses, trusting the tree to
hold a `Paren` wherever precedence needs one. Parsed SQL does; trees the planner builds
(a function's spelling such as `octet_length(s) * 8`, an argument placed into a
template) need not, and `7 / (octet_length(s) * 8)` would render as `7 / octet_length(s)
* 8`. `parenthesized` wraps every operator that is an operand of another operator, so
the text evaluates as the tree.

>>> import sqlglot
>>> product = exp.Mul(this=exp.column("s"), expression=exp.Literal.number(8))
>>> parenthesized(exp.Div(this=exp.Literal.number(7), expression=product)).sql()
'7 / (s * 8)'
"""

from __future__ import annotations

from sqlglot import exp

#: Binary nodes that are not infix operators over two values (a field access, a
#: collation, LIKE's ESCAPE clause): their operands keep their own rendering.
_NOT_OPERATORS = (exp.Dot, exp.Collate, exp.Escape)


def _operator(node: exp.Expr) -> bool:
    return isinstance(node, exp.Binary | exp.Unary) and not isinstance(node, _NOT_OPERATORS)


def parenthesized(tree: exp.Expr) -> exp.Expr:
    """`tree` with each operator that is an operand of an operator in parentheses: a
    copy where one is added, else `tree` itself."""
    if not any(_bare_operand(node) for node in tree.walk()):
        return tree

    def wrap(node: exp.Expression) -> exp.Expression:
        for key in ("this", "expression"):
            child = node.args.get(key)
            if _operator(node) and not isinstance(node, exp.Paren) and _infix(child):
                node.set(key, exp.Paren(this=child))
        return node

    return tree.transform(wrap)


def _infix(node: object) -> bool:
    return isinstance(node, exp.Binary) and not isinstance(node, _NOT_OPERATORS)


def _bare_operand(node: exp.Expr) -> bool:
    """Whether an operand of operator `node` is an operator without parentheses."""
    if not _operator(node) or isinstance(node, exp.Paren):
        return False
    return any(_infix(node.args.get(key)) for key in ("this", "expression"))
