"""dsql: SQL views maintained incrementally with differential dataflow on Apache Spark.

The face of the project: `dsql.connect()` returns a PEP 249 connection to a
session (`dsql.session`) that owns the catalog, the clock and the runtime.
`dsql.errors` holds the error hierarchy every layer uses; the runtime lives in
`dsql.runtime`, the compiler in `dsql.grammar` and `dsql.planner`.
"""

from __future__ import annotations

from dsql.errors import DsqlError

__all__ = ["DsqlError", "__version__", "apilevel", "connect", "paramstyle", "threadsafety"]
__version__ = "0.1.0"


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """The API is imported on first use, so `import dsql` stays light."""
    if name in ("connect", "apilevel", "paramstyle", "threadsafety", "Connection", "Cursor"):
        from dsql import api

        return getattr(api, name)
    raise AttributeError(name)
