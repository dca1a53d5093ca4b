"""PostgreSQL's text of a float, and the function each kernel writes it with.

PostgreSQL writes a `double precision` or `real` with the fewest significant digits
that read back as the same value (`extra_float_digits` 1, its default), in exponent
form when the first digit's power of ten is below -4 or at least 15 (6 for a real),
with a sign and at least two exponent digits, never a trailing `.0`: `2`, `0.1`,
`1e+20`, `1.5e-07`, `-0`, `NaN`, `Infinity`, `-Infinity`.

No engine's own text gives those digits: Spark's is Java's `Double.toString`, which
before Java 19 is not always the shortest (`2.82879384806159008E17`, `4.9E-324` where
PostgreSQL writes `2.82879384806159e+17`, `5e-324`), and DuckDB's, like Python's,
may end exactly halfway to the next float, a text PostgreSQL never writes (`shortest`).
Both read back as the value, though: each kernel registers `NAME`, a vectorized
function (a pandas UDF on Spark) that reads the engine's text of the float and writes
`text(value, single)`; `spelling(dialect)` is the call on the float `__0`.

>>> text(2.0), text(1e20), text(0.1), text(1e-7), text(-0.0)
('2', '1e+20', '0.1', '1e-07', '-0')
>>> text(0.1, single=True), text(1234567.0, single=True)
('0.1', '1.234567e+06')
"""

from __future__ import annotations

import decimal
import math
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

#: The name the Spark kernel registers the function under.
NAME = "dsql_float_text"


def shortest(value: float, single: bool = False) -> str:
    """The shortest decimal text that reads back as `value` (as a 32-bit float
    where `single`: `0.1`, not `0.10000000149011612`), as PostgreSQL's Ryu picks it: of
    the shortest, the nearest the value; never a text exactly halfway to a neighbouring
    float, which needs the reader to round half to even (PostgreSQL builds Ryu without
    STRICTLY_SHORTEST: `4.0293345400271184e+16`, where Python writes
    `4.029334540027118e+16`).

    >>> shortest(4.0293345400271184e16), shortest(0.1)
    ('40293345400271184e0', '0.1')
    """
    if value == 0 or not math.isfinite(value):
        return repr(value)
    if value < 0:
        return "-" + shortest(-value, single)
    if single:
        import numpy as np

        value = float(np.float32(value))
        fast = np.format_float_scientific(np.float32(value), unique=True)
        with np.errstate(over="ignore"):  # the next float past the largest is infinite
            above = float(np.nextafter(np.float32(value), np.float32(np.inf)))
        below = float(np.nextafter(np.float32(value), np.float32(0)))
    else:
        fast = repr(value)
        above, below = math.nextafter(value, math.inf), math.nextafter(value, 0)
    exact = Fraction(value)
    low = (exact + Fraction(below)) / 2
    high = exact + (exact - low if math.isinf(above) else (Fraction(above) - exact) / 2)
    if low < Fraction(fast) < high:
        return fast
    return _within(exact, low, high)


def _within(exact: Fraction, low: Fraction, high: Fraction) -> str:
    """The decimal of fewest digits strictly between `low` and `high` (which hold
    `exact`), the nearest `exact` of those (half to even), as `digits` e `exponent`."""
    power = math.floor(math.log10(max(abs(low), abs(high)))) + 1
    while True:
        grid = Fraction(10) ** power
        first, last = math.floor(low / grid) + 1, math.ceil(high / grid) - 1
        if first <= last:
            return f"{min(max(round(exact / grid), first), last)}e{power}"
        power -= 1


def text(value: float, single: bool = False) -> str:
    """`value` as PostgreSQL writes a float (a `real` where `single`): see the module."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    digits_text = decimal.Decimal(shortest(value, single)).normalize()
    sign, digits, exponent = digits_text.as_tuple()
    assert isinstance(exponent, int)
    power = exponent + len(digits) - 1  # of the first digit
    if -4 <= power < (6 if single else 15):
        return f"{digits_text:f}"
    mantissa = "".join(map(str, digits))
    mantissa = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'+' if power >= 0 else '-'}{abs(power):02d}"


def texts(engines: Sequence[Any], singles: Sequence[Any]) -> list[str | None]:
    """`text` of each float given as an engine's text of it (None where it is NULL)."""
    return [
        None if engine is None else text(float(engine), bool(single))
        for engine, single in zip(engines, singles, strict=True)
    ]


def register_duckdb(con: Any) -> None:
    """Define `NAME` on a DuckDB connection: a vectorized function over Arrow columns."""
    import pyarrow as pa
    from duckdb import sqltypes

    # DuckDB reads the parameters and evaluates the annotations (so `Any`, a global).
    def call(javas: Any, singles: Any) -> Any:
        return pa.array(texts(javas.to_pylist(), singles.to_pylist()), type=pa.string())

    parameters = [sqltypes.VARCHAR, sqltypes.BOOLEAN]
    con.create_function(NAME, call, parameters, sqltypes.VARCHAR, type="arrow")


def register_spark(spark: Any) -> None:
    """Define `NAME` on a Spark session: a pandas UDF, evaluated by the executors."""
    from pyspark.sql.functions import pandas_udf
    from pyspark.sql.types import StringType

    spark.udf.register(NAME, pandas_udf(spark_function(), StringType()))  # type: ignore[call-overload]


def spark_function() -> Callable[..., Any]:
    """The pandas function behind `NAME` on Spark, pickled with this module's code by
    value: executors of a cluster need no dsql installed to run it."""
    import pandas as pd
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def call(javas: Any, singles: Any) -> Any:
        columns = ([None if pd.isna(v) else v for v in c.tolist()] for c in (javas, singles))
        return pd.Series(texts(*columns), dtype=object)

    # PySpark reads the kind of pandas UDF from the hints, evaluated: real objects.
    call.__annotations__ = {name: pd.Series for name in ("javas", "singles", "return")}
    return call


__all__ = ["NAME", "register_duckdb", "register_spark", "shortest", "text", "texts"]
