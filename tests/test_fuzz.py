"""Malformed input (issue 7): every statement ends in a result or a `DsqlError`.

`test_fuzz_statements` runs FUZZ_STATEMENTS (default 10,000) statements: the
vendored suites' statements mutated (truncation, swapped/dropped/duplicated tokens,
wrong types, huge literals, deep nesting, unknown functions and names, garbage bytes,
unicode, splices; `fuzz/mutate.py`), some run as written, and statements that never
converge. Any exception other than a `DsqlError` fails the test; after each error the
session answers a control query and its tables are unchanged (`fuzz/harness.py`
says how that is checked cheaply). The run is seeded, so CI sees the same statements
every time; it prints the counts by outcome class. `test_random_token_sequences` adds
hypothesis-generated statements (derandomized) of SQL words and random characters.

The time bound: sessions run with `statement_timeout = '250ms'`, which the worker checks
between rounds and loops between inner steps; the tests below check that a canceled
statement leaves the session as it was. Regression cases for each class of bug the
fuzzer found follow at the end.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator

import pytest
from fuzz.corpus import DSQL_STATEMENTS, NON_TERMINATING, suite_statements
from fuzz.harness import Harness, Outcomes
from fuzz.mutate import KEYWORDS, mutate
from hypothesis import given, settings
from hypothesis import strategies as st

import dsql
from dsql.errors import DsqlError, DsqlWarning, QueryCanceledError, TypeMismatchError
from dsql.runtime.kernel.base import Prepared
from dsql.runtime.kernel.local import LocalKernel
from dsql.timeout import parse_duration

FUZZ_STATEMENTS = int(os.environ.get("DSQL_FUZZ_STATEMENTS", "10000"))
#: A fresh session every this many statements: fuzzed DROPs and DELETEs that succeed
#: would otherwise leave later statements nothing to read.
SESSION_STATEMENTS = 1000
#: The share of statements run as written (they reach the runtime; the rest mostly fail
#: in the front end, which is cheap).
AS_WRITTEN = 0.04
SEED = 20260407


def fuzz_statements(n: int, seed: int = SEED) -> list[tuple[str, str]]:
    """`n` (mutation, statement) pairs, the same for the same seed."""
    rng = random.Random(seed)
    corpus = list(suite_statements())
    own = list(DSQL_STATEMENTS)
    out = []
    for i in range(n):
        if i % 500 == 0:
            out.append(("non-terminating", NON_TERMINATING[(i // 500) % len(NON_TERMINATING)]))
            continue
        base = rng.choice(own) if rng.random() < 0.15 else rng.choice(corpus)
        if rng.random() < AS_WRITTEN:
            out.append(("as written", base))
            continue
        kind, text = mutate(rng, base, rng.choice(corpus))
        if rng.random() < 0.2:
            kind, text = f"{kind}+", mutate(rng, text, rng.choice(corpus))[1]
        out.append((kind, text))
    return out


def test_fuzz_statements() -> None:
    outcomes = Outcomes()
    statements = fuzz_statements(FUZZ_STATEMENTS)
    harness = None
    for i, (_, text) in enumerate(statements):
        if i % SESSION_STATEMENTS == 0:
            if harness is not None:
                harness.final_check()
                harness.close()
            harness = Harness(outcomes)
        harness.run(text)
    assert harness is not None
    harness.final_check()
    print(f"\n{len(statements)} statements\n{outcomes.summary()}")
    crashes = "\n\n".join(f"{text[:300]!r}\n{tb}" for text, tb in outcomes.crashes[:5])
    assert not outcomes.crashes, f"{len(outcomes.crashes)} statements crashed:\n{crashes}"
    assert sum(outcomes.counts.values()) == len(statements) >= FUZZ_STATEMENTS


def test_fuzz_is_deterministic() -> None:
    assert fuzz_statements(300) == fuzz_statements(300)


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    h = Harness(Outcomes())
    yield h
    h.final_check()
    h.close()


_WORDS = st.sampled_from([*KEYWORDS, "t1", "a", "b", "1", "'x'", "NULL", "count(*)", "."])


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.lists(_WORDS | st.text(max_size=3), max_size=14))
def test_random_token_sequences(harness: Harness, words: list[str]) -> None:
    """Hypothesis' statements: sequences of SQL words and random characters."""
    harness.run(" ".join(words))
    assert not harness.outcomes.crashes, harness.outcomes.crashes[0][1]


# --- statement_timeout ----------------------------------------------------------------------

LOOP = "WITH RECURSIVE r(n) AS (SELECT a FROM t UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r"


def _session(timeout: str | None = "300ms") -> dsql.Connection:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT count(*) AS n, sum(a) AS s FROM t")
    if timeout is not None:  # set after the set-up, which a loaded machine may run slowly
        con.execute(f"SET statement_timeout = '{timeout}'")
    return con


@pytest.mark.parametrize(
    "statement",
    [
        LOOP,
        f"CREATE MATERIALIZED VIEW w AS {LOOP}",
        f"SUBSCRIBE ({LOOP})",
        f"INSERT INTO t {LOOP}",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
    ],
    ids=["select", "view", "subscribe", "insert", "constant"],
)
def test_timeout_cancels_and_leaves_the_session_as_it_was(statement: str) -> None:
    con = _session()
    canceling = "canceling statement due to statement timeout"
    with pytest.raises(QueryCanceledError, match=canceling) as e:
        con.execute(statement)
    assert e.value.hint and "statement_timeout" in e.value.hint
    con.execute("SET statement_timeout = 0")  # the checks below must not race the clock
    live = [n for n in con.session.worker.nodes if n is not None and not n.dropped]
    assert con.execute("SELECT a FROM t ORDER BY a").fetchall() == [(1,), (2,)]
    assert [r[0] for r in con.execute("SHOW VIEWS").fetchall()] == ["v"]
    con.execute("INSERT INTO t VALUES (10)")  # the view made before still follows its table
    assert con.execute("SELECT * FROM v").fetchall() == [(3, 13)]
    assert len([n for n in con.session.worker.nodes if n is not None and not n.dropped]) == len(
        live
    )


def test_set_statement_timeout() -> None:
    con = _session(None)
    con.execute("SET statement_timeout = '200ms'")
    with pytest.raises(QueryCanceledError):
        con.execute(LOOP)
    con.execute("SET statement_timeout TO 0")  # disabled: the round limit ends the loop
    con.execute("SET statement_timeout = DEFAULT")
    assert con.executor.statement_timeout is None
    with pytest.raises(TypeMismatchError, match='invalid value for parameter "statement_timeout"'):
        con.execute("SET statement_timeout = 'soon'")


def test_parse_duration() -> None:
    assert parse_duration("2s") == 2.0
    assert parse_duration("250ms") == 0.25
    assert parse_duration("1500") == 1.5  # PostgreSQL: a bare number is milliseconds
    assert parse_duration("1min") == 60.0
    assert parse_duration(0.5) == 0.5
    assert parse_duration("0") is None and parse_duration(None) is None
    for bad in ("-1s", "2 parsecs", "", "1e3", -1):
        with pytest.raises(TypeMismatchError):
            parse_duration(bad)


def test_round_limit_error_leaves_the_session_usable() -> None:
    con = _session(None)
    mutual = (
        "WITH MUTUALLY RECURSIVE (ERROR AT RECURSION LIMIT 5) r(n int) AS "
        "(SELECT a FROM t UNION SELECT n + 1 FROM r) SELECT count(*) FROM r"
    )
    with pytest.raises(DsqlError, match="did not converge"):
        con.execute(mutual)
    # A view over rows its query fails on is created in error (Materialize's behaviour),
    # says so at CREATE, and refuses reads while the rows are there.
    with pytest.warns(DsqlWarning, match="'w' is in error: .*did not converge"):
        con.execute(f"CREATE MATERIALIZED VIEW w AS {mutual}")
    with pytest.raises(DsqlError, match="did not converge"):
        con.execute("SELECT * FROM w")
    assert [r[0] for r in con.execute("SHOW VIEWS").fetchall()] == ["v", "w"]
    con.execute("INSERT INTO t VALUES (10)")
    assert con.execute("SELECT * FROM v").fetchall() == [(3, 13)]
    con.execute("DELETE FROM t")  # no row: the loop converges, and the view heals
    assert con.execute("SELECT * FROM w").fetchall() == [(0,)]


# --- regressions: one case per class of bug the fuzzer found -----------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT a * 9223372036854775807 FROM t",  # an engine overflow inside a round
        "SELECT a * 99999999999999999999999999999999999999 FROM t",  # past numeric's 38 digits
        "SELECT a FROM t ORDER BY 0.0001",  # a non-integer ORDER BY constant
        "SELECT (*) FROM t",  # a star as a value (it reached DuckDB, which expanded it)
        "SELECT (SELECT (*) FROM t AS x), a FROM t",
        "SELECT a FROM t LIMIT 99999999999999999999999999999999999999",  # beyond bigint
        "SELECT * FROM t AS OF 123456789012345678901234567890.123456789",  # not a time
        "SUBSCRIBE t UP TO 99999999999999999999",  # beyond the last time
        "ADVANCE TO 9999999999999",  # its ticks overflowed the runtime's times
        "ADVANCE BY INTERVAL '9999999999 days'",
        "WITH MUTUALLY RECURSIVE r(f(n) int) AS (SELECT 1) SELECT * FROM r",  # not a name
        "CREATE TABLE z (f(a) int)",
        "SELECT a + 1\ud800 FROM t",  # a lone surrogate: no engine can encode it
        # rows built in memory at once, which no engine interrupts (it ran out of memory)
        "SELECT * FROM generate_series(1, 2147483648) AS g(x)",
        "SELECT count(*) FROM t, repeat_row(99999999999)",
    ],
)
def test_malformed_statement_is_a_dsql_error(statement: str) -> None:
    con = _session(None)
    with pytest.raises(DsqlError) as error:
        con.execute(statement)
    str(error.value).encode("utf-8")  # printable, as the REPL and CLI print it
    con.execute("INSERT INTO t VALUES (10)")
    assert con.execute("SELECT * FROM v").fetchall() == [(3, 13)]


def test_list_struct_and_interval_results_are_consolidated() -> None:
    con = _session(None)  # Arrow cannot group or sort these: reads and SUBSCRIBE failed
    con.execute("INSERT INTO t VALUES (1)")
    rows = con.execute("SELECT ARRAY[a, 0] AS l, (a, 0) AS r FROM t ORDER BY 1").fetchall()
    assert [r[0] for r in rows] == [[1, 0], [1, 0], [2, 0]]
    assert con.execute("SELECT a FROM t ORDER BY 1, ARRAY[1, 2]").fetchall() == [(1,), (1,), (2,)]
    assert len(con.execute("SELECT a, INTERVAL '1 day' AS i FROM t ORDER BY 1, 2").fetchall()) == 3
    cur = con.execute("SUBSCRIBE (SELECT ARRAY[a] AS l FROM t)")
    assert sorted((r[-1], r[-2]) for r in cur.fetchall()) == [([1], 2), ([2], 1)]  # (l, diff)


def test_a_view_that_fails_on_new_data_fails_alone() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a bigint)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    con.execute("CREATE MATERIALIZED VIEW s AS SELECT max(a + 1) AS s FROM t")
    con.execute("CREATE MATERIALIZED VIEW s1 AS SELECT s + 1 AS s1 FROM s")
    con.execute("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM t")
    con.execute("INSERT INTO t VALUES (9223372036854775807)")  # a + 1 overflows
    assert con.execute("SELECT * FROM n").fetchall() == [(3,)]  # other views go on
    for view in ("s", "s1"):
        with pytest.raises(DsqlError, match="materialized view 's' is in error: bigint out of"):
            con.execute(f"SELECT * FROM {view}")
    con.execute("DELETE FROM t WHERE a > 100")  # the view heals (`dsql.heal`)
    assert con.execute("SELECT * FROM n").fetchall() == [(2,)]
    assert con.execute("SELECT * FROM s").fetchall() == [(3,)]
    assert con.execute("SELECT * FROM s1").fetchall() == [(4,)]


def test_integer_literals_wider_than_int() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a bigint)")
    con.execute("INSERT INTO t VALUES (9223372036854775807), (-2147483649)")
    assert sorted(con.execute("SELECT a FROM t").fetchall()) == [(-2147483649,), (2**63 - 1,)]


def test_the_local_kernel_interrupts_a_query_at_its_deadline() -> None:
    kernel = LocalKernel()  # one DuckDB query of seconds: no step boundary to check at
    kernel.set_deadline(time.monotonic() + 0.2)
    with pytest.raises(QueryCanceledError):  # without the deadline it returns its count
        kernel.run(Prepared("SELECT count(*) AS n FROM range(3000000000)", ()), {})
    kernel.set_deadline(None)
    assert kernel.run(Prepared("SELECT 1 AS n", ()), {}).num_rows == 1
