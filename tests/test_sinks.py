"""Sinks (`dsql.sinks`): a relation's files, read back and accumulated, equal the relation
at every millisecond; each millisecond is written once, across restarts and kill -9."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from kill_loop import Say, forking_server, kill_cycles, run_child

import dsql
from dsql.errors import DsqlError, DsqlWarning

VIEWS = {
    "t": None,
    "agg": "SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g",
    "big": "SELECT id, v * 2 AS w FROM t WHERE v > 4",
}


def _files(path: Path) -> list[tuple[int, int, list[dict[str, Any]]]]:
    """The sink's files in order: (first ms, last ms, rows)."""
    found = []
    for name in sorted(os.listdir(path)):
        first, last = name.removesuffix(".parquet").split("-")
        found.append((int(first), int(last), pq.read_table(path / name).to_pylist()))
    return found


def _check_ranges(files: list[tuple[int, int, list[dict[str, Any]]]]) -> None:
    """Ranges follow each other without overlap, and every row is inside its file's."""
    for (_, last, _), (first, _, _) in zip(files, files[1:], strict=False):
        assert first > last, "a millisecond written twice"
    for first, last, rows in files:
        assert all(first <= r["mz_timestamp"] <= last for r in rows)


def _accumulated(
    files: list[tuple[int, int, list[dict[str, Any]]]], through: int
) -> Counter[tuple[Any, ...]]:
    """The diff envelope's rows up to millisecond `through`, as a multiset."""
    bag: Counter[tuple[Any, ...]] = Counter()
    for _, _, rows in files:
        for r in rows:
            if r["mz_timestamp"] <= through:
                bag[tuple(v for k, v in r.items() if k not in ("mz_timestamp", "mz_diff"))] += r[
                    "mz_diff"
                ]
    assert all(n >= 0 for n in bag.values()), "a negative count: a change repeated or lost"
    return +bag


def _upserted(
    files: list[tuple[int, int, list[dict[str, Any]]]], through: int, key: int
) -> Counter[tuple[Any, ...]]:
    """The upsert envelope's state by key up to `through`, as a multiset of rows."""
    state: dict[Any, tuple[Any, ...]] = {}
    for _, _, rows in files:
        for r in rows:
            if r["mz_timestamp"] > through:
                continue
            values = tuple(v for k, v in r.items() if k not in ("mz_timestamp", "mz_state"))
            assert r["mz_state"] in ("upsert", "delete"), r
            if r["mz_state"] == "upsert":
                state[values[key]] = values
            else:
                state.pop(values[key], None)
    return Counter(state.values())


def _contents(con: Any, name: str) -> Counter[tuple[Any, ...]]:
    return Counter(con.execute(f"SELECT * FROM {name}").fetchall())


def _statement(rng: random.Random, next_id: int) -> str:
    roll = rng.random()
    if roll < 0.5:
        rows = ", ".join(
            f"({next_id + i}, {rng.randrange(4)}, {rng.randrange(10)})"
            for i in range(rng.randint(1, 3))
        )
        return f"INSERT INTO t VALUES {rows}"
    if roll < 0.75:
        return f"UPDATE t SET v = {rng.randrange(10)} WHERE id % 7 = {rng.randrange(7)}"
    return f"DELETE FROM t WHERE id % 5 = {rng.randrange(5)}"


def _start(con: Any, root: Path) -> None:
    con.execute("CREATE TABLE t (id int, g int, v int)")
    for name, query in VIEWS.items():
        if query is not None:
            con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
        con.execute(f"CREATE SINK {name}_sink FROM {name} INTO FILES '{root / name}'")
    con.execute(
        f"CREATE SINK agg_upsert FROM agg INTO FILES '{root / 'up'}' KEY (g) ENVELOPE UPSERT"
    )


def _run_history(
    con: Any, rng: random.Random, steps: int, expected: dict[int, dict[str, Any]]
) -> None:
    """Random statements, several per millisecond; `expected[ms]` is each view's contents
    at the end of millisecond ms."""
    next_id = rng.randrange(1000, 10**6)
    for _ in range(steps):
        for _ in range(rng.randint(1, 3)):
            con.execute(_statement(rng, next_id))
            next_id += 3
        ms = con.session.clock.now_ms()
        expected[ms] = {name: _contents(con, name) for name in VIEWS}
        by = rng.randint(1, 3)
        con.execute(f"ADVANCE BY {by}")
        for skipped in range(ms + 1, ms + by):
            expected[skipped] = expected[ms]


def _verify(root: Path, expected: dict[int, dict[str, Any]]) -> None:
    for name in VIEWS:
        files = _files(root / name)
        _check_ranges(files)
        for ms, contents in sorted(expected.items()):
            assert _accumulated(files, ms) == contents[name], (name, ms)
    files = _files(root / "up")
    _check_ranges(files)
    for ms, contents in sorted(expected.items()):
        assert _upserted(files, ms, 0) == contents["agg"], ("upsert", ms)


def test_files_accumulate_to_the_view_at_every_millisecond(tmp_path: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    _start(con, tmp_path)
    expected: dict[int, dict[str, Any]] = {}
    _run_history(con, random.Random(7), 40, expected)
    _verify(tmp_path, expected)
    sinks = con.execute("SHOW SINKS").fetchall()
    assert [s[:3] for s in sinks] == [
        ("agg_sink", "agg", "diff"),
        ("agg_upsert", "agg", "upsert"),
        ("big_sink", "big", "diff"),
        ("t_sink", "t", "diff"),
    ]
    assert {s[4] for s in sinks} == {con.session.clock.now_ms() - 1}


@pytest.mark.parametrize("checkpoint_bytes", [None, 1], ids=["log", "checkpoint"])
def test_restarts_neither_drop_nor_repeat_a_millisecond(
    tmp_path: Path, checkpoint_bytes: int | None
) -> None:
    data = tmp_path / "data"
    rng = random.Random(11)
    expected: dict[int, dict[str, Any]] = {}
    for run in range(4):
        con = dsql.connect(
            kernel="local",
            allowed_paths=[tmp_path],
            data_dir=str(data),
            checkpoint_bytes=checkpoint_bytes,
        )
        if run == 0:
            _start(con, tmp_path)
        # The milliseconds of a restart's open one: a write after a restart joins it.
        _run_history(con, rng, 8, expected)
        con.close()
    _verify(tmp_path, expected)


def test_drop_sink_and_its_errors(tmp_path: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path], data_dir=str(tmp_path / "data"))
    con.execute("CREATE TABLE t (a int)")
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT a FROM t")
    with pytest.raises(DsqlError, match="unknown|does not exist"):
        con.execute(f"CREATE SINK k FROM nope INTO FILES '{tmp_path / 'k'}'")
    assert not (tmp_path / "k").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DsqlError, match="not writable"):
        con.execute(f"CREATE SINK k FROM v INTO FILES '{blocker / 'k'}'")
    with pytest.raises(DsqlError, match="KEY"):
        con.execute(f"CREATE SINK k FROM v INTO FILES '{tmp_path / 'k'}' ENVELOPE UPSERT")
    with pytest.raises(DsqlError, match="key column 'b'"):
        con.execute(f"CREATE SINK k FROM v INTO FILES '{tmp_path / 'k'}' KEY (b) ENVELOPE UPSERT")
    with pytest.raises(DsqlError, match="format"):
        con.execute(f"CREATE SINK k FROM v INTO FILES '{tmp_path / 'k'}' WITH (FORMAT = 'csv')")
    con.execute(f"CREATE SINK k FROM v INTO FILES '{tmp_path / 'k'}'")
    with pytest.raises(DsqlError, match="already exists"):
        con.execute(f"CREATE SINK k FROM v INTO FILES '{tmp_path / 'k'}'")
    con.execute(f"CREATE SINK IF NOT EXISTS k FROM v INTO FILES '{tmp_path / 'k'}'")
    with pytest.raises(DsqlError, match="k depend on it"):
        con.execute("DROP VIEW v")
    con.execute("CREATE SINK j FROM t INTO FILES '" + str(tmp_path / "j") + "'")
    con.execute("DROP SINK j")
    with pytest.raises(DsqlError, match="does not exist"):
        con.execute("DROP SINK j")
    con.execute("DROP SINK IF EXISTS j")
    con.close()
    con = dsql.connect(
        kernel="local", allowed_paths=[tmp_path], data_dir=str(tmp_path / "data")
    )  # DDL replayed
    assert [s[0] for s in con.execute("SHOW SINKS").fetchall()] == ["k"]
    con.execute("DROP VIEW v CASCADE")
    assert con.execute("SHOW SINKS").fetchall() == []
    con.close()
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path], data_dir=str(tmp_path / "data"))
    assert con.execute("SHOW SINKS").fetchall() == []
    con.close()


def test_callback_sink_gets_each_millisecond_once(tmp_path: Path) -> None:
    con = dsql.connect(kernel="local", data_dir=str(tmp_path / "data"))
    con.execute("CREATE TABLE t (id int, g int, v int)")
    con.execute(f"CREATE MATERIALIZED VIEW agg AS {VIEWS['agg']}")
    con.execute(f"CREATE MATERIALIZED VIEW big AS {VIEWS['big']}")
    got: list[tuple[int, list[dict[str, Any]]]] = []
    fail = {"once": True}

    def callback(ms: int, changes: Any) -> None:
        if ms >= 5 and fail["once"]:
            fail["once"] = False
            raise RuntimeError("downstream unavailable")
        got.append((ms, changes.to_pylist()))

    name = con.sink("agg", callback)
    expected: dict[int, dict[str, Any]] = {}
    with pytest.warns(DsqlWarning, match="callback failed"):
        _run_history(con, random.Random(3), 15, expected)
    times = [ms for ms, _ in got]
    assert times == sorted(set(times)), "a millisecond delivered twice or out of order"
    files = [(ms, ms, rows) for ms, rows in got]
    for ms, contents in expected.items():
        assert _accumulated(files, ms) == contents["agg"], ms
    assert name in [s[0] for s in con.execute("SHOW SINKS").fetchall()]
    con.close()
    con = dsql.connect(kernel="local", data_dir=str(tmp_path / "data"))
    assert con.execute("SHOW SINKS").fetchall() == []  # it lived with the connection
    con.close()


def test_a_callback_may_read_the_connection(tmp_path: Path) -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int)")
    seen: list[tuple[int, int, list[tuple[Any, ...]]]] = []

    def callback(ms: int, changes: Any) -> None:
        total = con.execute("SELECT count(*) FROM t").fetchall()
        seen.append((ms, changes.num_rows, total))

    con.sink("t", callback, name="reader")
    con.execute("INSERT INTO t VALUES (1), (2)")
    con.execute("ADVANCE BY 1")
    con.execute("INSERT INTO t VALUES (3)")
    con.execute("ADVANCE BY 1")
    assert seen == [(0, 2, [(2,)]), (1, 1, [(3,)])]
    con.execute("DROP SINK reader")
    con.execute("INSERT INTO t VALUES (4)")
    con.execute("ADVANCE BY 1")
    assert len(seen) == 2


def test_upsert_marks_a_key_with_two_new_rows_and_waits_for_commit(tmp_path: Path) -> None:
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path])
    con.execute("CREATE TABLE t (k int, v int)")
    con.execute(f"CREATE SINK u FROM t INTO FILES '{tmp_path / 'u'}' KEY (k) ENVELOPE UPSERT")
    con.execute("BEGIN")
    con.execute("INSERT INTO t VALUES (1, 10), (2, 20), (2, 21)")
    con.execute("ADVANCE BY 1")  # inside the transaction: the sink waits for COMMIT
    assert _files(tmp_path / "u") == []
    con.execute("COMMIT")
    con.execute("ADVANCE BY 1")
    con.execute("DELETE FROM t WHERE k = 1 OR v = 21")
    con.execute("ADVANCE BY 1")
    rows = [r for _, _, rs in _files(tmp_path / "u") for r in rs]
    assert [(r["mz_state"], r["k"], r["v"]) for r in rows] == [
        ("upsert", 1, 10),
        ("key_violation", 2, None),
        ("delete", 1, None),
        ("upsert", 2, 20),
    ]


def test_a_relative_directory_is_kept_absolute(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path], data_dir=str(tmp_path / "data"))
    con.execute("CREATE TABLE t (x int)")
    con.execute("CREATE SINK k FROM t INTO FILES 'out'")
    con.execute("INSERT INTO t VALUES (1)")
    con.close()
    monkeypatch.chdir(tmp_path / "b")
    con = dsql.connect(kernel="local", allowed_paths=[tmp_path], data_dir=str(tmp_path / "data"))
    con.execute("ADVANCE BY 1")
    con.close()
    assert not (tmp_path / "b" / "out").exists()
    assert _accumulated(_files(tmp_path / "a" / "out"), 0) == Counter({(1,): 1})


# --- kill -9 --------------------------------------------------------------------------------

KILLS = 20

PRELOAD = """
import duckdb, pyarrow, dsql.api, dsql.durable, dsql.sinks, dsql.runtime.kernel.local
from dsql import grammar
grammar.parse("SELECT 1")
"""


def child(out: str, data_dir: str, root: str, seed: str) -> None:
    """Recover, then insert and delete rows of `t` (ids unique to this child), reporting
    each statement before it runs and once it returned, with its millisecond."""

    def work(say: Say) -> None:
        con = dsql.connect(
            kernel="local", data_dir=data_dir, allowed_paths=[root], checkpoint_bytes=20_000
        )
        if not con.execute("SHOW TABLES").fetchall():
            con.execute("CREATE TABLE t (id int, g int, v int)")
            con.execute(f"CREATE MATERIALIZED VIEW agg AS {VIEWS['agg']}")
            con.execute(f"CREATE SINK t_sink FROM t INTO FILES '{root}/t'")
            con.execute(f"CREATE SINK agg_sink FROM agg INTO FILES '{root}/agg'")
        ids = [r[0] for r in con.execute("SELECT id FROM t").fetchall()]
        say({"ready": True})
        rng = random.Random(int(seed))
        next_id = int(seed) * 1000
        while True:
            ms = con.session.clock.now_ms()
            if ids and rng.random() < 0.3:
                victim = ids.pop(rng.randrange(len(ids)))
                say({"try": ["delete", victim, ms]})
                con.execute(f"DELETE FROM t WHERE id = {victim}")
            elif rng.random() < 0.3:
                say({"try": ["advance", None, ms]})
                con.execute("ADVANCE BY 1")
            else:
                next_id += 1
                say({"try": ["insert", next_id, ms]})
                con.execute(f"INSERT INTO t VALUES ({next_id}, {next_id % 3}, {next_id % 10})")
                ids.append(next_id)
            say({"ack": True})

    run_child(out, work)


def test_kill9_each_millisecond_is_written_exactly_once(tmp_path: Path) -> None:
    rng = random.Random(39)
    data_dir, root = tmp_path / "data", tmp_path / "sinks"
    acked: list[list[Any]] = []
    unsure: list[list[Any]] = []  # in flight at a kill: durable or not
    with forking_server("test_sinks", PRELOAD) as server:
        cycles = kill_cycles(
            server,
            tmp_path,
            rng,
            KILLS,
            lambda: [str(data_dir), str(root), str(rng.randrange(1, 10**6))],
            delay=(0.05, 0.4),
        )
        for messages in cycles:
            inflight = None
            for m in messages:
                if "try" in m:
                    inflight = m["try"]
                elif "ack" in m:
                    acked.append(inflight)
                    inflight = None
            if inflight is not None:
                unsure.append(inflight)

    con = dsql.connect(kernel="local", data_dir=str(data_dir))
    con.execute("ADVANCE BY 1")  # closes the last millisecond: the sinks write it
    final = _contents(con, "t")
    agg_now = _contents(con, "agg")
    now = con.session.clock.now_ms()
    con.close()

    t_files, agg_files = _files(root / "t"), _files(root / "agg")
    _check_ranges(t_files)
    _check_ranges(agg_files)
    written = Counter((r["id"], r["mz_timestamp"]) for _, _, rows in t_files for r in rows)
    assert all(n == 1 for n in written.values()), "a change written twice"
    got = Counter(
        {(r["id"], r["mz_timestamp"]): r["mz_diff"] for _, _, rows in t_files for r in rows}
    )
    # Each id's net change in each millisecond (an insert and a delete in one cancel):
    # what was acknowledged, plus possibly what was in flight at a kill.
    want: Counter[tuple[int, int]] = Counter()
    maybe: Counter[tuple[int, int]] = Counter()
    for ops, into in ((acked, want), (unsure, maybe)):
        for op, i, ms in ops:
            if op != "advance":
                into[(i, ms)] += 1 if op == "insert" else -1
    for key in set(want) | set(maybe) | set(got):
        assert got[key] - want[key] in (0, maybe[key]), (key, got[key], want[key], maybe[key])
    assert _accumulated(t_files, now) == final
    assert _accumulated(agg_files, now) == agg_now
    # The view's sink matches the table's at every millisecond: the aggregate recomputed
    # from the table's accumulated rows.
    for ms in sorted({r["mz_timestamp"] for _, _, rows in t_files for r in rows}):
        rows = _accumulated(t_files, ms)
        groups: dict[int, list[int]] = {}
        for (_, g, v), n in rows.items():
            groups.setdefault(g, []).extend([v] * n)
        recomputed = Counter({(g, len(vs), sum(vs)): 1 for g, vs in groups.items()})
        assert _accumulated(agg_files, ms) == recomputed, ms
    print(f"{KILLS} kills, {len(acked)} acknowledged statements, {len(t_files)} sink files")
    assert len(acked) > KILLS


def test_a_change_stream_as_a_spark_dataframe(spark: Any) -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (id int, g int, v int)")
    con.execute(f"CREATE MATERIALIZED VIEW agg AS {VIEWS['agg']}")
    con.execute("INSERT INTO t VALUES (1, 0, 5), (2, 1, 7)")
    updates = con.subscribe("agg")
    first = next(updates)  # the snapshot, iterated before to_spark
    con.execute("ADVANCE BY 1")
    con.execute("DELETE FROM t WHERE id = 2")
    con.execute("INSERT INTO t VALUES (3, 0, 1)")
    con.execute("ADVANCE BY 1")
    frame = updates.to_spark(spark)
    assert frame.columns == ["mz_timestamp", "mz_diff", "g", "n", "s"]
    got = sorted(tuple(r) for r in frame.collect())
    assert first.num_rows == 2
    assert got == [
        (0, 1, 0, 1, 5),
        (0, 1, 1, 1, 7),
        (1, -1, 0, 1, 5),
        (1, -1, 1, 1, 7),
        (1, 1, 0, 2, 6),
    ]


def test_a_sink_writes_only_inside_the_allowed_paths(tmp_path: Path) -> None:
    """A sink's directory is a file SQL names: the sandbox of COPY and sources holds it;
    recovering a data directory writes where the logged sink was allowed to."""
    data, out = tmp_path / "data", tmp_path / "out"
    con = dsql.connect(kernel="local", data_dir=str(data))
    con.execute("CREATE TABLE t (a int)")
    for place in (out, "/etc/dsql-sink", tmp_path / "data" / "files" / ".." / "k"):
        with pytest.raises(dsql.Error, match="outside the paths SQL may reach"):
            con.execute(f"CREATE SINK k FROM t INTO FILES '{place}'")
    con.close()
    con = dsql.connect(kernel="local", data_dir=str(data), allowed_paths=[out])
    con.execute(f"CREATE SINK k FROM t INTO FILES '{out}'")
    con.execute("INSERT INTO t VALUES (1)")
    con.close()
    con = dsql.connect(kernel="local", data_dir=str(data))  # recovered without the option
    con.execute("ADVANCE BY 1")
    assert [r["a"] for _, _, rows in _files(out) for r in rows] == [1]
    con.close()
