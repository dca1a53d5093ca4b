"""PostgreSQL, the reference for SQL semantics: a private server and result comparison.

`PgServer.start(root)` runs a throwaway PostgreSQL of the newest installed version
(Debian's layout, `/usr/lib/postgresql/<version>/bin`): `initdb` into a data directory
under `root`, the server listening only on a unix socket in that directory (no TCP
port is opened, so parallel runs cannot clash), with fsync off, in UTC, with the C
collation (text orders by bytes, as DuckDB orders it). Under root the server runs as the
`postgres` system user, which PostgreSQL requires; otherwise as the caller.
`PgServer.stop()` shuts it down; the data directory goes with `root`.

Comparison: `pg_rows` reads one query's rows with their PostgreSQL type
per column; `normalize` puts a value into the form the two sides compare in (floats
rounded to `FLOAT_DIGITS` significant digits in float columns only; numerics stay
`Decimal`, so a float where PostgreSQL gives a numeric is a difference; arrays as
tuples); `compare(got, want, ordered)` compares the rows as multisets, or as lists when
the query has a total ORDER BY, and returns a readable difference or None; `differs`
runs one query on both and compares.

>>> normalize(0.1 + 0.2, "float8"), normalize([1, [2, None]], "_int4")
(0.3, (1, (2, None)))
>>> compare([(1,), (2,)], [(2,), (1,)], ordered=False) is None
True
"""

from __future__ import annotations

import decimal
import glob
import os
import re
import shutil
import socket
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Significant digits two floats must agree to (PostgreSQL and DuckDB sum in different
#: orders, so the last bits of a float sum differ).
FLOAT_DIGITS = 10

FLOAT_TYPES = frozenset({"float4", "float8"})

INSTALL_HINT = (
    "PostgreSQL is the test suite's SQL oracle and is not installed: "
    "`apt-get install -y postgresql postgresql-client` (Debian/Ubuntu; .ci/run does it), "
    "or put a PostgreSQL whose bin/ holds initdb and pg_ctl under /usr/lib/postgresql/<version>/"
)


class PgMissing(RuntimeError):
    """No PostgreSQL installation was found (the message says how to install one)."""


def find_bindir() -> Path:
    """The `bin/` of the newest PostgreSQL under /usr/lib/postgresql (by major version)."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    if not found:
        raise PgMissing(INSTALL_HINT)
    return max(found, key=lambda b: int(re.sub(r"\D", "", b.parent.name) or 0))


def _free_port() -> int:
    """A port number no local TCP listener holds: it names the unix socket's file."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """A running private PostgreSQL: its socket directory, port and owning user."""

    bindir: Path
    root: Path
    port: int
    user: str | None  # the system user the server runs as; None: the caller

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root

    @classmethod
    def start(cls, root: Path, settings: str = "") -> PgServer:
        """A new server with its data directory under `root` (created, then owned by the
        server's user); `settings`: more `-c name=value` options (`wal_level=logical`)."""
        bindir = find_bindir()
        user = "postgres" if os.geteuid() == 0 else None
        root.mkdir(parents=True, exist_ok=True)
        if user is not None:
            shutil.chown(root, user, user)
            os.chmod(root, 0o700)
        server = cls(bindir, root, _free_port(), user)
        server._run(
            "initdb", "-D", str(server.data), "-U", "postgres", "-A", "trust",
            "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions",
        )  # fmt: skip
        options = (
            f"-p {server.port} -k {server.socket_dir} -c listen_addresses='' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            f"-c timezone=UTC -c max_connections=20 {settings}"
        )
        server._run(
            "pg_ctl", "-D", str(server.data), "-o", options, "-l", str(root / "server.log"),
            "-w", "start",
        )  # fmt: skip
        return server

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bindir / program), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{program} failed: {done.stderr or done.stdout}\n{tail}")

    def stop(self) -> None:
        """Shut the server down at once (its data is thrown away)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def connect(self, dbname: str = "postgres") -> Any:
        """A new autocommit psycopg connection to database `dbname`."""
        import psycopg

        return psycopg.connect(
            host=str(self.socket_dir), port=self.port, user="postgres", dbname=dbname,
            autocommit=True,
        )  # fmt: skip

    def database(self, name: str) -> Any:
        """A connection to a fresh, empty database `name` (dropped first if it exists)."""
        with self.connect() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.connect(name)

    def psql(self, sql: str, *options: str, dbname: str = "postgres") -> str:
        """What `psql` prints for `sql` with `options` (e.g. `-A`), as the terminal shows it."""
        command = [
            str(self.bindir / "psql"), "-X", "-q", "-h", str(self.socket_dir),
            "-p", str(self.port), "-U", "postgres", "-d", dbname, *options, "-c", sql,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        return done.stdout


# --- comparison ------------------------------------------------------------------------------


def pg_rows(conn: Any, sql: str) -> tuple[list[tuple[Any, ...]], list[str]]:
    """The rows PostgreSQL returns for `sql`, and each column's type name."""
    cur = conn.execute(sql)
    types = [_type_name(conn, d.type_code) for d in cur.description]
    return cur.fetchall(), types


def _type_name(conn: Any, oid: int) -> str:
    info = conn.adapters.types.get(oid)
    return info.name if info is not None else str(oid)


def normalize(value: Any, pg_type: str) -> Any:
    """`value` as the comparison sees it, for a column PostgreSQL types `pg_type`: floats
    rounded in float columns (and float arrays); lists as tuples; the rest as it is."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        element = pg_type[1:] if pg_type.startswith("_") else pg_type
        return tuple(normalize(v, element) for v in value)
    if pg_type in FLOAT_TYPES and isinstance(value, float | int | decimal.Decimal):
        return float(f"{float(value):.{FLOAT_DIGITS}g}")
    return value


def normalized(rows: Sequence[Sequence[Any]], types: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each row normalized column by column (see `normalize`)."""
    return [tuple(normalize(v, t) for v, t in zip(row, types, strict=True)) for row in rows]


def _typed(value: Any) -> Any:
    # Decimal('1') == 1 == 1.0 in Python: the type joins the value so that a float where
    # PostgreSQL gives a numeric (or the reverse) is a difference.
    if isinstance(value, tuple):
        return tuple(_typed(v) for v in value)
    return value if value is None else (type(value).__name__, value)


def compare(
    got: Sequence[tuple[Any, ...]], want: Sequence[tuple[Any, ...]], ordered: bool
) -> str | None:
    """None when the normalized rows `got` (dsql) equal `want` (PostgreSQL) — as lists when
    `ordered`, as multisets otherwise — else a description of the difference."""
    left, right = [_typed(r) for r in got], [_typed(r) for r in want]
    if ordered:
        if left == right:
            return None
        return f"dsql {list(got)}\n   != postgres {list(want)}"
    a, b = Counter(left), Counter(right)
    if a == b:
        return None
    extra, missing = a - b, b - a
    return (
        f"dsql has {sorted(map(repr, extra.elements()))} more, "
        f"{sorted(map(repr, missing.elements()))} fewer than postgres\n"
        f"  dsql {list(got)}\n  postgres {list(want)}"
    )


def seeded(target: Any, tables: Mapping[str, str], rows: Mapping[str, str]) -> Any:
    """`target` (a dsql or psycopg connection) holding the `tables` (name: column list),
    each filled with its `rows` (a VALUES list), returned for chaining."""
    for name, columns in tables.items():
        target.execute(f"CREATE TABLE {name} ({columns})")
        if rows.get(name):
            target.execute(f"INSERT INTO {name} VALUES {rows[name]}")
    return target


def create_both(con: Any, pg: Any, tables: Mapping[str, str], seed: Sequence[str]) -> None:
    """The same tables (name: column list), afresh, in dsql's connection `con` and
    PostgreSQL's `pg`, both then holding the rows of the `seed` statements."""
    pg.execute("DROP TABLE IF EXISTS " + ", ".join(tables))
    for name, columns in tables.items():
        con.execute(f"CREATE TABLE {name} ({columns})")
        pg.execute(f"CREATE TABLE {name} ({columns})")
    for sql in seed:
        con.execute(sql)
        pg.execute(sql)


def apply_both(con: Any, pg: Any, transaction: Sequence[str]) -> None:
    """The statements of one transaction run in dsql's connection `con` (at one
    timestamp) and in PostgreSQL's `pg` (one transaction)."""
    con.execute("BEGIN")
    for sql in transaction:
        con.execute(sql)
    con.execute("COMMIT")
    with pg.transaction():
        for sql in transaction:
            pg.execute(sql)


def differs(
    con: Any, pg: Any, sql: str, dsql_sql: str | None = None, ordered: bool = False
) -> str | None:
    """None when dsql's connection `con` answers `dsql_sql` (default `sql`) as PostgreSQL's
    connection `pg` answers `sql`, both normalized by PostgreSQL's column types; else
    the difference (see `compare`). Where PostgreSQL raises an error, dsql must raise a
    `DsqlError`; a dsql error where PostgreSQL answers is a difference."""
    import psycopg

    from dsql.errors import DsqlError

    try:
        want, types = pg_rows(pg, sql)
    except psycopg.Error as refused:
        try:
            got = con.execute(dsql_sql or sql).fetchall()
        except DsqlError:
            return None
        return f"postgres raised {type(refused).__name__}: {refused}\n  dsql answered {got}"
    try:
        got = con.execute(dsql_sql or sql).fetchall()
    except Exception as error:  # noqa: BLE001 - reported as the difference it is
        return f"dsql raised {type(error).__name__}: {error}\n  postgres {want}"
    if got and len(got[0]) != len(types):
        return f"dsql returns {len(got[0])} columns, postgres {len(types)}"
    return compare(normalized(got, types), normalized(want, types), ordered)


# --- views in error --------------------------------------------------------------------------


def in_error(con: Any, message: str, view: str = "v") -> bool:
    """Whether reading dsql's view `view` fails, with an error naming `message`."""
    from dsql.errors import DsqlError

    try:
        con.execute(f"SELECT * FROM {view}").fetchall()
    except DsqlError as error:
        assert f"is in error: {message}" in error.message, error
        return True
    return False


def no_warning() -> Any:
    """A context in which a `DsqlWarning` (a view's change of state) is an error."""
    import contextlib
    import warnings

    from dsql.errors import DsqlWarning

    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("error", DsqlWarning)
    return stack


def follow_steps(
    con: Any, pg: Any, query: str, steps: Sequence[tuple[str, bool]], message: str
) -> None:
    """Run each `(statement, broken)` step on dsql's `con` (whose view `v` is `query`) and
    PostgreSQL's `pg`: after it, `v` is in error with `message` exactly when `broken`
    (a warning says each change of state), else equal to PostgreSQL's `query`."""
    import pytest

    from dsql.errors import DsqlWarning

    for step, broken in steps:
        changes = broken != in_error(con, message)
        with pytest.warns(DsqlWarning) if changes else no_warning():
            con.execute(step)
        pg.execute(step)
        assert in_error(con, message) == broken, step
        if not broken:
            problem = differs(con, pg, query, dsql_sql="SELECT * FROM v")
            assert problem is None, f"after {step}: {problem}"
