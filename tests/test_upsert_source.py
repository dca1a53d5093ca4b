"""Upsert sources (`KEY (k) ENVELOPE UPSERT`): each record replaces its key's row, the
last record of a key in a poll wins, a record whose value columns are all NULL deletes
its key; the source equals a dict replay of its records after every poll (so its key is
unique at every time), views over it equal their query recomputed, a restart rebuilds
the state from the relation, and a NULL key is a bad record under ON ERROR."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsql
from dsql.errors import DsqlWarning

pytestmark = pytest.mark.filterwarnings("ignore::dsql.errors.DsqlWarning")

Record = tuple[int | None, str | None, int | None]


def _rows(cur: Any, sql: str) -> list[tuple[Any, ...]]:
    cur.execute(sql)
    return sorted(cur.fetchall(), key=repr)


def _write(directory: Path, name: str, fmt: str, records: list[Record]) -> None:
    """`records` (k, v, n) as a file of format `fmt`, written aside and renamed in."""
    part = directory / f".{name}.part"
    if fmt == "csv":
        part.write_text(
            "k,v,n\n" + "".join(f"{_cell(k)},{_cell(v)},{_cell(n)}\n" for k, v, n in records)
        )
    elif fmt == "json":
        part.write_text("".join(json.dumps({"k": k, "v": v, "n": n}) + "\n" for k, v, n in records))
    else:
        columns = list(zip(*records, strict=True)) if records else [(), (), ()]
        table = pa.table(
            [
                pa.array(columns[0], pa.int32()),
                pa.array(columns[1], pa.string()),
                pa.array(columns[2], pa.int32()),
            ],
            names=["k", "v", "n"],
        )
        pq.write_table(table, part)
    os.replace(part, directory / name)


def _cell(value: Any) -> str:
    """A CSV field: NULL as COPY's (an unquoted empty field), text quoted."""
    if value is None:
        return ""
    if isinstance(value, str):
        return '"' + value.replace('"', '""') + '"'
    return str(value)


def _replay(state: dict[int, tuple[Any, ...]], records: list[Record]) -> None:
    """The upsert envelope by hand: a record replaces its key's row; all-NULL values delete."""
    for k, v, n in records:
        assert k is not None
        if v is None and n is None:
            state.pop(k, None)
        else:
            state[k] = (k, v, n)


def _source(cur: Any, inbox: Path, fmt: str, on_error: str = "report") -> None:
    cur.execute(
        f"CREATE SOURCE s (k int, v text, n int) FROM FILES '{inbox}' "
        f"WITH (FORMAT = '{fmt}', ON ERROR = '{on_error}') KEY (k) ENVELOPE UPSERT"
    )


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    return tmp_path / "in"


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_records_replace_their_keys_row_and_tombstones_delete(inbox: Path, fmt: str) -> None:
    cur = dsql.connect(kernel="local", allowed_paths=[inbox]).cursor()
    _source(cur, inbox, fmt)
    # one poll, two files: by name, then by line; the last record of a key wins
    _write(inbox, f"a.{fmt}", fmt, [(1, "a", 1), (2, "b", 2), (1, "c", 3)])
    _write(inbox, f"b.{fmt}", fmt, [(3, "x", 5), (1, "d", 4)])
    assert _rows(cur, "SELECT * FROM s") == [(1, "d", 4), (2, "b", 2), (3, "x", 5)]
    # a tombstone deletes; one for a key with no row changes nothing; NULL in some
    # value columns is a row
    _write(inbox, f"c.{fmt}", fmt, [(2, None, None), (9, None, None), (3, None, 7)])
    assert _rows(cur, "SELECT * FROM s") == [(1, "d", 4), (3, None, 7)]
    # deleted, then back within one poll: the last record wins
    _write(inbox, f"d.{fmt}", fmt, [(1, None, None), (1, "e", 8), (3, "y", 1), (3, None, None)])
    assert _rows(cur, "SELECT * FROM s") == [(1, "e", 8)]
    assert _rows(cur, "SELECT count(*), count(DISTINCT k) FROM s") == [(1, 1)]


def test_an_update_is_a_retraction_and_an_insertion_at_one_time(inbox: Path) -> None:
    cur = dsql.connect(kernel="local", allowed_paths=[inbox]).cursor()
    _source(cur, inbox, "csv")
    _write(inbox, "a.csv", "csv", [(1, "a", 1), (2, "b", 2)])
    cur.execute("ADVANCE BY 1")
    cur.execute("SUBSCRIBE s WITH (SNAPSHOT = false)")
    other = cur.connection.cursor()
    _write(inbox, "b.csv", "csv", [(1, "z", 9), (2, "b", 2), (2, None, None)])
    other.execute("ADVANCE BY 1")
    updates = cur.fetchall(timeout=5)
    assert len({u[0] for u in updates}) == 1  # one mz_timestamp
    assert sorted(u[1:] for u in updates) == [(-1, 1, "a", 1), (-1, 2, "b", 2), (1, 1, "z", 9)]


def test_views_over_an_upsert_source_equal_recomputation(inbox: Path) -> None:
    cur = dsql.connect(kernel="local", allowed_paths=[inbox]).cursor()
    _source(cur, inbox, "csv")
    cur.execute("CREATE TABLE names (v text, label text)")
    cur.execute("INSERT INTO names VALUES ('a', 'A'), ('b', 'B'), ('c', 'C')")
    cur.execute(
        "CREATE MATERIALIZED VIEW totals AS SELECT v, count(*) AS c, sum(n) AS s FROM s GROUP BY v"
    )
    cur.execute(
        "CREATE MATERIALIZED VIEW labelled AS SELECT s.k, names.label FROM s JOIN names USING (v)"
    )
    state: dict[int, tuple[Any, ...]] = {}
    polls: list[list[Record]] = [
        [(1, "a", 1), (2, "b", 2), (3, "a", 3)],
        [(1, "b", 10), (4, "c", 4)],
        [(2, None, None), (3, "c", 5), (5, "a", None)],
        [(1, None, None), (4, "a", 1), (4, "b", 2)],
    ]
    for i, records in enumerate(polls):
        _write(inbox, f"f{i}.csv", "csv", records)
        cur.execute("ADVANCE BY 1")
        _replay(state, records)
        want: dict[str, list[Any]] = {}
        for _, v, n in state.values():
            c, s = want.get(v, [0, None])
            want[v] = [c + 1, s if n is None else (s or 0) + n]
        assert _rows(cur, "SELECT * FROM totals") == sorted(
            ((v, c, s) for v, (c, s) in want.items()), key=repr
        )
        label = {"a": "A", "b": "B", "c": "C"}
        assert _rows(cur, "SELECT * FROM labelled") == sorted(
            ((k, label[v]) for k, v, _ in state.values() if v in label), key=repr
        )


@pytest.mark.parametrize("checkpoint_bytes", [None, 1], ids=["log", "checkpoint"])
def test_a_restart_rebuilds_the_state_from_the_relation(
    tmp_path: Path, inbox: Path, checkpoint_bytes: Any
) -> None:
    data = tmp_path / "data"

    def connect() -> Any:
        return dsql.connect(
            kernel="local",
            data_dir=data,
            allowed_paths=[inbox],
            checkpoint_bytes=checkpoint_bytes,
        )

    con = connect()
    _source(con.cursor(), inbox, "csv")
    con.execute("CREATE MATERIALIZED VIEW total AS SELECT count(*) AS c, sum(n) AS s FROM s")
    state: dict[int, tuple[Any, ...]] = {}
    for i, records in enumerate([[(1, "a", 1), (2, "b", 2)], [(1, "c", 3), (3, "d", 4)]]):
        _write(inbox, f"f{i}.csv", "csv", records)
        con.execute("ADVANCE BY 1")
        _replay(state, records)
    assert _rows(con.cursor(), "SELECT * FROM s") == sorted(state.values())
    con.close()

    con = connect()
    cur = con.cursor()
    assert _rows(cur, "SELECT * FROM s") == sorted(state.values())  # no file read again
    # the recovered relation is the state: these retract the rows logged before
    later: list[Record] = [(1, "e", 5), (2, None, None), (4, "f", 6)]
    _write(inbox, "f2.csv", "csv", later)
    cur.execute("ADVANCE BY 1")
    _replay(state, later)
    assert _rows(cur, "SELECT * FROM s") == sorted(state.values())
    assert _rows(cur, "SELECT count(*), count(DISTINCT k) FROM s") == [(len(state), len(state))]
    assert _rows(cur, "SELECT * FROM total") == [(len(state), sum(n for _, _, n in state.values()))]
    con.close()

    con = connect()
    assert _rows(con.cursor(), "SELECT * FROM s") == sorted(state.values())
    con.close()


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_a_null_key_fails_its_file_naming_the_line(inbox: Path, fmt: str) -> None:
    cur = dsql.connect(kernel="local", allowed_paths=[inbox]).cursor()
    _source(cur, inbox, fmt)
    _write(inbox, f"a.{fmt}", fmt, [(1, "a", 1)])
    cur.execute("ADVANCE BY 1")
    _write(inbox, f"b.{fmt}", fmt, [(1, "b", 2), (None, "x", 3), (2, "c", 4)])
    with pytest.warns(DsqlWarning) as caught:
        cur.execute("ADVANCE BY 1")
    (message,) = [str(w.message) for w in caught]
    where = "line 3" if fmt == "csv" else "record 2"  # CSV's line 1 is its header
    assert f"b.{fmt}" in message and "null value in key (k)" in message and where in message
    assert _rows(cur, "SELECT * FROM s") == [(1, "a", 1)]  # the file adds nothing
    (error,) = [r[-1] for r in _rows(cur, "SHOW SOURCES")]
    assert f"b.{fmt}" in error
    _write(inbox, f"c.{fmt}", fmt, [(1, None, None)])  # the source goes on
    assert _rows(cur, "SELECT * FROM s") == []


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_bad_records_go_to_quarantine_and_the_rest_is_applied(inbox: Path, fmt: str) -> None:
    cur = dsql.connect(kernel="local", allowed_paths=[inbox]).cursor()
    _source(cur, inbox, fmt, on_error="quarantine")
    _write(inbox, f"a.{fmt}", fmt, [(1, "a", 1), (None, "x", 3), (2, "c", 4), (1, "d", 5)])
    assert _rows(cur, "SELECT * FROM s") == [(1, "d", 5), (2, "c", 4)]
    quarantined = _rows(cur, "SELECT file, line, error FROM s_quarantine")
    line = 3 if fmt == "csv" else 2
    assert quarantined == [(f"a.{fmt}", line, "null value in key (k) of an upsert source")]
    if fmt == "csv":  # a value that does not read is quarantined too, with its line
        _write(inbox, "b.csv", "csv", [(2, None, None)])
        (inbox / "c.csv").write_text("k,v,n\n3,ok,1\n4,bad,notanumber\n")
        assert _rows(cur, "SELECT * FROM s") == [(1, "d", 5), (3, "ok", 1)]
        assert ("c.csv", 3) in _rows(cur, "SELECT file, line FROM s_quarantine")


@pytest.mark.parametrize(
    ("clause", "message"),
    [
        ("KEY (k, v, n) ENVELOPE UPSERT", "covers every column"),
        ("KEY (z) ENVELOPE UPSERT", "key column 'z' is not a column"),
        ("KEY (k, k) ENVELOPE UPSERT", "names a column twice"),
        ("ENVELOPE UPSERT", "ENVELOPE UPSERT needs KEY"),
        ("KEY (k)", "ENVELOPE UPSERT needs KEY"),
        ("KEY (k) ENVELOPE DEBEZIUM", "unknown source envelope 'debezium'"),
    ],
)
def test_a_key_that_cannot_work_is_refused(inbox: Path, clause: str, message: str) -> None:
    cur = dsql.connect(kernel="local", allowed_paths=[inbox]).cursor()
    with pytest.raises(dsql.Error, match=message.replace("(", r"\(").replace(")", r"\)")):
        cur.execute(
            f"CREATE SOURCE s (k int, v text, n int) FROM FILES '{inbox}' "
            f"WITH (FORMAT = 'csv') {clause}"
        )
    assert "s" not in {r[0] for r in _rows(cur, "SHOW SOURCES")}
    cur.execute(
        f"CREATE SOURCE s (k int, v text) FROM FILES '{inbox}' WITH (FORMAT = 'csv') ENVELOPE NONE"
    )


_records = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.one_of(st.none(), st.sampled_from(["a", "b", "c,d", 'q"u'])),
        st.one_of(st.none(), st.integers(-3, 3)),
    ),
    max_size=6,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    polls=st.lists(st.lists(_records, max_size=3), min_size=1, max_size=5),
    fmt=st.sampled_from(["csv", "json", "parquet"]),
)
def test_the_source_equals_a_dict_replay_after_every_poll(
    tmp_path_factory: pytest.TempPathFactory, polls: list[list[list[Record]]], fmt: str
) -> None:
    inbox = tmp_path_factory.mktemp("in")
    cur = dsql.connect(kernel="local", allowed_paths=[inbox]).cursor()
    _source(cur, inbox, fmt)
    state: dict[int, tuple[Any, ...]] = {}
    for p, files in enumerate(polls):
        for f, records in enumerate(files):
            _write(inbox, f"p{p:02d}-f{f}.{fmt}", fmt, records)
            _replay(state, records)
        cur.execute("ADVANCE BY 1")
        assert _rows(cur, "SELECT * FROM s") == sorted(state.values(), key=repr)


def test_not_null_value_columns_take_tombstones_but_no_stored_null(inbox: Path) -> None:
    cur = dsql.connect(kernel="local", allowed_paths=[inbox]).cursor()
    cur.execute(
        f"CREATE SOURCE s (k int, v text NOT NULL, n int) FROM FILES '{inbox}' "
        "WITH (FORMAT = 'csv') KEY (k) ENVELOPE UPSERT"
    )
    _write(inbox, "a.csv", "csv", [(1, "a", 1), (2, "b", 2)])
    _write(inbox, "b.csv", "csv", [(1, None, None)])  # a tombstone: nothing stored is NULL
    assert _rows(cur, "SELECT * FROM s") == [(2, "b", 2)]
    _write(inbox, "c.csv", "csv", [(3, "c", 3), (2, None, 5)])  # a row with a NULL v
    with pytest.warns(DsqlWarning, match='null value in column "v"'):
        cur.execute("ADVANCE BY 1")
    assert _rows(cur, "SELECT * FROM s") == [(2, "b", 2)]


_WRITER = """
import os, random, sys
import dsql
data, inbox, start, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
con = dsql.connect(kernel="local", data_dir=data, allowed_paths=[inbox], checkpoint_bytes=6000)
con.execute(
    f"CREATE SOURCE IF NOT EXISTS s (k int, v text, n int) FROM FILES '{inbox}' "
    "WITH (FORMAT = 'csv') KEY (k) ENVELOPE UPSERT"
)
con.execute(
    "CREATE MATERIALIZED VIEW IF NOT EXISTS tot AS SELECT v, count(*) AS c, sum(n) AS s "
    "FROM s GROUP BY v"
)
rng = random.Random(seed)
for i in range(start, start + 10_000):
    lines = []
    for _ in range(rng.randint(1, 8)):
        k, v, n = rng.randint(0, 15), rng.choice("abc"), rng.randint(0, 9)
        lines.append(f"{k},," if rng.random() < 0.25 else f"{k},{v},{n}")
    part = os.path.join(inbox, f".{i:06d}.part")
    with open(part, "w") as f:
        f.write("k,v,n\\n" + "\\n".join(lines) + "\\n")
    os.replace(part, os.path.join(inbox, f"{i:06d}.csv"))
    con.execute("SELECT count(*) FROM s")  # each statement polls first
"""


def test_kill9_while_upserting_loses_and_repeats_no_record(tmp_path: Path) -> None:
    """A writer killed with SIGKILL at random moments (checkpoints every few polls): on
    restart the source equals the dict replay of every file that arrived (each applied
    once, in name order), and its view equals that replay aggregated."""
    import random
    import signal
    import subprocess
    import sys
    import time

    data, inbox = tmp_path / "data", tmp_path / "in"
    inbox.mkdir()
    rng = random.Random(39)
    arrived: list[int] = []
    env = {**os.environ, "PYTHONPATH": str(Path(dsql.__file__).parent.parent)}
    for cycle in range(6):
        start = len(list(inbox.glob("*.csv")))
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(data), str(inbox), str(start), str(cycle)],
            env=env,
        )
        if cycle % 2:  # while it recovers or creates, or as it writes
            time.sleep(rng.uniform(0.5, 3.0))
        else:  # once it writes, whatever the machine's load
            deadline = time.monotonic() + 60
            while len(list(inbox.glob("*.csv"))) == start and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.0))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        con = dsql.connect(kernel="local", data_dir=data, allowed_paths=[inbox])
        try:
            if "s" not in {r[0] for r in con.execute("SHOW SOURCES").fetchall()}:
                continue  # killed before its CREATE SOURCE was logged
            state: dict[int, tuple[Any, ...]] = {}
            for path in sorted(inbox.glob("*.csv")):
                records = []
                for line in path.read_text().splitlines()[1:]:
                    k, v, n = line.split(",")
                    records.append((int(k), v or None, int(n) if n else None))
                _replay(state, records)
            cur = con.cursor()
            arrived.append(len(list(inbox.glob("*.csv"))))
            assert _rows(cur, "SELECT * FROM s") == sorted(state.values(), key=repr)
            want: dict[str, tuple[int, int]] = {}
            for _, v, n in state.values():
                c, s = want.get(v, (0, 0))
                want[v] = (c + 1, s + n)
            if not _rows(cur, "SHOW MATERIALIZED VIEWS"):
                continue  # killed before its CREATE MATERIALIZED VIEW was logged
            assert _rows(cur, "SELECT * FROM tot") == sorted(
                ((v, c, s) for v, (c, s) in want.items()), key=repr
            )
        finally:
            con.close()
    assert len(arrived) >= 3 and arrived[-1] > arrived[0] > 0  # the kills hit a running writer
