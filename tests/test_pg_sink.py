"""PostgreSQL sinks: a view's changes written into a real server's tables, exactly once.

Each test follows a random history of inserts, updates and deletes and checks the
PostgreSQL tables against dsql's own answers at every millisecond: the diff table
accumulated up to a millisecond equals the view then, the upsert table equals the view
now, and the progress row names the last millisecond written.
"""

from __future__ import annotations

import itertools
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pg_oracle import PgServer
from test_pg_cdc import LOGICAL

import dsql
from dsql.errors import DsqlWarning, SchemaError

_databases = itertools.count()

VIEW = "SELECT g, sum(v) AS total, count(*) AS n, max(note) AS note FROM t GROUP BY g"


@pytest.fixture(scope="module")
def server() -> Iterator[PgServer]:
    root = Path(tempfile.mkdtemp(prefix="dsql-pgsink-"))
    started = PgServer.start(root, LOGICAL)  # SHOW SOURCES lists a CDC source of it too
    yield started
    started.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def db(server: PgServer) -> Iterator[Any]:
    """A fresh database of `server` (its name in `.dbname`)."""
    name = f"sink_{next(_databases)}"
    conn = server.database(name)
    conn.dbname = name
    yield conn
    conn.close()


def connection_sql(server: PgServer, database: str) -> str:
    return (
        f"CREATE CONNECTION pg TO POSTGRES (HOST '{server.socket_dir}', PORT {server.port},"
        f" USER 'postgres', PASSWORD 'hunter2', DATABASE '{database}')"
    )


def _statement(rng: random.Random, next_id: int) -> str:
    roll = rng.random()
    if roll < 0.5:
        rows = ", ".join(
            f"({next_id + i}, {rng.randrange(4)}, {rng.randrange(-5, 20)}.{rng.randrange(100):02d},"
            f" 'n{rng.randrange(9)}')"
            for i in range(rng.randint(1, 4))
        )
        return f"INSERT INTO t VALUES {rows}"
    if roll < 0.75:
        note = f"u{rng.randrange(9)}"
        return f"UPDATE t SET v = v + 1, note = '{note}' WHERE id % 5 = {rng.randrange(5)}"
    return f"DELETE FROM t WHERE id % 7 = {rng.randrange(7)}"


def _view_rows(con: Any) -> Counter[tuple[Any, ...]]:
    return Counter(con.execute("SELECT * FROM v").fetchall())


def _history(con: Any, rng: random.Random, steps: int, first_id: int = 1) -> dict[int, Counter]:
    """Random writes, one to three per millisecond; each millisecond's view contents."""
    expected: dict[int, Counter] = {}
    next_id = first_id
    for _ in range(steps):
        for _ in range(rng.randint(1, 3)):
            con.execute(_statement(rng, next_id))
            next_id += 4
        ms = con.session.clock.now_ms()
        expected[ms] = _view_rows(con)
        con.execute("ADVANCE BY 1")
    con.execute("SELECT 1")  # a statement boundary after the last ADVANCE: the sinks flush
    return expected


def _accumulated(db: Any, table: str, through: int) -> Counter[tuple[Any, ...]]:
    rows = db.execute(
        f"SELECT g, total, n, note, sum(mz_diff) FROM {table} WHERE mz_timestamp <= %s"
        " GROUP BY 1, 2, 3, 4 HAVING sum(mz_diff) <> 0",
        (through,),
    ).fetchall()
    return Counter({tuple(r[:4]): int(r[4]) for r in rows})


def _upserted(db: Any, table: str) -> Counter[tuple[Any, ...]]:
    return Counter(db.execute(f"SELECT g, total, n, note FROM {table}").fetchall())


def _progress(db: Any, schema: str = "public") -> dict[str, int]:
    return dict(db.execute(f"SELECT target, ts FROM {schema}.dsql_sink_progress").fetchall())


def _start(con: Any, server: PgServer, db: Any) -> None:
    con.execute(connection_sql(server, db.dbname))
    con.execute("CREATE TABLE t (id int, g int, v numeric(8, 2), note text)")
    con.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW}")


def test_diff_and_upsert_sinks_follow_the_views_history(server: PgServer, db: Any) -> None:
    con = dsql.connect()
    _start(con, server, db)
    con.execute("CREATE SINK d FROM v INTO POSTGRES CONNECTION pg (TABLE 'out.v_changes')")
    con.execute(
        "CREATE SINK u FROM v INTO POSTGRES CONNECTION pg (TABLE 'v_state') KEY (g) ENVELOPE UPSERT"
    )
    expected = _history(con, random.Random(39), 20)
    for ms, rows in expected.items():
        assert _accumulated(db, "out.v_changes", ms) == rows, ms
    assert _upserted(db, "v_state") == _view_rows(con)
    last = max(expected)
    assert _progress(db, "out") == {"v_changes": last}
    assert _progress(db) == {"v_state": last}
    # each millisecond's changes consolidated: no row twice within one millisecond
    dup = db.execute(
        "SELECT mz_timestamp, g, total, n, note, count(*) FROM out.v_changes"
        " GROUP BY 1, 2, 3, 4, 5 HAVING count(*) > 1"
    ).fetchall()
    assert dup == []
    types = dict(
        db.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'out.v_changes'::regclass AND attnum > 0"
        ).fetchall()
    )
    assert types == {
        "mz_timestamp": "bigint",
        "mz_diff": "bigint",
        "g": "integer",
        "total": "numeric(38,2)",
        "n": "bigint",
        "note": "text",
    }
    sinks = {r[0]: r for r in con.execute("SHOW SINKS").fetchall()}
    assert sinks["d"][3] == "postgres pg out.v_changes" and sinks["d"][4] == last
    shown = str(con.execute("SHOW CONNECTIONS").fetchall()) + str(sinks)
    assert "hunter2" not in shown
    con.close()


def test_values_of_every_type_arrive_as_postgresql_reads_them(server: PgServer, db: Any) -> None:
    con = dsql.connect()
    con.execute(connection_sql(server, db.dbname))
    con.execute(
        "CREATE TABLE w (k int, d numeric(10, 3), f double precision, ts timestamp,"
        " tz timestamptz, i interval, b bytea, a int[], s text[], ok boolean, day date,"
        " c varchar(4))"
    )
    con.execute("CREATE SINK k FROM w INTO POSTGRES CONNECTION pg (TABLE 'w')")
    con.execute(
        "INSERT INTO w VALUES (1, 12.345, 0.1, '2024-02-29 23:59:59.123456',"
        " '2024-01-01 10:00:00+02', '1 year 2 mons 3 days 04:05:06', '\\x00ff',"
        " '{1,NULL,3}', '{\"a b\",\"c,d\",NULL}', true, '2024-03-01', 'abcd'),"
        " (2, NULL, 'NaN', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    )
    con.execute("ADVANCE BY 1")
    con.execute("SELECT 1")
    got = db.execute(
        "SELECT k, d, f::text, ts::text, tz::text, i::text, b, a, s, ok, day::text, c"
        " FROM w ORDER BY k"
    ).fetchall()
    assert got[0] == (
        1,
        Decimal("12.345"),
        "0.1",
        "2024-02-29 23:59:59.123456",
        "2024-01-01 08:00:00+00",
        "1 year 2 mons 3 days 04:05:06",
        b"\x00\xff",
        [1, None, 3],
        ["a b", "c,d", None],
        True,
        "2024-03-01",
        "abcd",
    )
    assert got[1][2] == "NaN" and got[1][1] is None
    con.close()


def test_an_existing_table_that_does_not_fit_is_refused(server: PgServer, db: Any) -> None:
    con = dsql.connect()
    _start(con, server, db)
    db.execute(
        "CREATE TABLE wrong (mz_timestamp bigint, mz_diff bigint, g bigint, total numeric,"
        " note text, extra int)"
    )
    with pytest.raises(SchemaError) as error:
        con.execute("CREATE SINK d FROM v INTO POSTGRES CONNECTION pg (TABLE 'wrong')")
    message = error.value.message
    assert "g is bigint, the sink writes integer" in message
    assert "total is numeric, the sink writes numeric(38,2)" in message
    assert "n (bigint) is missing" in message and "extra is not a column" in message
    assert "d" not in {r[0] for r in con.execute("SHOW SINKS").fetchall()}
    # a table that fits but holds rows no sink wrote
    db.execute(
        "CREATE TABLE filled (g int PRIMARY KEY, total numeric(38, 2), n bigint, note text);"
        " INSERT INTO filled VALUES (1, 1, 1, 'x')"
    )
    with pytest.raises(SchemaError, match="rows that no sink wrote"):
        con.execute(
            "CREATE SINK u FROM v INTO POSTGRES CONNECTION pg (TABLE 'filled') KEY (g)"
            " ENVELOPE UPSERT"
        )
    db.execute("TRUNCATE filled")  # the same table, empty: taken as it is
    con.execute(
        "CREATE SINK u FROM v INTO POSTGRES CONNECTION pg (TABLE 'filled') KEY (g) ENVELOPE UPSERT"
    )
    con.execute("INSERT INTO t VALUES (1, 1, 2.5, 'a'), (2, 1, 1, 'b')")
    con.execute("ADVANCE BY 1")
    con.execute("SELECT 1")
    assert _upserted(db, "filled") == _view_rows(con)
    with pytest.raises(SchemaError, match='sink "u" uses it'):
        con.execute("DROP CONNECTION pg")
    refused = {
        "CREATE SINK t FROM v INTO POSTGRES CONNECTION pg (TABLE 'made1')": "already exists",
        "CREATE SINK k FROM nope INTO POSTGRES CONNECTION pg (TABLE 'made2')": "nope",
        "CREATE SINK k FROM v INTO POSTGRES CONNECTION pg (TABLE 'made3') KEY (x)"
        " ENVELOPE UPSERT": "sink key column 'x' is not a column of 'v'",
        "CREATE SINK k FROM v INTO POSTGRES CONNECTION nope (TABLE 'made4')": "does not exist",
    }
    for statement, message in refused.items():
        with pytest.raises(dsql.Error, match=message):
            con.execute(statement)
    made = db.execute("SELECT relname FROM pg_class WHERE relname LIKE 'made%'").fetchall()
    assert made == []  # refused before anything was created upstream
    con.close()


def test_a_server_away_delays_the_sink_and_loses_nothing() -> None:
    root = Path(tempfile.mkdtemp(prefix="dsql-pgsink-away-"))  # the server's user may enter
    server = PgServer.start(root)
    try:
        name = "away"
        server.database(name).close()
        con = dsql.connect()
        con.execute(connection_sql(server, name))
        con.execute("CREATE TABLE t (id int, g int, v numeric(8, 2), note text)")
        con.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW}")
        con.execute("CREATE SINK d FROM v INTO POSTGRES CONNECTION pg (TABLE 'changes')")
        con.execute(
            "CREATE SINK u FROM v INTO POSTGRES CONNECTION pg (TABLE 'state') KEY (g)"
            " ENVELOPE UPSERT"
        )
        rng = random.Random(7)
        expected = _history(con, rng, 5)
        server._run("pg_ctl", "-D", str(server.data), "-m", "fast", "-w", "stop")
        with pytest.warns(DsqlWarning, match="sink [du]: cannot connect to PostgreSQL"):
            expected |= _history(con, rng, 5, first_id=1000)
        server._run(
            "pg_ctl", "-D", str(server.data), "-l", str(root / "server.log"), "-w", "start",
            "-o", f"-p {server.port} -k {server.socket_dir} -c listen_addresses=''",
        )  # fmt: skip
        expected |= _history(con, rng, 5, first_id=2000)
        with server.connect(name) as db:
            for ms, rows in expected.items():
                assert _accumulated(db, "changes", ms) == rows, ms
            assert _upserted(db, "state") == _view_rows(con)
            assert _progress(db) == {"changes": max(expected), "state": max(expected)}
        con.close()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


#: The child of the crash test: a durable session whose PostgreSQL sink kills the
#: process right after its `kill_at`-th committed transaction, before the file sink
#: created after it writes the same millisecond.
CHILD = textwrap.dedent(
    """
    import os, random, signal, sys
    sys.path.insert(0, {tests!r})
    import dsql
    from dsql.pg_sink import PgTarget
    from test_pg_sink import _history, _start, connection_sql
    data_dir, kill_at, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[4])
    first = sys.argv[3] == "1"
    commits = 0
    def committed(self, ms):
        global commits
        commits += 1
        if commits == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    PgTarget.committed = committed
    con = dsql.connect(data_dir=data_dir, allowed_paths=[os.path.dirname(data_dir)])
    if first:
        con.execute({connection!r})
        con.execute("CREATE TABLE t (id int, g int, v numeric(8, 2), note text)")
        con.execute("CREATE MATERIALIZED VIEW v AS " + {view!r})
        con.execute("CREATE SINK d FROM v INTO POSTGRES CONNECTION pg (TABLE 'changes')")
        con.execute(
            "CREATE SINK u FROM v INTO POSTGRES CONNECTION pg (TABLE 'state') KEY (g)"
            " ENVELOPE UPSERT"
        )
        con.execute("CREATE SINK f FROM v INTO FILES " + repr(data_dir + "-files"))
    _history(con, random.Random(seed), 10, first_id=seed * 1000)
    con.close()
    """
)


def test_a_restart_resumes_each_sink_exactly_once(
    server: PgServer, db: Any, tmp_path: Path
) -> None:
    data_dir = str(tmp_path / "data")
    script = tmp_path / "child.py"
    script.write_text(
        CHILD.format(
            tests=str(Path(__file__).parent),
            connection=connection_sql(server, db.dbname),
            view=VIEW,
        )
    )

    def run(kill_at: int, first: bool, seed: int) -> int:
        done = subprocess.run(
            [sys.executable, str(script), data_dir, str(kill_at), "1" if first else "0", str(seed)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode in (0, -signal.SIGKILL), done.stderr
        return done.returncode

    # killed after PostgreSQL's commit of sink d, before sink f wrote that millisecond
    assert run(5, True, 1) == -signal.SIGKILL
    written = sorted(Path(data_dir + "-files").glob("*.parquet"))
    through = int(written[-1].name.split("-")[1].split(".")[0]) if written else -1
    assert _progress(db)["changes"] > through  # PostgreSQL committed what dsql had not
    assert run(3, False, 2) == -signal.SIGKILL
    assert run(0, False, 3) == 0
    con = dsql.connect(data_dir=data_dir)
    files = [pq.read_table(p) for p in sorted(Path(data_dir + "-files").glob("*.parquet"))]
    from_files: Counter[tuple[Any, ...]] = Counter()
    for table in files:
        for r in table.to_pylist():
            from_files[(r["mz_timestamp"], r["g"], r["total"], r["n"], r["note"])] += r["mz_diff"]
    in_pg: Counter[tuple[Any, ...]] = Counter()
    for r in db.execute("SELECT mz_timestamp, g, total, n, note, mz_diff FROM changes"):
        in_pg[tuple(r[:5])] += int(r[5])
    # the same changes at the same milliseconds, once each
    assert in_pg == {k: d for k, d in from_files.items() if d}
    last = max(r[0] for r in in_pg)
    assert _accumulated(db, "changes", last) == _view_rows(con)
    assert _upserted(db, "state") == _view_rows(con)
    assert _progress(db)["changes"] == _progress(db)["state"]
    con.close()


def test_a_key_with_several_rows_holds_the_upsert_sink_back(server: PgServer, db: Any) -> None:
    con = dsql.connect()
    _start(con, server, db)
    con.execute(
        "CREATE SINK u FROM t INTO POSTGRES CONNECTION pg (TABLE 'by_g') KEY (g) ENVELOPE UPSERT"
    )
    con.execute("INSERT INTO t VALUES (1, 1, 1, 'a')")
    con.execute("ADVANCE BY 1")
    con.execute("INSERT INTO t VALUES (2, 1, 2, 'b')")  # key g = 1 now has two rows
    with pytest.warns(DsqlWarning, match=r"sink u: key \(g = 1\) has several rows at 1"):
        con.execute("ADVANCE BY 1")
        con.execute("SELECT 1")
    assert db.execute("SELECT id, g FROM by_g").fetchall() == [(1, 1)]  # as at 0
    assert _progress(db) == {"by_g": 0}
    con.close()


def test_a_sink_created_again_on_its_table_resumes(server: PgServer, db: Any) -> None:
    con = dsql.connect()
    _start(con, server, db)
    make = "CREATE SINK d FROM v INTO POSTGRES CONNECTION pg (TABLE 'changes')"
    con.execute(make)
    rng = random.Random(3)
    expected = _history(con, rng, 6)
    con.execute("DROP SINK d")
    expected |= _history(con, rng, 3, first_id=500)  # not written while dropped
    con.execute(make)
    expected |= _history(con, rng, 4, first_id=900)
    last = max(expected)
    assert _accumulated(db, "changes", last) == expected[last] == _view_rows(con)
    assert _progress(db) == {"changes": last}
    con.close()


def test_show_sources_and_sinks_list_every_kind_without_the_password(
    server: PgServer, db: Any, tmp_path: Path
) -> None:
    db.execute(
        "CREATE TABLE up (k int, w text); ALTER TABLE up REPLICA IDENTITY FULL;"
        " CREATE PUBLICATION p FOR TABLE up; INSERT INTO up VALUES (1, 'x')"
    )
    con = dsql.connect(allowed_paths=[str(tmp_path)])
    try:
        con.execute(connection_sql(server, db.dbname))
        con.execute("CREATE SOURCE s FROM POSTGRES CONNECTION pg (PUBLICATION 'p') FOR TABLES (up)")
        con.execute(f"CREATE SOURCE f (a int) FROM FILES '{tmp_path}' WITH (FORMAT = 'csv')")
        con.execute("CREATE SINK k FROM up INTO POSTGRES CONNECTION pg (TABLE 'out.up')")
        con.execute(f"CREATE SINK j FROM up INTO FILES '{tmp_path / 'j'}'")
        con.sink("up", lambda ms, changes: None)
        sources = con.execute("SHOW SOURCES").fetchall()
        assert [r[0] for r in sources] == ["f", "s"]
        assert sources[1][1:] == (
            "postgres pg (PUBLICATION 'p') public.up AS up",
            "pgoutput",
            None,
            1,
            None,
        )
        sinks = {r[0]: r[3] for r in con.execute("SHOW SINKS").fetchall()}
        callback = [name for name in sinks if name not in {"k", "j"}]
        assert sinks["k"] == "postgres pg out.up" and sinks["j"] == str(tmp_path / "j")
        assert len(callback) == 1 and sinks[callback[0]].startswith("callback")
        shown = str(sources) + str(sinks) + str(con.execute("SHOW CONNECTIONS").fetchall())
        assert "hunter2" not in shown
    finally:
        con.execute("DROP SOURCE s CASCADE")  # its slot goes with it
        con.close()


def test_a_secret_is_the_connections_password_and_no_output_prints_it(
    server: PgServer, db: Any, tmp_path: Path
) -> None:
    data_dir = str(tmp_path / "data")
    con = dsql.connect(data_dir=data_dir)
    con.execute("CREATE SECRET pw AS 'hunter2'")
    with pytest.raises(SchemaError) as taken:
        con.execute("CREATE SECRET pw AS 'hunter2'")
    assert "hunter2" not in str(taken.value)
    for broken in ("CREATE SECRET x AS 'hunter2' junk", "CREATE SECRET x 'hunter2'",
                   "CREATE SECRET x AS 'hunter2"):  # fmt: skip
        with pytest.raises(dsql.Error) as garbled:
            con.execute(broken)
        assert "hunter2" not in str(garbled.value) and "*******" in str(garbled.value)
    con.execute(
        connection_sql(server, db.dbname).replace("PASSWORD 'hunter2'", "PASSWORD SECRET pw")
    )
    con.execute("CREATE TABLE t (a int)")
    con.execute("CREATE SINK k FROM t INTO POSTGRES CONNECTION pg (TABLE 'sec')")
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("ADVANCE BY 1")
    con.execute("SELECT 1")
    assert db.execute("SELECT a, mz_diff FROM sec").fetchall() == [(1, 1)]
    assert con.session.pg.connections["pg"].password == "hunter2"  # the test server trusts
    assert con.execute("SHOW SECRETS").fetchall() == [("pw",)]
    with pytest.raises(SchemaError, match='connection "pg" uses it'):
        con.execute("DROP SECRET pw")
    with pytest.raises(SchemaError, match='secret "nope" does not exist'):
        con.execute(
            "CREATE CONNECTION q TO POSTGRES (HOST 'h', USER 'u', PASSWORD SECRET nope,"
            " DATABASE 'd')"
        )
    shown = [con.execute(f"SHOW {what}").fetchall() for what in ("CONNECTIONS", "SINKS", "SOURCES")]
    assert "hunter2" not in str(shown) + repr(con.session.pg.connections)
    con.close()
    con = dsql.connect(data_dir=data_dir)  # the secret and the connection come back
    con.execute("INSERT INTO t VALUES (2)")
    con.execute("ADVANCE BY 1")
    con.execute("SELECT 1")
    assert sorted(db.execute("SELECT a, mz_diff FROM sec").fetchall()) == [(1, 1), (2, 1)]
    con.close()


@pytest.mark.parametrize("checkpoint_bytes", [None, 1], ids=["log", "checkpoint"])
def test_a_reconnected_session_continues_both_envelopes(
    server: PgServer, db: Any, tmp_path: Path, checkpoint_bytes: int | None
) -> None:
    """Closed and opened again on its data directory, the session's sinks go on from
    their progress; after a checkpoint (history folded into a snapshot) the first write
    is the difference between the table and the relation, read back from PostgreSQL."""
    data_dir = str(tmp_path / "data")
    rng = random.Random(11)
    con = dsql.connect(data_dir=data_dir, checkpoint_bytes=checkpoint_bytes)
    _start(con, server, db)
    con.execute("CREATE SINK d FROM v INTO POSTGRES CONNECTION pg (TABLE 'changes')")
    con.execute(
        "CREATE SINK u FROM v INTO POSTGRES CONNECTION pg (TABLE 'state') KEY (g) ENVELOPE UPSERT"
    )
    expected = _history(con, rng, 6)
    con.close()
    con = dsql.connect(data_dir=data_dir, checkpoint_bytes=checkpoint_bytes)
    expected |= _history(con, rng, 6, first_id=500)
    last = max(expected)
    assert _accumulated(db, "changes", last) == expected[last] == _view_rows(con)
    assert _upserted(db, "state") == _view_rows(con)
    if checkpoint_bytes is None:  # the whole history kept: every millisecond as it was
        for ms, rows in expected.items():
            assert _accumulated(db, "changes", ms) == rows, ms
    con.close()
