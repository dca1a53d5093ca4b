"""Delta Lake sources and sinks (`dsql.delta_source`, `dsql.delta_sink`): a source equals
its Delta table after every version (the change data feed's updates and deletes
included), a view over it equals its query recomputed; a removal without the feed stops
the source rather than guess; sinks hold each closed millisecond exactly once, across
restarts and a SIGKILL on either side of the Delta commit."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

import dsql
from dsql.errors import AccessError, DsqlWarning, SchemaError, SourceError

FEED = {"delta.enableChangeDataFeed": "true"}

#: The view over the source, and the same query for DuckDB over the Delta snapshot.
VIEW = "SELECT v, count(*) AS n, sum(x) AS total FROM s GROUP BY v"


def _rows(con: Any, sql: str) -> list[tuple[Any, ...]]:
    return sorted(con.execute(sql).fetchall(), key=repr)


def _batch(ks: list[int], vs: list[str | None], xs: list[int]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array(ks, pa.int32()),
            "v": pa.array(vs, pa.string()),
            "x": pa.array(xs, pa.int64()),
        }
    )


def _delta_rows(path: Path) -> list[tuple[Any, ...]]:
    snapshot = DeltaTable(str(path)).to_pyarrow_table().cast(_batch([], [], []).schema)
    return sorted(((r["k"], r["v"], r["x"]) for r in snapshot.to_pylist()), key=repr)


def _recomputed(path: Path) -> list[tuple[Any, ...]]:
    """VIEW evaluated from scratch by DuckDB over the table's current snapshot."""
    s = DeltaTable(str(path)).to_pyarrow_table().cast(_batch([], [], []).schema)  # noqa: F841
    return sorted(duckdb.sql(VIEW).fetchall(), key=repr)


def _check(con: Any, path: Path) -> None:
    """The source equals the table, the view equals its query recomputed over it."""
    con.execute("ADVANCE BY 1")  # polls first: the versions since land at one time
    assert _rows(con, "SELECT k, v, x FROM s") == _delta_rows(path)
    assert _rows(con, "SELECT * FROM m") == _recomputed(path)


def test_a_source_follows_appends_updates_deletes_and_merges_with_the_feed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t"
    write_deltalake(
        str(path), _batch([1, 2, 3], ["a", "b", None], [10, 20, 30]), configuration=FEED
    )
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    con.execute(f"CREATE SOURCE s FROM DELTA '{path}'")
    assert con.execute("SHOW COLUMNS FROM s").fetchall() == [
        ("k", True, "int"),
        ("v", True, "text"),
        ("x", True, "bigint"),
    ]
    con.execute(f"CREATE MATERIALIZED VIEW m AS {VIEW}")
    _check(con, path)
    table = DeltaTable(str(path))
    write_deltalake(str(path), _batch([4, 5], ["a", "c"], [1, 2]), mode="append")
    _check(con, path)
    table = DeltaTable(str(path))
    table.update(updates={"v": "'b'", "x": "x + 100"}, predicate="k = 1")
    _check(con, path)
    table.delete("v = 'b'")
    _check(con, path)
    source = _batch([3, 6], ["z", "a"], [33, 6])
    (
        table.merge(source, "t.k = s.k", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    _check(con, path)
    # Several versions between two polls, an update then a delete of the same row.
    table.update(updates={"x": "0"}, predicate="k = 6")
    table.delete("k = 6")
    write_deltalake(str(path), _batch([7], [None], [7]), mode="append")
    _check(con, path)
    write_deltalake(str(path), _batch([8], ["q"], [8]), mode="overwrite")
    _check(con, path)
    (row,) = con.execute("SHOW SOURCES").fetchall()
    assert row[2:4] == ("delta", DeltaTable(str(path)).version()) and row[5] is None


@pytest.mark.parametrize("seed", [1, 2])
def test_random_versions_keep_the_view_equal_to_recomputation(tmp_path: Path, seed: int) -> None:
    """Seeded random appends, updates, deletes and merges, polled after one to three
    versions at a time; AS OF each polled time the view is what the table was then."""
    rng = random.Random(seed)
    path = tmp_path / "t"
    write_deltalake(str(path), _batch([0], ["a"], [0]), configuration=FEED)
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    con.execute(f"CREATE SOURCE s FROM DELTA '{path}'")
    con.execute(f"CREATE MATERIALIZED VIEW m WITH (RETAIN HISTORY FOR '1 hour') AS {VIEW}")
    then: dict[int, list[tuple[Any, ...]]] = {}
    for _ in range(8):
        for _version in range(rng.randint(1, 3)):
            table, k = DeltaTable(str(path)), rng.randint(0, 9)
            match rng.choice(["append", "update", "delete", "merge"]):
                case "append":
                    n = rng.randint(1, 3)
                    ks = [rng.randint(0, 9) for _ in range(n)]
                    vs = [rng.choice(["a", "b", None]) for _ in range(n)]
                    write_deltalake(str(path), _batch(ks, vs, ks), mode="append")
                case "update":
                    table.update(updates={"x": "x + 1", "v": "'b'"}, predicate=f"k <= {k}")
                case "delete":
                    table.delete(f"k = {k}")
                case "merge":
                    (
                        table.merge(_batch([k], ["c"], [k]), "t.k = s.k", "s", "t")
                        .when_matched_delete()
                        .when_not_matched_insert_all()
                        .execute()
                    )
        _check(con, path)
        then[con.execute("SELECT mz_now()").fetchone()[0] - 1] = _recomputed(path)
    for ms, want in then.items():
        assert _rows(con, f"SELECT * FROM m AS OF {ms}") == want


def test_a_waiting_fetch_reads_new_versions_under_the_wall_clock(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), _batch([1], ["a"], [1]), configuration=FEED)
    con = dsql.connect(kernel="local", clock="wall", allowed_paths=[tmp_path])
    cur = con.cursor()
    cur.execute(f"CREATE SOURCE s FROM DELTA '{path}'")
    cur.execute("SUBSCRIBE (SELECT sum(x) AS total FROM s)")
    DeltaTable(str(path)).update(updates={"x": "41"}, predicate="k = 1")
    deadline = time.monotonic() + 30
    got: list[Any] = []
    while not any(u[-1] == 41 for u in got) and time.monotonic() < deadline:
        got += cur.fetchall(timeout=1)  # no statement runs: the wait itself polls
    assert [(u[1], u[-1]) for u in got if u[-1] == 41] == [(1, 41)]


def test_appends_without_the_feed_are_read_from_their_files(tmp_path: Path) -> None:
    """Partitioned appends: the partition column is no part of the data files."""
    path = tmp_path / "t"
    write_deltalake(str(path), _batch([1, 2], ["a", "b"], [1, 2]), partition_by=["v"])
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    con.execute(f"CREATE SOURCE s FROM DELTA '{path}'")
    con.execute(f"CREATE MATERIALIZED VIEW m AS {VIEW}")
    _check(con, path)
    write_deltalake(str(path), _batch([3, 4], ["a", None], [3, 4]), mode="append")
    write_deltalake(str(path), _batch([5], ["c"], [5]), mode="append")
    _check(con, path)
    DeltaTable(str(path)).optimize.compact()  # rewrites files, changes no row
    _check(con, path)


@pytest.mark.parametrize("change", ["delete", "overwrite"])
def test_a_removal_without_the_feed_stops_the_source(tmp_path: Path, change: str) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), _batch([1, 2], ["a", "b"], [1, 2]))
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    con.execute(f"CREATE SOURCE s FROM DELTA '{path}'")
    con.execute(f"CREATE MATERIALIZED VIEW m AS {VIEW}")
    _check(con, path)
    before = _rows(con, "SELECT k, v, x FROM s")
    if change == "delete":
        DeltaTable(str(path)).delete("k = 1")
    else:
        write_deltalake(str(path), _batch([9], ["z"], [9]), mode="overwrite")
    with pytest.warns(DsqlWarning, match="stopped at version 1.*change data feed"):
        con.execute("ADVANCE BY 1")
    write_deltalake(str(path), _batch([3], ["c"], [3]), mode="append")
    con.execute("ADVANCE BY 1")
    assert _rows(con, "SELECT k, v, x FROM s") == before  # the last version it could read
    (row,) = con.execute("SHOW SOURCES").fetchall()
    assert row[2] == "delta" and row[3] == 0 and "no change data feed" in row[5]


def test_every_type_dsql_shares_with_delta_goes_through_source_and_sink(
    tmp_path: Path,
) -> None:
    utc = dt.UTC
    typed = pa.table(
        {
            "i16": pa.array([1, 2], pa.int16()),
            "b": pa.array([True, None]),
            "f": pa.array([1.5, None], pa.float32()),
            "d": pa.array([1.25, None]),
            "n": pa.array([decimal.Decimal("1.23"), None], pa.decimal128(10, 2)),
            "day": pa.array([dt.date(2020, 1, 2), None]),
            "ts": pa.array([dt.datetime(2020, 1, 2, 3, 4, 5, 6), None], pa.timestamp("us")),
            "tz": pa.array(
                [dt.datetime(2020, 1, 2, 3, tzinfo=utc), None], pa.timestamp("us", "UTC")
            ),
            "by": pa.array([b"\x00x", None]),
            "arr": pa.array([[1, None], None], pa.list_(pa.int64())),
        }
    )
    write_deltalake(str(tmp_path / "t"), typed, configuration=FEED)
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    con.execute(f"CREATE SOURCE s FROM DELTA '{tmp_path / 't'}'")
    assert [r[2] for r in con.execute("SHOW COLUMNS FROM s").fetchall()] == [
        "smallint",
        "boolean",
        "real",
        "double precision",
        "decimal(10, 2)",
        "date",
        "timestamp",
        "timestamptz",
        "bytea",
        "bigint[]",
    ]
    con.execute(f"CREATE SINK d FROM s INTO DELTA '{tmp_path / 'diff'}'")
    con.execute(f"CREATE SINK u FROM s INTO DELTA '{tmp_path / 'up'}' KEY (i16) ENVELOPE UPSERT")
    con.execute("ADVANCE BY 1")
    DeltaTable(str(tmp_path / "t")).delete("i16 = 2")
    con.execute("ADVANCE BY 1")
    con.execute("ADVANCE BY 1")
    want = typed.slice(0, 1).to_pylist()
    assert con.execute("SELECT count(*) FROM s").fetchall() == [(1,)]
    assert DeltaTable(str(tmp_path / "up")).to_pyarrow_table().to_pylist() == want
    diff = DeltaTable(str(tmp_path / "diff")).to_pyarrow_table()
    assert sorted(diff.drop_columns(["mz_timestamp"]).to_pylist(), key=repr) == sorted(
        [{"mz_diff": 1, **r} for r in typed.to_pylist()]
        + [{"mz_diff": -1, **typed.to_pylist()[1]}],
        key=repr,
    )


@pytest.mark.parametrize("into", ["FILES", "DELTA"])
def test_an_upsert_sink_takes_array_columns(tmp_path: Path, into: str) -> None:
    """The upsert envelope counts rows by value: arrays among them are values too (a
    FILES sink may even key by one; a Delta merge cannot match on one)."""
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    con.execute("CREATE TABLE t (k int, a int[], b int[])")
    if into == "DELTA":
        with pytest.raises(dsql.Error, match='key column "a" is an array'):
            con.execute(
                f"CREATE SINK u FROM t INTO DELTA '{tmp_path / 'x'}' KEY (a) ENVELOPE UPSERT"
            )
    key = "a" if into == "FILES" else "k"
    con.execute(
        f"CREATE SINK u FROM t INTO {into} '{tmp_path / 'out'}' KEY ({key}) ENVELOPE UPSERT"
    )
    con.execute("INSERT INTO t VALUES (1, ARRAY[1], ARRAY[2, NULL]), (3, ARRAY[3], NULL)")
    con.execute("ADVANCE BY 1")
    con.execute("UPDATE t SET b = ARRAY[4] WHERE k = 1")
    con.execute("ADVANCE BY 1")
    con.close()
    want = [{"k": 1, "a": [1], "b": [4]}, {"k": 3, "a": [3], "b": None}]
    if into == "DELTA":
        rows = DeltaTable(str(tmp_path / "out")).to_pyarrow_table().to_pylist()
    else:
        latest: dict[Any, dict[str, Any]] = {}
        for f in sorted((tmp_path / "out").iterdir()):
            for r in pq.read_table(f).to_pylist():
                assert r.pop("mz_timestamp") >= 0 and r.pop("mz_state") == "upsert"
                latest[tuple(r["a"])] = r
        rows = list(latest.values())
    assert sorted(rows, key=repr) == want


def test_bad_places_and_types_are_refused(tmp_path: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    with pytest.raises(SourceError, match="no such Delta table"):
        con.execute(f"CREATE SOURCE s FROM DELTA '{tmp_path / 'missing'}'")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.parquet").write_bytes(b"")
    with pytest.raises(SourceError, match="not a Delta table"):
        con.execute(f"CREATE SOURCE s FROM DELTA '{tmp_path / 'plain'}'")
    write_deltalake(str(tmp_path / "gone"), _batch([1], ["a"], [1]))
    con.execute(f"CREATE SOURCE g FROM DELTA '{tmp_path / 'gone'}'")
    con.execute("ADVANCE BY 1")
    shutil.rmtree(tmp_path / "gone")
    with pytest.warns(DsqlWarning, match="source 'g' cannot read its table: no such Delta table"):
        con.execute("ADVANCE BY 1")
    assert con.execute("SELECT k FROM g").fetchall() == [(1,)]  # told once
    assert "no such Delta table" in con.execute("SHOW SOURCES").fetchall()[0][5]
    con.execute("DROP SOURCE g")
    nested = pa.table({"k": [1], "m": pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))})
    write_deltalake(str(tmp_path / "nested"), nested)
    with pytest.raises(SchemaError, match='column "m" .* no type for'):
        con.execute(f"CREATE SOURCE s FROM DELTA '{tmp_path / 'nested'}'")
    con.execute("CREATE TABLE t (k int, d interval)")
    with pytest.raises(SourceError, match="not a Delta table"):
        con.execute(f"CREATE SINK k FROM t INTO DELTA '{tmp_path / 'plain'}'")
    with pytest.raises(dsql.Error, match="interval"):
        con.execute(f"CREATE SINK k FROM t INTO DELTA '{tmp_path / 'out'}'")
    assert con.execute("SHOW SINKS").fetchall() == []
    assert "s" not in {r[0] for r in con.execute("SHOW SOURCES").fetchall()}


def test_the_sandbox_refuses_a_path_not_named(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), _batch([1], ["a"], [1]))
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path / "elsewhere"])
    with pytest.raises(AccessError, match="outside the paths SQL may reach"):
        con.execute(f"CREATE SOURCE s FROM DELTA '{path}'")
    con.execute("CREATE TABLE t (k int)")
    with pytest.raises(AccessError, match="outside the paths SQL may reach"):
        con.execute(f"CREATE SINK k FROM t INTO DELTA '{tmp_path / 'out'}'")
    assert not (tmp_path / "out").exists()


def test_a_data_file_outside_the_sandbox_stops_the_source(tmp_path: Path) -> None:
    """A Delta log may name a file by absolute path (shallow clones do): read only if
    the sandbox allows it there too."""
    allowed, secret = tmp_path / "allowed", tmp_path / "secret.parquet"
    path = allowed / "t"
    write_deltalake(str(path), _batch([1], ["a"], [1]))
    pq.write_table(_batch([2], ["secret"], [2]), secret)
    add = {
        "path": secret.as_uri(),
        "partitionValues": {},
        "size": secret.stat().st_size,
        "modificationTime": 0,
        "dataChange": True,
    }
    con = dsql.connect(kernel="local", allowed_paths=[allowed])
    con.execute(f"CREATE SOURCE s FROM DELTA '{path}'")
    con.execute("ADVANCE BY 1")
    (path / "_delta_log" / f"{1:020d}.json").write_text(json.dumps({"add": add}) + "\n")
    with pytest.warns(DsqlWarning, match="stopped at version 1.*outside the paths"):
        con.execute("ADVANCE BY 1")
    assert con.execute("SELECT k, v, x FROM s").fetchall() == [(1, "a", 1)]


# --- sinks -------------------------------------------------------------------------------
def _history(path: Path) -> Counter[tuple[Any, ...]]:
    """A diff sink's rows: (mz_timestamp, mz_diff, columns...) counted."""
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return Counter(tuple(r.values()) for r in rows)


def _rows_at(path: Path, version: int) -> Counter[tuple[Any, ...]]:
    rows = DeltaTable(str(path), version=version).to_pyarrow_table().to_pylist()
    return Counter(tuple(r.values()) for r in rows)


def _accumulated(history: Counter[tuple[Any, ...]], ms: int) -> list[tuple[Any, ...]]:
    """What a diff sink's rows up to `ms` add up to, as sorted rows."""
    total: Counter[tuple[Any, ...]] = Counter()
    for (at, diff, *row), count in history.items():
        if at <= ms:
            total[tuple(row)] += diff * count
    assert all(n >= 0 for n in total.values())
    return sorted((r for r, n in total.items() for _ in range(n)), key=repr)


def _upserted(path: Path) -> list[tuple[Any, ...]]:
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return sorted((tuple(r.values()) for r in rows), key=repr)


WRITES = [
    "INSERT INTO t VALUES (1, 'a', 1), (2, 'a', 2), (3, NULL, 3)",
    "UPDATE t SET x = x * 10 WHERE k = 1",
    "DELETE FROM t WHERE k = 2",
    "INSERT INTO t VALUES (4, 'b', 4), (5, NULL, 5)",
    "DELETE FROM t WHERE v IS NULL",
    "UPDATE t SET v = 'c' WHERE v = 'a'",
]


def _sinks(con: Any, tmp_path: Path) -> None:
    con.execute("CREATE TABLE t (k int, v text, x bigint)")
    con.execute(
        "CREATE MATERIALIZED VIEW m AS SELECT v, count(*) AS n, sum(x) AS total FROM t GROUP BY v"
    )
    con.execute(f"CREATE SINK d FROM m INTO DELTA '{tmp_path / 'diff'}'")
    con.execute(f"CREATE SINK u FROM m INTO DELTA '{tmp_path / 'upsert'}' KEY (v) ENVELOPE UPSERT")


def test_sinks_hold_the_views_history_and_state(tmp_path: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    _sinks(con, tmp_path)
    states = {}
    for sql in WRITES:
        con.execute(sql)
        states[con.execute("SELECT mz_now()").fetchone()[0]] = _rows(con, "SELECT * FROM m")
        con.execute("ADVANCE BY 3")  # closes the write's millisecond: the sinks flush
        assert _upserted(tmp_path / "upsert") == _rows(con, "SELECT * FROM m")
    history = _history(tmp_path / "diff")
    for ms, want in states.items():
        assert _accumulated(history, ms) == want
    diff, upsert = DeltaTable(str(tmp_path / "diff")), DeltaTable(str(tmp_path / "upsert"))
    through = {r[0]: r[4] for r in con.execute("SHOW SINKS").fetchall()}
    assert diff.transaction_version("dsql-sink-d") == through["d"]
    assert upsert.transaction_version("dsql-sink-u") == through["u"]
    # One commit per flush with changes (each write here), after the empty creation.
    assert diff.version() == upsert.version() == len(WRITES)


def test_an_upsert_key_with_several_rows_has_none_in_the_table(tmp_path: Path) -> None:
    """A Delta table holds one row per key: a key violation removes the key's row until
    the relation has one row for it again."""
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    con.execute("CREATE TABLE t (k int, v text)")
    con.execute(f"CREATE SINK u FROM t INTO DELTA '{tmp_path / 'up'}' KEY (k) ENVELOPE UPSERT")
    steps = [
        ("INSERT INTO t VALUES (1, 'a'), (2, 'x')", [(1, "a"), (2, "x")]),
        ("INSERT INTO t VALUES (1, 'b')", [(2, "x")]),
        ("DELETE FROM t WHERE v = 'a'", [(1, "b"), (2, "x")]),
        # Key 3 comes and goes: its 'delete' meets no row, and the commit still records
        # the progress.
        ("INSERT INTO t VALUES (3, 'y'), (3, 'z')", [(1, "b"), (2, "x")]),
    ]
    for sql, want in steps:
        con.execute(sql)
        con.execute("ADVANCE BY 1")
        assert _upserted(tmp_path / "up") == want
        through = con.execute("SHOW SINKS").fetchall()[0][4]
        assert DeltaTable(str(tmp_path / "up")).transaction_version("dsql-sink-u") == through


@pytest.mark.parametrize("checkpoint_bytes", [None, 1], ids=["log", "checkpoint"])
def test_restarts_read_each_version_and_write_each_millisecond_once(
    tmp_path: Path, checkpoint_bytes: int | None
) -> None:
    data, path = tmp_path / "data", tmp_path / "t"
    write_deltalake(str(path), _batch([1, 2], ["a", "b"], [1, 2]), configuration=FEED)

    def connect() -> Any:
        return dsql.connect(
            kernel="local",
            data_dir=data,
            allowed_paths=[tmp_path],
            checkpoint_bytes=checkpoint_bytes,
        )

    con = connect()
    con.execute(f"CREATE SOURCE s FROM DELTA '{path}'")
    con.execute(f"CREATE MATERIALIZED VIEW m AS {VIEW}")
    con.execute(f"CREATE SINK d FROM m INTO DELTA '{tmp_path / 'diff'}'")
    con.execute(f"CREATE SINK u FROM s INTO DELTA '{tmp_path / 'up'}' KEY (k) ENVELOPE UPSERT")
    _check(con, path)
    DeltaTable(str(path)).update(updates={"x": "x + 1"}, predicate="k = 1")
    _check(con, path)
    con.close()
    # Versions committed while dsql is down are read once, at the first poll after.
    DeltaTable(str(path)).delete("k = 2")
    write_deltalake(str(path), _batch([3], ["a"], [3]), mode="append")
    for _ in range(2):
        con = connect()
        _check(con, path)
        assert _upserted(tmp_path / "up") == _rows(con, "SELECT k, v, x FROM s")
        con.close()
    con = connect()
    con.execute("ADVANCE BY 1")
    history = _history(tmp_path / "diff")
    assert _accumulated(history, 10**15) == _rows(con, "SELECT * FROM m")
    con.execute("DROP SOURCE s CASCADE")
    con.close()
    con = connect()
    assert con.execute("SHOW SOURCES").fetchall() == con.execute("SHOW SINKS").fetchall() == []
    con.close()


def test_a_restart_without_the_table_keeps_the_source_and_its_rows(tmp_path: Path) -> None:
    """The log holds the source's columns: a table gone at restart does not stop the
    recovery; the source says why it reads nothing, and reads again once it is back."""
    data, path = tmp_path / "data", tmp_path / "t"
    write_deltalake(str(path), _batch([1, 2], ["a", "b"], [1, 2]), configuration=FEED)
    con = dsql.connect(kernel="local", data_dir=data, allowed_paths=[tmp_path])
    with pytest.raises(SchemaError, match="are not Delta table"):
        con.execute(f"CREATE SOURCE s (k int, v text) FROM DELTA '{path}'")
    con.execute(f"CREATE SOURCE s (k int, v text, x bigint) FROM DELTA '{path}'")
    con.execute(f"CREATE MATERIALIZED VIEW m AS {VIEW}")
    _check(con, path)
    want = _rows(con, "SELECT * FROM m")
    con.close()
    path.rename(tmp_path / "away")
    con = dsql.connect(kernel="local", data_dir=data, allowed_paths=[tmp_path])
    with pytest.warns(DsqlWarning, match="cannot read its table: no such Delta table"):
        assert _rows(con, "SELECT * FROM m") == want
    assert "no such Delta table" in con.execute("SHOW SOURCES").fetchall()[0][5]
    (tmp_path / "away").rename(path)
    DeltaTable(str(path)).delete("k = 1")
    _check(con, path)
    con.close()


def _killed(script: str, *args: Path | str) -> None:
    """Run `script` in a fresh Python with `args`; it must end killed by SIGKILL."""
    child = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import dsql
    from dsql import delta_sink

    data, path, out, when = sys.argv[1:5]
    original = delta_sink.DeltaTarget.write
    calls = []

    def write(self, first, last, changes):
        calls.append(last)
        if len(calls) == 3 and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        original(self, first, last, changes)
        if len(calls) == 3 and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)

    delta_sink.DeltaTarget.write = write
    con = dsql.connect(kernel="local", data_dir=data, allowed_paths=[os.path.dirname(out)])
    con.execute("CREATE TABLE t (k int, v text, x bigint)")
    con.execute("CREATE MATERIALIZED VIEW m AS SELECT v, count(*) AS n FROM t GROUP BY v")
    con.execute(f"CREATE SINK d FROM m INTO DELTA '{out}'")
    for i in range(6):
        con.execute(f"INSERT INTO t VALUES ({i}, '{'ab'[i % 2]}', {i})")
        con.execute("ADVANCE BY 2")
    print("not killed", flush=True)
    """
)


@pytest.mark.parametrize("when", ["before", "after"])
def test_sigkill_around_the_delta_commit_writes_each_millisecond_once(
    tmp_path: Path, when: str
) -> None:
    data, out = tmp_path / "data", tmp_path / "diff"
    _killed(_CHILD, data, tmp_path, out, when)
    committed = DeltaTable(str(out)).version()
    assert committed == (2 if when == "before" else 3)
    con = dsql.connect(kernel="local", data_dir=data, allowed_paths=[tmp_path])
    con.execute("ADVANCE BY 1")
    seen: set[int] = set()
    for version in range(1, DeltaTable(str(out)).version() + 1):  # one commit per flush
        added = _rows_at(out, version) - _rows_at(out, version - 1)
        times = {row[0] for row in added}
        assert not times & seen, f"version {version} repeats milliseconds {times & seen}"
        seen |= times
    assert _accumulated(_history(out), 10**15) == _rows(con, "SELECT * FROM m")
    con.execute("INSERT INTO t VALUES (9, 'c', 9)")
    con.execute("ADVANCE BY 1")
    assert _accumulated(_history(out), 10**15) == _rows(con, "SELECT * FROM m")
    con.close()


_SOURCE_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import pyarrow as pa
    from deltalake import write_deltalake
    import dsql
    from dsql import durable

    data, path, when = sys.argv[1:4]
    original = durable.Durable.polled
    calls = []

    def polled(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2 and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        original(self, *args, **kwargs)
        if len(calls) == 2 and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)

    durable.Durable.polled = polled
    con = dsql.connect(kernel="local", data_dir=data, allowed_paths=[os.path.dirname(path)])
    con.execute(f"CREATE SOURCE s FROM DELTA '{path}'")
    con.execute("ADVANCE BY 1")  # the snapshot: the first poll
    for i in range(3):
        batch = pa.table({"k": pa.array([10 + i], pa.int32()), "v": ["n"], "x": [i]})
        write_deltalake(path, batch, mode="append")
        con.execute("ADVANCE BY 1")
    print("not killed", flush=True)
    """
)


@pytest.mark.parametrize("when", ["before", "after"])
def test_sigkill_around_a_polls_log_record_reads_each_version_once(
    tmp_path: Path, when: str
) -> None:
    data, path = tmp_path / "data", tmp_path / "t"
    write_deltalake(str(path), _batch([1, 2], ["a", "b"], [1, 2]), configuration=FEED)
    _killed(_SOURCE_CHILD, data, path, when)
    con = dsql.connect(kernel="local", data_dir=data, allowed_paths=[tmp_path])
    con.execute("ADVANCE BY 1")
    assert _rows(con, "SELECT k, v, x FROM s") == _delta_rows(path)
    con.close()
