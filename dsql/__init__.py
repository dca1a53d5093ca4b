"""dsql: SQL views maintained incrementally with differential dataflow on Apache Spark.

The face of the project: `dsql.connect()` returns a PEP 249 connection to a
session (`dsql.session`) that owns the catalog, the clock and the runtime;
`dsql.compile(sql, catalog)` plans a query without running it. `dsql.errors`
holds the error hierarchy every layer uses (PEP 249's exception names included);
the runtime lives in `dsql.runtime`, the compiler in `dsql.grammar` and
`dsql.planner`.
"""

from __future__ import annotations

from dsql.errors import (
    DatabaseError,
    DataError,
    DsqlError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,  # noqa: A004 - PEP 249's name
)

__all__ = [
    "DataError",
    "DatabaseError",
    "DsqlError",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "Warning",
    "__version__",
    "apilevel",
    "compile",
    "connect",
    "paramstyle",
    "threadsafety",
]
__version__ = "0.1.0"
apilevel = "2.0"
threadsafety = 2
paramstyle = "qmark"

_LAZY = ("connect", "compile", "Connection", "Cursor", "CompiledQuery")


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """The API is imported on first use, so `import dsql` stays light."""
    if name in _LAZY:
        from dsql import api

        return getattr(api, name)
    raise AttributeError(name)
