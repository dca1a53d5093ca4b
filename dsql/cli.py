"""The `dsql` command (the REPL and `dsql run` arrive with the product issue)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `dsql` console script."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("--version", "-V"):
        from dsql import __version__

        print(f"dsql {__version__}")
        return 0
    print(
        "dsql: the SQL front-end is not built yet; use the Python runtime API (dsql.runtime).",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
