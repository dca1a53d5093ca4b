"""PostgreSQL's interval: months, days and microseconds kept apart, read from its text.

An interval is three integers, `(months, days, micros)`, never folded into one
another by arithmetic (`'1 month'` added to a timestamp moves the calendar month,
`'30 days'` thirty days), though comparison counts a month as 30 days and a day as 24
hours. dsql stores one as Arrow's `month_day_nano_interval` (nanoseconds a multiple of
1000), which DuckDB reads as its own INTERVAL of the same three parts.

`parse` reads PostgreSQL's interval input (`IntervalStyle` postgres, and the
SQL-standard and ISO 8601 forms) the way `DecodeInterval`/`DecodeISO8601Interval` in
PostgreSQL's datetime.c do: number-unit pairs, fractions spilling into the smaller
parts (a month is 30 days, a day 24 hours), `H:M:S` time fields, `Y-M` year-month
fields, `@` and `ago`, and a qualifier (`INTERVAL '30' MINUTE`, `YEAR TO MONTH`) that
names a bare number's unit and drops the fields below its end. `text` writes one as
PostgreSQL prints it.

>>> parse("1 day 02:03:04"), parse("-1 year +2 mons"), parse("P1Y2M3DT4H5M6S")
((0, 1, 7384000000), (-10, 0, 0), (14, 3, 14706000000))
>>> parse("30", "minute"), parse("1-2", "year", "month"), parse("1.25 mon")
((0, 0, 1800000000), (14, 0, 0), (1, 7, 43200000000))
>>> text(14, 1, 7_200_000_000), text(0, 0, 5_400_500_000), text(-1, 2, 1_000_000)
('1 year 2 mons 1 day 02:00:00', '01:30:00.5', '-1 mons +2 days 00:00:01')
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from dsql.errors import DataError

Interval = tuple[int, int, int]

USEC_PER_SEC = 1_000_000
USEC_PER_DAY = 86_400 * USEC_PER_SEC
DAYS_PER_MONTH = 30
#: The largest time part dsql stores: Arrow's interval counts it in 64-bit nanoseconds
#: (PostgreSQL's, in microseconds, reaches 1000 times further).
MAX_MICROS = (2**63 - 1) // 1000

_TOKEN_LENGTH = 10
#: Units of the postgres style, by every spelling PostgreSQL accepts (it reads only a
#: word's first `_TOKEN_LENGTH` letters: `millenniums` is `millennium`), as (field, part,
#: scale): the field a unit sets, and the months, days or microseconds per unit.
_UNITS: dict[str, tuple[str, str, int]] = {}
for _names, _unit in (
    (
        ("microsecond", "microseconds", "usec", "usecs", "usecond", "useconds", "us"),
        ("microsecond", "us", 1),
    ),
    (
        ("millisecond", "milliseconds", "msec", "msecs", "msecond", "mseconds", "ms"),
        ("millisecond", "us", 1000),
    ),
    (("second", "seconds", "sec", "secs", "s"), ("second", "us", USEC_PER_SEC)),
    (("minute", "minutes", "min", "mins", "m"), ("minute", "us", 60 * USEC_PER_SEC)),
    (("hour", "hours", "hr", "hrs", "h"), ("hour", "us", 3600 * USEC_PER_SEC)),
    (("day", "days", "d"), ("day", "day", 1)),
    (("week", "weeks", "w"), ("week", "day", 7)),
    (("month", "months", "mon", "mons"), ("month", "month", 1)),
    (("year", "years", "yr", "yrs", "y"), ("year", "month", 12)),
    (("decade", "decades", "dec", "decs"), ("decade", "month", 120)),
    (("century", "centuries", "cent", "c"), ("century", "month", 1200)),
    (("millennium", "millennia", "mil", "mils"), ("millennium", "month", 12000)),
):
    for _name in _names:
        _UNITS[_name[:_TOKEN_LENGTH]] = _unit
#: The fields a time field (`H:M:S.f`) sets, and a number of seconds with a fraction.
_TIME_FIELDS = frozenset({"hour", "minute", "second", "millisecond", "microsecond"})
_SECOND_FIELDS = frozenset({"second", "millisecond", "microsecond"})

#: A qualifier's field: the unit a bare number counts in.
QUALIFIER_FIELDS = ("year", "month", "day", "hour", "minute", "second")

_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)"
_TOKEN = re.compile(
    rf"(?P<time>[+-]?\d+:\d+(?:\.\d*)?(?::\d+(?:\.\d*)?)?)"
    rf"|(?P<ym>[+-]?\d+-\d+)"
    rf"|(?P<num>{_NUMBER})\s*(?P<unit>[a-z]+)?"
    rf"|(?P<word>[a-z]+)"
)


def invalid(value: str) -> DataError:
    """PostgreSQL's error for text that is no interval."""
    return DataError(
        f'invalid input syntax for type interval: "{value}"',
        hint="write e.g. '1 day 02:03:04', '-1 year +2 mons' or 'P1Y2M3DT4H5M6S'",
    )


def parse(
    value: str, first: str | None = None, last: str | None = None, precision: int | None = None
) -> Interval:
    """The interval `value` spells, under a qualifier `first [TO last]` if given
    (`first`, `last`: fields of `QUALIFIER_FIELDS`) and with its seconds rounded to
    `precision` digits (half away from zero) if given; a DataError if it spells none."""
    end = last or first
    try:
        text = value.strip().lower()
        if text.startswith("p"):
            parts = _iso8601(text[1:])
        else:
            parts = _postgres(text, first, end)
    except (InvalidOperation, ValueError, KeyError, OverflowError):
        raise invalid(value) from None
    months, days, micros = parts
    if not (-(2**31) <= months < 2**31 and -(2**31) <= days < 2**31):
        raise DataError("interval out of range")
    if abs(micros) > MAX_MICROS:
        raise DataError(
            "interval out of range",
            hint="dsql keeps an interval's time part within ±2562047 hours (Arrow "
            "counts it in nanoseconds); give longer spans in days",
        )
    months, days, micros = _truncated(parts, end)
    if precision is not None and 0 <= precision < 6:
        unit = 10 ** (6 - precision)
        rounded = (abs(micros) + unit // 2) // unit * unit
        micros = rounded if micros >= 0 else -rounded
    return months, days, micros


def _spill(parts: list[Decimal], amount: Decimal, unit: tuple[str, int]) -> None:
    """Add `amount` of `unit` to `parts` (months, days, micros), a fraction of a month
    going to days (30 a month) and of a day to microseconds, as PostgreSQL does."""
    part, scale = unit
    if part == "month":
        if scale >= 12:  # years and larger: the fraction as whole months
            parts[0] += (amount * scale).to_integral_value(ROUND_HALF_EVEN)
            return
        whole = int(amount)
        parts[0] += whole
        amount = (amount - whole) * DAYS_PER_MONTH
        part, scale = "day", 1
    if part == "day":
        total = amount * scale
        whole = int(total)
        parts[1] += whole
        parts[2] += (total - whole) * USEC_PER_DAY
        return
    parts[2] += amount * scale


def _postgres(text: str, first: str | None, end: str | None) -> Interval:
    """The postgres style (and the SQL standard's fields): see the module docstring."""
    text = text.removeprefix("@").strip()
    negate = False
    if text.endswith("ago"):
        negate, text = True, text[: -len("ago")].strip()
    if not text:
        raise ValueError(text)
    parts = [Decimal(0), Decimal(0), Decimal(0)]
    position = 0
    tokens = []
    while position < len(text):
        if text[position].isspace():
            position += 1
            continue
        match = _TOKEN.match(text, position)
        if match is None:
            raise ValueError(text)
        tokens.append(match)
        position = match.end()
    seen: set[str] = set()  # each field at most once, as PostgreSQL requires

    def sets(fields: set[str] | frozenset[str]) -> None:
        if seen & fields:
            raise ValueError(text)
        seen.update(fields)

    bare = [t for i, t in enumerate(tokens) if t["num"] and t["unit"] is None]
    if len(bare) > 1 and not (len(bare) == 2 and (first, end) == ("day", "hour")):
        raise ValueError(text)  # only SQL's `'D H' DAY TO HOUR` has two bare numbers
    for i, token in enumerate(tokens):
        if token["time"]:
            sets(_TIME_FIELDS)
            _time_field(parts, token["time"], first == "minute" and end == "second")
        elif token["ym"]:
            sets({"year", "month"})
            sign = -1 if token["ym"].startswith("-") else 1
            years, months = token["ym"].lstrip("+-").split("-")
            parts[0] += sign * (int(years) * 12 + int(months))
        elif token["num"]:
            number = Decimal(token["num"])
            unit = token["unit"]
            if unit is None:
                # A bare number: days before a time field or another bare number, else
                # the qualifier's unit (seconds without one).
                follows = i + 1 < len(tokens) and (tokens[i + 1]["time"] or len(bare) == 2)
                unit = "day" if follows else (end or "second")
            field, part, scale = _UNITS[unit[:_TOKEN_LENGTH]]
            seconds = field == "second" and number != number.to_integral_value()
            sets(_SECOND_FIELDS if seconds else {field})
            _spill(parts, number, (part, scale))
        else:
            raise ValueError(text)
    months, days = int(parts[0]), int(parts[1])
    micros = int(parts[2].to_integral_value(ROUND_HALF_EVEN))
    sign = -1 if negate else 1
    return sign * months, sign * days, sign * micros


def _time_field(parts: list[Decimal], field: str, minutes_first: bool = False) -> None:
    """Add an `H:M[:S[.f]]` field (`M:S` with a fraction, or under `MINUTE TO SECOND`)."""
    sign = Decimal(-1) if field.startswith("-") else Decimal(1)
    pieces = field.lstrip("+-").split(":")
    if len(pieces) == 2 and ("." in pieces[1] or minutes_first):
        pieces = ["0", *pieces]
    hours, minutes = Decimal(pieces[0]), Decimal(pieces[1])
    seconds = Decimal(pieces[2]) if len(pieces) > 2 else Decimal(0)
    if minutes >= 60 or seconds >= 60:
        raise ValueError(field)
    parts[2] += sign * ((hours * 60 + minutes) * 60 + seconds) * USEC_PER_SEC


_ISO_DESIGNATORS = {
    "date": {"y": ("month", 12), "m": ("month", 1), "w": ("day", 7), "d": ("day", 1)},
    "time": {
        "h": ("us", 3600 * USEC_PER_SEC),
        "m": ("us", 60 * USEC_PER_SEC),
        "s": ("us", USEC_PER_SEC),
    },
}


def _iso8601(text: str) -> Interval:
    """ISO 8601's `P[nY][nM][nW][nD][T[nH][nM][nS]]` or `PYYYY-MM-DDThh:mm:ss` (after P)."""
    parts = [Decimal(0), Decimal(0), Decimal(0)]
    date, _, time = text.partition("t")
    if not (date or time):
        raise ValueError(text)
    alternative = re.fullmatch(r"(\d+)-(\d+)-(\d+)", date)
    if alternative:
        years, months, days = (int(g) for g in alternative.groups())
        parts[0] += years * 12 + months
        parts[1] += days
        if time:
            _time_field(parts, time)
        return int(parts[0]), int(parts[1]), int(parts[2])
    for section, kind in ((date, "date"), (time, "time")):
        for number, designator in _designated(section):
            _spill(parts, Decimal(number), _ISO_DESIGNATORS[kind][designator])
    micros = int(parts[2].to_integral_value(ROUND_HALF_EVEN))
    return int(parts[0]), int(parts[1]), micros


def _designated(section: str) -> list[tuple[str, str]]:
    """The `(number, designator)` pairs of an ISO 8601 section, all of it consumed."""
    pairs = re.findall(rf"({_NUMBER})([a-z])", section)
    if "".join(n + d for n, d in pairs) != section:
        raise ValueError(section)
    return pairs


def _truncated(parts: Interval, end: str | None) -> Interval:
    """`parts` without the fields below a qualifier's end (`HOUR TO MINUTE` drops seconds)."""
    months, days, micros = parts
    match end:
        case "year":
            return int(months / 12) * 12, 0, 0
        case "month":
            return months, 0, 0
        case "day":
            return months, days, 0
        case "hour" | "minute":
            unit = 3600 * USEC_PER_SEC if end == "hour" else 60 * USEC_PER_SEC
            return months, days, int(micros / unit) * unit
    return parts


def canonical(parts: Interval) -> str:
    """Text both kernels read back as exactly `parts`."""
    months, days, micros = parts
    return f"{months} months {days} days {micros} microseconds"


def text(months: int, days: int, micros: int) -> str:
    """An interval as PostgreSQL writes it (`IntervalStyle` postgres): years, months and
    days each with its own sign, then the time as `[-]HH:MM:SS[.ffffff]`.

    >>> text(-1, -1, 0), text(0, 0, 0), text(0, 0, -1)
    ('-1 mons -1 days', '00:00:00', '-00:00:00.000001')
    """
    years, mons = int(months / 12), months - 12 * int(months / 12)  # both toward zero
    parts = []
    negative = False  # the part after a negative one shows its sign, `+` too
    for n, unit in ((years, "year"), (mons, "mon"), (days, "day")):
        if n:
            plus = "+" if negative and n > 0 else ""
            parts.append(f"{plus}{n} {unit}{'' if n == 1 else 's'}")
            negative = n < 0
    if micros or not parts:
        sign = "-" if micros < 0 else ("+" if negative else "")
        seconds, fraction = divmod(abs(micros), USEC_PER_SEC)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        clock = f"{sign}{hour:02d}:{minute:02d}:{second:02d}"
        parts.append(clock + (f".{fraction:06d}".rstrip("0") if fraction else ""))
    return " ".join(parts)


__all__ = ["Interval", "canonical", "invalid", "parse", "text"]
