"""dsql against PostgreSQL on random queries, and the wrong answers such queries found.

Random queries (`pg_querygen.py`: joins of every kind, nested and correlated subqueries,
grouping, set operations, ordering with LIMIT, casts and mixed types, over small tables
of NULLs, duplicates, negatives and empty strings) must be answered as PostgreSQL answers
them, both as one-off SELECTs and as materialized views kept through random changes.
Where PostgreSQL raises, dsql must raise a `DsqlError`; where dsql refuses a query
PostgreSQL answers, that is not a wrong answer and the example is passed over. The
named tests below hold each wrong answer the generator found, with its siblings.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_oracle import apply_both, create_both, differs
from pg_querygen import CHANGES, SEED, TABLES, HypothesisChooser, query

import dsql
from dsql.runtime.kernel.precedence import parenthesized


@pytest.fixture(scope="module")
def pgdb(pg: Any) -> Iterator[Any]:
    """A PostgreSQL database of this module's own."""
    conn = pg.database("hunt")
    yield conn
    conn.close()


def _fresh(pgdb: Any) -> dsql.Connection:
    con = dsql.connect(kernel="local")
    create_both(con, pgdb, TABLES, SEED)
    return con


def _refused(problem: str | None) -> bool:
    """Whether a difference is dsql refusing, with a `DsqlError`, what PostgreSQL answers
    (allowed; any other exception is a crash)."""
    if problem is None or not problem.startswith("dsql raised "):
        return False
    return problem.split()[2].rstrip(":") in DSQL_ERRORS


def _subclasses(cls: type) -> set[type]:
    return {cls}.union(*(_subclasses(s) for s in cls.__subclasses__()))


#: The names of dsql's error classes.
DSQL_ERRORS = {c.__name__ for c in _subclasses(dsql.errors.DsqlError)}


def _known_difference(problem: str | None) -> bool:
    """A difference README's table lists: PostgreSQL refuses a FULL JOIN on a condition
    that is no equality, which dsql evaluates."""
    return problem is not None and "FULL JOIN is only supported with merge-joinable" in problem


def _wrong(problem: str | None) -> bool:
    return problem is not None and not _refused(problem) and not _known_difference(problem)


RANDOM = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
    database=None,
)


@settings(max_examples=25, **RANDOM)
@given(data=st.data())
def test_random_selects_agree_with_postgres(pgdb: Any, data: Any) -> None:
    q = query(HypothesisChooser(data))
    con = _fresh(pgdb)
    problem = differs(con, pgdb, q.sql, ordered=q.ordered)
    assert not _wrong(problem), f"{q.sql}\n{problem}"


@settings(max_examples=6, **RANDOM)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_random_views_agree_with_postgres_through_changes(pgdb: Any, data: Any, seed: int) -> None:
    q = query(HypothesisChooser(data))
    con = _fresh(pgdb)
    try:
        pgdb.execute(f"SELECT * FROM ({q.sql}) z LIMIT 0")
        con.execute(f"CREATE MATERIALIZED VIEW v AS {q.sql}")
    except Exception:  # noqa: BLE001 - refused on either side: no view to keep
        return
    rng = random.Random(seed)
    for now in range(1, 4):
        problem = differs(con, pgdb, q.sql, dsql_sql="SELECT * FROM v")
        if problem is not None and "is in error" in problem:
            return  # PostgreSQL's lazier evaluation skipped a failing row: not wrong
        assert not _wrong(problem), f"{q.sql}\nat {now}: {problem}"
        changes = [rng.choice(CHANGES[rng.choice(sorted(CHANGES))]) for _ in range(2)]
        apply_both(con, pgdb, changes)
        con.execute(f"ADVANCE TO {now}")


# --- wrong answers found, and their siblings -------------------------------------------------

#: An integer from a function (or from `date - date`) divided by or into an integer is
#: PostgreSQL's integer division, not a float quotient.
INTEGER_DIVISIONS = (
    "SELECT a / length(s) AS x FROM t1 WHERE s <> ''",
    "SELECT 7 / length(s) AS x, 7 % length(s) AS y FROM t1 WHERE s <> ''",
    "SELECT length(s) / 2 AS x FROM t1",
    "SELECT 7 / char_length(s) AS x FROM t1 WHERE s <> ''",
    "SELECT 7 / position('b' in s) AS x FROM t1 WHERE s = 'ab'",
    "SELECT 7 / strpos(s, 'b') AS x FROM t1 WHERE s = 'ab'",
    "SELECT 700 / ascii(s) AS x FROM t1 WHERE s <> ''",
    "SELECT 7 / octet_length(s) AS x FROM t1 WHERE s <> ''",
    "SELECT 7 / cardinality(ARRAY[1, 2]) AS x",
    "SELECT 7 / array_length(ARRAY[1, 2], 1) AS x",
    "SELECT 7 / array_position(ARRAY[1, 2], 2) AS x",
    "SELECT 7 / regexp_count(s, 'a') AS x FROM t1 WHERE s = 'ab'",
    "SELECT 7 / (length(s) + 1) AS x FROM t1",
    "SELECT 7 / abs(length(s)) AS x FROM t1 WHERE s <> ''",
    "SELECT 7 / nullif(length(s), 0) AS x, coalesce(length(s), 1) / 2 AS y FROM t1",
    "SELECT 7 / greatest(length(s), 1) AS x FROM t1",
    "SELECT (d - DATE '2024-01-01') / 2 AS x, (d - DATE '2024-01-01') * 2 AS y FROM t1",
    "SELECT 7 / (d - DATE '2023-12-30') AS x FROM t1",
    "SELECT d - d AS x FROM t1",
)

#: `date - date` is an int: aggregates take it as one.
DATE_DIFFERENCES = (
    "SELECT avg(d - DATE '2024-01-01') AS x FROM t1",
    "SELECT sum(d - DATE '2024-01-01') AS x, max(d - DATE '2024-01-01') AS y FROM t1",
    "SELECT a, sum(d - DATE '2023-01-01') AS x FROM t1 GROUP BY a",
)

#: A DISTINCT aggregate's argument types its result (it was read as no argument).
DISTINCT_AGGREGATES = (
    "SELECT count(*) AS n FROM t1 HAVING sum(DISTINCT a) > 3000000000",
    "SELECT sum(DISTINCT a) / 2 AS x, sum(DISTINCT n) / 3 AS y, sum(DISTINCT b) / 2 AS z FROM t1",
)

#: COALESCE, GREATEST, LEAST and CASE over numerics of different scales (or numerics and
#: integers) keep every value's digits (the engines' common type dropped them).
NUMERIC_BRANCHES = (
    "SELECT coalesce(n, round(n, -1)) AS x, coalesce(round(n, -1), n) AS y FROM t1",
    "SELECT coalesce(n, round(n)) AS x, coalesce(n, round(n, 1)) AS y FROM t1",
    "SELECT coalesce(n, trunc(n)) AS x, coalesce(n, ceil(n)) AS y FROM t1",
    "SELECT coalesce(n, CAST(a AS numeric)) AS x, coalesce(CAST(a AS numeric), n) AS y FROM t1",
    "SELECT greatest(n, round(n, -1)) AS x, least(n, round(n, -1)) AS y FROM t1",
    "SELECT CASE WHEN a > 0 THEN n ELSE round(n, -1) END AS x FROM t1",
    "SELECT CASE a WHEN 1 THEN n WHEN 2 THEN 7 ELSE round(n, -1) END AS x FROM t1",
    "SELECT coalesce(n / 3, b) AS x, greatest(n, a, 0.5) AS y FROM t1",
    "SELECT coalesce(max(n), round(avg(n), 0)) AS x FROM t1",
)

#: `x op ANY (subquery)` and `x op ALL (subquery)`, NULLs and empty subqueries among them.
QUANTIFIED_SUBQUERIES = (
    "SELECT a FROM t1 WHERE a > ALL (SELECT k FROM t3 WHERE k IS NOT NULL)",
    "SELECT a FROM t1 WHERE a = SOME (SELECT k FROM t3)",
    "SELECT a, a > ANY (SELECT k FROM t3) AS x, a <= ALL (SELECT k FROM t3 WHERE k IS NOT NULL) "
    "AS y, a <> ALL (SELECT k FROM t3 WHERE k > 100) AS z, a = ANY (SELECT k FROM t3 "
    "WHERE k > 100) AS w FROM t1",
    "SELECT a, s = ANY (SELECT w FROM t3 WHERE t3.k = t1.a) AS x, "
    "a < ALL (SELECT v FROM t3 WHERE t3.w = t1.s) AS y FROM t1",
    "SELECT a FROM t1 WHERE a > ANY (SELECT k, v FROM t3)",
)

#: Row constructor comparisons: field by field, a NULL field making an undecided
#: comparison NULL (the engines compare rows as structs, where NULL is a value).
ROW_COMPARISONS = (
    "SELECT a, s FROM t1 WHERE (a, s) > (1, 'a')",
    "SELECT a, s, (a, s) > (1, 'a') AS gt, (a, s) >= (1, 'a') AS ge, (a, s) < (1, 'a') AS lt, "
    "(a, s) <= (1, 'a') AS le FROM t1",
    "SELECT a, b, (a, b) = (1, 10) AS eq, (a, b) <> (1, 10) AS ne, NOT ((a, b) = (1, 10)) AS nn "
    "FROM t1",
    "SELECT a, b, (a, b) IS DISTINCT FROM (1, 10) AS d, "
    "(a, b) IS NOT DISTINCT FROM (NULL, -7) AS nd FROM t1",
    "SELECT a, b, (a, b) IN ((1, 10), (NULL, -7), (2, NULL)) AS i, "
    "(a, b) NOT IN ((1, 10), (0, 0)) AS ni FROM t1",
    "SELECT a, (a, b, s) > (1, 10, 'a') AS x, (a, b, s) <= (0, 0, 'ab') AS y FROM t1",
    "SELECT (1, 2) < (1, 3) AS a, (1, NULL) < (2, 0) AS b, (NULL, 1) = (NULL, 1) AS c",
    "SELECT (1, 2) = (1, 2, 3) AS a",
)

#: `date_trunc` of a date is a timestamp with time zone, as PostgreSQL resolves it.
DATE_TRUNC = (
    "SELECT date_trunc('month', d) AS x, date_trunc('day', d) AS y FROM t1",
    "SELECT d FROM t1 WHERE date_trunc('month', d) = TIMESTAMP '2024-01-01'",
)

#: A function spelled as an operator (`bit_length(s)` is `octet_length(s) * 8`) inside
#: another operator keeps its own precedence.
PRECEDENCE = (
    "SELECT 7 / bit_length(s) AS x FROM t1 WHERE s <> ''",
    "SELECT 100 - bit_length(s) * 2 AS x, -bit_length(s) AS y FROM t1",
    "SELECT 800 / bit_length(s) % 7 AS x FROM t1 WHERE s <> ''",
)

#: GROUP BY a constant that is no integer: PostgreSQL's error, not one group of all rows.
GROUP_BY_CONSTANTS = (
    "SELECT count(*) FROM t1 GROUP BY 'x'",
    "SELECT count(*) FROM t1 GROUP BY false",
    "SELECT count(*) FROM t1 GROUP BY NULL",
    "SELECT count(*) FROM t1 GROUP BY 1.5",
    "SELECT count(*) FROM t1 GROUP BY -2.25",
    "SELECT count(*) FROM t1 WHERE false GROUP BY 'x'",
)


#: Each kind of wrong answer found, by name.
FOUND = {
    "integer_divisions": INTEGER_DIVISIONS,
    "date_differences": DATE_DIFFERENCES,
    "distinct_aggregates": DISTINCT_AGGREGATES,
    "numeric_branches": NUMERIC_BRANCHES,
    "quantified_subqueries": QUANTIFIED_SUBQUERIES,
    "row_comparisons": ROW_COMPARISONS,
    "date_trunc": DATE_TRUNC,
    "precedence": PRECEDENCE,
}


@pytest.mark.parametrize("kind", sorted(FOUND))
def test_found_wrong_answers_agree(pgdb: Any, kind: str) -> None:
    con = _fresh(pgdb)
    wrong = [f"{sql}\n  {d}" for sql in FOUND[kind] if (d := differs(con, pgdb, sql)) is not None]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "sql",
    INTEGER_DIVISIONS[:4]
    + DATE_DIFFERENCES[2:]
    + NUMERIC_BRANCHES[:1]
    + NUMERIC_BRANCHES[5:6]
    + QUANTIFIED_SUBQUERIES[2:4]
    + ROW_COMPARISONS[1:3]
    + DATE_TRUNC[:1]
    + PRECEDENCE[:1],
)
def test_found_wrong_answers_agree_as_views(pgdb: Any, sql: str) -> None:
    con = _fresh(pgdb)
    con.execute(f"CREATE MATERIALIZED VIEW v AS {sql}")
    for change in (CHANGES["t1"][2], CHANGES["t1"][5], CHANGES["t1"][3]):
        con.execute(change)
        pgdb.execute(change)
        assert differs(con, pgdb, sql, dsql_sql="SELECT * FROM v") is None, (sql, change)


@pytest.mark.parametrize("sql", GROUP_BY_CONSTANTS)
def test_group_by_a_constant_that_is_no_integer_is_an_error(pgdb: Any, sql: str) -> None:
    con = _fresh(pgdb)
    with pytest.raises(dsql.Error, match="non-integer constant in GROUP BY"):
        con.execute(sql)
    assert differs(con, pgdb, sql) is None


@pytest.mark.parametrize("position", ["-1", "0", "7"])
def test_group_by_a_position_outside_the_select_list_is_an_error(pgdb: Any, position: str) -> None:
    con = _fresh(pgdb)
    sql = f"SELECT count(*) FROM t1 GROUP BY {position}"
    with pytest.raises(dsql.Error, match=f"GROUP BY position {position} is not in select list"):
        con.execute(sql)
    assert differs(con, pgdb, sql) is None


@pytest.mark.parametrize(
    "grouping", ["ROLLUP (a)", "CUBE (a, s)", "GROUPING SETS ((a), ())", "s, ROLLUP (a)"]
)
def test_grouping_sets_are_refused_by_name(pgdb: Any, grouping: str) -> None:
    con = _fresh(pgdb)
    with pytest.raises(dsql.NotSupportedError, match="GROUPING SETS, ROLLUP and CUBE"):
        con.execute(f"SELECT a, count(*) FROM t1 GROUP BY {grouping}")


def test_operators_nested_in_built_trees_are_parenthesized() -> None:
    from sqlglot import exp

    product = exp.Mul(this=exp.column("s"), expression=exp.Literal.number(8))
    conjunction = exp.And(this=exp.column("p"), expression=exp.column("q"))
    tree = exp.Or(
        this=exp.Not(this=conjunction),
        expression=exp.GT(
            this=exp.Div(this=exp.Literal.number(7), expression=product),
            expression=exp.Neg(this=exp.Sub(this=exp.column("a"), expression=exp.column("b"))),
        ),
    )
    assert parenthesized(tree).sql() == "NOT (p AND q) OR ((7 / (s * 8)) > -(a - b))"
    # A tree with nothing to add is returned as it is.
    plain = exp.Add(this=exp.column("a"), expression=exp.Literal.number(1))
    assert parenthesized(plain) is plain
