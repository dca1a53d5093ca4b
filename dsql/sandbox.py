"""The sandbox of files: which directories SQL may read and write (COPY, file sources).

A path SQL names is reached only if, resolved (symlinks followed, `..` folded, relative
to the working directory), it lies in one of the allowed directories. Nothing is
allowed by default: PostgreSQL lets only superusers (or `pg_read_server_files` /
`pg_write_server_files`) COPY to or from a server file, and a dsql session is its
user's whole account; the user names the directories (`dsql.connect(allowed_paths=
[...])`, `dsql --allow-path DIR`). The client's own data (`COPY ... FROM STDIN`,
`TO STDOUT`) needs no permission. A URI of another scheme (`s3a://`, `hdfs://`) is
allowed when it starts with an allowed URI followed by `/`.

The caller opens the resolved path `check` returns, never the text it was given, so a
symlink swapped in after the check is not followed to a place the check refused.

>>> box = Sandbox(["/tmp"])
>>> str(box.check("/tmp/../tmp/x.csv", "read"))
'/tmp/x.csv'
>>> try:
...     box.check("/etc/passwd", "read")
... except AccessError as error:
...     print(error.message)
cannot read '/etc/passwd': it is outside the paths SQL may reach
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlparse

from dsql.errors import AccessError

#: How a user allows a directory, for the errors' hints.
HOW_TO_ALLOW = (
    "allow its directory: dsql.connect(allowed_paths=['DIR']) or dsql --allow-path DIR; "
    "or send the rows through the client (COPY ... FROM STDIN / TO STDOUT)"
)


class Sandbox:
    """The directories (and URI prefixes) SQL may reach; see the module docstring."""

    def __init__(self, allowed: Iterable[str | os.PathLike[str]] = ()) -> None:
        self.directories: tuple[Path, ...] = ()
        self.uris: tuple[str, ...] = ()
        #: While a data directory is recovered: the places its logged statements name
        #: were allowed when they were first run, and are again (`dsql.durable`).
        self.recovering = False
        for entry in allowed:
            self.allow(entry)

    def allow(self, entry: str | os.PathLike[str]) -> None:
        """Let SQL reach everything under `entry` (a directory, or a URI prefix)."""
        if _scheme(str(entry)) not in ("", "file"):
            self.uris += (str(entry).rstrip("/"),)
        else:
            self.directories += (_resolved(str(entry)),)

    def check(self, location: str, action: str) -> Path | str:
        """`location` resolved, if SQL may `action` ("read", "write") it: a `Path`, or
        the URI as given for another scheme; an `AccessError` otherwise."""
        if _scheme(location) not in ("", "file"):
            if (
                self.recovering
                or ".." not in location.split("/")
                and any(location.startswith(uri + "/") for uri in self.uris)
            ):
                return location
            raise _refused(location, action)
        path = _resolved(location)
        if self.recovering or any(path == d or d in path.parents for d in self.directories):
            return path
        raise _refused(location, action)

    def describe(self) -> str:
        """The allowed places, one per line (none: the empty string)."""
        return "\n".join([*map(str, self.directories), *self.uris])


def _scheme(text: str) -> str:
    scheme = urlparse(text).scheme
    return "" if len(scheme) <= 1 else scheme  # one letter: a Windows drive


def _resolved(text: str) -> Path:
    """The absolute path `text` names, every symlink and `..` resolved."""
    if _scheme(text) == "file":
        text = unquote(urlparse(text).path)
    return Path(os.path.realpath(text))


def _refused(location: str, action: str) -> AccessError:
    return AccessError(
        f"cannot {action} {location!r}: it is outside the paths SQL may reach",
        hint=HOW_TO_ALLOW,
    )


__all__ = ["Sandbox"]
