"""dsql's statement grammar: every statement form, positions, errors, and robustness.

No Spark: the grammar is pure text to AST. Queries are checked against sqlglot parsing
the same text directly (the grammar must hand them over untouched).
"""

from __future__ import annotations

import doctest

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from dsql.errors import DataError, ParseError
from dsql.grammar import (
    Advance,
    Begin,
    Close,
    Commit,
    CreateIndex,
    CreateTable,
    CreateView,
    DeclareCursor,
    Delete,
    Drop,
    Explain,
    Fetch,
    Insert,
    MutuallyRecursive,
    Rollback,
    Select,
    SetVariable,
    Show,
    Subscribe,
    Update,
    parse,
)


def one(text: str):
    """The single statement in `text`."""
    (statement,) = parse(text)
    return statement


def sql(node: exp.Expression) -> str:
    return node.sql("postgres")


def same_as_sqlglot(tree: exp.Expression, text: str) -> bool:
    return tree == sqlglot.parse_one(text, read="postgres")


# ---- statement forms ---------------------------------------------------------------------


def test_create_table():
    s = one('create table if not exists T (a int NOT NULL DEFAULT 1 + 2, "B" numeric(10, 2) NULL)')
    assert isinstance(s, CreateTable)
    assert (s.name, s.if_not_exists) == ("t", True)
    a, b = s.columns
    assert (a.name, sql(a.type), a.not_null, sql(a.default)) == ("a", "INT", True, "1 + 2")
    assert (b.name, sql(b.type), b.not_null, b.default) == ("B", "DECIMAL(10, 2)", False, None)
    assert one("CREATE TABLE t (ts timestamp with time zone, xs text[])").columns[1].name == "xs"


def test_insert_values_and_select():
    s = one("INSERT INTO t (a, \"B\") VALUES (1, 'x'), (2, 'y;z')")
    assert isinstance(s, Insert)
    assert (s.table, s.columns) == ("t", ("a", "B"))
    assert isinstance(s.query, exp.Values)
    assert same_as_sqlglot(s.query, "VALUES (1, 'x'), (2, 'y;z')")
    s = one("insert into t select a from u where a > 1")
    assert s.columns is None and isinstance(s.query, exp.Select)


def test_update_and_delete():
    s = one("UPDATE t SET a = a + 1, b = coalesce(b, 'x,y', f(1, 2)) WHERE a IN (1, 2)")
    assert isinstance(s, Update)
    assert [(c, sql(e)) for c, e in s.assignments] == [
        ("a", "a + 1"),
        ("b", "COALESCE(b, 'x,y', F(1, 2))"),
    ]
    assert sql(s.where) == "a IN (1, 2)"
    assert one("UPDATE t SET a = 0").where is None
    d = one("DELETE FROM T WHERE a > 1 AND b IS NULL")
    assert isinstance(d, Delete) and d.table == "t" and sql(d.where) == "a > 1 AND b IS NULL"
    assert one("DELETE FROM t").where is None


def test_create_view_forms():
    s = one('CREATE MATERIALIZED VIEW v (x, "Y") AS SELECT a, b FROM t')
    assert isinstance(s, CreateView)
    assert (s.name, s.materialized, s.columns, s.or_replace, s.if_not_exists) == (
        "v",
        True,
        ("x", "Y"),
        False,
        False,
    )
    q = "WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT n + 1 FROM r WHERE n < 5) SELECT * FROM r"
    s = one(f"CREATE OR REPLACE VIEW IF NOT EXISTS w AS {q}")
    assert (s.materialized, s.columns, s.or_replace, s.if_not_exists) == (False, None, True, True)
    assert same_as_sqlglot(s.query, q)


def test_create_index():
    s = one("CREATE INDEX i ON t (a + 1, b)")
    assert isinstance(s, CreateIndex)
    assert (s.name, s.on, [sql(k) for k in s.keys]) == ("i", "t", ["a + 1", "b"])
    assert one("CREATE INDEX ON t (a)").name is None
    d = one("CREATE DEFAULT INDEX ON v")
    assert (d.name, d.on, d.keys) == (None, "v", ())


@pytest.mark.parametrize(
    ("text", "kind", "names", "if_exists", "cascade"),
    [
        ("DROP TABLE t", "table", ("t",), False, False),
        ("DROP VIEW IF EXISTS a, B CASCADE", "view", ("a", "b"), True, True),
        ("DROP MATERIALIZED VIEW v RESTRICT", "view", ("v",), False, False),
        ("drop index i", "index", ("i",), False, False),
        ("DROP TABLE view", "table", ("view",), False, False),  # keywords only where expected
    ],
)
def test_drop(text, kind, names, if_exists, cascade):
    s = one(text)
    assert isinstance(s, Drop)
    assert (s.kind, s.names, s.if_exists, s.cascade) == (kind, names, if_exists, cascade)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT a, count(*) FROM t GROUP BY a HAVING count(*) > 1 ORDER BY a LIMIT 3",
        "VALUES (1), (2)",
        "(SELECT 1) UNION ALL (SELECT 2)",
        "WITH x AS (SELECT 1 AS a) SELECT * FROM x",
        "SELECT * FROM t WHERE mz_now() <= ts + 3600000",
        "SELECT ';' AS \"semi;colon\" -- a comment; with a semicolon\nFROM t",
        "SELECT $$as of$$, 'up to', a AS offset FROM t",
    ],
)
def test_select_round_trips_through_sqlglot(query):
    s = one(query)
    assert isinstance(s, Select) and s.as_of is None
    assert same_as_sqlglot(s.query, query)
    assert s.text == query


def test_select_as_of_and_mz_now():
    s = one("SELECT mz_now(), a FROM t AS OF 1000 + 5")
    assert sql(s.as_of) == "1000 + 5"
    assert isinstance(s.query.expressions[0], exp.Anonymous)
    assert s.query.expressions[0].name.lower() == "mz_now"
    assert (
        one("SELECT * FROM (SELECT 1) AS sub AS OF 3").query.sql()
        == "SELECT * FROM (SELECT 1) AS sub"
    )


def test_subscribe():
    s = one("SUBSCRIBE TO v WITH (SNAPSHOT = false, PROGRESS) AS OF 5 UP TO 10")
    assert isinstance(s, Subscribe)
    assert (s.target, s.snapshot, s.progress, sql(s.as_of), sql(s.up_to)) == (
        "v",
        False,
        True,
        "5",
        "10",
    )
    s = one("SUBSCRIBE (SELECT * FROM t WHERE mz_now() < a) WITH (snapshot off)")
    assert same_as_sqlglot(s.target, "SELECT * FROM t WHERE mz_now() < a")
    assert (s.snapshot, s.progress, s.as_of, s.up_to) == (False, None, None, None)
    assert one("SUBSCRIBE v UP TO 3").up_to is not None


def test_cursors():
    d = one("DECLARE c CURSOR FOR SUBSCRIBE v WITH (PROGRESS = true)")
    assert isinstance(d, DeclareCursor) and d.name == "c"
    assert (d.subscribe.target, d.subscribe.progress) == ("v", True)
    assert d.subscribe.text == "SUBSCRIBE v WITH (PROGRESS = true)"
    assert d.subscribe.position == (1, 22)
    cases = {
        "FETCH c": (1, None),
        "FETCH ALL c": (None, None),
        "FETCH 10 FROM c WITH (timeout = '1s')": (10, "1s"),
        "FETCH FORWARD ALL IN c": (None, None),
        "FETCH ALL FROM c WITH (TIMEOUT '0s')": (None, "0s"),
    }
    for text, (count, timeout) in cases.items():
        f = one(text)
        assert isinstance(f, Fetch) and (f.cursor, f.count, f.timeout) == ("c", count, timeout)
    assert one("CLOSE C") == Close(cursor="c")


def test_explain():
    s = one("EXPLAIN SELECT 1")
    assert isinstance(s, Explain) and (s.stage, s.options) == ("optimized", ())
    assert same_as_sqlglot(s.target, "SELECT 1")
    s = one("EXPLAIN PHYSICAL PLAN WITH (arity, join implementations) FOR MATERIALIZED VIEW v")
    assert (s.stage, s.target) == ("physical", "v")
    assert s.options == (("arity", "true"), ("join implementations", "true"))
    assert one("EXPLAIN RAW PLAN FOR VIEW v").target == "v"
    assert one("EXPLAIN DECORRELATED PLAN AS TEXT FOR SELECT 1").stage == "decorrelated"
    s = one("EXPLAIN WITH x AS (SELECT 1) SELECT * FROM x")  # a CTE, not options
    assert s.options == () and isinstance(s.target, exp.Select)


@pytest.mark.parametrize(
    ("text", "what", "of"),
    [
        ("SHOW TABLES", "tables", None),
        ("SHOW VIEWS", "views", None),
        ("SHOW MATERIALIZED VIEWS", "materialized views", None),
        ("SHOW INDEXES", "indexes", None),
        ("SHOW INDEXES ON t", "indexes", "t"),
        ("show index from T", "indexes", "t"),
        ("SHOW COLUMNS FROM t", "columns", "t"),
        ("SHOW ARRANGEMENTS", "arrangements", None),
        ("SHOW SUBSCRIPTIONS", "subscriptions", None),
        ("SHOW CREATE VIEW v", "create view", "v"),
        ("SHOW CREATE MATERIALIZED VIEW v", "create materialized view", "v"),
        ("SHOW CREATE TABLE t", "create table", "t"),
    ],
)
def test_show(text, what, of):
    assert one(text) == Show(what=what, of=of)


def test_advance():
    cases = {
        "ADVANCE TO 1000": ("to", "1000"),
        "ADVANCE TO TIMESTAMP '2024-01-01 00:00:00'": (
            "to",
            "CAST('2024-01-01 00:00:00' AS TIMESTAMP)",
        ),
        "ADVANCE BY 10": ("by", "10"),
        "ADVANCE BY INTERVAL '5 minutes'": (
            "by",
            "CAST('0 months 0 days 300000000 microseconds' AS INTERVAL)",
        ),
    }
    for text, (field, expected) in cases.items():
        s = one(text)
        assert isinstance(s, Advance)
        assert sql(getattr(s, field)) == expected
        assert getattr(s, "by" if field == "to" else "to") is None


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("BEGIN", Begin),
        ("begin transaction", Begin),
        ("START TRANSACTION", Begin),
        ("COMMIT", Commit),
        ("END", Commit),
        ("commit work", Commit),
        ("ROLLBACK", Rollback),
        ("ABORT", Rollback),
    ],
)
def test_transactions(text, cls):
    assert isinstance(one(text), cls)


def test_set_variable():
    assert one("SET x = 'a b'") == SetVariable(name="x", value="a b")
    assert one("SET search_path TO public") == SetVariable(name="search_path", value="public")
    assert one("SET SESSION cluster = 42") == SetVariable(name="cluster", value="42")


def test_mutually_recursive_everywhere():
    mr = (
        "WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 5)"
        " a (n int) AS (SELECT 1 UNION SELECT n + 1 FROM b),"
        " b (n int NOT NULL) AS (SELECT n FROM a WHERE n < 3)"
        " SELECT * FROM a"
    )
    s = one(mr)
    q = s.query
    assert isinstance(q, MutuallyRecursive)
    assert (q.limit, q.on_limit) == (5, "return")
    assert [b.name for b in q.bindings] == ["a", "b"]
    assert [(c.name, sql(c.type), c.not_null) for c in q.bindings[1].columns] == [
        ("n", "INT", True)
    ]
    assert same_as_sqlglot(q.bindings[0].query, "SELECT 1 UNION SELECT n + 1 FROM b")
    assert same_as_sqlglot(q.body, "SELECT * FROM a")
    plain = "WITH MUTUALLY RECURSIVE a (n int) AS (SELECT 1) SELECT * FROM a"
    assert (one(plain).query.limit, one(plain).query.on_limit) == (None, None)
    assert isinstance(one(f"CREATE VIEW v AS {plain}").query, MutuallyRecursive)
    assert isinstance(one(f"SUBSCRIBE ({plain})").target, MutuallyRecursive)
    assert isinstance(one(f"EXPLAIN {plain}").target, MutuallyRecursive)
    err = one(
        "WITH MUTUALLY RECURSIVE (ERROR AT RECURSION LIMIT 3) a (n int) AS (SELECT 1) TABLE a"
    )
    assert (err.query.limit, err.query.on_limit) == (3, "error")
    assert one(f"{plain} AS OF 7").as_of is not None


# ---- several statements, comments, positions --------------------------------------------


def test_multiple_statements_with_comments():
    text = (
        "-- leading comment; not a statement\n"
        "CREATE TABLE t (a int);  /* a ; in a comment */\n"
        "INSERT INTO t VALUES (1);\n"
        "\n"
        "   SELECT 'x;y' FROM t -- trailing\n"
        ";;\n"
        "SUBSCRIBE t"
    )
    statements = parse(text)
    assert [type(s).__name__ for s in statements] == [
        "CreateTable",
        "Insert",
        "Select",
        "Subscribe",
    ]
    assert [s.position for s in statements] == [(2, 1), (3, 1), (5, 4), (7, 1)]
    assert [s.text for s in statements] == [
        "CREATE TABLE t (a int)",
        "INSERT INTO t VALUES (1)",
        "SELECT 'x;y' FROM t",
        "SUBSCRIBE t",
    ]


def test_empty_inputs():
    assert parse("") == ()
    assert parse("  ;\n; -- nothing\n/* at all */") == ()


# ---- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "position", "hint_part"),
    [
        ("FOO bar", (1, 1), "a statement starts with"),
        ("SELECT 1;\n  frobnicate", (2, 3), "a statement starts with"),
        ("DROP TABLE", (1, 11), "expected a table name"),
        ("DROP TABLE t,", (1, 14), "a name"),
        ("DROP SCHEMA s", (1, 6), "TABLE"),
        ("SELECT 1 +", (1, 10), "'+'"),
        ("SELECT 1;\nSELECT a FROM t WHERE", (2, 17), "'WHERE'"),
        ("SELECT 1;\nSELECT (1", (2, 8), "close it"),
        ("SELECT 1)", (1, 9), "remove it"),
        ("SELECT 'abc", (1, 8), "close"),
        ("CREATE TABLE t (a)", (1, 17), "name type"),
        ("CREATE TABLE t (a int CHECK (a > 0))", (1, 17), "NOT NULL"),
        ("CREATE TABLE t", (1, 15), "parenthesized list"),
        ("CREATE VIEW v AS", (1, 17), "a query"),
        ("CREATE VIEW v AS SELECT 1 AS OF 3", (1, 27), "end of the statement"),
        ("CREATE VIEW v AS DELETE FROM t", (1, 18), "a query"),
        ("INSERT INTO t", (1, 14), "a query"),
        ("INSERT INTO t VALUES (1,", (1, 22), "close it"),
        ("SUBSCRIBE v WITH (snapshot = maybe)", (1, 19), "true or false"),
        ("SUBSCRIBE v WITH (foo)", (1, 19), "SNAPSHOT"),
        ("SUBSCRIBE v AS OF", (1, 18), "an expression"),
        ("SUBSCRIBE v UP TO 1 AS OF 2", (1, 21), "near 'AS'"),
        ("SUBSCRIBE (SELECT 1 +)", (1, 21), "'+'"),
        ("SUBSCRIBE (DROP TABLE t)", (1, 12), "a query"),
        ("FETCH", (1, 6), "a cursor name"),
        ("FETCH c WITH (limit = 3)", (1, 15), "timeout"),
        ("DECLARE c CURSOR FOR SELECT 1", (1, 22), "SUBSCRIBE"),
        ("SHOW COLUMNS", (1, 13), "SHOW COLUMNS FROM"),
        ("SHOW", (1, 5), "TABLES"),
        ("UPDATE t SET a =", (1, 17), "an expression"),
        ("UPDATE t SET a = 1 WHERE", (1, 25), "an expression"),
        ("ADVANCE TO", (1, 11), "an expression"),
        ("ADVANCE BY 1 +", (1, 14), "'+'"),
        ("EXPLAIN BOGUS SELECT 1", (1, 9), "a query"),
        (
            "WITH MUTUALLY RECURSIVE a AS (SELECT 1) SELECT * FROM a",
            (1, 27),
            "parenthesized list",
        ),
        (
            "WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT x) a (n int) AS (SELECT 1) TABLE a",
            (1, 52),
            "a whole number",
        ),
        ("SELECT 1;\n\n  SELECT * FROM t WHERE a = = 1", (3, 29), "'='"),
    ],
)
def test_error_positions(text, position, hint_part):
    with pytest.raises(ParseError) as info:
        parse(text)
    error = info.value
    assert error.position == position, str(error)
    assert hint_part in (error.hint or ""), str(error)
    assert error.statement and error.statement in text


def test_error_quotes_the_statement_not_the_input():
    with pytest.raises(ParseError) as info:
        parse("SELECT 1; DROP TABLE; SELECT 2")
    assert info.value.statement == "DROP TABLE"
    assert info.value.position == (1, 21)


# ---- robustness --------------------------------------------------------------------------

VALID = [
    "CREATE TABLE t (a int NOT NULL DEFAULT 1, b text)",
    "INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y')",
    "UPDATE t SET a = a + 1 WHERE b = 'x'",
    "DELETE FROM t WHERE a > 1",
    "CREATE MATERIALIZED VIEW v (x) AS SELECT a FROM t WHERE mz_now() < a",
    "CREATE INDEX i ON t (a)",
    "DROP VIEW IF EXISTS v CASCADE",
    "SELECT a FROM t AS OF 5",
    "SUBSCRIBE TO (SELECT * FROM t) WITH (SNAPSHOT = false) AS OF 1 UP TO 9",
    "DECLARE c CURSOR FOR SUBSCRIBE v",
    "FETCH 3 FROM c WITH (timeout = '1s')",
    "EXPLAIN PHYSICAL PLAN WITH (arity) FOR VIEW v",
    "SHOW COLUMNS FROM t",
    "ADVANCE BY INTERVAL '5 minutes'",
    "WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 5) a (n int) AS (SELECT 1) SELECT * FROM a",
    "SET x TO 'y'",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALID), st.data())
def test_truncations_and_splices_raise_only_parse_error(statement, data):
    cut = data.draw(st.integers(0, len(statement)))
    insert = data.draw(st.sampled_from(["", "(", ")", "'", '"', ";", ",", " AS OF ", "--", "/*"]))
    text = (
        statement[:cut] + insert + statement[cut:] if data.draw(st.booleans()) else statement[:cut]
    )
    try:
        parse(text)
    except (ParseError, DataError) as e:
        # DataError: a literal PostgreSQL reads and rejects (an interval's text), located too.
        assert e.position is not None
        line, column = e.position
        assert 1 <= line <= text.count("\n") + 1 and column >= 1


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "SELECT",
                "CREATE",
                "VIEW",
                "TABLE",
                "(",
                ")",
                "'",
                ",",
                ";",
                "AS",
                "OF",
                "WITH",
                "SUBSCRIBE",
                "MUTUALLY",
                "RECURSIVE",
                "x",
                "1",
                "=",
                "UP",
                "TO",
                "--",
                "\n",
                "*",
            ]
        )
    )
    | st.text(max_size=40)
)
def test_garbage_raises_only_parse_error(words):
    text = " ".join(words) if isinstance(words, list) else words
    try:
        parse(text)
    except ParseError:
        pass


def test_valid_statements_parse():
    for statement in VALID:
        (s,) = parse(statement)
        assert s.text == statement and s.position == (1, 1)


def test_doctests():
    import dsql.grammar
    from dsql.grammar import ast, diagnostics, parser, source
    from dsql.grammar import sql as sql_bridge

    for module in (dsql.grammar, ast, diagnostics, parser, source, sql_bridge):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.__name__
