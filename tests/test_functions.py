"""dsql's function surface (`planner/functions.py`): every listed function means the same
on every kernel, and everything else is refused at bind time with the function's name,
its position and a hint.

The cross-kernel test evaluates each listed scalar function's sample over a row of
values and a row of NULLs, once in-process (DuckDB) and once on Spark, in one query each.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pytest

import dsql
from dsql.planner.functions import FUNCTIONS

_TABLE = (
    "CREATE TABLE f (i int, j int, x float8, y float8, n numeric(10,3), s text, p text, "
    "d date, ts timestamp)"
)
_ROWS = (
    "INSERT INTO f VALUES (7, -3, 2.55, 0.5, 2.55, 'Hello World', 'l', DATE '2024-03-05', "
    "TIMESTAMP '2024-03-05 10:11:12.5'), (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
)
_SCALARS = [f for f in FUNCTIONS if f.kind == "scalar"]
#: dsql's aggregates (`expr_bind._AGGREGATES`), each over the rows of `f`.
_AGGREGATES = (
    "count(*)",
    "count(s)",
    "sum(i)",
    "sum(n)",
    "avg(x)",
    "min(s)",
    "max(ts)",
    "string_agg(s, ',')",
    "bool_and(i > 0)",
    "bool_or(i > 0)",
    "stddev(x)",
    "stddev_pop(x)",
    "variance(x)",
    "var_pop(x)",
    "count(DISTINCT j)",
)


def _evaluate(con: dsql.Connection) -> list[tuple[Any, ...]]:
    """Every scalar sample over `f`'s two rows (the NULL row last), one query; then a row
    of every aggregate over them, one more."""
    cur = con.cursor()
    cur.execute(_TABLE)
    cur.execute(_ROWS)
    cur.execute("INSERT INTO f VALUES (2, 4, -1.25, 1.5, 0.125, 'abc', 'b', NULL, NULL)")
    columns = ", ".join(f"{f.sample} AS f{k}" for k, f in enumerate(_SCALARS))
    cur.execute(f"SELECT {columns} FROM f WHERE i IS DISTINCT FROM 2 ORDER BY i NULLS LAST")
    rows = cur.fetchall()
    cur.execute(
        "SELECT " + ", ".join(f"{a} AS a{k}" for k, a in enumerate(_AGGREGATES)) + " FROM f"
    )
    return rows + cur.fetchall()


def _same(a: Any, b: Any) -> bool:
    """Equal values; floats to 12 significant digits (the engines' libm differ in the
    last bit), timestamps compared as instants when one side carries a zone."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return a is not None and b is not None and Decimal(a) == Decimal(b)
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return a.replace(tzinfo=None) == b.replace(tzinfo=None)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b and type(a) is type(b)


def test_every_listed_scalar_function_agrees_on_both_kernels(spark: Any) -> None:
    local = _evaluate(dsql.connect(kernel="local"))
    on_spark = _evaluate(dsql.connect(kernel="spark", spark=spark))
    differ = [
        (f.names[0], f.sample, [row[k] for row in local[:2]], [row[k] for row in on_spark[:2]])
        for k, f in enumerate(_SCALARS)
        if not all(_same(a[k], b[k]) for a, b in zip(local[:2], on_spark[:2], strict=True))
    ]
    differ += [
        (a, local[2][k], on_spark[2][k])
        for k, a in enumerate(_AGGREGATES)
        if not _same(local[2][k], on_spark[2][k])
    ]
    assert not differ, "\n".join(map(str, differ))


def test_every_listed_scalar_function_evaluates_in_process() -> None:
    rows = _evaluate(dsql.connect(kernel="local"))
    assert len(rows) == 3
    values = dict(zip((f.names[0] for f in _SCALARS), rows[0], strict=True))
    assert values["lower"] == "hello world"
    assert values["log"] == pytest.approx(math.log10(2.55) + math.log(2.55, 2) + math.log10(2.55))
    assert values["ceil"] == 0.0 and isinstance(values["ceil"], float)  # ceil(2.55) + ceil(-3)
    assert values["concat"] == "Hello World7l"


def _error(sql: str, setup: tuple[str, ...] = ()) -> dsql.Error:
    con = dsql.connect(kernel="local")
    cur = con.cursor()
    cur.execute("CREATE TABLE t (a int, s text, x float8)")
    for statement in setup:
        cur.execute(statement)
    with pytest.raises(dsql.Error) as caught:
        cur.execute(sql)
    cur.execute("SELECT count(*) FROM t")  # the session stays usable
    assert cur.fetchall() == [(0,)]
    return caught.value


@pytest.mark.parametrize(
    ("sql", "name", "column"),
    [
        ("SELECT getenv('HOME') FROM t", "getenv", 8),
        ("SELECT a FROM t WHERE current_setting('threads') = '1'", "current_setting", 23),
        ("SELECT json_serialize_plan('SELECT 1')", "json_serialize_plan", 8),
        ("SELECT * FROM read_text('/etc/passwd')", "read_text", 15),
        ("SELECT * FROM read_csv('/etc/passwd')", "read_csv", 15),
        ("SELECT upper(sleep_ms(10)) FROM t", "sleep_ms", 14),
        ("SELECT version()", "version", 8),
    ],
)
def test_an_engine_function_dsql_does_not_list_is_refused(sql: str, name: str, column: int) -> None:
    error = _error(sql)
    assert isinstance(error, dsql.ProgrammingError)
    assert error.message == f"function {name}() does not exist"
    assert error.position is not None and abs(error.position[1] - column) <= 1
    assert error.hint


def test_a_misspelt_function_gets_the_closest_name() -> None:
    error = _error("SELECT uper(s) FROM t")
    assert error.message == "function uper() does not exist"
    assert error.position == (1, 8)
    assert error.hint == "perhaps you meant upper()"


def test_a_call_with_the_wrong_number_of_arguments_is_refused() -> None:
    error = _error("SELECT make_date(2024, 1) FROM t")
    assert error.message == "function make_date() does not take 2 arguments"
    assert error.hint == "make_date takes 3 arguments"


def test_clock_and_session_functions_are_refused() -> None:
    for sql in ("SELECT now()", "SELECT current_timestamp", "SELECT current_user"):
        assert "is not supported" in _error(sql).message


def test_random_is_read_in_one_off_queries_and_refused_in_views() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    assert con.execute("SELECT count(*) FROM t WHERE random() < 2").fetchall() == [(2,)]
    with pytest.raises(dsql.Error, match="random"):
        con.execute("CREATE MATERIALIZED VIEW v AS SELECT a FROM t WHERE random() < 0.5")


def test_round_of_a_double_to_places_is_refused_as_in_postgresql() -> None:
    error = _error("SELECT round(x, 1) FROM t")
    assert error.message == "function round(double precision, integer) does not exist"
    assert "numeric" in (error.hint or "")


def test_a_view_refuses_an_unlisted_function_before_it_is_created() -> None:
    con = dsql.connect(kernel="local")
    cur = con.cursor()
    cur.execute("CREATE TABLE t (a int)")
    with pytest.raises(dsql.Error, match="function getenv"):
        cur.execute("CREATE MATERIALIZED VIEW v AS SELECT getenv('HOME') AS h FROM t")
    with pytest.raises(dsql.Error):
        cur.execute("SELECT * FROM v")
