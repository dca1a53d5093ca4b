"""Date and timestamp literals read as PostgreSQL reads them, into one ISO form.

The engines read date/time text each its own way (DuckDB takes ISO only and truncates a
seventh digit of a second; Spark's cast forgets `'epoch'`), so a literal
(`'20200105'::date`, `timestamptz '2020-01-05 10:00+05:30'`) is read here, at plan
time, with PostgreSQL's rules (DateStyle `ISO, MDY`, TimeZone `UTC`), and handed to
every kernel as ISO text they all read alike: `YYYY-MM-DD`, `YYYY-MM-DD HH:MM:SS.ffffff`,
a timestamptz moved to UTC.

Read: ISO dates (`2020-01-05`, also with `/` or `.`), `YYYYMMDD` and `YYMMDD`,
month/day/year (`1/5/2020`, `01.05.2020`), month names (`Jan 5 2020`, `5 January 2020`,
`2020-Jan-05`); a time after a blank or `T` (`HH:MM[:SS[.f]]`, a fraction rounded to
microseconds, `24:00:00`); a zone `Z`, `UTC`, `GMT`, `+05`, `-03`, `+05:30`, `+0530`
(a timestamp ignores it); `epoch`. Refused with a `DsqlError`: `infinity`, `-infinity`,
`now`, `today`, `tomorrow`, `yesterday`, `allballs` (dsql's dates are finite and its
views' values may not move with the clock), zone names, and any other form.

>>> read("20200105", "date"), read("Jan 5 2020", "date")
('2020-01-05', '2020-01-05')
>>> read("2020-01-05 10:00:00+05:30", "timestamptz")
'2020-01-05 04:30:00+00'
>>> read("2020-01-05 10:00:00.1234567", "timestamp")
'2020-01-05 10:00:00.123457'
"""

from __future__ import annotations

import datetime as dt
import re

from dsql.errors import DataError, UnsupportedError

#: PostgreSQL's month names and their abbreviations.
_MONTHS = {
    name: number
    for number, full in enumerate(
        (
            "january february march april may june july august september october november december"
        ).split(),
        start=1,
    )
    for name in (full, full[:3], *(("sept",) if full == "september" else ()))
}
#: Words PostgreSQL reads as values dsql does not hold, with what each means.
_SPECIAL = {
    "infinity": "an infinite date or timestamp",
    "+infinity": "an infinite date or timestamp",
    "-infinity": "an infinite date or timestamp",
    "now": "the current time",
    "today": "the current date",
    "tomorrow": "the current date",
    "yesterday": "the current date",
    "allballs": "a time of day",
}
_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2})(\.\d*)?)?")
_ZONE = re.compile(r"(?:z|utc|gmt|([+-])(\d{1,2})(?::?(\d{2}))?)")
_DAY_FORMS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})"), "ymd"),
    (re.compile(r"(\d{1,2})[-/.](\d{1,2})[-/.](\d{4})"), "mdy"),
    (re.compile(r"(\d{4})(\d{2})(\d{2})"), "ymd"),
    (re.compile(r"(\d{2})(\d{2})(\d{2})"), "yymd"),
    (re.compile(r"([a-z]+)\.?[ -](\d{1,2}),?[ -](\d{4})"), "Mdy"),
    (re.compile(r"(\d{1,2})[ -]([a-z]+)\.?,?[ -](\d{4})"), "dMy"),
    (re.compile(r"(\d{4})-([a-z]+)-(\d{1,2})"), "yMd"),
)


def read(text: str, kind: str) -> str:
    """The ISO text of `text` read as a PostgreSQL `kind` (`date`, `timestamp` or
    `timestamptz`) literal: see the module."""
    word = text.strip().lower()
    if word in _SPECIAL:
        raise UnsupportedError(
            f"'{text.strip()}' ({_SPECIAL[word]}) is not supported as a {kind}",
            hint="write the date or time itself; mz_now() is the time a read happens at",
        )
    if word == "epoch":
        word = "1970-01-01 00:00:00+00"
    day, rest = _day(word, text, kind)
    moment = dt.datetime(day.year, day.month, day.day)
    if kind == "date":  # the time, if any, is read and dropped
        _clock_and_zone(moment, rest, text, kind)
        return day.isoformat()
    moment, offset = _clock_and_zone(moment, rest, text, kind)
    if kind == "timestamptz":
        return (moment - offset).isoformat(sep=" ") + "+00"
    return moment.isoformat(sep=" ")


def _clock_and_zone(
    moment: dt.datetime, rest: str, text: str, kind: str
) -> tuple[dt.datetime, dt.timedelta]:
    """`moment` at the time of day `rest` starts with, and the offset of its zone."""
    rest = rest.removeprefix("t") if rest.startswith("t") else rest.strip()
    if rest:
        moment, rest = _clock(moment, rest, text, kind)
    offset = None
    if rest.strip():
        offset = _zone(rest.strip(), text, kind)
    return moment, offset or dt.timedelta()


def _day(word: str, text: str, kind: str) -> tuple[dt.date, str]:
    """The date at the start of `word`, and the text after it."""
    for pattern, order in _DAY_FORMS:
        found = pattern.match(word)
        # A `T` before the time follows an ISO date only (PostgreSQL refuses it elsewhere).
        follows = " t+-z" if pattern is _DAY_FORMS[0][0] and "-" in _found_text(found) else " +-z"
        if found is None or (found.end() < len(word) and word[found.end()] not in follows):
            continue
        a, b, c = found.groups()
        match order:
            case "ymd":
                y, m, d = int(a), int(b), int(c)
            case "mdy":
                y, m, d = int(c), int(a), int(b)
            case "yymd":
                y, m, d = 2000 + int(a) if int(a) < 70 else 1900 + int(a), int(b), int(c)
            case "Mdy" | "dMy" | "yMd":
                name, number, year = {"Mdy": (a, b, c), "dMy": (b, a, c), "yMd": (b, c, a)}[order]
                if name not in _MONTHS:
                    continue
                y, m, d = int(year), _MONTHS[name], int(number)
        try:
            return dt.date(y, m, d), word[found.end() :]
        except ValueError:
            raise DataError(f'date/time field value out of range: "{text}"') from None
    raise _unread(text, kind)


def _found_text(found: re.Match[str] | None) -> str:
    """The text a match covers ('' for no match)."""
    return "" if found is None else found[0]


def _clock(day: dt.datetime, rest: str, text: str, kind: str) -> tuple[dt.datetime, str]:
    """`day` at the time of day that starts `rest`, and the text after it."""
    found = _TIME.match(rest)
    if found is None:
        raise _unread(text, kind)
    hour, minute = int(found[1]), int(found[2])
    second = int(found[3] or 0)
    # PostgreSQL rounds the fraction to microseconds (rint of the double it reads).
    micros = round(float("0" + found[4]) * 1_000_000) if found[4] else 0
    if minute > 59 or second > 59 or hour > 24 or (hour == 24 and (minute or second or micros)):
        raise DataError(f'date/time field value out of range: "{text}"')
    at = day + dt.timedelta(hours=hour, minutes=minute, seconds=second, microseconds=micros)
    return at, rest[found.end() :]


def _zone(rest: str, text: str, kind: str) -> dt.timedelta:
    """The offset from UTC that `rest` names (a timestamp ignores it)."""
    found = _ZONE.fullmatch(rest)
    if found is None:
        raise _unread(text, kind)
    if found[1] is None:
        return dt.timedelta()
    hours, minutes = int(found[2]), int(found[3] or 0)
    if hours > 15 or minutes > 59:
        raise DataError(f'time zone displacement out of range: "{text}"')
    offset = dt.timedelta(hours=hours, minutes=minutes)
    return offset if found[1] == "+" else -offset


def _unread(text: str, kind: str) -> UnsupportedError:
    return UnsupportedError(
        f'{kind} text dsql does not read: "{text}"',
        hint="write it as YYYY-MM-DD[ HH:MM[:SS[.ffffff]]][+HH[:MM]]",
    )


__all__ = ["read"]
