"""The in-process DuckDB that dsql runs its own SQL on: closed to the world.

Every DuckDB connection dsql opens comes from `connect`. Its configuration is fixed at
connect time and locked: no file system, network or extension access (`read_text`,
`read_csv`, `glob`, `COPY`, `ATTACH`, `INSTALL`/`LOAD` and httpfs URLs all fail), no
extension installed or loaded behind a function's back, and no `SET` afterwards. Inputs
reach it only as registered Arrow tables, and files dsql itself reads (a table created
from a Parquet or CSV path) are read by pyarrow in Python.

>>> con = connect()
>>> con.execute("SELECT current_setting('enable_external_access')").fetchone()
(False,)
"""

from __future__ import annotations

from typing import Any

#: The connect-time configuration of every DuckDB connection dsql opens.
CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    # Steps and reads are small: DuckDB's worker threads cost more CPU than they save.
    "threads": 1,
    # Never spill into the working directory: state past the memory limit is an error.
    "temp_directory": "",
    "lock_configuration": True,
}


def connect(memory_limit: int | None = None) -> Any:
    """A new in-memory DuckDB connection under `CONFIG`, and `memory_limit` bytes if given."""
    import duckdb

    config = dict(CONFIG)
    if memory_limit is not None:
        config["memory_limit"] = f"{int(memory_limit)}B"
    return duckdb.connect(config=config)


__all__ = ["CONFIG", "connect"]
