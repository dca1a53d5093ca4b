"""PostgreSQL's text of a float, and the Spark function that writes it.

PostgreSQL writes a `double precision` or `real` with the fewest significant digits
that read back as the same value (`extra_float_digits` 1, its default), in exponent
form when the first digit's power of ten is below -4 or at least 15 (6 for a real),
with a sign and at least two exponent digits, never a trailing `.0`: `2`, `0.1`,
`1e+20`, `1.5e-07`, `-0`, `NaN`, `Infinity`, `-Infinity`.

Spark's cast of a float to a string is Java's `Double.toString`, which before Java 19
is not always the shortest text (`2.82879384806159008E17`, `4.9E-324` where PostgreSQL
writes `2.82879384806159e+17`, `5e-324`), so no Spark SQL expression over it rebuilds
PostgreSQL's digits. Java's text does read back as the value, though: the Spark kernel
registers `NAME`, a pandas UDF that reads it and writes `text(value, single)`.
`expression(single)` is the call, in Spark's SQL, on the float `__0`.

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
from typing import Any

#: The name the Spark kernel registers the function under.
NAME = "dsql_float_text"


def shortest(value: float, single: bool = False) -> str:
    """The shortest decimal text that reads back as `value` (as a 32-bit float where
    `single`: `0.1`, not `0.10000000149011612`)."""
    if single:
        import numpy as np

        return np.format_float_scientific(np.float32(value), unique=True)
    return repr(value)


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


def texts(javas: Sequence[Any], singles: Sequence[Any]) -> list[str | None]:
    """`text` of each float given as Java's text of it (None where it is NULL)."""
    return [
        None if java is None else text(float(java), bool(single))
        for java, single in zip(javas, singles, strict=True)
    ]


def expression(single: bool) -> str:
    """The call, in Spark's SQL, that writes the float `__0` (a real where `single`):
    a real widens to a double first (exactly), whose Java text reads back exactly."""
    return f"{NAME}(CAST(CAST(__0 AS DOUBLE) AS STRING), {'TRUE' if single else 'FALSE'})"


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


__all__ = ["NAME", "expression", "register_spark", "shortest", "text", "texts"]
