"""The in-process kernel's interval functions: DuckDB macros over an interval's parts.

The planner writes the interval operations DuckDB does not spell as PostgreSQL does as
calls `DSQL_IV_*(...)` (`planner/interval_spellings.py`); `install` defines each as a
DuckDB macro on a connection. DuckDB's `datepart` reads the parts: `year` and `month`
split the months toward zero, `day` is the days, and `hour`, `minute` and
`microseconds` (within the minute) the microseconds. Integer quotients truncate toward
zero, as PostgreSQL's C does (`dsql_iv_tdiv`).
"""

from __future__ import annotations

import re
from typing import Any

_DAY = 86_400_000_000
#: The largest time part Arrow's interval holds, in microseconds (it counts 64-bit
#: nanoseconds); the planner refuses literals past it alike (`planner/interval.py`).
MAX_MICROS = (2**63 - 1) // 1000

MACROS: tuple[str, ...] = (
    # The parts, and an interval of parts.
    "dsql_iv_micros(i) AS datepart('hour', i)::BIGINT * 3600000000"
    " + datepart('minute', i)::BIGINT * 60000000 + datepart('microseconds', i)",
    "dsql_iv_months(i) AS datepart('year', i)::BIGINT * 12 + datepart('month', i)",
    "dsql_iv_days(i) AS datepart('day', i)::BIGINT",
    # An interval whose time part Arrow can hold (it counts nanoseconds in 64 bits), else
    # an error: past it the value would wrap around on its way out of DuckDB.
    f"dsql_iv_checked(i) AS CASE WHEN dsql_iv_micros(i) NOT BETWEEN {-MAX_MICROS} AND"
    f" {MAX_MICROS} THEN error('interval out of range') ELSE i END",
    "dsql_iv_of(m, d, us) AS dsql_iv_checked(to_months(m::INTEGER) + to_days(d::INTEGER)"
    " + to_microseconds(us::BIGINT))",
    "dsql_iv_tdiv(a, b) AS (a - a % b) // b",
    # PostgreSQL's text (IntervalStyle postgres).
    "dsql_iv_2(n) AS CASE WHEN n < 10 THEN '0' ELSE '' END || n::VARCHAR",
    "dsql_iv_clock(sign, us) AS sign || dsql_iv_2(abs(us) // 3600000000) || ':'"
    " || dsql_iv_2(abs(us) // 60000000 % 60) || ':' || dsql_iv_2(abs(us) // 1000000 % 60)"
    " || CASE WHEN abs(us) % 1000000 = 0 THEN ''"
    " ELSE '.' || rtrim(lpad((abs(us) % 1000000)::VARCHAR, 6, '0'), '0') END",
    "dsql_iv_part(n, unit, plus) AS CASE WHEN n = 0 THEN NULL"
    " ELSE CASE WHEN plus AND n > 0 THEN '+' ELSE '' END || n::VARCHAR || ' ' || unit"
    " || CASE WHEN n = 1 THEN '' ELSE 's' END END",
    "dsql_iv_text_of(y, mo, d, us) AS concat_ws(' ', dsql_iv_part(y, 'year', false),"
    " dsql_iv_part(mo, 'mon', y < 0),"
    " dsql_iv_part(d, 'day', CASE WHEN mo <> 0 THEN mo < 0 ELSE y < 0 END),"
    " CASE WHEN us <> 0 OR (y = 0 AND mo = 0 AND d = 0) THEN dsql_iv_clock("
    "CASE WHEN us < 0 THEN '-' WHEN (CASE WHEN d <> 0 THEN d < 0 WHEN mo <> 0 THEN mo < 0"
    " ELSE y < 0 END) THEN '+' ELSE '' END, us) END)",
    "dsql_iv_text(i) AS CASE WHEN i IS NULL THEN NULL ELSE dsql_iv_text_of(datepart('year', i),"
    " datepart('month', i), datepart('day', i), dsql_iv_micros(i)) END",
    # extract's exact fields: a year is 365.25 days, a month 30.
    "dsql_iv_epoch(i) AS CAST(datepart('year', i)::HUGEINT * 31557600000000"
    " + datepart('month', i)::HUGEINT * 2592000000000 + datepart('day', i)::HUGEINT * 86400000000"
    " + dsql_iv_micros(i) AS DECIMAL(38, 0)) * 0.000001",
    "dsql_iv_second(i) AS CAST(datepart('microseconds', i) AS DECIMAL(38, 0)) * 0.000001",
    "dsql_iv_millisecond(i) AS CAST(datepart('microseconds', i) AS DECIMAL(38, 0)) * 0.001",
    "dsql_iv_microsecond(i) AS CAST(datepart('microseconds', i) AS DECIMAL(38, 0))",
    # justify_hours, justify_days, justify_interval (PostgreSQL's timestamp.c).
    f"dsql_iv_jh(m, d, t) AS CASE WHEN d > 0 AND t < 0 THEN dsql_iv_of(m, d - 1, t + {_DAY})"
    f" WHEN d < 0 AND t > 0 THEN dsql_iv_of(m, d + 1, t - {_DAY}) ELSE dsql_iv_of(m, d, t) END",
    f"dsql_iv_justify_hours(i) AS dsql_iv_jh(dsql_iv_months(i),"
    f" dsql_iv_days(i) + dsql_iv_tdiv(dsql_iv_micros(i), {_DAY}),"
    f" dsql_iv_micros(i) - dsql_iv_tdiv(dsql_iv_micros(i), {_DAY}) * {_DAY})",
    "dsql_iv_jd(m, d, t) AS CASE WHEN m > 0 AND d < 0 THEN dsql_iv_of(m - 1, d + 30, t)"
    " WHEN m < 0 AND d > 0 THEN dsql_iv_of(m + 1, d - 30, t) ELSE dsql_iv_of(m, d, t) END",
    "dsql_iv_justify_days(i) AS dsql_iv_jd(dsql_iv_months(i) + dsql_iv_tdiv(dsql_iv_days(i), 30),"
    " dsql_iv_days(i) - dsql_iv_tdiv(dsql_iv_days(i), 30) * 30, dsql_iv_micros(i))",
    "dsql_iv_ji3(m, d, t) AS CASE WHEN m > 0 AND (d < 0 OR (d = 0 AND t < 0))"
    " THEN dsql_iv_jh(m - 1, d + 30, t) WHEN m < 0 AND (d > 0 OR (d = 0 AND t > 0))"
    " THEN dsql_iv_jh(m + 1, d - 30, t) ELSE dsql_iv_jh(m, d, t) END",
    "dsql_iv_ji2(m, d, t) AS dsql_iv_ji3(m + dsql_iv_tdiv(d, 30), d - dsql_iv_tdiv(d, 30) * 30, t)",
    f"dsql_iv_justify_interval(i) AS dsql_iv_ji2(dsql_iv_months(i),"
    f" dsql_iv_days(i) + dsql_iv_tdiv(dsql_iv_micros(i), {_DAY}),"
    f" dsql_iv_micros(i) - dsql_iv_tdiv(dsql_iv_micros(i), {_DAY}) * {_DAY})",
    # make_interval(years, months, weeks, days, hours, mins, secs).
    "dsql_iv_make(y, mo, w, d, h, mi, s) AS dsql_iv_of(y::BIGINT * 12 + mo, w::BIGINT * 7 + d,"
    " h::BIGINT * 3600000000 + mi::BIGINT * 60000000"
    " + round_even(CAST(s AS DOUBLE) * 1000000, 0)::BIGINT)",
)


_SIGNATURE = re.compile(r"(\w+)\(([\w, ]*)\) AS (.*)", re.S)


def bound_once(macro: str) -> str:
    """`macro` (`name(p, ...) AS body`) with each parameter evaluated once.

    A DuckDB macro is inlined: a parameter used k times copies its argument k times, and
    macros that call macros multiply those copies (`justify_interval(a)::text` grew to
    tens of seconds of binding). The parameters are packed into one struct, bound once by
    a one-element lambda transform, and the body reads the struct's fields:

    >>> bound_once("twice(n) AS n + n")
    'twice(n) AS LIST_TRANSFORM([STRUCT_PACK(n := n)], LAMBDA __p: __p.n + __p.n)[1]'
    """
    match = _SIGNATURE.fullmatch(macro)
    assert match is not None, macro
    name, params, body = match.groups()
    names = [p.strip() for p in params.split(",") if p.strip()]
    if all(len(re.findall(rf"\b{p}\b", body)) <= 1 for p in names):
        return macro
    packed = ", ".join(f"{p} := {p}" for p in names)
    for p in names:
        body = re.sub(rf"(?<![.'\w]){p}\b(?!')", f"__p.{p}", body)
    return f"{name}({params}) AS LIST_TRANSFORM([STRUCT_PACK({packed})], LAMBDA __p: {body})[1]"


def install(con: Any) -> None:
    """Define every interval macro on DuckDB connection `con`."""
    for macro in MACROS:
        con.execute(f"CREATE MACRO {bound_once(macro)}")


__all__ = ["MACROS", "bound_once", "install"]
