"""PostgreSQL's regular-expression functions over many matches against PostgreSQL 15:
`regexp_matches` and `regexp_split_to_table` (sets of rows), `regexp_split_to_array`,
`regexp_count`, `regexp_substr`, `regexp_instr`, `regexp_like`; in one-off queries, in
materialized views and their SUBSCRIBE under inserts and deletes, and as a property:
random patterns of a small grammar on random strings (hypothesis), dsql against
PostgreSQL. dsql may refuse a call (an `UnsupportedError`); it may never answer
otherwise than PostgreSQL.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_oracle import differs, seeded
from pg_seeded import assert_same, fixtures

import dsql

TABLE = "id int, s text"
ROWS = (
    "(1, 'a1b22 c333'), (2, NULL), (3, ''), (4, 'Hello World'), (5, ',a,,b,'), "
    "(6, 'a' || chr(10) || 'b1'), (7, 'foo bar baz'), (8, 'aab')"
)

QUERIES = [
    "SELECT id, regexp_matches(s, '[0-9]+', 'g') FROM t",
    "SELECT id, regexp_matches(s, '([a-z])([0-9]+)', 'g') FROM t",
    "SELECT id, regexp_matches(s, '([a-z])([0-9]+)') FROM t",
    "SELECT id, regexp_matches(s, 'O', 'gi'), regexp_matches(s, 'O', 'gi') FROM t",
    "SELECT id, regexp_matches(s, '\\y(\\w)(\\w*)\\y', 'g') FROM t",
    "SELECT id, regexp_matches(s, '(?n)^b', 'g') FROM t",
    "SELECT id, regexp_matches(s, 'a*', 'g') FROM t",
    "SELECT id, regexp_matches(s, 'x*') FROM t",
    "SELECT id, regexp_matches(s, NULL) FROM t",
    "SELECT id, m[1], m[2] FROM t, regexp_matches(s, '(\\w)(\\d)', 'g') AS m",
    "SELECT id, m FROM t CROSS JOIN LATERAL regexp_matches(s, '[ab]', 'g') AS m(m)",
    "SELECT count(*), min(id) FROM t, regexp_matches(s, '[[:alpha:]]', 'g') AS m",
    "SELECT regexp_matches('foobarbequebaz', '(bar)(beque)')",
    "SELECT regexp_matches('foobarbequebazilbarfbonk', '(b[^b]+)(b[^b]+)', 'g')",
    "SELECT id, regexp_split_to_table(s, ',') FROM t",
    "SELECT id, regexp_split_to_table(s, '\\s+') FROM t",
    "SELECT id, p, n FROM t, regexp_split_to_table(s, '[ab]') WITH ORDINALITY AS x(p, n)",
    "SELECT regexp_split_to_table('the quick brown fox', '\\s+')",
    "SELECT id, regexp_split_to_array(s, ','), regexp_split_to_array(s, 'B', 'i') FROM t",
    "SELECT id, regexp_split_to_array(s, '[[:digit:]]+'), regexp_split_to_array(s, NULL) FROM t",
    "SELECT id, regexp_count(s, '[0-9]'), regexp_count(s, 'a*'), regexp_count(s, 'O', 1, 'i')"
    " FROM t",
    "SELECT id, regexp_count(s, '\\w+'), regexp_count(s, '(?n)^.'), regexp_count(s, NULL) FROM t",
    "SELECT id, regexp_substr(s, '[0-9]+'), regexp_substr(s, '[0-9]+', 1, 2),"
    " regexp_substr(s, '[0-9]+', 1, 4) FROM t",
    "SELECT id, regexp_substr(s, '([a-z])([0-9]+)', 1, 2, '', 2),"
    " regexp_substr(s, '(o)', 1, 1, 'i', 1), regexp_substr(s, '(o)', 1, 1, '', 2) FROM t",
    "SELECT id, regexp_instr(s, '[0-9]+'), regexp_instr(s, '[0-9]+', 1, 2),"
    " regexp_instr(s, '[0-9]+', 1, 2, 1), regexp_instr(s, 'x') FROM t",
    "SELECT id, regexp_instr(s, 'O', 1, 1, 0, 'i'), regexp_instr(s, '(?n)^b'),"
    " regexp_instr(s, 'a*', 1, 1, 1), regexp_instr(s, '\\yb', 1, 2) FROM t",
    "SELECT id, regexp_like(s, 'a.b'), regexp_like(s, 'A.B', 'i'), regexp_like(s, 'a.b', 'n'),"
    " regexp_like(s, '^b', 'n') FROM t",
    "SELECT id, regexp_substr(s, 'b', 1, 1, '', 1), regexp_substr(s, 'b', 1, 1, '', 2),"
    " regexp_instr(s, 'b', 1, 1, 0, '', 1), regexp_instr(s, '(b)', 1, 1, 0, '', 2) FROM t",
    "SELECT s LIKE 'a\\_b', 'a_b' LIKE 'a\\_b', 'a\\b' LIKE 'a\\\\b', 'ab' LIKE '\\ab',"
    " 'a!b' LIKE 'a!!b' ESCAPE '!', 'a\\b' LIKE 'a\\b' ESCAPE '', 'A_' ILIKE 'a#_' ESCAPE '#'"
    " FROM t",
    "SELECT regexp_substr('abc', 'b', 1, 0)",
    "SELECT regexp_count('abc', 'b', 0)",
    "SELECT regexp_instr('abc', 'b', 1, 1, 2)",
    "SELECT regexp_like('abc', 'b', 'g')",
    "SELECT regexp_split_to_array('abc', 'b', 'g')",
    "SELECT regexp_matches('abc', 'b', 'z')",
]


pgc, con = fixtures("regex_funcs", {"t": TABLE}, {"t": ROWS})


@pytest.mark.parametrize("sql", QUERIES)
def test_regex_functions_answer_as_postgres(con: dsql.Connection, pgc: Any, sql: str) -> None:
    assert_same(con, pgc, sql)


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELECT regexp_matches(s, s) FROM t", "needs a literal pattern"),
        ("SELECT regexp_count(s, s || 'x') FROM t", "needs a literal pattern"),
        ("SELECT regexp_split_to_table(s, 'x*') FROM t", "may match empty text"),
        ("SELECT regexp_split_to_array(s, '') FROM t", "may match empty text"),
        ("SELECT regexp_count(s, 'a', 2) FROM t", "start position other than 1"),
        ("SELECT regexp_instr(s, '(a)', 1, 1, 0, '', 1) FROM t", "subexpression"),
        ("SELECT regexp_instr(s, 'a*', 1, 2) FROM t", "may match empty text"),
        ("SELECT regexp_substr(s, 'a', 1, id) FROM t", 'literal "n"'),
        ("SELECT regexp_matches(s, '(a|ab)c', 'g') FROM t", "longest match"),
        ("SELECT regexp_count(s, '(ab)+') FROM t", "longest match"),
        ("SELECT regexp_like(s, s, 'i') FROM t", "needs a literal pattern"),
        ("SELECT s ~ s FROM t", "needs a literal pattern"),
        ("SELECT s !~* (s || 'a') FROM t", "needs a literal pattern"),
        ("SELECT regexp_replace(s, s, 'z') FROM t", "needs a literal pattern"),
        ("SELECT regexp_split_to_table(s, s) FROM t", "needs a literal pattern"),
        ("SELECT s LIKE s ESCAPE '!' FROM t", "needs a literal pattern"),
        ("SELECT s LIKE 'a\\' FROM t", "ends with its escape character"),
        ("SELECT s LIKE 'a!' ESCAPE '!' FROM t", "ends with its escape character"),
    ],
)
def test_what_cannot_be_exact_is_refused(con: dsql.Connection, sql: str, words: str) -> None:
    with pytest.raises(dsql.NotSupportedError, match=words):
        con.execute(sql).fetchall()


VIEWS = {
    "matches": "SELECT id, regexp_matches(s, '([a-z])([0-9]*)', 'g') AS m FROM t",
    "pieces": "SELECT p, count(*) AS c FROM t, regexp_split_to_table(s, '[ ,]') AS p GROUP BY p",
    "scalars": "SELECT id, regexp_count(s, '[0-9]') AS c, regexp_substr(s, '[a-z]+', 1, 2) AS w,"
    " regexp_instr(s, '[0-9]') AS i, regexp_split_to_array(s, ' ') AS a FROM t"
    " WHERE regexp_like(s, 'A', 'i')",
}

_WORDS = ["'foo 12'", "'ab,a'", "NULL", "''", "'a7 b8 c'", "'a' || chr(10) || 'b'", "'x9y9'"]


def _bag(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(tuple(v) if isinstance(v, list) else v for v in r) for r in rows)


@pytest.mark.parametrize("seed", range(2))
def test_views_and_subscribe_equal_postgres_under_random_histories(pg: Any, seed: int) -> None:
    """Each view, and the updates its SUBSCRIBE streams, hold what PostgreSQL computes
    for its query after each insert or delete (a set-returning row retracted with its
    input row)."""
    rng = random.Random(seed)
    pgc = seeded(pg.database(f"regex_funcs_views_{seed}"), {"t": TABLE}, {})
    con = seeded(dsql.connect(kernel="local"), {"t": TABLE}, {})
    for name, sql in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    updates = con.subscribe("matches")
    seen: Counter[tuple[Any, ...]] = Counter()
    ids: list[int] = []
    for step in range(12):
        if ids and rng.random() < 0.4:
            statement = f"DELETE FROM t WHERE id = {ids.pop(rng.randrange(len(ids)))}"
        else:
            ids.append(step)
            statement = f"INSERT INTO t VALUES ({step}, {rng.choice(_WORDS)})"
        for target in (con, pgc):
            target.execute(statement)
        for name, sql in VIEWS.items():
            difference = differs(con, pgc, sql, f"SELECT * FROM {name}")
            assert difference is None, f"seed {seed}, view {name}\n{difference}"
        for _, diff, *values in updates.rows():
            seen[tuple(tuple(v) if isinstance(v, list) else v for v in values)] += diff
        want = _bag(pgc.execute(VIEWS["matches"]).fetchall())
        assert +seen == want and all(n >= 0 for n in seen.values()), (statement, seen, want)
    pgc.close()


# --- the differential property --------------------------------------------------------------

_ATOMS = ["a", "b", "1", " ", ".", "[ab]", "[^a]", "\\d", "\\w", "\\s", "[[:alpha:]]", "\\W"]
_QUANTIFIERS = ["", "", "", "*", "+", "?", "{1,2}", "*?", "+?"]
_PIECES = st.one_of(
    st.builds(lambda a, q: a + q, st.sampled_from(_ATOMS), st.sampled_from(_QUANTIFIERS)),
    st.sampled_from(["^", "$", "\\y", "(a|b1)", "(\\d+)", "([ab])", "(?:ab)"]),
)
_PATTERNS = st.lists(_PIECES, min_size=1, max_size=4).map("".join)
_STRINGS = st.lists(st.text(alphabet="ab1 _\nA,", max_size=8), min_size=1, max_size=5)

_CALLS = [
    "regexp_matches(s, {p}, 'g')",
    "regexp_matches(s, {p})",
    "regexp_matches(s, {p}, 'gi')",
    "regexp_split_to_table(s, {p})",
    "regexp_split_to_array(s, {p})",
    "regexp_count(s, {p})",
    "regexp_substr(s, {p}, 1, 2)",
    "regexp_substr(s, {p}, 1, 1, 'i', 1)",
    "regexp_instr(s, {p})",
    "regexp_instr(s, {p}, 1, 2, 1)",
    "regexp_like(s, {p}, 'n')",
]


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@pytest.fixture(scope="module")
def strings_pg(pg: Any) -> Any:
    conn = seeded(pg.database("regex_funcs_property"), {"strings": TABLE}, {})
    yield conn
    conn.close()


@pytest.mark.parametrize("call", _CALLS)
def test_random_patterns_and_strings_answer_as_postgres(strings_pg: Any, call: str) -> None:
    con = seeded(dsql.connect(kernel="local"), {"strings": TABLE}, {})
    outcomes: Counter[str] = Counter()

    @settings(
        max_examples=40,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(pattern=_PATTERNS, strings=_STRINGS)
    def check(pattern: str, strings: list[str]) -> None:
        rows = ", ".join(f"({i}, {_sql_text(s)})" for i, s in enumerate(strings))
        for target in (con, strings_pg):
            target.execute("DELETE FROM strings")
            target.execute(f"INSERT INTO strings VALUES {rows}")
        sql = f"SELECT id, {call.format(p=_sql_text(pattern))} FROM strings"
        try:
            con.execute(sql).fetchall()
        except dsql.NotSupportedError:
            outcomes["refused"] += 1
            return
        except dsql.Error:
            pass  # an error PostgreSQL must raise too: `differs` checks
        difference = differs(con, strings_pg, sql)
        assert difference is None, f"pattern {pattern!r} on {strings!r}: {sql}\n{difference}"
        outcomes["answered"] += 1

    check()
    assert outcomes["answered"] > outcomes["refused"], outcomes


def test_each_function_answers_alike_on_spark(spark: Any, pg: Any) -> None:
    """A case of each function (and of the text functions' edges), and a view of the
    set-returning ones under a short history, on Spark."""
    pgc = seeded(pg.database("regex_funcs_spark"), {"t": TABLE}, {"t": ROWS})
    con = seeded(dsql.connect(kernel="spark", spark=spark), {"t": TABLE}, {"t": ROWS})
    queries = [QUERIES[i] for i in (1, 2, 6, 9, 15, 16, 18, 20, 23, 24, 25, 26)] + [
        "SELECT id, substring(s, id - 4, 3), split_part(s, ',', id - 9), split_part(s, '', 1),"
        " lpad(s, id, ''), overlay(s placing 'XY' from 2 for 1), to_hex(id - 6) FROM t",
        "SELECT id, s ~ ('\\y' || 'b') FROM t",
        "SELECT id, s LIKE 'a\\_b%', s LIKE s, s NOT ILIKE '%!%%' ESCAPE '!', 'ab' LIKE '\\ab'"
        " FROM t",
    ]
    failures = [
        f"{sql}\n{difference}"
        for sql in queries
        if (difference := differs(con, pgc, sql)) is not None
    ]
    for name in ("matches", "pieces"):
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS[name]}")
    for step in ["", "DELETE FROM t WHERE id = 1", "INSERT INTO t VALUES (9, 'q5 r,s')"]:
        for target in (con, pgc) if step else ():
            target.execute(step)
        for name in ("matches", "pieces"):
            if difference := differs(con, pgc, VIEWS[name], f"SELECT * FROM {name}"):
                failures.append(f"view {name} after {step!r}\n{difference}")
    assert not failures, "\n\n".join(failures)
    pgc.close()


# --- the text functions beside them ---------------------------------------------------------

_SIBLINGS = [
    "s LIKE p",
    "s ILIKE p",
    "s NOT LIKE p",
    "s LIKE '%!%%' ESCAPE '!' OR s ILIKE '%\\_%' OR s LIKE '%\\\\%' OR s LIKE '%\\a%'",
    "s NOT ILIKE p || '%'",
    "s SIMILAR TO '(a|!)%_'",
    "substring(s from '[a-z]+')",
    "substring(s, n)",
    "substring(s, n, 2)",
    "substring(s from 2 for n)",
    "split_part(s, ',', n)",
    "split_part(s, p, 2)",
    "split_part(s, p, n)",
    "string_to_array(s, p)",
    "string_to_array(s, ',', p)",
    "translate(s, p, 'xy')",
    "overlay(s placing p from n)",
    "overlay(s placing 'XY' from 2 for n)",
    "position(p in s)",
    "strpos(s, p)",
    "starts_with(s, p)",
    "concat_ws(p, s, n, s)",
    "left(s, n)",
    "right(s, n)",
    "lpad(s, n, p)",
    "rpad(s, n, p)",
    "lpad(s, n + 6, 'xyz')",
    "initcap(translate(s, 'é', 'e'))",  # é: the oracle runs in the C locale
    "repeat(s, n)",
    "ascii(s)",
    "chr(n + 64)",
    "md5(s)",
    "to_hex(n)",
    "to_hex(n * 100000 - 7)",
    "to_hex(n::bigint - 10)",
    "btrim(s, p)",
    "replace(s, p, 'Z')",
]
_TEXTS = st.text(alphabet="ab_%!\\ ,.A1é", max_size=7)


@pytest.fixture(scope="module")
def siblings_pg(pg: Any) -> Any:
    conn = seeded(pg.database("regex_funcs_siblings"), {"w": "id int, s text, p text, n int"}, {})
    yield conn
    conn.close()


@pytest.mark.parametrize("expression", _SIBLINGS)
def test_text_functions_answer_as_postgres_on_random_inputs(
    siblings_pg: Any, expression: str
) -> None:
    """Each function on random texts, patterns, delimiters and counts (empty, negative,
    zero, NULL): PostgreSQL's answer, or an error where PostgreSQL raises one."""
    con = seeded(dsql.connect(kernel="local"), {"w": "id int, s text, p text, n int"}, {})
    rows = st.lists(
        st.tuples(st.none() | _TEXTS, st.none() | _TEXTS, st.none() | st.integers(-4, 8)),
        min_size=1,
        max_size=6,
    )

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(rows=rows)
    def check(rows: list[tuple[str | None, str | None, int | None]]) -> None:
        if "LIKE" in expression:  # a pattern ending with its escape: refused (README)
            rows = [(s, p + "x" if p and p.endswith("\\") else p, n) for s, p, n in rows]

        def value(v: str | int | None) -> str:
            return "NULL" if v is None else str(v) if isinstance(v, int) else _sql_text(v)

        values = ", ".join(
            f"({i}, {value(s)}, {value(p)}, {value(n)})" for i, (s, p, n) in enumerate(rows)
        )
        for target in (con, siblings_pg):
            target.execute("DELETE FROM w")
            target.execute(f"INSERT INTO w VALUES {values}")
        sql = f"SELECT id, {expression} FROM w"
        difference = differs(con, siblings_pg, sql)
        assert difference is None, f"{sql} on {rows!r}\n{difference}"

    check()


def test_a_query_parameter_is_a_literal_pattern(con: dsql.Connection, pgc: Any) -> None:
    """A pattern passed as a parameter is read with PostgreSQL's syntax, as a literal."""
    for sql, pattern in [
        ("SELECT id, regexp_matches(s, ?, 'g') FROM t", "\\y\\w"),
        ("SELECT id, s ~ ? FROM t", "[[:digit:]]{2}"),
        ("SELECT id, regexp_replace(s, ?, '#', 'g'), regexp_count(s, ?) FROM t", "\\d"),
    ]:
        got = con.execute(sql, (pattern,) * sql.count("?")).fetchall()
        literal = sql.replace("?", "'" + pattern + "'")
        assert _bag(got) == _bag(pgc.execute(literal).fetchall()), sql


def test_format_and_quoting_are_refused_by_name(con: dsql.Connection) -> None:
    for call in ("format('%s', s)", "quote_literal(s)", "quote_ident(s)"):
        with pytest.raises(dsql.ProgrammingError, match="is not supported") as info:
            con.execute(f"SELECT {call} FROM t")
        assert info.value.hint


def test_a_concatenation_of_literals_is_a_literal_pattern(con: dsql.Connection, pgc: Any) -> None:
    assert_same(
        con,
        pgc,
        "SELECT id, s ~ ('\\y' || 'b'), regexp_count(s, '[0-9]' || '+'),"
        " regexp_replace(s, '\\' || 'd', '#', 'g') FROM t",
    )
