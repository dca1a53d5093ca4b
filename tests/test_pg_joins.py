"""FROM-clause binding against PostgreSQL: USING/NATURAL merges, JOIN before comma,
parenthesized joins, table functions WITH ORDINALITY and ROWS FROM, `*` over duplicate
names; one-off queries and materialized views under random inserts and deletes.

The oracle is the test run's PostgreSQL (the `pg` fixture), in a database of this
module's; every query runs on both, and the rows are compared as psql prints them (in
order where the query has ORDER BY, as multisets otherwise).
"""

from __future__ import annotations

import random
import subprocess
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import dsql
from dsql.errors import DsqlError, SchemaError, UnsupportedError

TABLES = {
    "a": "x int, y int",
    "b": "x int, z int",
    "c": "x bigint, w int",
    "d": "x int, y int, z int",
    "arrs": "id int, arr int[]",
}
ROWS = {
    "a": "(42, 1), (44, 2), (NULL, 3), (42, 5)",
    "b": "(42, 10), (43, 11), (16, 12), (NULL, 13)",
    "c": "(42, 100), (16, 101), (7, 102)",
    "d": "(42, 1, 10), (44, 9, NULL), (16, NULL, 12)",
    "arrs": "(1, ARRAY[5, 6, 7]), (2, ARRAY[]::int[]), (3, NULL), (4, ARRAY[8, NULL])",
}


class Joins:
    """The session's PostgreSQL (the `pg` fixture), database `joins`, queried through psql."""

    def __init__(self, server: Any) -> None:
        self.server = server
        server.database("joins").close()

    def query(self, sql: str) -> list[tuple[str, ...]] | str:
        """The rows psql prints (NULL as `NULL`), or the error's first line."""
        result = self.query_with_names(sql)
        return result if isinstance(result, str) else result[1]

    def query_with_names(self, sql: str) -> tuple[list[str], list[tuple[str, ...]]] | str:
        """The column names and rows psql prints, or the error's first line."""
        try:
            out = self.server.psql(
                sql, "-A", "-P", "footer=off", "-F", "\t", "-P", "null=NULL",
                "-v", "ON_ERROR_STOP=1", dbname="joins",
            )  # fmt: skip
        except subprocess.CalledProcessError as error:
            return error.stderr.splitlines()[0]
        lines = out.splitlines()
        if not lines:
            return [], []
        return lines[0].split("\t"), [tuple(line.split("\t")) for line in lines[1:]]


@pytest.fixture(scope="module")
def pg(pg: Any) -> Joins:  # noqa: F811 - the session's server, as this module's database
    server = Joins(pg)
    for name, columns in TABLES.items():
        server.query(f"CREATE TABLE {name} ({columns}); INSERT INTO {name} VALUES {ROWS[name]}")
    return server


@pytest.fixture
def con() -> Iterator[dsql.Connection]:
    connection = dsql.connect(kernel="local")
    cur = connection.cursor()
    for name, columns in TABLES.items():
        cur.execute(f"CREATE TABLE {name} ({columns})")
        cur.execute(f"INSERT INTO {name} VALUES {ROWS[name]}")
    yield connection
    connection.close()


def _text(value: object) -> str:
    """A value as psql prints it."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, list | tuple):
        return "{" + ",".join(_text(v) for v in value) + "}"
    return str(value)


def _dsql_rows(con: dsql.Connection, sql: str) -> tuple[list[str], list[tuple[str, ...]]]:
    cur = con.cursor()
    cur.execute(sql)
    return [d[0] for d in cur.description], [tuple(_text(v) for v in r) for r in cur.fetchall()]


def assert_same(pg: Joins, con: dsql.Connection, sql: str) -> None:
    """dsql's rows and column names for `sql` are PostgreSQL's."""
    expected = pg.query_with_names(sql)
    assert not isinstance(expected, str), f"PostgreSQL refused {sql}: {expected}"
    names, rows = expected
    columns, got = _dsql_rows(con, sql)
    assert columns == names, sql
    if "ORDER BY" in sql.upper():
        assert got == rows, sql
    else:
        assert Counter(got) == Counter(rows), sql


# --- 1. USING and NATURAL ---------------------------------------------------------------

USING_QUERIES = [
    "SELECT x FROM a FULL JOIN b USING (x) ORDER BY x",
    "SELECT * FROM a FULL JOIN b USING (x)",
    "SELECT * FROM a JOIN b USING (x)",
    "SELECT * FROM a LEFT JOIN b USING (x)",
    "SELECT * FROM a RIGHT JOIN b USING (x)",
    "SELECT x, a.x, b.x FROM a RIGHT JOIN b USING (x)",
    "SELECT x, a.x, b.x FROM a FULL JOIN b USING (x)",
    "SELECT c.* FROM a RIGHT JOIN c USING (x)",
    "SELECT a.*, c.* FROM a FULL JOIN c USING (x)",
    "SELECT * FROM a FULL JOIN c USING (x)",
    "SELECT x + 0 AS s FROM a FULL JOIN c USING (x)",
    "SELECT * FROM a NATURAL JOIN d",
    "SELECT * FROM a NATURAL FULL JOIN d",
    "SELECT * FROM d NATURAL RIGHT JOIN a",
    "SELECT * FROM a NATURAL JOIN (SELECT 1 AS q) s",
    "SELECT * FROM a NATURAL LEFT JOIN (SELECT 1 AS q) s",
    "SELECT * FROM a JOIN d USING (x, y)",
    "SELECT * FROM a FULL JOIN d USING (y, x)",
    "SELECT * FROM a JOIN b USING (x) JOIN c USING (x)",
    "SELECT * FROM a FULL JOIN b USING (x) FULL JOIN c USING (x)",
    "SELECT x, count(*) FROM a FULL JOIN b USING (x) LEFT JOIN c USING (x) GROUP BY x",
    "SELECT * FROM a FULL JOIN b USING (x) WHERE x IS NULL",
    "SELECT * FROM a FULL JOIN b USING (x) WHERE x > 40",
    "SELECT * FROM (SELECT x FROM a FULL JOIN b USING (x)) s NATURAL FULL JOIN c",
    "SELECT * FROM a JOIN (VALUES (42, 'p'), (NULL, 'q')) AS v(x, t) USING (x)",
    "SELECT * FROM (VALUES (42), (45)) v(x) FULL JOIN b USING (x)",
    "SELECT * FROM a JOIN unnest(ARRAY[42, 44]) AS u(x) USING (x)",
    "SELECT * FROM a NATURAL JOIN generate_series(40, 44) AS g(x)",
    "SELECT * FROM a FULL JOIN generate_series(42, 43) AS g(x) USING (x)",
]


def test_using_unifies_the_merged_column_type(pg: Joins, con: dsql.Connection) -> None:
    assert pg.query("SELECT pg_typeof(x) FROM a JOIN c USING (x) LIMIT 1") == [("bigint",)]
    cur = con.cursor()
    cur.execute("CREATE VIEW j AS SELECT x FROM a FULL JOIN c USING (x)")
    cur.execute("SHOW COLUMNS FROM j")
    assert [(r[0], r[2]) for r in cur.fetchall()] == [("x", "bigint")]


# --- 2. JOIN binds tighter than the comma --------------------------------------------------

COMMA_QUERIES = [
    "SELECT count(*) FROM a, b FULL JOIN c ON b.x = c.x",
    "SELECT * FROM a, b FULL JOIN c ON b.x = c.x",
    "SELECT * FROM a, b RIGHT JOIN c ON b.x = c.x WHERE a.y < 3",
    "SELECT * FROM a, b LEFT JOIN c ON b.x = c.x WHERE a.x = b.x",
    "SELECT * FROM a, b JOIN c USING (x)",
    "SELECT * FROM b FULL JOIN c ON b.x = c.x, a",
    "SELECT * FROM a, b FULL JOIN c ON b.x = c.x, d",
    "SELECT count(*) FROM a CROSS JOIN b FULL JOIN c ON b.x = c.x",
    "SELECT * FROM a, b JOIN LATERAL (SELECT a.y + b.z AS s) l ON true",
    "SELECT * FROM a JOIN b JOIN c ON c.x = b.x ON a.x = b.x",
    # A join's right side may be an unparenthesized NATURAL or CROSS join.
    "SELECT * FROM a JOIN b NATURAL JOIN c ON a.x = c.x",
    "SELECT * FROM a LEFT JOIN b CROSS JOIN (SELECT 1 AS q) s NATURAL JOIN d USING (x)",
    "SELECT * FROM a LEFT JOIN b NATURAL JOIN c ON true LEFT JOIN d ON true",
    "SELECT * FROM a FULL JOIN b CROSS JOIN c ON a.y = c.w - 100",
    "SELECT * FROM (a RIGHT JOIN b NATURAL FULL JOIN c ON a.x = b.x) j",
]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM a, b JOIN c ON a.x = c.x",
        "SELECT * FROM a, b JOIN c ON y = c.x",
        "SELECT a.x FROM (a JOIN b ON a.x = b.x) j",
        "SELECT * FROM a FULL JOIN generate_series(1, a.x) g ON true",
    ],
)
def test_references_postgres_refuses_are_refused(pg: Joins, con: dsql.Connection, sql: str) -> None:
    assert isinstance(pg.query(sql), str)
    with pytest.raises(SchemaError, match="cannot be referenced|does not exist") as info:
        con.cursor().execute(sql)
    assert info.value.hint


# --- 3. Parenthesized joins -------------------------------------------------------------

PAREN_QUERIES = [
    "SELECT * FROM (a JOIN b ON a.x = b.x) j",
    "SELECT j.* FROM (a JOIN b USING (x)) j",
    "SELECT j.x, j.z FROM (a JOIN b USING (x)) AS j",
    "SELECT * FROM (a JOIN b ON true) AS j(p, q, r) WHERE p = r",
    "SELECT count(*) FROM ((a JOIN b ON a.x = b.x) JOIN (c JOIN a a2 ON c.x = a2.x) ON true)",
    "SELECT * FROM (a JOIN b ON a.x = b.x)",
    "SELECT * FROM ((a JOIN b ON a.x = b.x))",
    "SELECT * FROM a LEFT JOIN (b JOIN c ON b.x = c.x) ON a.x = b.x",
    "SELECT * FROM a LEFT JOIN (b JOIN c USING (x)) j ON a.x = j.x",
    "SELECT * FROM a FULL JOIN (b LEFT JOIN c USING (x)) USING (x)",
    "SELECT * FROM (a FULL JOIN b USING (x)) FULL JOIN c USING (x)",
    "SELECT * FROM (a FULL JOIN b USING (x)) j RIGHT JOIN c ON j.x = c.x",
    "SELECT * FROM c, (a FULL JOIN b USING (x)) j WHERE j.x = c.x",
    "SELECT * FROM (a JOIN b USING (x)) j, a",
    "SELECT * FROM (a CROSS JOIN LATERAL unnest(ARRAY[a.y, 0]) u) WHERE u > 0",
    "SELECT * FROM a JOIN ((VALUES (42)) v(x) JOIN b USING (x)) USING (x)",
    "SELECT * FROM ((SELECT 42 AS x) s JOIN b USING (x))",
    "SELECT * FROM (a JOIN b ON a.x = b.x) j, LATERAL (SELECT j.y + j.z AS s) l",
    "SELECT * FROM (SELECT * FROM a FULL JOIN b USING (x)) s WHERE s.x IS NOT NULL",
    "SELECT x FROM a WHERE EXISTS (SELECT 1 FROM b FULL JOIN c ON b.x = c.x WHERE c.x = a.x)",
    "SELECT a.x, (SELECT count(*) FROM b RIGHT JOIN c USING (x) WHERE x < a.x) FROM a",
]


def test_a_join_alias_hides_its_tables_and_may_repeat_them(con: dsql.Connection) -> None:
    with pytest.raises(SchemaError, match="specified more than once"):
        con.cursor().execute("SELECT * FROM a JOIN (b JOIN a ON true) ON true")
    with pytest.raises(SchemaError, match="specified more than once"):
        con.cursor().execute("SELECT * FROM (a JOIN a ON true) j")
    con.cursor().execute("SELECT * FROM (a JOIN b ON true) j, a")
    with pytest.raises(SchemaError, match="ambiguous"):
        con.cursor().execute("SELECT j.x FROM (a JOIN b ON a.x = b.x) j")


# --- 4. Table functions: WITH ORDINALITY, ROWS FROM ---------------------------------------

FUNCTION_QUERIES = [
    "SELECT * FROM unnest(ARRAY[5, 6]) WITH ORDINALITY",
    "SELECT * FROM unnest(ARRAY[5, 6]) WITH ORDINALITY u",
    "SELECT * FROM unnest(ARRAY[5, 6]) WITH ORDINALITY AS u(v, n)",
    "SELECT * FROM unnest(ARRAY['p', NULL, 'q']) WITH ORDINALITY AS u(v)",
    "SELECT * FROM generate_series(3, 11, 4) WITH ORDINALITY",
    "SELECT * FROM generate_series(5, 1, -2) WITH ORDINALITY AS g(v, n)",
    "SELECT * FROM ROWS FROM (unnest(ARRAY[1, 2]), generate_series(1, 3)) WITH ORDINALITY",
    "SELECT * FROM ROWS FROM (unnest(ARRAY[1, 2]), generate_series(1, 3)) AS r(p)",
    "SELECT * FROM ROWS FROM (generate_series(1, 0), unnest(ARRAY[]::int[]))",
    "SELECT * FROM ROWS FROM (generate_series(1, 2)) WITH ORDINALITY AS t",
    "SELECT * FROM unnest(ARRAY[1], ARRAY['a', 'b'])",
    "SELECT * FROM unnest(ARRAY[1], ARRAY['a', 'b']) WITH ORDINALITY AS t(p, q, n)",
    "SELECT * FROM ROWS FROM (unnest(ARRAY[1, 2], ARRAY[3]))",
    "SELECT id, v, i FROM arrs, unnest(arrs.arr) WITH ORDINALITY AS u(v, i)",
    "SELECT id, u.* FROM arrs, LATERAL unnest(arr) WITH ORDINALITY u",
    "SELECT * FROM arrs CROSS JOIN ROWS FROM (unnest(arr), generate_series(1, id)) r",
    "SELECT id, r.* FROM arrs, ROWS FROM (unnest(arr), unnest(ARRAY[id])) WITH ORDINALITY r",
    "SELECT * FROM a, generate_series(1, a.y) WITH ORDINALITY AS g(v, n) WHERE n > 1",
    "SELECT * FROM a LEFT JOIN unnest(ARRAY[42, 43]) WITH ORDINALITY u(x, n) USING (x)",
    "SELECT * FROM a, LATERAL generate_series(1, a.y) WITH ORDINALITY AS g(v, n)",
    "SELECT * FROM arrs, unnest(arr, ARRAY[id, id]) WITH ORDINALITY AS u(p, q, n) WHERE n > 1",
    "SELECT * FROM a FULL JOIN ROWS FROM (generate_series(1, 3), unnest(ARRAY['p'])) "
    "AS r(v, t) ON a.y = r.v",
    "SELECT * FROM ROWS FROM (generate_series(1::bigint, 3), generate_series(5, 2, -1)) "
    "WITH ORDINALITY",
]


@pytest.mark.parametrize(
    "sql, error",
    [
        ("SELECT * FROM generate_series(3, 4) WITH ORDINALITY AS g(a, b, c)", SchemaError),
        ("SELECT * FROM repeat_row(2) WITH ORDINALITY", UnsupportedError),
        ("SELECT * FROM a, generate_series(1, a.y) g FULL JOIN c ON g = c.w", UnsupportedError),
        (
            "SELECT * FROM generate_series(timestamp '2024-01-31', timestamp '2024-04-01', "
            "interval '1 month') WITH ORDINALITY",
            UnsupportedError,
        ),
    ],
)
def test_table_functions_refused(con: dsql.Connection, sql: str, error: type) -> None:
    with pytest.raises(error):
        con.cursor().execute(sql)


# --- 5. `*` over duplicate names -------------------------------------------------------------

STAR_QUERIES = [
    "SELECT * FROM (SELECT 1, 2) s, (SELECT 3, 4) t",
    'SELECT * FROM (SELECT 1 AS "?column?") s, (SELECT 2) t',
    "SELECT * FROM (SELECT * FROM (SELECT 1, 2) s, (SELECT 3, 4) t) u",
    "SELECT *, * FROM a",
    "SELECT s.*, t.* FROM (SELECT y, y + 1 AS y FROM a) s JOIN (SELECT z, z FROM b) t ON true",
    "SELECT (SELECT count(*) FROM b), (SELECT z FROM b UNION SELECT 1 ORDER BY 1 LIMIT 1)",
]


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE VIEW v AS SELECT * FROM (SELECT 1, 2) s, (SELECT 3, 4) t",
        "CREATE MATERIALIZED VIEW v AS SELECT * FROM (SELECT 1, 2) s, (SELECT 3, 4) t",
        "CREATE MATERIALIZED VIEW v AS SELECT * FROM a JOIN b ON a.x = b.x",
        "CREATE VIEW v AS SELECT 1 AS k, 2 AS k",
    ],
)
def test_views_refuse_duplicate_column_names(pg: Joins, con: dsql.Connection, sql: str) -> None:
    assert "specified more than once" in str(pg.query(sql))
    with pytest.raises(SchemaError, match="specified more than once"):
        con.cursor().execute(sql)


@pytest.mark.parametrize(
    "sql", USING_QUERIES + COMMA_QUERIES + PAREN_QUERIES + FUNCTION_QUERIES + STAR_QUERIES
)
def test_queries_match_postgres(pg: Joins, con: dsql.Connection, sql: str) -> None:
    assert_same(pg, con, sql)


# --- Views under random histories --------------------------------------------------------

VIEWS = {
    "v_full_using": "SELECT x, y, z FROM a FULL JOIN b USING (x)",
    "v_right_using": "SELECT x, a.y, c.w FROM a RIGHT JOIN c USING (x)",
    "v_natural": "SELECT * FROM a NATURAL FULL JOIN d",
    "v_chain": "SELECT * FROM a JOIN b USING (x) LEFT JOIN c USING (x)",
    "v_comma_full": "SELECT a.y, b.z, c.w FROM a, b FULL JOIN c ON b.x = c.x",
    "v_paren": "SELECT j.x, j.y, c.w FROM (a FULL JOIN b USING (x)) j LEFT JOIN c USING (x)",
    "v_count_using": "SELECT x, count(*) AS n FROM a FULL JOIN b USING (x) GROUP BY x",
    "v_ordinality": "SELECT id, v, n FROM arrs, unnest(arr) WITH ORDINALITY AS u(v, n)",
    "v_outer_in_subquery": (
        "SELECT a.y FROM a WHERE EXISTS (SELECT 1 FROM b FULL JOIN c USING (x) WHERE x = a.x)"
    ),
    "v_values": "SELECT * FROM b NATURAL FULL JOIN (VALUES (42), (45)) v(x)",
    "v_lateral_paren": (
        "SELECT j.x, s.t FROM (a JOIN b USING (x)) j, LATERAL (SELECT j.y + j.z AS t) s"
    ),
    "v_rows_from": (
        "SELECT id, p, q, n FROM arrs, "
        "ROWS FROM (unnest(arr), generate_series(1, id)) WITH ORDINALITY AS r(p, q, n)"
    ),
}


def _random_change(rng: random.Random) -> list[str]:
    """One random insert or delete, as statements both systems run."""
    small = lambda: rng.choice(["NULL", "16", "42", "43", "44", "7"])  # noqa: E731
    table = rng.choice(["a", "b", "c", "d", "arrs"])
    if rng.random() < 0.35:
        column = {"a": "y", "b": "z", "c": "w", "d": "x", "arrs": "id"}[table]
        return [f"DELETE FROM {table} WHERE {column} = {rng.randint(0, 13)}"]
    if table == "arrs":
        items = ", ".join(small() for _ in range(rng.randint(0, 3)))
        array = rng.choice(["NULL", f"ARRAY[{items}]::int[]"])
        return [f"INSERT INTO arrs VALUES ({rng.randint(0, 4)}, {array})"]
    width = 3 if table == "d" else 2
    values = ", ".join([small()] + [str(rng.randint(0, 13)) for _ in range(width - 1)])
    return [f"INSERT INTO {table} VALUES ({values})"]


@pytest.mark.parametrize("seed", [1, 2])
def test_views_agree_with_postgres_under_changes(
    pg: Joins, con: dsql.Connection, seed: int
) -> None:
    rng = random.Random(seed)
    cur = con.cursor()
    for name, sql in VIEWS.items():
        cur.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    try:
        for _ in range(12):
            for statement in _random_change(rng):
                cur.execute(statement)
                assert not isinstance(pg.query(statement), str), statement
            for name, sql in VIEWS.items():
                _, got = _dsql_rows(con, f"SELECT * FROM {name}")
                expected = pg.query(sql)
                assert Counter(got) == Counter(expected), name
    finally:
        for name, rows in ROWS.items():
            pg.query(f"DELETE FROM {name}; INSERT INTO {name} VALUES {rows}")


def test_table_functions_and_merged_columns_on_spark(pg: Joins, spark: object) -> None:
    """Spark evaluates the zipped functions' subscripts and the merged columns alike."""
    connection = dsql.connect(kernel="spark", spark=spark)
    cur = connection.cursor()
    for name, columns in TABLES.items():
        cur.execute(f"CREATE TABLE {name} ({columns})")
        cur.execute(f"INSERT INTO {name} VALUES {ROWS[name]}")
    for sql in [
        "SELECT * FROM unnest(ARRAY[5, 6]) WITH ORDINALITY AS u(v, n)",
        "SELECT id, r.* FROM arrs, ROWS FROM (unnest(arr), unnest(ARRAY[id])) WITH ORDINALITY r",
        "SELECT * FROM a FULL JOIN c USING (x)",
        "SELECT * FROM a, b FULL JOIN c ON b.x = c.x",
    ]:
        assert_same(pg, connection, sql)
    connection.close()


def test_every_error_is_a_dsql_error(con: dsql.Connection) -> None:
    for sql in [
        "SELECT * FROM a JOIN b USING (nope)",
        "SELECT * FROM a JOIN (SELECT 1 AS x, 2 AS x) s USING (x)",
        "SELECT * FROM a JOIN b USING (x, x)",
        "SELECT * FROM a JOIN (SELECT 'p' AS x) s USING (x)",
        "SELECT * FROM (a JOIN b ON true) AS j(p, q, r, s, t)",
        "SELECT * FROM a LEFT JOIN LATERAL (SELECT a.y) s ON true",
    ]:
        with pytest.raises(DsqlError):
            con.cursor().execute(sql)
