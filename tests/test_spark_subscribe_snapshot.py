"""SUBSCRIBE over a view Spark holds streams its snapshot in pieces of `fetch_rows` rows.

The snapshot of a Spark-placed view is stamped, consolidated and ordered by Spark's
executors and read back a file at a time (`dsql.subscribe`), so `FETCH n`, a cursor's
`fetchmany` and `Connection.subscribe`'s iterator each hold at most a piece of it in the
driver. Each stream must equal the same subscription on the in-process kernel (the
runtime's reference, which orders updates by time, then by row) update for update and in
order, through the snapshot and the changes after it; and no collect into the driver
(`Kernel.to_arrow`) nor read of the stored copy (`Kernel.read`) may hold more than the
bound; over Spark Connect as over a classic session. A temporal view's stored snapshot
holds updates at future times (`mz_now()` filters): each comes only once the clock
passes its time, as the in-process kernel's does, under kernel "spark", "auto" and over
Connect. Run under `flock
/tmp/dsql-heavy.lock`: they start Spark (and a Connect server).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from cluster import in_own_process
from test_spark_connect import remote  # noqa: F401 - the Connect server fixture

import dsql

#: The rows of `t`: the view holds `VIEW_ROWS` of them, many times `BOUND`.
ROWS = 24_000
VIEW_ROWS = 20_000
#: `fetch_rows`, and the most rows Spark collects into the driver in one piece
#: (`SparkKernel.small_rows`, scaled down with it so the view is far past it).
BOUND = 1_000

T = pa.table(
    {
        "k": pa.array(range(ROWS), pa.int64()),
        "s": pa.array([None if i % 17 == 0 else f"s{i % 29}" for i in range(ROWS)]),
    }
)
VIEW = f"SELECT k, s, k % 7 AS g FROM t WHERE k < {VIEW_ROWS}"
CHANGES = [
    "DELETE FROM t WHERE k % 1000 = 3",
    "INSERT INTO t VALUES (5, 'again'), (-1, NULL)",
    "UPDATE t SET s = 'changed' WHERE k BETWEEN 100 AND 140",
]


class Record:
    """The largest table a kernel collected into the driver (`to_arrow`) and the pieces
    it read of stored copies (`read`), recorded around the real methods."""

    def __init__(self, kernel: Any) -> None:  # noqa: ANN401
        self.collected = 0
        self.pieces: list[int] = []
        to_arrow, read = kernel.to_arrow, kernel.read

        def collecting(frame: Any) -> pa.Table:  # noqa: ANN401
            table = to_arrow(frame)
            self.collected = max(self.collected, table.num_rows)
            return table

        def reading(frame: Any, batch_rows: int) -> Iterator[pa.Table]:  # noqa: ANN401
            for part in read(frame, batch_rows):
                self.pieces.append(part.num_rows)
                yield part

        kernel.to_arrow, kernel.read = collecting, reading


def connect(kernel: str, spark: Any = None) -> dsql.Connection:  # noqa: ANN401
    """A session holding `t` and the materialized view `v`, on `kernel`."""
    if kernel == "spark":
        con = dsql.connect(spark=spark, kernel="spark")
        con.session.worker.kernel.small_rows = BOUND
    else:
        con = dsql.connect(kernel="local")
    con.create_table("t", T)
    con.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW}")
    con.execute(f"SET fetch_rows = {BOUND}")
    return con


def fetch_all(con: dsql.Connection, cursor: str, n: int, held: Callable[[], int]) -> list:
    """Every update `FETCH n` gives until one comes back empty; `held()` (rows the driver
    keeps for the subscription) never exceeds a piece past `n`."""
    rows: list = []
    while part := con.execute(f"FETCH {n} {cursor}").fetchall():
        assert len(part) <= n
        assert held() <= BOUND, held()
        rows.extend(part)
    return rows


def fetch_many(cursor: Any) -> list:  # noqa: ANN401
    """Every row of a cursor's result by `fetchmany(600)`; the cursor never holds more
    than that and one piece of `BOUND` rows."""
    rows: list = []
    while part := cursor.fetchmany(600):
        held = 0 if cursor._table is None else cursor._table.num_rows  # noqa: SLF001
        assert held <= 600 + BOUND, held
        rows.extend(part)
    return rows


def subscription(con: dsql.Connection, cursor: str) -> Any:  # noqa: ANN401
    return con.executor.cursors[cursor]


def pending(con: dsql.Connection, cursor: str) -> int:
    sub = subscription(con, cursor)
    return 0 if sub._pending is None else sub._pending.num_rows  # noqa: SLF001


@pytest.fixture(scope="module")
def pair(spark: Any) -> Iterator[tuple[dsql.Connection, dsql.Connection]]:  # noqa: ANN401
    """A session on Spark and one in-process, given the same statements."""
    cons = connect("spark", spark), connect("local")
    yield cons
    for con in cons:
        con.close()


def snapshot_now(local: dsql.Connection) -> list[tuple]:
    """The view's rows now, by DuckDB over `t` as the reference session holds it."""
    db = duckdb.connect()
    db.register("t", local.execute("SELECT * FROM t").fetch_arrow_table())
    return sorted(tuple(r) for r in db.execute(VIEW).fetchall())


@pytest.mark.parametrize(
    "options",
    ["", " WITH (PROGRESS)"],
    ids=["plain", "progress"],
)
def test_fetch_streams_the_snapshot_in_bounded_pieces_exactly(
    pair: tuple[dsql.Connection, dsql.Connection], options: str
) -> None:
    spark_con, local = pair
    record = Record(spark_con.session.worker.kernel)
    statement = f"DECLARE c CURSOR FOR SUBSCRIBE v{options}"
    spark_con.execute(statement)
    local.execute(statement)
    got = fetch_all(spark_con, "c", 700, lambda: pending(spark_con, "c"))
    want = fetch_all(local, "c", 700, lambda: 0)
    assert got == want
    if "SNAPSHOT" not in options:
        data = sorted(r[-3:] for r in got if r[-4] is not None for _ in range(r[-4]))
        assert data == snapshot_now(local) and len(data) >= VIEW_ROWS - VIEW_ROWS // 500
        assert len(record.pieces) >= VIEW_ROWS // BOUND
    assert record.collected <= BOUND and max(record.pieces, default=0) <= BOUND
    for con in (spark_con, local):
        con.execute("ADVANCE BY 1000")
        for change in CHANGES:
            con.execute(change)
    after = fetch_all(spark_con, "c", 700, lambda: pending(spark_con, "c"))
    assert after == fetch_all(local, "c", 700, lambda: 0) and after
    for con in (spark_con, local):
        con.execute("CLOSE c")
    assert spark_con.session.exports == []  # every stored piece deleted once read


def test_a_subscribe_statement_and_the_iterator_stream_in_bounded_pieces(
    pair: tuple[dsql.Connection, dsql.Connection],
) -> None:
    spark_con, local = pair
    record = Record(spark_con.session.worker.kernel)
    cursor, reference = spark_con.cursor(), local.cursor()
    cursor.execute("SUBSCRIBE v")
    reference.execute("SUBSCRIBE v")
    got = fetch_many(cursor)
    assert got == reference.fetchall() and sorted(
        r[2:] for r in got for _ in range(r[1])
    ) == snapshot_now(local)
    updates = spark_con.subscribe("v")
    pieces = []
    while updates.sub.streaming or not pieces:
        pieces.append(next(updates))
    assert max(p.num_rows for p in pieces) <= BOUND
    streamed = [r for p in pieces for r in zip(*p.to_pydict().values(), strict=True)]
    assert sorted(r[2:] for r in streamed for _ in range(r[1])) == snapshot_now(local)
    assert record.collected <= BOUND
    updates.close()
    cursor.close()


def test_closing_mid_snapshot_deletes_its_stored_pieces(
    pair: tuple[dsql.Connection, dsql.Connection],
) -> None:
    spark_con = pair[0]
    spark_con.execute("DECLARE c CURSOR FOR SUBSCRIBE v")
    assert len(spark_con.execute("FETCH 10 c").fetchall()) == 10
    assert spark_con.session.exports  # the rest is stored, unread
    spark_con.execute("CLOSE c")
    assert spark_con.session.exports == []


def test_a_negative_count_in_a_stored_snapshot_is_refused(spark: Any) -> None:  # noqa: ANN401
    con = connect("spark", spark)
    con.execute("CREATE TABLE n (k bigint, c bigint)")
    con.execute("INSERT INTO n SELECT k, CASE WHEN k = 7 THEN -2 ELSE 1 END FROM t")
    con.execute("CREATE MATERIALIZED VIEW r AS SELECT k FROM n, repeat_row(c)")
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE r")
    with pytest.raises(dsql.errors.DataError, match=r"negative multiplicity \(-2\)"):
        con.execute("FETCH 10 c")
    assert con.session.exports == []
    con.close()


# --- over Spark Connect (the server `tests/test_spark_connect.py` starts) ---------------


def _child_streams(server: str) -> tuple[list, list, list[int], int, list]:
    """In a child process (a Connect session is one per process): a SELECT of the view
    and its SUBSCRIBE, each fetched in pieces over Connect; the pieces read and the most
    rows collected at once."""
    con = dsql.connect(remote=server, kernel="spark")
    con.session.worker.kernel.small_rows = BOUND
    con.create_table("t", T)
    con.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW}")
    con.execute(f"SET fetch_rows = {BOUND}")
    record = Record(con.session.worker.kernel)
    cursor = con.cursor()
    cursor.execute("SELECT * FROM v ORDER BY k")
    selected = fetch_many(cursor)
    con.execute("DECLARE c CURSOR FOR SUBSCRIBE v")
    subscribed = fetch_all(con, "c", 700, lambda: pending(con, "c"))
    assert con.session.exports == []
    con.close()
    con = temporal("spark", lambda: dsql.connect(remote=server, kernel="spark"))
    streamed = temporal_stream(con, "")
    con.close()
    return selected, subscribed, record.pieces, record.collected, streamed


def test_select_and_subscribe_stream_over_spark_connect(remote: str) -> None:  # noqa: F811
    local = connect("local")
    selected, subscribed, pieces, collected, streamed = in_own_process(_child_streams, remote)
    assert [tuple(r) for r in selected] == local.execute("SELECT * FROM v ORDER BY k").fetchall()
    local.execute("DECLARE c CURSOR FOR SUBSCRIBE v")
    assert [tuple(r) for r in subscribed] == fetch_all(local, "c", 700, lambda: 0)
    assert len(pieces) >= 2 * VIEW_ROWS // BOUND and max(pieces) <= BOUND
    assert collected <= BOUND
    local.close()
    local = temporal("local", lambda: dsql.connect(kernel="local"))
    assert streamed == temporal_stream(local, "")  # a temporal view's, over Connect too
    local.close()


# --- a temporal view: updates at times not yet complete wait for their time -------------

#: `r`'s rows: row i valid from millisecond i % 20 for 3 milliseconds (`mz_now()`
#: filters), so the snapshot's stored batches hold retractions (and insertions) at
#: future times, which may be emitted only once the clock passes them.
TEMPORAL_ROWS = 3_000
TEMPORAL = "SELECT a, b FROM r WHERE mz_now() >= a AND mz_now() < a + 3"
#: The clock's steps after the SUBSCRIBE (milliseconds).
ADVANCES = (5, 6, 12, 40)


def temporal(kernel: str, connect_to: Callable[[], dsql.Connection]) -> dsql.Connection:
    """A session whose view `vt` over `r` is temporal (`TEMPORAL`), stored on Spark
    unless `kernel` is "local"."""
    con = connect_to()
    if kernel == "spark":
        con.session.worker.kernel.small_rows = 200
    rows = range(TEMPORAL_ROWS)
    a = pa.array([i % 20 for i in rows], pa.int64())
    con.create_table("r", pa.table({"a": a, "b": pa.array(rows, pa.int64())}))
    con.execute(f"CREATE MATERIALIZED VIEW vt AS {TEMPORAL}")
    con.execute("SET fetch_rows = 400")
    return con


def temporal_stream(con: dsql.Connection, options: str) -> list[list[tuple]]:
    """The SUBSCRIBE's updates fetched after it starts and after each of `ADVANCES`; none
    is stamped later than the clock when it is fetched."""
    con.execute(f"DECLARE c CURSOR FOR SUBSCRIBE vt{options}")
    steps = [con.execute("FETCH ALL c").fetchall()]
    assert all(row[0] <= con.session.clock.now_ms() for row in steps[-1])
    for ms in ADVANCES:
        con.execute(f"ADVANCE TO {ms}")
        steps.append(con.execute("FETCH ALL c").fetchall())
        assert all(row[0] <= ms for row in steps[-1]), (ms, max(steps[-1]))
    con.execute("CLOSE c")
    return [[tuple(r) for r in step] for step in steps]


@pytest.mark.parametrize(
    ("kernel", "options"),
    [("spark", ""), ("auto", " WITH (PROGRESS)")],
)
def test_a_temporal_views_stored_snapshot_holds_back_future_updates(
    spark: Any,
    kernel: str,
    options: str,  # noqa: ANN401
) -> None:
    if kernel == "auto":
        con = temporal(
            "auto", lambda: dsql.connect(spark=spark, kernel="auto", placement_threshold=500)
        )
    else:
        con = temporal("spark", lambda: dsql.connect(spark=spark, kernel="spark"))
    record = Record(
        con.session.worker.kernel if kernel == "spark" else con.session.worker.kernel.remote
    )
    local = temporal("local", lambda: dsql.connect(kernel="local"))
    got = temporal_stream(con, options)
    assert got == temporal_stream(local, options)
    assert record.pieces and max(record.pieces) <= 400  # the stored snapshot streamed
    assert con.session.exports == []
    con.close()
    local.close()
