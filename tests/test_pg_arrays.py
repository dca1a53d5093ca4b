"""Arrays written as PostgreSQL's text (`'{1,2}'::int[]`, `'{a,"b c",NULL}'::text[]`)
against PostgreSQL: literals, casts of text columns, INSERT of array text, `= ANY(...)`,
round trips through `::text`; in one-off queries, in materialized views under inserts
and deletes, on the in-process kernel and (a subset) on Spark.

The oracle is the test run's PostgreSQL (the `pg` fixture); rows are compared by
`pg_oracle.differs`. Where PostgreSQL raises an error dsql raises a `DsqlError`.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from pg_oracle import differs, seeded
from pg_seeded import assert_same, fixtures

import dsql

TABLE = "id int, s text, a int[], w text[]"
ROWS = (
    "(1, '{1,2,3}', '{1,2,3}', '{a,\"b c\",NULL}'), "
    "(2, ' { 4 , NULL , 5 } ', ARRAY[]::int[], '{}'), "
    "(3, '{}', NULL, '{\"NULL\",null,\" x \"}'), "
    '(4, NULL, \'{7}\', \'{"q\\"t","b\\\\c","{}",""}\'), '
    "(5, '{-1,+2,  3  }', '{ 10, 20 }', '{\"a,b\", c d ,e\\\\,f}')"
)

#: Queries both must answer alike (or both refuse).
QUERIES = [
    "SELECT '{1,2,3}'::int[], '{}'::int[], '{a,\"b c\",NULL}'::text[], '{\"NULL\",NULL}'::text[]",
    "SELECT '{ 1 , 2 }'::int[], '{ a b , c }'::text[], '{\"\"}'::text[], '{\\\\,x}'::text[]",
    "SELECT '{t,f,true,NULL}'::bool[], '{1.5,2}'::numeric[], '{9000000000}'::bigint[]",
    "SELECT '{1,2,3}'::int[]::text, '{a,\"b c\",NULL,\"\"}'::text[]::text",
    "SELECT array_length('{1,2,3}'::int[], 1), array_length('{}'::int[], 1),"
    " cardinality('{}'::int[]), cardinality('{a,b}'::text[])",
    "SELECT ARRAY[]::int[], cardinality(ARRAY[]::int[])",
    "SELECT 1 = ANY('{1,2}'::int[]), 3 = ANY('{1,2}'::int[]), 3 = ANY('{1,NULL}'::int[]),"
    " 1 = ANY('{}'::int[]), NULL::int = ANY('{1}'::int[])",
    "SELECT 1 <> ALL('{1,2}'::int[]), 3 <> ALL('{1,2}'::int[]), 3 <> ALL('{1,NULL}'::int[]),"
    " 1 = ALL('{}'::int[]), 2 > ANY('{1,5}'::int[]), 'b' = ANY('{a,b}'::text[])",
    "SELECT id, s::int[] FROM t WHERE id <> 4 ORDER BY id",
    "SELECT id, s::int[], (s::int[])::text FROM t WHERE id <> 4 ORDER BY id",
    "SELECT id, w, w::text, a::text FROM t ORDER BY id",
    "SELECT id, cardinality(w), array_length(a, 1), 5 = ANY(s::int[]) FROM t ORDER BY id",
    "SELECT id, w::text::text[] = w FROM t ORDER BY id",
    "SELECT id FROM t WHERE 2 = ANY(a) OR 20 = ANY(a) ORDER BY id",
    "SELECT '{1,2'::int[]",
    "SELECT '1,2'::int[]",
    "SELECT '{1,2}x'::int[]",
    "SELECT '{1,,2}'::int[]",
    "SELECT '{\"a}'::text[]",
    "SELECT '{a'::text[]",
    "SELECT '{a}'::int[]",
    "SELECT 'x'::int[] FROM t",
    "SELECT (s || 'x')::int[] FROM t",
]


pgc, con = fixtures("arrays", {"t": TABLE}, {"t": ROWS})


@pytest.mark.parametrize("sql", QUERIES)
def test_array_text_answers_as_postgres(con: dsql.Connection, pgc: Any, sql: str) -> None:
    assert_same(con, pgc, sql)


def test_multidimensional_literals_are_refused(con: dsql.Connection) -> None:
    with pytest.raises(dsql.NotSupportedError, match="multidimensional arrays"):
        con.execute("SELECT '{{1,2},{3,4}}'::int[]")
    con.execute("INSERT INTO t (id, s) VALUES (9, '{{1},{2}}')")
    with pytest.raises(dsql.Error, match="multidimensional arrays"):
        con.execute("SELECT s::int[] FROM t WHERE id = 9").fetchall()


def test_malformed_literal_has_postgres_message_and_position(con: dsql.Connection) -> None:
    sql = "SELECT 1, '{1,2'::int[]"
    with pytest.raises(dsql.Error, match='malformed array literal: "{1,2"') as info:
        con.execute(sql)
    assert info.value.position is not None
    assert str(info.value).count("^") == 1


def test_insert_of_array_text(con: dsql.Connection, pgc: Any) -> None:
    pgc.execute("DROP TABLE IF EXISTS ins")
    for target in (con, pgc):
        target.execute("CREATE TABLE ins (a int[], w text[])")
        target.execute(
            "INSERT INTO ins VALUES ('{1,2}', '{x,\"y z\",NULL}'), ('{}', '{\"NULL\"}'), "
            "(' { 3 } ', NULL)"
        )
    assert differs(con, pgc, "SELECT a, w, a::text, w::text FROM ins") is None
    with pytest.raises(dsql.Error, match="malformed array literal"):
        con.execute("INSERT INTO ins VALUES ('{1', NULL)")
    with pytest.raises(dsql.Error, match='invalid input syntax for type integer: "x"'):
        con.execute("INSERT INTO ins VALUES ('{x}', NULL)")
    con.execute("UPDATE ins SET a = '{5,6}' WHERE a = '{}'::int[]")
    pgc.execute("UPDATE ins SET a = '{5,6}' WHERE a = '{}'::int[]")
    assert differs(con, pgc, "SELECT a, w FROM ins") is None


VIEWS = {
    "parsed": "SELECT id, s::int[] AS p, cardinality(s::int[]) AS n FROM t",
    "members": "SELECT id FROM t WHERE 3 = ANY(s::int[]) OR 'b c' = ANY(w)",
    "texts": "SELECT w::text AS wt, count(*) AS c FROM t GROUP BY w::text",
}


def _random_row(rng: random.Random, id_: int) -> str:
    s = rng.choice(["NULL", "'{}'", "'{1,2,3}'", "' {3 , NULL} '", "'{10}'"])
    w = rng.choice(["NULL", "'{}'", "'{a,\"b c\"}'", "'{NULL,\"NULL\"}'", "'{\"x,y\"}'"])
    return f"({id_}, {s}, NULL, {w})"


@pytest.mark.parametrize("seed", range(2))
def test_views_equal_their_queries_under_random_histories(pg: Any, seed: int) -> None:
    """Each view holds what PostgreSQL computes for its query after each insert or delete."""
    rng = random.Random(seed)
    pgc = pg.database(f"arrays_views_{seed}")
    pgc.execute(f"CREATE TABLE t ({TABLE})")
    con = dsql.connect(kernel="local")
    con.execute(f"CREATE TABLE t ({TABLE})")
    for name, sql in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    ids: list[int] = []
    for step in range(10):
        if ids and rng.random() < 0.35:
            gone = ids.pop(rng.randrange(len(ids)))
            statement = f"DELETE FROM t WHERE id = {gone}"
        else:
            ids.append(step)
            statement = f"INSERT INTO t VALUES {_random_row(rng, step)}"
        for target in (con, pgc):
            target.execute(statement)
        for name, sql in VIEWS.items():
            difference = differs(con, pgc, sql, f"SELECT * FROM {name}")
            assert difference is None, f"seed {seed}, view {name}\n{difference}"
    pgc.close()


def test_a_subset_answers_alike_on_spark(spark: Any, pg: Any) -> None:
    pgc = seeded(pg.database("arrays_spark"), {"t": TABLE}, {"t": ROWS})
    con = seeded(dsql.connect(kernel="spark", spark=spark), {"t": TABLE}, {"t": ROWS})
    failures = [
        f"{sql}\n{difference}"
        for sql in QUERIES
        if (difference := differs(con, pgc, sql, ordered="ORDER BY" in sql.upper())) is not None
    ]
    con.execute(f"CREATE MATERIALIZED VIEW parsed AS {VIEWS['parsed']}")
    for step in ["", "DELETE FROM t WHERE id = 1", "INSERT INTO t VALUES (8, '{8,9}', NULL, NULL)"]:
        for target in (con, pgc) if step else ():
            target.execute(step)
        if difference := differs(con, pgc, VIEWS["parsed"], "SELECT * FROM parsed"):
            failures.append(f"view after {step!r}\n{difference}")
    pgc.close()
    assert not failures, "\n\n".join(failures)
