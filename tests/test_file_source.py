"""File sources: files that keep arriving in a directory become inserts, each file read
once, at a new time per poll; views over the source equal their query recomputed from
the files at every time; a malformed file is reported (or quarantined), never skipped in
silence, and the source goes on."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dsql

pytestmark = pytest.mark.filterwarnings("ignore::dsql.errors.DsqlWarning")


def _rows(cur: Any, sql: str) -> list[tuple[Any, ...]]:
    cur.execute(sql)
    return cur.fetchall()


def _arrive(directory: Path, name: str, text: str) -> None:
    """A file arriving as a writer should deliver it: written aside, renamed into place."""
    (directory / f".{name}.part").write_text(text)
    os.replace(directory / f".{name}.part", directory / name)


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    return tmp_path / "in"


def test_each_new_file_is_inserted_once_and_views_follow(inbox: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[inbox])
    cur = con.cursor()
    cur.execute(f"CREATE SOURCE s (k text, x int) FROM FILES '{inbox}' WITH (FORMAT = 'csv')")
    cur.execute("CREATE MATERIALIZED VIEW v AS SELECT k, sum(x) AS total FROM s GROUP BY k")
    cur.execute("CREATE MATERIALIZED VIEW big AS SELECT k, x FROM s WHERE x > 10")
    every: list[str] = []
    for step in range(5):
        text = "".join(f"{'ab'[i % 2]},{step * 7 + i}\n" for i in range(step + 1))
        every.append(text)
        _arrive(inbox, f"f{step}.csv", "k,x\n" + text)
        (inbox / "_ignored.csv").write_text("k,x\nz,1\n")  # a name starting with _ or .
        cur.execute("ADVANCE BY 1")
        rows = [line.split(",") for chunk in every for line in chunk.splitlines()]
        want: dict[str, int] = {}
        for k, x in rows:
            want[k] = want.get(k, 0) + int(x)
        assert sorted(_rows(cur, "SELECT * FROM v")) == sorted(want.items())
        assert sorted(_rows(cur, "SELECT * FROM big")) == sorted(
            (k, int(x)) for k, x in rows if int(x) > 10
        )
    (inbox / "f0.csv").write_text("k,x\na,1000\n")  # a file already read is not read again
    cur.execute("ADVANCE BY 1")
    assert _rows(cur, "SELECT count(*) FROM s") == [(15,)]
    assert _rows(cur, "SHOW SOURCES")[0][3:] == (5, 15, None)


def test_subscribe_sees_each_poll_at_its_own_time(inbox: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[inbox])
    cur = con.cursor()
    cur.execute(f"CREATE SOURCE s (x int) FROM FILES '{inbox}' WITH (FORMAT = 'text')")
    cur.execute("SUBSCRIBE (SELECT x FROM s) WITH (SNAPSHOT = false)")
    other = con.cursor()
    for step in range(3):
        _arrive(inbox, f"{step}.txt", f"{step}\n{step + 10}\n")
        other.execute("ADVANCE BY 1")
    updates = cur.fetchall(timeout=5)
    by_time: dict[int, list[int]] = {}
    for ts, diff, x in updates:
        assert diff == 1
        by_time.setdefault(ts, []).append(x)
    assert sorted(sorted(v) for v in by_time.values()) == [[0, 10], [1, 11], [2, 12]]


def test_a_waiting_fetch_polls_under_the_wall_clock(inbox: Path) -> None:
    con = dsql.connect(kernel="local", clock="wall", allowed_paths=[inbox])
    cur = con.cursor()
    cur.execute(f"CREATE SOURCE s (x int) FROM FILES '{inbox}' WITH (FORMAT = 'text')")
    cur.execute("SUBSCRIBE (SELECT sum(x) AS s FROM s) WITH (SNAPSHOT = false)")
    _arrive(inbox, "a.txt", "5\n6\n")
    deadline = time.monotonic() + 30
    got: list[Any] = []
    while not any(u[-1] == 11 for u in got) and time.monotonic() < deadline:
        got += cur.fetchall(timeout=1)  # no statement runs: the wait itself polls
    assert any(u[1] == 1 and u[-1] == 11 for u in got)


@pytest.mark.parametrize("kind", ["parquet", "json"])
def test_parquet_and_json_files(inbox: Path, kind: str) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[inbox])
    cur = con.cursor()
    cur.execute(f"CREATE SOURCE s (a int, b text) FROM FILES '{inbox}' WITH (FORMAT = '{kind}')")
    table = pa.table({"a": pa.array([1, 2], pa.int64()), "b": ["x", None]})
    if kind == "parquet":
        pq.write_table(table, inbox / ".p")
    else:
        (inbox / ".p").write_text('{"a": 1, "b": "x"}\n{"a": 2, "b": null}\n')
    os.replace(inbox / ".p", inbox / f"one.{kind}")
    assert _rows(cur, "SELECT * FROM s ORDER BY a") == [(1, "x"), (2, None)]


def test_a_malformed_file_is_reported_and_the_source_goes_on(inbox: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[inbox])
    cur = con.cursor()
    cur.execute(f"CREATE SOURCE s (a int, b text) FROM FILES '{inbox}' WITH (FORMAT = 'csv')")
    cur.execute("CREATE MATERIALIZED VIEW v AS SELECT count(*) AS n FROM s")
    _arrive(inbox, "1.csv", "a,b\n1,x\n")
    _arrive(inbox, "2.csv", "a,b\n2,y\nnot a number,z\n")
    with pytest.warns(dsql.errors.DsqlWarning, match="2.csv"):
        cur.execute("SELECT n FROM v")
    assert cur.fetchall() == [(1,)]  # the bad file gives no row; the good one its own
    assert any("2.csv" in n and "line 3, column a" in n for n in cur.notices)
    error = _rows(cur, "SHOW SOURCES")[0][-1]
    assert "2.csv" in error and 'invalid input syntax for type integer: "not a number"' in error
    _arrive(inbox, "3.csv", "a,b\n3,z\n")
    assert _rows(cur, "SELECT n FROM v") == [(2,)]


def test_quarantine_keeps_the_good_rows_and_the_bad_ones_apart(inbox: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[inbox])
    cur = con.cursor()
    cur.execute(
        f"CREATE SOURCE s (a int NOT NULL, b date) FROM FILES '{inbox}' "
        "WITH (FORMAT = 'csv', ON ERROR = 'quarantine')"
    )
    _arrive(inbox, "1.csv", "a,b\n1,2024-01-01\n2,someday\n3\n4,2024-01-04\n")
    assert _rows(cur, "SELECT a FROM s ORDER BY a") == [(1,), (4,)]
    assert _rows(cur, "SELECT file, line, error, record FROM s_quarantine ORDER BY line") == [
        ("1.csv", 3, 'invalid input syntax for type date: "someday"', "2,someday"),
        ("1.csv", 4, 'missing data for column "b"', "3"),
    ]
    cur.execute("DROP SOURCE s")
    assert _rows(cur, "SHOW TABLES") == []


@pytest.mark.parametrize(
    ("statement", "error"),
    [
        ("INSERT INTO s VALUES (1)", "is a source, not a table"),
        ("DELETE FROM s", "is a source, not a table"),
        ("UPDATE s SET a = 2", "is a source, not a table"),
        ("COPY s FROM '{d}/x.txt'", "is a source, not a table"),
        ("DROP TABLE s", "is a source, not a table"),
        ("CREATE SOURCE s2 (a int) FROM FILES '{d}' WITH (FORMAT = 'xml')", "FORMAT"),
        ("CREATE SOURCE s2 (a int) FROM FILES '{d}/nope' WITH (FORMAT = 'csv')", "no such"),
        ("CREATE SOURCE s2 (a int) FROM FILES '{d}' WITH (FORMAT = 'csv', ON ERROR = 'x')", "ON"),
        ("CREATE SOURCE s (a int) FROM FILES '{d}' WITH (FORMAT = 'csv')", "already exists"),
    ],
)
def test_a_source_refuses_what_it_cannot_do(inbox: Path, statement: str, error: str) -> None:
    cur = dsql.connect(kernel="local", allowed_paths=[inbox]).cursor()
    cur.execute(f"CREATE SOURCE s (a int) FROM FILES '{inbox}' WITH (FORMAT = 'text')")
    with pytest.raises(dsql.Error, match=error):
        cur.execute(statement.format(d=inbox))


def test_a_symlink_out_of_the_sandbox_is_not_followed(tmp_path: Path, inbox: Path) -> None:
    (tmp_path / "secret.txt").write_text("42\n")
    cur = dsql.connect(kernel="local", allowed_paths=[inbox]).cursor()
    cur.execute(f"CREATE SOURCE s (a int) FROM FILES '{inbox}' WITH (FORMAT = 'text')")
    (inbox / "link.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.warns(dsql.errors.DsqlWarning, match="outside the paths SQL may reach"):
        assert _rows(cur, "SELECT count(*) FROM s") == [(0,)]


def test_progress_is_the_files_read_and_a_restored_source_skips_them(inbox: Path) -> None:
    _arrive(inbox, "a.txt", "1\n")
    con = dsql.connect(kernel="local", allowed_paths=[inbox])
    con.cursor().execute(f"CREATE SOURCE s (x int) FROM FILES '{inbox}' WITH (FORMAT = 'text')")
    assert _rows(con.cursor(), "SELECT x FROM s") == [(1,)]
    progress = con.session.sources.progress()
    assert progress == {"s": ("a.txt",)}
    _arrive(inbox, "b.txt", "2\n")
    again = dsql.connect(kernel="local", allowed_paths=[inbox])
    cur = again.cursor()
    cur.execute(f"CREATE SOURCE s (x int) FROM FILES '{inbox}' WITH (FORMAT = 'text')")
    again.session.sources.restore("s", progress["s"])
    assert _rows(cur, "SELECT x FROM s") == [(2,)]


def test_files_arriving_in_a_transaction_come_after_it(inbox: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[inbox])
    cur = con.cursor()
    cur.execute(f"CREATE SOURCE s (x int) FROM FILES '{inbox}' WITH (FORMAT = 'text')")
    cur.execute("CREATE TABLE t (x int)")
    cur.execute("BEGIN")
    _arrive(inbox, "a.txt", "1\n")
    cur.execute("INSERT INTO t VALUES (1)")
    assert _rows(cur, "SELECT count(*) FROM s") == [(0,)]  # no part of the transaction
    cur.execute("COMMIT")
    assert _rows(cur, "SELECT count(*) FROM s") == [(1,)]
