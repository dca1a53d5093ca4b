"""Common statement shapes of PostgreSQL's corpus, each answered as PostgreSQL answers it.

Each case runs on the session's PostgreSQL (`pg`) and on dsql (local kernel) and must get
the verdict given (tests/pg_regress.py: `same`, `pg_error`, `refused`). The shapes are
those the outside suites use where dsql answered wrongly or crashed: a global aggregate
whose HAVING reads no aggregate (`HAVING false` must keep no row, even of an empty
input), the empty grouping set `GROUP BY ()`, and queries of no output columns
(`SELECT FROM t`: one empty row per row). `test_views_follow_changes` keeps the same
shapes as materialized views through deletes and inserts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pg_regress import Statement, holding, judge

import dsql

TABLES = (
    "CREATE TABLE t (a int, b int, s text)",
    "INSERT INTO t VALUES (1, 2, 'a'), (2, NULL, 'b'), (NULL, 3, NULL), (2, 2, 'a_c')",
    "CREATE TABLE e (a int)",
    "CREATE TABLE ch (a int, c char(3), v varchar(5), s text)",
    "INSERT INTO ch VALUES (1, 'ab', 'ab', 'ab'), (2, 'ab ', 'ab ', 'ab '), (3, NULL, NULL, NULL), "
    "(4, 'x', 'x ', 'x  ')",
    "CREATE TABLE cu (d char(5), w varchar(3))",
    "INSERT INTO cu VALUES ('ab', 'ab '), ('x', 'x'), ('ab  ', NULL)",
)

#: Each statement and the verdict it must have.
CASES = (
    # HAVING of a global aggregate: filters its one row, which exists for any input.
    ("SELECT count(*) FROM t HAVING false", "same"),
    ("SELECT count(*) FROM t HAVING 1 > 2", "same"),
    ("SELECT sum(a), count(*) FROM e HAVING true", "same"),
    ("SELECT sum(a) FROM e HAVING false", "same"),
    ("SELECT count(*) FROM t WHERE false HAVING 1 = 1", "same"),
    ("SELECT max(a) FROM t HAVING count(*) > 2 AND false", "same"),
    # HAVING without any aggregate: one group of all rows.
    ("SELECT 1 FROM t HAVING true", "same"),
    ("SELECT 2 AS two FROM t HAVING false", "same"),
    ("SELECT 'x' FROM e HAVING true", "same"),
    ("SELECT (SELECT 1 FROM t HAVING true), (SELECT 1 FROM e HAVING false)", "same"),
    ("SELECT a, (SELECT 1 FROM t u WHERE u.a = t.a HAVING true) FROM t", "same"),
    ("SELECT b FROM t GROUP BY b HAVING true", "same"),
    ("SELECT b FROM t GROUP BY b HAVING false", "same"),
    # GROUP BY (): a global aggregate, one row even of no input.
    ("SELECT 1 FROM t GROUP BY ()", "same"),
    ("SELECT 1 FROM e GROUP BY ()", "same"),
    ("SELECT count(*), sum(a) FROM e GROUP BY ()", "same"),
    ("SELECT count(*) FROM t WHERE false GROUP BY ()", "same"),
    ("SELECT b, count(*) FROM t GROUP BY (), b", "same"),
    ("SELECT 1 FROM t GROUP BY () HAVING count(*) > 10", "same"),
    # No output columns: as many empty rows as rows.
    ("SELECT FROM t", "same"),
    ("SELECT FROM t WHERE a > 1", "same"),
    ("SELECT FROM e", "same"),
    ("SELECT FROM t GROUP BY a", "same"),
    ("SELECT FROM t ORDER BY a LIMIT 2", "same"),
    ("SELECT count(*) FROM (SELECT FROM t UNION ALL SELECT FROM t) s", "same"),
    ("SELECT count(*) FROM (SELECT FROM t UNION SELECT FROM t) s", "same"),
    ("SELECT count(*) FROM (SELECT FROM t EXCEPT ALL SELECT FROM t WHERE a = 2) s", "same"),
    ("SELECT count(*) FROM (SELECT FROM t INTERSECT SELECT FROM e) s", "same"),
    ("SELECT a FROM t WHERE EXISTS (SELECT FROM t u WHERE u.b = t.a)", "same"),
    ("SELECT EXISTS (SELECT FROM e), EXISTS (SELECT FROM t)", "same"),
    # char(n) beside a string literal or a varchar(n): trailing blanks insignificant;
    # beside text (or a text function's result), compared as text.
    ("SELECT a, c = 'ab ', c <> 'ab  ', c < 'ab ', c >= 'ab ', c IS DISTINCT FROM 'ab ', "
     "'x  ' IS NOT DISTINCT FROM c, c > 'ab', c = $$ab $$ FROM ch", "same"),
    ("SELECT a, c IN ('ab ', 'x  '), c NOT IN ('x '), c BETWEEN 'a ' AND 'ab ', "
     "CASE c WHEN 'ab ' THEN 1 WHEN 'x ' THEN 2 ELSE 0 END FROM ch", "same"),
    ("SELECT a, c = v, v = c, c = s, c = upper(v), c = v || '', c = coalesce(s, v) FROM ch",
     "same"),
    ("SELECT a, w FROM ch JOIN cu ON c = w", "same"),
    ("SELECT a, w FROM ch JOIN cu ON c = w OR a > 3", "same"),
    ("SELECT a FROM ch WHERE c IN (SELECT w FROM cu)", "same"),
    ("SELECT a FROM ch WHERE v IN (SELECT c FROM ch)", "same"),
    ("SELECT a FROM ch WHERE c NOT IN (SELECT w FROM cu WHERE w IS NOT NULL)", "same"),
    ("SELECT a FROM ch WHERE c = ANY (SELECT w FROM cu)", "same"),
    ("SELECT a FROM ch WHERE c IN (SELECT s FROM ch)", "same"),
    ("SELECT a, (SELECT count(*) FROM cu WHERE cu.w = ch.c) FROM ch", "same"),
    ("SELECT a FROM ch u WHERE EXISTS (SELECT 1 FROM ch w WHERE w.a = u.a AND u.c = 'ab ')",
     "same"),
    # Pattern matches see char(n)'s blanks.
    ("SELECT a, c LIKE 'ab ', c LIKE 'ab', v LIKE 'ab ', c NOT LIKE '% ', c ILIKE 'AB_', "
     "c LIKE 'x%', c LIKE 'a\\b ' ESCAPE '\\' FROM ch", "same"),
    ("SELECT a, c ~ 'b $', c ~* 'B', c !~ ' $', c SIMILAR TO 'ab ', c SIMILAR TO 'x' FROM ch",
     "same"),
    ("SELECT a, c::text LIKE 'ab ', c || '' LIKE 'ab' FROM ch", "same"),
    # An untyped string beside an array is an array literal.
    ("SELECT '{x}' || array['y'], array['y'] || '{x,z}', array[1] || '{2,3}', "
     "'{}' || array[1], array[1.5] || '{2}', '{NULL}' || array[true]", "same"),
    ("SELECT 'x' || array['y']", "pg_error"),
    ("SELECT array['a'] || 'b'::text, 'b'::text || array['a'], array[1,2] || 3", "same"),
    # ARRAY(subquery): the subquery's rows in its order, {} for none.
    ("SELECT ARRAY(SELECT a FROM t ORDER BY a DESC), ARRAY(SELECT a FROM e), "
     "ARRAY(SELECT s FROM t ORDER BY s NULLS FIRST), ARRAY(SELECT s AS q FROM t ORDER BY q), "
     "ARRAY(SELECT s FROM t ORDER BY a DESC, 1)", "same"),
    ("SELECT ARRAY(SELECT DISTINCT a FROM t ORDER BY a DESC), "
     "ARRAY(SELECT a FROM t ORDER BY a DESC NULLS LAST LIMIT 2 OFFSET 1)", "same"),
    ("SELECT a, ARRAY(SELECT u.s FROM t u WHERE u.a >= t.a ORDER BY u.s), "
     "cardinality(ARRAY(SELECT u.a FROM t u WHERE u.a > t.a)) FROM t", "same"),
    ("SELECT ARRAY(SELECT a FROM t UNION SELECT 7 ORDER BY a DESC), "
     "ARRAY(SELECT a FROM t UNION SELECT 7 ORDER BY 1 LIMIT 2), "
     "cardinality(ARRAY(SELECT a FROM t UNION ALL SELECT a FROM t))", "same"),
    ("SELECT array(SELECT sum(x + y) s FROM generate_series(1, 3) y GROUP BY y ORDER BY s) "
     "FROM generate_series(1, 3) x", "same"),
    ("SELECT a FROM t WHERE a = ANY (ARRAY(SELECT b FROM t WHERE b > 1))", "same"),
    ("SELECT ARRAY(SELECT a, b FROM t)", "pg_error"),
    ("SELECT ARRAY(SELECT DISTINCT a FROM t ORDER BY b)", "pg_error"),
    # An untyped string beside an array in COALESCE, GREATEST, LEAST: an array literal.
    ("SELECT coalesce((SELECT array_agg(a) FROM e), '{}'), coalesce(NULL::int[], '{1,2}'), "
     "greatest(array[1], '{0,5}'), least('{0,5}', array[1]), coalesce(s, '{}') FROM t", "same"),
    # Arithmetic and aggregates of untyped NULLs no single variant takes: PostgreSQL's error.
    ("SELECT NULL + NULL", "pg_error"),
    ("SELECT (NULL) * NULL FROM t", "pg_error"),
    ("SELECT NULL - NULL, NULL / NULL, NULL % NULL", "pg_error"),
    ("SELECT -(NULL)", "pg_error"),
    ("SELECT date '2024-01-01' + NULL", "pg_error"),
    ("SELECT NULL + (date '2024-01-01' + a) FROM t", "pg_error"),
    ("SELECT coalesce(max(NULL - NULL), -99) FROM t", "pg_error"),
    ("SELECT sum(NULL) FROM t", "pg_error"),
    ("SELECT d - NULL, ts - NULL, (d - NULL) + 1, coalesce(d - (NULL), 5) FROM "
     "(VALUES (date '2024-01-01', timestamp '2024-01-01 10:00')) v(d, ts)", "same"),
    ("SELECT coalesce((date '2023-12-31' - NULL), date '2024-01-01')", "pg_error"),
    ("SELECT avg(DISTINCT (NULL)) FROM t", "pg_error"),
    ("SELECT array_agg(NULL) FROM t", "pg_error"),
    ("SELECT round(avg(NULL), 6) FROM e HAVING false", "pg_error"),
    ("SELECT count(NULL), max(NULL), min(NULL), sum(NULL::int), avg(NULL::float8), "
     "array_agg(NULL::int) FROM t", "same"),
    ("SELECT 1 + NULL, a + NULL, NULL * a, 1.5 * NULL, NULL - 2, -NULL::int FROM t", "same"),
    ("SELECT timestamp '2024-01-01' + NULL, NULL::int + NULL, "
     "date '2024-01-01' + NULL::int", "same"),
    # Comparisons across type families (text, number, date and time, boolean): no such
    # operator (an untyped literal or NULL takes the other side's type).
    ("SELECT s = 1 FROM ch", "pg_error"),
    ("SELECT a < s FROM ch", "pg_error"),
    ("SELECT v <> a FROM ch", "pg_error"),
    ("SELECT c >= 2.5 FROM ch", "pg_error"),
    ("SELECT NULL::text = a FROM ch", "pg_error"),
    ("SELECT a = '1', s = '1', s = NULL, a = NULL, length(s) = a, s = a::text FROM ch", "same"),
    ("SELECT (d - NULL) <> d, d - d <> d FROM (VALUES (date '2024-01-01')) v(d)", "pg_error"),
    ("SELECT a = d FROM (VALUES (1, date '2024-01-01')) v(a, d)", "pg_error"),
    ("SELECT b = 1 FROM (VALUES (true)) v(b)", "pg_error"),
    ("SELECT s = d FROM (VALUES ('x', date '2024-01-01')) v(s, d)", "pg_error"),
    ("SELECT d < ts, d = '2024-01-01', b = 't', a = 1.5, (d - d) + a > 0 "
     "FROM (VALUES (date '2024-01-01', timestamp '2024-01-01 00:00', true, 1)) v(d, ts, b, a)",
     "same"),
    # DISTINCT needs a select list.
    ("SELECT DISTINCT FROM t", "pg_error"),
    ("SELECT count(*) FROM (SELECT DISTINCT FROM t) s", "pg_error"),
)  # fmt: skip


@pytest.fixture(scope="module")
def both(pg: Any) -> Iterator[tuple[dsql.Connection, Any]]:
    """dsql and PostgreSQL holding `TABLES`."""
    with holding(pg, "hunt3", TABLES) as pair:
        yield pair


@pytest.mark.parametrize(("sql", "kind"), CASES, ids=[c[0][:60] for c in CASES])
def test_case(sql: str, kind: str, both: tuple[dsql.Connection, Any]) -> None:
    verdict = judge(Statement(sql, 1), *both)
    assert verdict.kind == kind, str(verdict)


#: Shapes kept as materialized views: each must equal its query after every change.
VIEWS = (
    "SELECT count(*) FROM w HAVING false",
    "SELECT 1 FROM w HAVING true",
    "SELECT sum(a) FROM w GROUP BY ()",
    "SELECT FROM w",
    "SELECT FROM w WHERE a > 1",
    "SELECT a, ARRAY(SELECT u.a FROM w u WHERE u.a < w.a ORDER BY u.a DESC) AS l FROM w",
    "SELECT count(*) FROM (SELECT FROM w UNION ALL SELECT FROM w WHERE a IS NULL) s",
)

CHANGES = (
    "INSERT INTO w VALUES (1), (2), (NULL), (2)",
    "DELETE FROM w WHERE a = 2",
    "DELETE FROM w",
    "INSERT INTO w VALUES (3)",
)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT CAST(3000000000 AS int) FROM t", "integer out of range"),
        ("SELECT (a * 40000.5)::smallint FROM t", "smallint out of range"),
        ("SELECT 1e20::bigint FROM t", "bigint out of range"),
        ("SELECT (a * 1e19::float8)::bigint FROM t", "bigint out of range"),
    ],
)
def test_integer_casts_out_of_range_speak_postgres(
    sql: str, message: str, both: tuple[dsql.Connection, Any]
) -> None:
    """An integer cast past its type's range: PostgreSQL's words, not the engine's."""
    with pytest.raises(dsql.errors.DsqlError) as raised:
        both[0].execute(sql)
    assert str(raised.value).splitlines()[0] == message


def test_views_follow_changes(pg: Any) -> None:
    with holding(pg, "hunt3_views", ("CREATE TABLE w (a int)",)) as (con, conn):
        for i, sql in enumerate(VIEWS):
            con.execute(f"CREATE MATERIALIZED VIEW v{i} AS {sql}")
        for change in ("", *CHANGES):
            if change:
                conn.execute(change)
                con.execute(change)
            for i, sql in enumerate(VIEWS):
                want = sorted(conn.execute(sql).fetchall(), key=repr)
                got = sorted(con.execute(f"SELECT * FROM v{i}").fetchall(), key=repr)
                assert got == want, f"after {change!r}: view {sql!r}"
