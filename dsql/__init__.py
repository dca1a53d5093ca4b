"""dsql: SQL views maintained incrementally with differential dataflow on Apache Spark.

The face of the project. `dsql.errors` holds the error hierarchy every layer uses;
the runtime lives in `dsql.runtime`, the compiler in `dsql.grammar` and `dsql.planner`.
"""

from __future__ import annotations

from dsql.errors import DsqlError

__all__ = ["DsqlError", "__version__"]
__version__ = "0.1.0"
