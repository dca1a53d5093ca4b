"""Volatile functions: calls whose value changes from one evaluation to the next.

`random()`, `gen_random_uuid()` and the wall-clock functions (`now()`, `clock_timestamp()`,
...) give a row a new value each time it is evaluated. A one-off read evaluates each row
once, but a maintained dataflow evaluates a row again to retract it, and a retraction
with another value than its insertion leaves both behind (a row with a negative count);
a CTE read twice is two evaluations unless both readers share one (`bind`).

`mz_now()` is not volatile: it is the time of the read, or a temporal filter's bound.

>>> from dsql.planner.expr import parse_expr
>>> [call_name(c) for c in volatile_calls(parse_expr("random() < 0.5 AND now() > x"))]
['random', 'now']
"""

from __future__ import annotations

from sqlglot import exp

from dsql.errors import UnsupportedError
from dsql.planner.expr import SubqueryExpr, as_expression
from dsql.planner.plan import Plan, walk
from dsql.planner.stateful import expressions_of

#: Volatile calls sqlglot parses to nodes of their own, with PostgreSQL's name for each.
_NODES: dict[type, str] = {
    exp.Rand: "random",
    exp.Uuid: "gen_random_uuid",
    exp.CurrentTimestamp: "now",
    exp.CurrentDate: "current_date",
    exp.CurrentTime: "current_time",
    exp.Localtimestamp: "localtimestamp",
    exp.Localtime: "localtime",
}

#: Volatile calls sqlglot leaves as anonymous functions.
_NAMES = frozenset(
    {
        "clock_timestamp",
        "statement_timestamp",
        "transaction_timestamp",
        "timeofday",
        "random_normal",
        "setseed",
    }
)


def call_name(call: exp.Expression) -> str:
    """PostgreSQL's name of a volatile call."""
    return _NODES.get(type(call)) or call.name.lower()


def volatile_calls(e: exp.Expression) -> list[exp.Expression]:
    """The volatile calls in `e`, subqueries' plans included."""
    found: list[exp.Expression] = []
    for node in e.walk():
        if type(node) in _NODES or (
            isinstance(node, exp.Anonymous) and node.name.lower() in _NAMES
        ):
            found.append(as_expression(node))
        elif isinstance(node, SubqueryExpr):
            found.extend(plan_volatile_calls(node.plan))
    return found


def plan_volatile_calls(plan: Plan) -> list[exp.Expression]:
    """The volatile calls anywhere in `plan`."""
    return [c for node in walk(plan) for e in expressions_of(node) for c in volatile_calls(e)]


def refuse_volatile(plan: Plan, what: str) -> None:
    """An error if `plan`, to be maintained as `what`, calls a volatile function."""
    calls = plan_volatile_calls(plan)
    if calls:
        name = call_name(calls[0])
        time = name not in ("random", "gen_random_uuid", "random_normal", "setseed")
        raise UnsupportedError(
            f"{name}() in {what} is not supported: its value changes each time it is "
            "evaluated, and a maintained query evaluates a row again to retract it",
            hint="filter by the time with mz_now() (WHERE mz_now() < ts + 1000)"
            if time
            else "compute it in a one-off SELECT, or store the values in a table",
        )


__all__ = ["call_name", "plan_volatile_calls", "refuse_volatile", "volatile_calls"]
