"""Threads sharing one connection: every acknowledged write is kept, views stay equal to
their queries, a SUBSCRIBE read in one thread never disturbs writes in another, and
`FETCH ... WITH (timeout = ...)` waits on the wall clock as Materialize's does."""

from __future__ import annotations

import threading
import time

import pytest

import dsql

THREADS = 4
ROWS = 60


def _run_threads(work, count: int = THREADS) -> list[BaseException]:
    """Run `work(i)` in `count` threads started together; the exceptions they raised."""
    failures: list[BaseException] = []
    start = threading.Barrier(count)

    def body(i: int) -> None:
        start.wait()
        try:
            work(i)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            failures.append(error)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return failures


@pytest.mark.parametrize("clock", ["manual", "wall"])
@pytest.mark.parametrize("through", ["connection", "cursor per thread", "one shared cursor"])
def test_concurrent_inserts_keep_every_acknowledged_row(clock, through):
    con = dsql.connect(kernel="local", clock=clock)
    con.execute("CREATE TABLE t (thread int, i int)")
    con.execute("CREATE MATERIALIZED VIEW n AS SELECT thread, count(*) AS n FROM t GROUP BY thread")
    shared = con.cursor()
    acknowledged: list[tuple[int, int]] = []

    def work(thread: int) -> None:
        cur = {"connection": con, "cursor per thread": con.cursor(), "one shared cursor": shared}[
            through
        ]
        for i in range(ROWS):
            cur.execute("INSERT INTO t VALUES (?, ?)", (thread, i))
            acknowledged.append((thread, i))
            if i % 20 == 0:  # reads interleave with the writes
                cur.execute("SELECT count(*) FROM n")

    assert _run_threads(work) == []
    assert len(acknowledged) == THREADS * ROWS
    assert sorted(con.execute("SELECT thread, i FROM t").fetchall()) == sorted(acknowledged)
    assert sorted(con.execute("SELECT thread, n FROM n").fetchall()) == [
        (thread, ROWS) for thread in range(THREADS)
    ]


def test_executemany_from_threads_is_not_interleaved_into_loss():
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (thread int, i int)")

    def work(thread: int) -> None:
        cur = con.cursor()
        cur.executemany("INSERT INTO t VALUES (?, ?)", [(thread, i) for i in range(ROWS)])
        assert cur.rowcount == ROWS

    assert _run_threads(work) == []
    assert con.execute("SELECT count(*), count(DISTINCT (thread, i)) FROM t").fetchall() == [
        (THREADS * ROWS, THREADS * ROWS)
    ]


@pytest.mark.parametrize("clock", ["manual", "wall"])
def test_a_subscribe_fetched_in_one_thread_never_fails_inserts_in_another(clock):
    con = dsql.connect(kernel="local", clock=clock)
    con.execute("CREATE TABLE t (a int)")
    con.execute("CREATE MATERIALIZED VIEW s AS SELECT sum(a) AS s, count(*) AS n FROM t")
    sub = con.cursor()
    sub.execute("SUBSCRIBE s")
    done = threading.Event()
    seen: list[tuple] = []

    def work(i: int) -> None:
        if i == 0:  # the reader
            while not done.is_set():
                seen.extend(sub.fetchall(timeout=0.01))
            seen.extend(sub.fetchall())
            return
        try:
            for k in range(ROWS):
                con.execute("INSERT INTO t VALUES (?)", (k,))
                if clock == "manual" and k % 10 == 0:
                    con.execute("ADVANCE BY 1")
        finally:
            if i == 1:
                done.set()

    assert _run_threads(work, 2) == []
    assert con.execute("SELECT s, n FROM s").fetchall() == [(sum(range(ROWS)), ROWS)]
    # Every update seen, with the rest fetched now, sums to the view's contents.
    if clock == "manual":
        con.execute("ADVANCE BY 1")
    seen.extend(sub.fetchall())
    final: dict[tuple, int] = {}
    for _ts, diff, *row in seen:
        final[tuple(row)] = final.get(tuple(row), 0) + diff
    assert {r: d for r, d in final.items() if d} == {(sum(range(ROWS)), ROWS): 1}


def test_fetch_with_timeout_waits_for_updates_on_the_wall_clock():
    con = dsql.connect(kernel="local", clock="wall")
    con.execute("CREATE TABLE t (a int)")
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE t")
    # Ready rows (the snapshot is empty: none) ... nothing ready: waits out its timeout.
    started = time.monotonic()
    assert con.execute("FETCH ALL c WITH (timeout = '0.4s')").fetchall() == []
    assert time.monotonic() - started >= 0.35
    # timeout 0 does not wait.
    started = time.monotonic()
    assert con.execute("FETCH ALL c WITH (timeout = '0s')").fetchall() == []
    assert time.monotonic() - started < 0.3
    # Rows ready: returns at once.
    con.execute("INSERT INTO t VALUES (1)")
    started = time.monotonic()
    rows = con.execute("FETCH ALL c WITH (timeout = '5s')").fetchall()
    assert [r[1:] for r in rows] == [(1, 1)]
    assert time.monotonic() - started < 2
    # An update arriving while it waits ends the wait early.
    timer = threading.Timer(0.3, lambda: con.execute("INSERT INTO t VALUES (2)"))
    timer.start()
    started = time.monotonic()
    rows = con.execute("FETCH ALL c WITH (timeout = '10s')").fetchall()
    timer.join()
    assert [r[1:] for r in rows] == [(1, 2)]
    assert 0.2 < time.monotonic() - started < 5


def test_fetch_with_timeout_on_the_manual_clock_wakes_on_another_threads_write():
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int)")
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE t")
    assert con.execute("FETCH ALL c WITH (timeout = '0s')").fetchall() == []

    def write() -> None:
        con.execute("INSERT INTO t VALUES (7)")
        con.execute("ADVANCE BY 5")

    timer = threading.Timer(0.2, write)
    timer.start()
    started = time.monotonic()
    rows = con.execute("FETCH ALL c WITH (timeout = '10s')").fetchall()
    timer.join()
    assert [r[1:] for r in rows] == [(1, 7)]
    assert time.monotonic() - started < 5


def test_fetch_timeout_must_be_a_duration():
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE t (a int)")
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE t")
    with pytest.raises(dsql.ProgrammingError, match='parameter "timeout"'):
        con.execute("FETCH ALL c WITH (timeout = 'soon')")
    assert con.execute("FETCH ALL c").fetchall() == []
