"""`ln`, `log`, `log10`, `exp` and `power` of numerics against a private PostgreSQL.

Each is PostgreSQL's numeric result digit for digit, at the scale PostgreSQL picks per
row (`runtime/kernel/numeric_transcendental.py`): checked function by function on
hundreds of generated inputs, on constants as PostgreSQL prints them, on a table, in a
view under inserts and deletes (a row PostgreSQL refuses puts the view in error only
while present), and once on Spark. A result the 38-digit column cannot hold (more than
20 digits after the point, or 18 before it) is refused per row, never rounded.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from pg_oracle import create_both, differs, follow_steps

import dsql
from dsql.errors import DsqlError, UnsupportedError
from dsql.runtime.kernel import numeric_transcendental as nt


@pytest.fixture(scope="module")
def pgdb(pg: Any) -> Iterator[Any]:
    """A PostgreSQL database of this module's own."""
    conn = pg.database("numeric_exact")
    yield conn
    conn.close()


def _number(rng: random.Random) -> tuple[str, int]:
    """A positive numeric as text, and its scale: many magnitudes, some near 1."""
    scale = rng.choice([0, 1, 2, 4, 6, 10, 20])
    if rng.random() < 0.2:
        value = 1 + Decimal(rng.randint(-999, 999)).scaleb(-rng.randint(2, 8))
    else:
        value = Decimal(rng.randint(1, 10 ** rng.randint(1, 14))).scaleb(-rng.randint(0, 10))
    scale = min(scale, 26 - value.adjusted())  # 28 digits: the default context
    value = value.quantize(Decimal(1).scaleb(-scale))
    if value <= 0:
        value = Decimal(1).scaleb(-scale)
    return f"{value:f}", scale


def _cases(seed: int, count: int) -> list[tuple[str, str, int, str, int]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        op = rng.choice(["ln", "exp", "log", "power", "power"])
        (a, sa), (b, sb) = _number(rng), _number(rng)
        if op == "exp":
            a, sa = f"{Decimal(rng.randint(-4000, 4000)).scaleb(-2):f}", 2
        if op == "power":
            whole = rng.random() < 0.4
            b = str(rng.randint(-6, 9)) if whole else f"{Decimal(rng.randint(-500, 500)) / 100:f}"
            sb = 0 if whole else 2
            if Decimal(a) > 10**4:
                a = f"{Decimal(a).scaleb(-6).quantize(Decimal(1).scaleb(-sa)):f}"
        cases.append((op, a, sa, b, sb))
    return cases


def _pg_sql(op: str, a: str, sa: int, b: str, sb: int) -> str:
    x, y = f"{a}::numeric(40, {sa})", f"{b}::numeric(40, {sb})"
    return {"ln": f"ln({x})", "exp": f"exp({x})", "log": f"log({x}, {y})"}.get(
        op, f"power({x}, {y})"
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_each_value_is_postgres_text_or_refused(pgdb: Any, seed: int) -> None:
    """The kernel function's text equals what PostgreSQL prints, digit for digit, on
    every generated input whose result dsql's column holds."""
    checked = 0
    for case in _cases(seed, 250):
        mine = nt.value(*case)
        if mine == "!range":
            continue
        sql = f"SELECT ({_pg_sql(*case)})::text"
        if mine.startswith("!"):
            with pytest.raises(psycopg.Error, match=nt.MESSAGES[mine[1:]]):
                pgdb.execute(sql)
            continue
        (text,) = pgdb.execute(sql).fetchone()
        assert mine == text, f"{sql}: dsql {mine}, postgres {text}"
        checked += 1
    assert checked > 150


@pytest.mark.parametrize(
    ("sql", "text"),
    [
        ("ln(2.0)", "0.6931471805599453"),
        ("exp(1.0)", "2.7182818284590452"),
        ("ln(10::numeric)", "2.3025850929940457"),
        ("log(2.0, 64.0)", "6.0000000000000000"),
        ("power(2.0, 0.5)", "1.4142135623730950"),
        ("2.0 ^ 0.5", "1.4142135623730950"),
        ("log(100.0)", "2.0000000000000000"),
        ("log10(1000.000)", "3.0000000000000000"),
        ("log(2, 8)", "3.0000000000000000"),
        ("ln(1.0001)", "0.00009999500033330834"),
        ("exp(-5.0)", "0.006737946999085467"),
        ("exp(30.5)", "17619017951355.631"),
        ("power(0.01, 1.5)", "0.0010000000000000000"),
        ("power(100.0, 3.5)", "10000000.000000000"),
        ("power(3.0, -1)", "0.3333333333333333"),
        ("power(-2.0, -3)", "-0.1250000000000000"),
        ("power(1.5, 0.5::numeric(20, 20))", "1.22474487139158904910"),
        ("power(0.0, 0.5)", "0.0000000000000000"),
    ],
)
def test_constants_print_postgres_digits(pg: Any, sql: str, text: str) -> None:
    con = dsql.connect(kernel="local")
    assert pg.psql(f"SELECT {sql}", "-A", "-t").strip() == text
    cursor = con.execute(f"SELECT {sql}")
    (got,) = cursor.fetchone()
    assert got == Decimal(text) and f"{got:f}".startswith(text), (sql, got)
    assert cursor.description[0][1] == "decimal128(38, 20)"


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("ln(0.0)", "cannot take logarithm of zero"),
        ("ln(-1.5)", "cannot take logarithm of a negative number"),
        ("log(0.0, 2.0)", "cannot take logarithm of zero"),
        ("log(2.0, -3.0)", "cannot take logarithm of a negative number"),
        ("log10(-3.0)", "cannot take logarithm of a negative number"),
        ("log(1.0, 2.0)", "division by zero"),
        ("exp(10000.0)", "value overflows numeric format"),
        ("power(0.0, -1.5)", "zero raised to a negative power is undefined"),
        ("power(-2.0, 0.5)", "a negative number raised to a non-integer power"),
    ],
)
def test_errors_are_postgres_errors(pgdb: Any, sql: str, message: str) -> None:
    con = dsql.connect(kernel="local")
    with pytest.raises(psycopg.Error, match=message):
        pgdb.execute(f"SELECT {sql}")
    with pytest.raises(DsqlError, match=message):
        con.execute(f"SELECT {sql}").fetchall()


def test_results_the_column_cannot_hold_are_refused_per_row() -> None:
    """PostgreSQL's exp(100.0) has 44 digits, exp(-50.0) 37 after the point: refused
    where a row has one, never rounded to what the column holds."""
    con = dsql.connect(kernel="local")
    for sql in (
        "exp(100.0)",
        "exp(-50.0)",
        "power(10.0, 18.5)",
        "ln(1.0000000001)",
        "power(0.0001, 1.5)",
    ):
        with pytest.raises(DsqlError, match="supported where the result PostgreSQL gives"):
            con.execute(f"SELECT {sql}").fetchall()
    with pytest.raises(UnsupportedError, match="more than 20 digits after the point"):
        con.execute("SELECT ln(1.5::numeric(38, 21))")
    # Integers and floats keep PostgreSQL's double precision functions.
    assert con.execute("SELECT ln(2), exp(1::float8), log(100)").description[0][1] == "double"


TABLES = {"t": "k int, a numeric(20, 4), b numeric(10, 2), i int"}
ROWS = (
    "INSERT INTO t VALUES (1, 2.0000, 0.50, 3), (2, 0.0001, 1.25, -2), (3, 12345.6789, 2.00, 0),"
    " (4, 1.0000, -0.75, 7), (5, 0.9500, 3.10, 1), (6, NULL, 0.01, NULL), (7, 987654.3210, NULL, 2)"
)
QUERY = (
    "SELECT k, ln(a) AS l, log(a) AS g, log(b + 1, a) AS lb, exp(b) AS e, power(a, b) AS p,"
    " power(a, i) AS pi, a ^ 0.5 AS r FROM t"
)


def test_a_table_of_inputs_is_postgres(pgdb: Any) -> None:
    con = dsql.connect(kernel="local")
    create_both(con, pgdb, TABLES, (ROWS,))
    problem = differs(con, pgdb, QUERY)
    assert problem is None, problem


def test_a_view_follows_inserts_and_deletes_and_is_in_error_while_a_zero_is_there(
    pgdb: Any,
) -> None:
    con = dsql.connect(kernel="local")
    create_both(con, pgdb, TABLES, ())
    query = "SELECT k, max(ln(a)) AS l, sum(exp(b)) AS e, min(power(a, b)) AS p FROM t GROUP BY k"
    con.execute(f"CREATE MATERIALIZED VIEW v AS {query}")
    zero = "cannot take logarithm of zero"
    steps = (
        (ROWS, False),
        ("DELETE FROM t WHERE k = 2", False),
        ("INSERT INTO t VALUES (8, 0.0000, 1.00, 1)", True),
        ("INSERT INTO t VALUES (1, 3.5000, 0.25, 1)", True),
        ("DELETE FROM t WHERE k = 8", False),
        ("UPDATE t SET b = b + 1 WHERE k < 4", False),
    )
    follow_steps(con, pgdb, query, steps, zero)


def test_spark_computes_the_same_digits(pgdb: Any) -> None:
    con = dsql.connect(kernel="spark")
    create_both(con, pgdb, TABLES, (ROWS,))
    problem = differs(con, pgdb, QUERY)
    assert problem is None, problem
    con.execute("INSERT INTO t VALUES (9, -1.0000, 1.00, 1)")
    with pytest.raises(DsqlError, match="cannot take logarithm of a negative number"):
        con.execute("SELECT ln(a) FROM t").fetchall()


def test_error_messages_are_sql_strings_on_every_kernel() -> None:
    """Each message is written into the statement as a string literal: no quote in it."""
    assert not any("'" in message for message in nt.MESSAGES.values())


# --- scale, gcd, lcm, div, mod, round, trunc, ceil, floor ------------------------------------

INTEGRAL = {"n": "k int, a numeric(12, 3), b numeric(8, 1), i int"}
INTEGRAL_ROWS = (
    "INSERT INTO n VALUES (1, 12.500, 7.5, 18), (2, -7.125, 2.0, -1250), (3, 0.000, -0.5, 0),"
    " (4, NULL, 3.0, 7), (5, 123456789.999, 0.1, NULL), (6, 1.000, 1.0, 1)"
)
ROUNDING = (
    "SELECT k, scale(a) AS sa, scale(b) AS sb, scale(a * b) AS sp, scale(a + b) AS ss,"
    " scale(i) AS si, round(a, -2) AS r1, round(i, -2) AS r2, round(i, 1) AS r3,"
    " trunc(a, -1) AS t1, trunc(a, 1) AS t2, trunc(i, -2) AS t3, ceil(a) AS c, floor(b) AS f"
    " FROM n"
)
DIVISORS = (
    "SELECT k, gcd(a, b) AS g, lcm(a, b) AS l, gcd(a, i) AS gi, lcm(b, i) AS li,"
    " div(a, b) AS d, mod(a, b) AS m, a % b AS r FROM n WHERE b <> 0"
)


@pytest.mark.parametrize("sql", [ROUNDING, DIVISORS])
def test_integral_functions_of_numerics_are_postgres(pgdb: Any, sql: str) -> None:
    con = dsql.connect(kernel="local")
    create_both(con, pgdb, INTEGRAL, (INTEGRAL_ROWS,))
    problem = differs(con, pgdb, sql)
    assert problem is None, problem
    # The types too: numeric everywhere, scale and min_scale integers.
    for column, pg_type in zip(
        con.execute(sql).description, pgdb.execute(sql).description, strict=True
    ):
        want = {"int4": "int32", "numeric": "decimal128"}[_pg_type(pgdb, pg_type.type_code)]
        assert column[1].startswith(want), (column, pg_type)


def _pg_type(pgdb: Any, oid: int) -> str:
    return pgdb.adapters.types.get(oid).name


def test_integral_functions_follow_inserts_and_deletes(pgdb: Any) -> None:
    con = dsql.connect(kernel="local")
    create_both(con, pgdb, INTEGRAL, ())
    query = (
        "SELECT k, max(gcd(a, b)) AS g, sum(lcm(b, i)) AS l, max(scale(a * b)) AS s,"
        " sum(round(i, -1)) AS r FROM n WHERE b <> 0 GROUP BY k"
    )
    con.execute(f"CREATE MATERIALIZED VIEW v AS {query}")
    for step in (
        INTEGRAL_ROWS,
        "DELETE FROM n WHERE k = 2",
        "INSERT INTO n VALUES (2, 44.000, 0.4, 95), (7, 9.999, 0.3, -3)",
        "UPDATE n SET b = b * 2 WHERE k > 3",
        "DELETE FROM n WHERE a IS NULL",
    ):
        con.execute(step)
        pgdb.execute(step)
        problem = differs(con, pgdb, query, dsql_sql="SELECT * FROM v")
        assert problem is None, f"after {step}: {problem}"


def test_scale_refusals_and_postgres_errors() -> None:
    con = dsql.connect(kernel="local")
    with pytest.raises(UnsupportedError, match="PostgreSQL picks its scale per row"):
        con.execute("SELECT scale(1.5 / 3)")
    with pytest.raises(DsqlError, match=r"function scale\(double precision\) does not exist"):
        con.execute("SELECT scale(1.5::float8)")
    with pytest.raises(DsqlError, match=r"function gcd\(int, double precision\) does not exist"):
        con.execute("SELECT gcd(2, 3.0::float8)")
    with pytest.raises(DsqlError, match="more than 38 digits"):
        con.execute("SELECT lcm(99999999999999999999.9, 99999999999999999998.7)").fetchall()


def test_the_spark_function_runs_where_dsql_is_not_installed(tmp_path: Any) -> None:
    """Executors of a cluster may lack dsql: the pandas UDF carries its module's code."""
    import subprocess
    import sys

    from pyspark import cloudpickle

    from dsql.runtime.kernel import numeric_transcendental

    (tmp_path / "fn.pkl").write_bytes(cloudpickle.dumps(numeric_transcendental.spark_function()))
    script = (
        "import sys, pickle\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'ditable' not in repr(f)]\n"
        "try:\n    import dsql\nexcept ImportError:\n    pass\n"
        "else:\n    raise SystemExit('dsql is importable')\n"
        "import pandas as pd\n"
        f"fn = pickle.loads(open({str(tmp_path / 'fn.pkl')!r}, 'rb').read())\n"
        "s = lambda v: pd.Series([v])\n"
        "print(fn(s('ln'), s('2.0'), s(1), s('0'), s(0))[0])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0.6931471805599453"
