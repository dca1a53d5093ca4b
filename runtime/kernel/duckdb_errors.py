"""DuckDB's error messages in dsql's words: the user reads PostgreSQL's phrasing, never
the engine's class names (`Conversion Error`, `Binder Error`, ...).

`translated(message)` is the `DsqlError` for one DuckDB message, or None when no rule
knows it. A value that does not convert is PostgreSQL's `invalid input syntax for type
t: "value"` (an array's: `malformed array literal`), a data error (`ExecutionError`),
which a materialized view recovers from once the value is gone. An expression DuckDB
cannot bind or parse is dsql's own shortcoming, so it is an `UnsupportedError`.

>>> str(translated("Conversion Error: Could not convert string 'x1' to INT32"))
'invalid input syntax for type integer: "x1"'
>>> str(translated('Conversion Error: Could not convert string "inf" to DECIMAL(38,10)'))
'invalid input syntax for type numeric: "inf"'
>>> translated("Binder Error: Cannot deduce template type 'T'").message
'an expression of this statement is not supported by the in-process kernel'
>>> str(translated("Out of Range Error: Overflow in multiplication of INTERVAL!"))
'overflow in multiplication of INTERVAL'
"""

from __future__ import annotations

import re

from dsql.errors import DsqlError, ExecutionError, UnsupportedError

#: DuckDB's type names and PostgreSQL's.
_PG_TYPES = {
    "TINYINT": "smallint", "INT8": "smallint", "SMALLINT": "smallint", "INT16": "smallint",
    "INTEGER": "integer", "INT32": "integer", "BIGINT": "bigint", "INT64": "bigint",
    "HUGEINT": "numeric", "INT128": "numeric", "DOUBLE": "double precision",
    "FLOAT": "real", "BOOLEAN": "boolean", "DATE": "date", "TIMESTAMP": "timestamp",
    "TIMESTAMP WITH TIME ZONE": "timestamp with time zone", "TIME": "time",
    "INTERVAL": "interval", "VARCHAR": "text", "UUID": "uuid", "BLOB": "bytea",
}  # fmt: skip

_NOT_CONVERTED = (
    re.compile(r"Could not convert string (['\"])(?P<value>.*)\1 to (?P<type>[A-Z0-9_ ]+\w*)"),
    re.compile(
        r"Type \w+ with value (['\"])(?P<value>.*)\1 can't be cast to the destination type "
        r"(?P<type>[A-Z0-9_ ]+(\(\d+, ?\d+\))?(\[\])*)"
    ),
    re.compile(r"Failed to cast value to \w+: (?P<value>.*?)(?P<type>)$"),
)

#: DuckDB's classes of errors in a value: what follows the class reads as it is.
_DATA_ERROR = re.compile(r"^(Out of Range|Invalid Input|Conversion) Error: (?P<said>.*)")

#: DuckDB's classes of errors in an expression it was given: dsql rendered something
#: the engine does not take (a combination the binder should have refused).
_NOT_EVALUATED = re.compile(r"^(Binder|Parser|Catalog|Not implemented) Error")


def translated(message: str) -> DsqlError | None:
    """The `DsqlError` that says DuckDB's `message` in dsql's words (see the module)."""
    for pattern in _NOT_CONVERTED:
        found = pattern.search(message)
        if found is None:
            continue
        value, duck_type = found.group("value"), found.group("type").strip()
        if duck_type.endswith("[]"):
            return ExecutionError(f'malformed array literal: "{value}"')
        name = "numeric" if duck_type.startswith("DECIMAL") else _PG_TYPES.get(duck_type)
        if name is None:
            return ExecutionError(f'invalid input syntax: "{value}"')
        return ExecutionError(f'invalid input syntax for type {name}: "{value}"')
    data = _DATA_ERROR.match(message)
    if data is not None:
        said = data.group("said").rstrip(".!")
        return ExecutionError(said[0].lower() + said[1:] if said else "invalid value")
    if _NOT_EVALUATED.match(message):
        return UnsupportedError(
            "an expression of this statement is not supported by the in-process kernel",
            hint="a function applied to arguments of types it does not take, or a form "
            "dsql does not evaluate; write it another way",
        )
    return None
