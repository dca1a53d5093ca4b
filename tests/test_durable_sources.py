"""File sources and COPY under a data directory: a restart reads no file twice and loses
no row a poll or a COPY inserted, from the log and from a checkpoint; the data
directory's `files/` folder is SQL's to use, the log beside it is not."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import dsql


def _connect(data: Path, inbox: Path, checkpoint_bytes: int | None = None) -> Any:
    return dsql.connect(
        kernel="local", data_dir=data, allowed_paths=[inbox], checkpoint_bytes=checkpoint_bytes
    )


def _arrive(directory: Path, name: str, text: str) -> None:
    (directory / f".{name}.part").write_text(text)
    os.replace(directory / f".{name}.part", directory / name)


def _rows(con: Any, sql: str) -> list[tuple[Any, ...]]:
    return sorted(con.execute(sql).fetchall())


@pytest.mark.parametrize("checkpoint_bytes", [None, 1], ids=["log", "checkpoint"])
def test_a_restarted_source_reads_each_file_once(tmp_path: Path, checkpoint_bytes: Any) -> None:
    data, inbox = tmp_path / "data", tmp_path / "in"
    inbox.mkdir()
    con = _connect(data, inbox, checkpoint_bytes)
    con.execute(
        f"CREATE SOURCE s (k text, x int) FROM FILES '{inbox}' "
        "WITH (FORMAT = 'csv', ON ERROR = 'quarantine')"
    )
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT k, sum(x) AS total FROM s GROUP BY k")
    _arrive(inbox, "f1.csv", "k,x\na,1\nb,2\n")
    con.execute("ADVANCE BY 1")
    _arrive(inbox, "f2.csv", "k,x\na,10\nb,oops\n")
    con.execute("ADVANCE BY 1")
    want = _rows(con, "SELECT * FROM v")
    quarantined = _rows(con, "SELECT file, line FROM s_quarantine")
    assert want == [("a", 11), ("b", 2)] and quarantined == [("f2.csv", 3)]
    con.close()

    con = _connect(data, inbox, checkpoint_bytes)
    assert _rows(con, "SELECT * FROM v") == want  # f1 and f2 are not read again
    assert _rows(con, "SELECT file, line FROM s_quarantine") == quarantined
    _arrive(inbox, "f3.csv", "k,x\nc,5\n")
    con.execute("ADVANCE BY 1")
    assert _rows(con, "SELECT * FROM v") == [("a", 11), ("b", 2), ("c", 5)]
    con.execute("DROP SOURCE s CASCADE")
    con.close()

    con = _connect(data, inbox, checkpoint_bytes)
    assert "s" not in {r[0] for r in con.execute("SHOW SOURCES").fetchall()}
    con.close()


def test_copy_rows_survive_a_restart_and_files_is_sqls_folder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    con = dsql.connect(kernel="local", data_dir=data)
    (data / "files" / "in.csv").write_text("1,x\n2,y\n")
    con.execute("CREATE TABLE t (a int, b text)")
    con.execute(f"COPY t FROM '{data / 'files' / 'in.csv'}' (FORMAT csv)")
    with pytest.raises(dsql.Error, match="outside the paths SQL may reach"):
        con.execute(f"COPY t TO '{data / 'wal-00000001.log'}'")
    con.close()
    con = dsql.connect(kernel="local", data_dir=data)
    assert _rows(con, "SELECT * FROM t") == [(1, "x"), (2, "y")]
    con.close()
