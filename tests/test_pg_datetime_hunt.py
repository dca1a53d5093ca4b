"""Date and time literals, their casts and `extract`, against PostgreSQL.

A generator writes date/time literals in the forms PostgreSQL reads (ISO, compact,
month/day/year, month names, times with fractions past microseconds, zones as `Z`,
`-03`, `+05:30`, `+0530`), some out of range, some special words, as typed literals,
`::` casts and `CAST`, cast on to another type or to text, or under `extract`. Each
expression's text must be PostgreSQL's, and where PostgreSQL refuses it dsql must
refuse it too; the special words dsql does not hold (`infinity`, `today`) are refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsql

MONTHS = ("Jan", "February", "mar", "Apr", "May", "June", "Jul", "aug", "Sep", "Oct", "Nov", "Dec")
#: Words PostgreSQL reads as dates and dsql refuses (no infinite or clock-bound values).
REFUSED = ("infinity", "-infinity", "today", "now", "tomorrow", "yesterday")


@st.composite
def _day(draw: Any) -> str:
    """A date in one of PostgreSQL's forms (DateStyle ISO, MDY), now and then invalid."""
    y = draw(st.integers(1900, 2100))
    m = draw(st.integers(1, 12))
    d = draw(st.integers(1, 31))  # past the month's end now and then: an error
    form = draw(st.sampled_from(("iso", "slash", "compact", "short", "mdy", "dots", "names")))
    match form:
        case "iso":
            return f"{y:04d}-{m:0{draw(st.sampled_from((1, 2)))}d}-{d:02d}"
        case "slash":
            return f"{y:04d}/{m:02d}/{d:02d}"
        case "compact":
            return f"{y:04d}{m:02d}{d:02d}"
        case "short":
            return f"{y % 100:02d}{m:02d}{d:02d}"
        case "mdy":
            return f"{m}/{d}/{y:04d}"
        case "dots":
            return f"{m:02d}.{d:02d}.{y:04d}"
    name = MONTHS[m - 1]
    return draw(st.sampled_from((f"{name} {d} {y}", f"{d} {name} {y}", f"{y}-{name}-{d:02d}")))


@st.composite
def _moment(draw: Any) -> str:
    """A date, perhaps with a time of day (a fraction of up to 9 digits) and a zone."""
    text = draw(_day())
    iso = text[:4].isdigit() and text[4:5] == "-" and text[5:6].isdigit()
    if draw(st.booleans()):
        h, mi, s = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
        sep = draw(st.sampled_from((" ", "T") if iso else (" ",)))
        clock = f"{h:02d}:{mi:02d}"
        if draw(st.booleans()):
            clock += f":{s:02d}"
            digits = draw(st.integers(0, 9))
            if digits:
                clock += "." + "".join(str(draw(st.integers(0, 9))) for _ in range(digits))
        zone = draw(st.sampled_from(("", "", "Z", "+00", "-03", "+05:30", "+0530", " UTC", "-11")))
        text += sep + clock + zone
    return text


@st.composite
def _expression(draw: Any) -> str:
    """A date/time literal in one of its spellings, perhaps cast on or extracted from."""
    kind = draw(st.sampled_from(("date", "timestamp", "timestamptz")))
    text = draw(_moment()) if draw(st.integers(0, 20)) else draw(st.sampled_from(("epoch",)))
    literal = draw(
        st.sampled_from((f"{kind} '{text}'", f"'{text}'::{kind}", f"CAST('{text}' AS {kind})"))
    )
    shape = draw(st.sampled_from(("text", "date", "extract", "date_part", "timestamp")))
    match shape:
        case "date" | "timestamp":
            return f"({literal}::{shape})::text"
        case "extract" | "date_part":
            fields = ["year", "month", "day", "dow", "doy", "quarter", "epoch"]
            if kind != "date":
                fields += ["hour", "minute", "second", "millisecond", "microseconds"]
            field = draw(st.sampled_from(fields))
            call = f"extract({field} FROM {literal})"
            if shape == "date_part":
                call = f"date_part('{field}', {literal})"
            return f"({call})::text"
    return f"({literal})::text"


@pytest.fixture(scope="module")
def pgdb(pg: Any) -> Iterator[Any]:
    """A PostgreSQL database of this module's own (TimeZone UTC, DateStyle ISO, MDY)."""
    conn = pg.database("datetime_hunt")
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute("SET DateStyle = 'ISO, MDY'")
    yield conn
    conn.close()


def _pg_answer(pgdb: Any, sql: str) -> str | None:
    """PostgreSQL's answer to `sql` as text, or None where it refuses it."""
    try:
        return pgdb.execute(sql).fetchone()[0]
    except Exception:  # noqa: BLE001 - PostgreSQL refuses it: dsql must refuse too
        pgdb.rollback()
        return None


def _agrees(con: Any, pgdb: Any, expression: str) -> None:
    sql = f"SELECT {expression}"
    want = _pg_answer(pgdb, sql)
    if want is None:
        with pytest.raises(dsql.Error):
            con.execute(sql).fetchall()
        return
    assert con.execute(sql).fetchall() == [(want,)], sql


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_expression())
def test_datetime_literals_agree_with_postgres(pgdb: Any, expression: str) -> None:
    _agrees(dsql.connect(kernel="local"), pgdb, expression)


@pytest.mark.parametrize("word", REFUSED)
@pytest.mark.parametrize("kind", ["date", "timestamp", "timestamptz"])
def test_special_words_are_refused(word: str, kind: str) -> None:
    with pytest.raises(dsql.NotSupportedError, match="not supported"):
        dsql.connect(kernel="local").execute(f"SELECT '{word}'::{kind}")


#: Expressions the Spark kernel answers over a table's row, each as PostgreSQL does.
SPARK_CASES = (
    "'20200105'::date",
    "timestamp '2020-01-05 10:00'::date",
    "'2020-01-05 10:00:00+05:30'::timestamptz",
    "'2020-01-05 10:00:00-03'::timestamptz",
    "'2020-01-05 10:00:00+0530'::timestamptz",
    "'2020-01-05T10:00:00Z'::timestamptz",
    "'epoch'::timestamp",
    "'Jan 5 2020'::date",
    "'2020-01-05 10:00:00.1234567'::timestamp",
    "extract(second FROM t)",
    "extract(millisecond FROM t)",
    "extract(epoch FROM t)",
    "date_part('second', t)",
    "extract(epoch FROM d)",
)


def test_datetime_literals_agree_on_spark(spark: Any, pgdb: Any) -> None:
    columns = ", ".join(f"({e})::text AS c{i}" for i, e in enumerate(SPARK_CASES))
    table = "CREATE TABLE w (t timestamp, d date)"
    row = "INSERT INTO w VALUES ('2020-01-05 10:00:01.25', '2020-01-05')"
    con = dsql.connect(kernel="spark")
    try:
        for target in (con, pgdb):
            target.execute(table)
            target.execute(row)
        sql = f"SELECT {columns} FROM w"
        got, want = con.execute(sql).fetchall(), pgdb.execute(sql).fetchall()
        wrong = [(e, g, w) for e, g, w in zip(SPARK_CASES, got[0], want[0], strict=True) if g != w]
        assert not wrong, wrong
    finally:
        pgdb.execute("DROP TABLE IF EXISTS w")
        con.close()
