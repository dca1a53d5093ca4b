"""Type checks: mypy over the package as it installs, so types are checked across modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_error_in_the_installed_layout(tmp_path: Path) -> None:
    """`mypy -p dsql` reports no error over a tree laid out as the package installs.

    pyproject.toml's package-dir maps the top-level folders `planner/`, `runtime/` and
    `grammar/` to `dsql.planner`, `dsql.runtime` and `dsql.grammar`. Checked in place
    (`mypy dsql grammar planner runtime`), an import such as `dsql.runtime.linear`
    resolves to no file and is typed Any, so no type that crosses a module is checked.
    Here `tmp_path/dsql` links every entry of the repository's `dsql/` and the three
    folders under their package names: mypy then reads each import's definition. The
    cache is in `tmp_path` too, so a stale one is never read.
    """
    package = tmp_path / "dsql"
    package.mkdir()
    for entry in (REPO / "dsql").iterdir():
        (package / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    for folder in ("planner", "runtime", "grammar"):
        (package / folder).symlink_to(REPO / folder, target_is_directory=True)
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(REPO / "pyproject.toml"),
        "--cache-dir",
        str(tmp_path / "mypy_cache"),
        "-p",
        "dsql",
    ]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"mypy -p dsql:\n{result.stdout}{result.stderr}"
