"""The recursive term of `WITH RECURSIVE`: what the SQL standard's meaning allows.

dsql evaluates `WITH RECURSIVE r AS (base UNION [ALL] step)` as the fixpoint of
`r = base + step(r)`, which equals SQL's evaluation (each round feeds the step only the
previous round's new rows) exactly when the step is linear in `r`. PostgreSQL enforces
the same restrictions, so a query dsql accepts means the same on PostgreSQL and DuckDB:

- `r` is read once in the step (a self-join of `r` is not linear);
- no SELECT that reads `r` aggregates or groups (a sum over all of `r` is not the sum of
  the per-round sums);
- no ORDER BY, LIMIT or OFFSET on the recursive query (they would cut rounds, not `r`).

A non-linear fixpoint is what `WITH MUTUALLY RECURSIVE` is for, and the errors say so.

>>> import sqlglot
>>> q = sqlglot.parse_one("WITH RECURSIVE t AS (SELECT 1 AS x UNION ALL "
...     "SELECT a.x + b.x FROM t AS a, t AS b) SELECT * FROM t", read="postgres")
>>> check_recursive_term(q.args["with_"].expressions[0].this, "t")
Traceback (most recent call last):
...
dsql.errors.SchemaError: recursive reference to query 't' must not appear more than once...
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp

from dsql.errors import SchemaError, UnsupportedError

__all__ = ["check_recursive_term"]

_MUTUALLY = (
    "a step that is not linear in its query needs WITH MUTUALLY RECURSIVE "
    "(name (col type, ...) AS (...)), whose fixpoint allows it"
)


def check_recursive_term(body: exp.Union, name: str) -> None:
    """Raise if `body` (`base UNION [ALL] step`) is no linear recursion over `name`."""
    for part in (body, body.expression):
        for clause in ("order", "limit", "offset"):
            if part.args.get(clause) is not None:
                word = {"order": "ORDER BY"}.get(clause, clause.upper())
                raise UnsupportedError(
                    f"{word} in a recursive query is not supported",
                    hint=f"apply {word} to the query that reads '{name}', outside its definition",
                )
    references = _references(body.expression, name)
    if sum(uses for _, uses in references) > 1:
        raise SchemaError(
            f"recursive reference to query '{name}' must not appear more than once",
            hint=_MUTUALLY,
        )
    for ref, _ in references:
        select = ref.find_ancestor(exp.Select)
        if select is not None and _aggregates(select):
            raise SchemaError(
                f"aggregate functions are not allowed in the recursive term of '{name}'",
                hint=_MUTUALLY,
            )


def _references(step: exp.Expression, name: str) -> list[tuple[exp.Table, int]]:
    """The tables in `step` that read `name`, each with how many times it reads it.

    A CTE defined inside the step reads `name` as often as its body does, so every use
    of that CTE counts that many times; tables inside such CTE bodies are not listed.
    """
    uses = {name: 1}
    for cte in step.find_all(exp.CTE):
        inner = sum(uses.get(t.name, 0) for t in cte.this.find_all(exp.Table))
        if inner:
            uses[cte.alias_or_name] = inner
    found = []
    for table in step.find_all(exp.Table):
        if table.args.get("db") or table.name not in uses or _in_cte(table, step):
            continue
        found.append((table, uses[table.name]))
    return found


def _in_cte(node: exp.Expression, root: exp.Expression) -> bool:
    """Whether `node` is inside the body of a CTE defined within `root`."""
    parent = node.parent
    while parent is not None and parent is not root:
        if isinstance(parent, exp.CTE):
            return True
        parent = parent.parent
    return False


def _aggregates(select: exp.Select) -> bool:
    """Whether `select` itself groups or aggregates (nested queries not counted)."""
    if select.args.get("group") is not None or select.args.get("having") is not None:
        return True
    return any(isinstance(e, exp.AggFunc) for s in select.expressions for e in _own_nodes(s))


def _own_nodes(node: exp.Expression) -> Iterator[exp.Expression]:
    """`node` and its descendants, not entering subqueries or window functions."""
    yield node
    if isinstance(node, exp.Subquery | exp.Select | exp.Window):
        return
    for child in node.iter_expressions():
        yield from _own_nodes(child)
