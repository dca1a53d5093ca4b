"""PostgreSQL change data capture: a source over a real server's logical replication.

The upstream server runs with `wal_level = logical` on a private socket; every
upstream change is checked by running the same query in PostgreSQL and in dsql (over
the source's relations) after dsql's next statement has polled the slot.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pg_oracle import PgServer

import dsql
import dsql.errors
from dsql import pgoutput
from dsql.errors import SchemaError, SourceError

_databases = itertools.count()

LOGICAL = (
    "-c wal_level=logical -c max_replication_slots=10 -c max_wal_senders=10"
    " -c synchronous_commit=on"  # a commit is decodable once it returns
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[PgServer]:
    root = Path(tempfile.mkdtemp(prefix="dsql-cdc-"))
    server = PgServer.start(root, LOGICAL)
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def db(upstream: PgServer) -> Iterator[Any]:
    """A fresh upstream database with tables a (k, v text, n numeric) and b (k, w int),
    both REPLICA IDENTITY FULL, in publication p."""
    name = f"cdc_{next(_databases)}"
    conn = upstream.database(name)
    conn.execute(
        "CREATE TABLE a (k int PRIMARY KEY, v text, n numeric(10, 2));"
        " ALTER TABLE a REPLICA IDENTITY FULL;"
        " CREATE TABLE b (k int, w int); ALTER TABLE b REPLICA IDENTITY FULL;"
        " CREATE PUBLICATION p FOR TABLE a, b"
    )
    conn.dbname = name
    yield conn
    for (slot,) in conn.execute(
        "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()"
    ).fetchall():
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    conn.close()


def connection_sql(server: PgServer, database: str, **overrides: Any) -> str:
    options = {
        "host": str(server.socket_dir),
        "port": server.port,
        "user": "postgres",
        "database": database,
        **overrides,
    }
    spelled = ", ".join(
        f"{k.upper()} {v}" if isinstance(v, int) else f"{k.upper()} '{v}'"
        for k, v in options.items()
    )
    return f"CREATE CONNECTION pg TO POSTGRES ({spelled})"


def source(con: Any, server: PgServer, db: Any, tables: str = "TABLES (a, b)") -> Any:
    cur = con.cursor()
    cur.execute(connection_sql(server, db.dbname))
    cur.execute(f"CREATE SOURCE s FROM POSTGRES CONNECTION pg (PUBLICATION 'p') FOR {tables}")
    return cur


QUERIES = (
    "SELECT k, v, n FROM a",
    "SELECT v, count(*) AS c, sum(n) AS s FROM a GROUP BY v",
    "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k",
    "SELECT count(*) AS c, sum(w) AS s FROM b",
)


def same_as_upstream(cur: Any, db: Any) -> None:
    for i, query in enumerate(QUERIES):
        cur.execute(f"SELECT * FROM v{i}")
        got = sorted(cur.fetchall(), key=repr)
        want = sorted(db.execute(query).fetchall(), key=repr)
        assert got == want, f"{query}\n  dsql {got}\n  postgres {want}"


def views(cur: Any) -> None:
    for i, query in enumerate(QUERIES):
        cur.execute(f"CREATE MATERIALIZED VIEW v{i} AS {query}")


# --- the decoder ------------------------------------------------------------------------


def _tuple(*values: str | None) -> bytes:
    out = len(values).to_bytes(2, "big")
    for v in values:
        if v is None:
            out += b"n"
        elif v == "<u>":
            out += b"u"
        else:
            out += b"t" + len(v.encode()).to_bytes(4, "big") + v.encode()
    return out


def test_decoder_reads_each_message_kind() -> None:
    oid = (16384).to_bytes(4, "big")
    relation = (
        b"R" + oid + b"public\0a\0" + b"f" + (2).to_bytes(2, "big")
        + b"\x01k\0" + (23).to_bytes(4, "big") + (-1).to_bytes(4, "big", signed=True)
        + b"\x00v\0" + (25).to_bytes(4, "big") + (-1).to_bytes(4, "big", signed=True)
    )  # fmt: skip
    assert pgoutput.decode(relation) == pgoutput.Relation(
        16384, "public", "a", "f", ("k", "v"), (23, 25)
    )
    assert pgoutput.decode(b"I" + oid + b"N" + _tuple("1", None)) == pgoutput.Insert(
        16384, ("1", None)
    )
    update = pgoutput.decode(b"U" + oid + b"O" + _tuple("1", "x") + b"N" + _tuple("1", "<u>"))
    assert update == pgoutput.Update(16384, ("1", "x"), "O", ("1", pgoutput.UNCHANGED))
    assert pgoutput.decode(b"U" + oid + b"N" + _tuple("2", "é")) == pgoutput.Update(
        16384, None, None, ("2", "é")
    )
    assert pgoutput.decode(b"D" + oid + b"O" + _tuple("1", "x")) == pgoutput.Delete(
        16384, ("1", "x"), "O"
    )
    truncate = b"T" + (2).to_bytes(4, "big") + b"\0" + oid + (7).to_bytes(4, "big")
    assert pgoutput.decode(truncate) == pgoutput.Truncate((16384, 7))
    commit = b"C\0" + (10).to_bytes(8, "big") + (20).to_bytes(8, "big") + (0).to_bytes(8, "big")
    assert pgoutput.decode(commit) == pgoutput.Commit(10, 20)
    assert pgoutput.decode(b"O" + (1).to_bytes(8, "big") + b"x\0") == pgoutput.Skipped("O")


@pytest.mark.parametrize(
    "data",
    [b"I\0\0", b"Z", b"I" + bytes(4) + b"N" + _tuple("abc")[:-1], b"D" + bytes(4) + b"N"],
)
def test_decoder_refuses_malformed_messages(data: bytes) -> None:
    with pytest.raises(pgoutput.DecodeError):
        pgoutput.decode(data)


def test_statements_parse() -> None:
    from dsql import grammar

    (stmt,) = grammar.parse(
        "CREATE SOURCE IF NOT EXISTS s FROM POSTGRES CONNECTION pg (PUBLICATION 'p')"
        ' FOR TABLES (t, sch."T 2" AS u)'
    )
    assert isinstance(stmt, grammar.CreatePgSource)
    assert (stmt.connection, stmt.options, stmt.tables, stmt.if_not_exists) == (
        "pg",
        (("publication", "p"),),
        (("t", None), ("sch.T 2", "u")),
        True,
    )
    (stmt,) = grammar.parse(
        "CREATE SOURCE s FROM POSTGRES CONNECTION pg (PUBLICATION 'p') FOR ALL TABLES"
    )
    assert isinstance(stmt, grammar.CreatePgSource) and stmt.tables is None
    (stmt,) = grammar.parse("DROP CONNECTION IF EXISTS a, b")
    assert stmt == grammar.DropConnection(
        names=("a", "b"), if_exists=True, text=stmt.text, position=stmt.position
    )
    for bad in (
        "CREATE SOURCE s FROM POSTGRES CONNECTION pg FOR ALL TABLES",
        "CREATE SOURCE s FROM POSTGRES CONNECTION pg (PUBLICATION 'p') FOR TABLES",
        "CREATE CONNECTION pg TO MYSQL (HOST 'h')",
    ):
        with pytest.raises(dsql.errors.ParseError):
            grammar.parse(bad)


def test_a_slot_left_behind_is_a_warning(upstream: PgServer, db: Any) -> None:
    """DROP SOURCE while the server is away: the relations go, and a warning names the
    slot that stays upstream."""
    con = dsql.connect()
    cur = source(con, upstream, db)
    slot = con.session.pg.by_name["s"].slot
    con.session.pg.connections["pg"] = dataclasses.replace(con.session.pg.connections["pg"], port=1)
    con.session.pg.by_name["s"].connection = con.session.pg.connections["pg"]
    with pytest.warns(dsql.errors.DsqlWarning, match=slot):
        cur.execute("DROP SOURCE s")
    cur.execute("SHOW TABLES")
    assert cur.fetchall() == []
    db.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


# --- the source -------------------------------------------------------------------------


def test_changes_keep_views_equal_to_upstream(upstream: PgServer, db: Any) -> None:
    db.execute("INSERT INTO a VALUES (1, 'x', 1.5), (2, NULL, 2), (3, 'x', NULL)")
    db.execute("INSERT INTO b VALUES (1, 10), (1, 11), (4, 40)")
    con = dsql.connect()
    cur = source(con, upstream, db)
    views(cur)
    same_as_upstream(cur, db)
    steps = [
        ["INSERT INTO a VALUES (4, 'y', 4.25)"],
        ["UPDATE a SET n = n + 1 WHERE v = 'x'"],
        ["UPDATE a SET k = 10 WHERE k = 1", "UPDATE b SET k = 10 WHERE k = 1"],
        ["DELETE FROM b WHERE w = 11", "INSERT INTO b VALUES (2, 20), (2, 20)"],
        ["DELETE FROM a WHERE v IS NULL"],
        ["INSERT INTO a VALUES (5, 'z', 5)", "DELETE FROM a WHERE k = 5"],
        ["UPDATE a SET v = 'it''s', n = NULL WHERE k = 4"],
        ["TRUNCATE b", "INSERT INTO b VALUES (3, 30)"],
        ["DELETE FROM b WHERE w = 30", "TRUNCATE a"],
        ["INSERT INTO a VALUES (6, 'w', 6), (7, 'w', 7)", "INSERT INTO b VALUES (6, 1)"],
    ]
    for step in steps:
        with db.transaction():
            for statement in step:
                db.execute(statement)
        same_as_upstream(cur, db)
    # several transactions between two polls
    db.execute("UPDATE a SET n = 0 WHERE k = 6")
    db.execute("DELETE FROM a WHERE k = 7")
    db.execute("INSERT INTO a VALUES (7, 'w', 70)")
    same_as_upstream(cur, db)
    cur.execute("SELECT * FROM a WHERE k = 7")
    assert cur.fetchall() == [(7, "w", Decimal("70.00"))]


TYPES = {
    "i2": ("smallint", "-32768"),
    "i8": ("bigint", "9223372036854775807"),
    "f4": ("real", "1.5"),
    "f8": ("double precision", "'-Infinity'"),
    "nu": ("numeric", "123456789.000000001"),
    "vc": ("varchar(5)", "'a\\b'"),
    "ch": ("char(3)", "'ab'"),
    "tx": ("text", "E'tab\\there\\nnewline'"),
    "bo": ("boolean", "true"),
    "da": ("date", "'2024-02-29'"),
    "ts": ("timestamp", "'2024-01-01 10:00:00.123456'"),
    "tz": ("timestamptz", "'2024-01-01 10:00:00+02'"),
    "iv": ("interval", "'1 year 2 days 03:04:05'"),
    "ar": ("int[]", "ARRAY[1, NULL, 3]"),
}


def test_column_types_arrive_as_postgres_stores_them(upstream: PgServer, db: Any) -> None:
    """Every type dsql has arrives equal through the snapshot and through the slot, and
    NULL in each."""
    columns = ", ".join(f"{name} {kind}" for name, (kind, _) in TYPES.items())
    values = ", ".join(value for _, value in TYPES.values())
    nulls = ", ".join("NULL" for _ in TYPES)
    db.execute(f"CREATE TABLE ty (k int, {columns}); ALTER TABLE ty REPLICA IDENTITY FULL")
    db.execute("CREATE PUBLICATION pt FOR TABLE ty")
    db.execute(f"INSERT INTO ty VALUES (1, {values}), (2, {nulls})")
    con = dsql.connect()
    cur = con.cursor()
    cur.execute(connection_sql(upstream, db.dbname))
    cur.execute("CREATE SOURCE s FROM POSTGRES CONNECTION pg (PUBLICATION 'pt') FOR ALL TABLES")
    db.execute(f"INSERT INTO ty VALUES (3, {values}), (4, {nulls})")
    db.execute("UPDATE ty SET k = k + 10 WHERE k IN (1, 2)")
    names = ", ".join(TYPES)
    for name in TYPES:
        # char(n) (dsql keeps no blank padding) and interval (dsql fetches text) as text
        shown = f"{name}::text" if name in ("ch", "iv") else name
        query = f"SELECT k, {shown} FROM ty ORDER BY k"
        cur.execute(query)
        got = cur.fetchall()
        assert got == db.execute(query).fetchall(), name
    cur.execute(f"SELECT count(*) FROM (SELECT DISTINCT {names} FROM ty) d")
    assert cur.fetchall() == [(2,)]


def test_each_transaction_lands_at_one_time(upstream: PgServer, db: Any) -> None:
    """Moving value between two tables in one transaction never shows a partial total,
    at any time a subscription sees, under the wall clock."""
    db.execute("INSERT INTO a VALUES (1, 'x', 0); INSERT INTO b VALUES (1, 100)")
    con = dsql.connect(clock="wall")
    cur = source(con, upstream, db)
    cur.execute(
        "CREATE MATERIALIZED VIEW total AS SELECT x.s AS bs, y.s AS ys FROM"
        " (SELECT sum(w) AS s FROM b) x, (SELECT sum(n)::int AS s FROM a) y"
    )
    cur.execute("CREATE TABLE x (i int)")
    cur.execute("DECLARE c CURSOR FOR SUBSCRIBE total")
    for i in range(6):
        with db.transaction():
            db.execute("UPDATE b SET w = w - 5 WHERE k = 1")
            db.execute("INSERT INTO b VALUES (2, 1), (3, -1)")
            db.execute("UPDATE a SET n = n + 5")
        if i % 2:
            cur.execute("INSERT INTO x VALUES (1)")  # a statement: a poll
    cur.execute("INSERT INTO x VALUES (1)")
    cur.execute("FETCH ALL c")
    by_time: dict[int, list[tuple[int, Any]]] = defaultdict(list)
    for ts, diff, bs, ys in cur.fetchall():
        by_time[ts].append((diff, (bs, ys)))
    assert len(by_time) > 1
    state: dict[Any, int] = defaultdict(int)
    for ts in sorted(by_time):
        for diff, sums in by_time[ts]:
            state[sums] += diff
        (now,) = [sums for sums, n in state.items() if n]  # one row at every time
        assert sum(now) == 100, f"at {ts}: {dict(state)}"
    cur.execute("SELECT count(*), sum(w) FROM b")
    assert cur.fetchall() == [(13, 70)]


@pytest.mark.parametrize("checkpoint_bytes", [None, 1], ids=["log", "checkpoints"])
def test_restart_resumes_without_loss_or_repeat(
    upstream: PgServer, db: Any, checkpoint_bytes: int | None
) -> None:
    """Recovered from the log alone, or from a checkpoint taken after every statement."""
    data_dir = Path(tempfile.mkdtemp(prefix="dsql-cdc-data-"))

    def connect() -> Any:
        return dsql.connect(data_dir=data_dir, checkpoint_bytes=checkpoint_bytes)

    try:
        db.execute("INSERT INTO a VALUES (1, 'x', 1)")
        con = connect()
        cur = source(con, upstream, db)
        views(cur)
        db.execute("INSERT INTO a VALUES (2, 'y', 2)")
        same_as_upstream(cur, db)
        # a crash between logging a poll and advancing the slot: the slot sends the
        # transaction again, and the recovered source knows it has it
        db.execute("UPDATE a SET n = n * 10")
        s = con.session
        s.writes = []
        s.pg.poll()
        s.durable.polled(s.writes, s.source_kinds.progress())
        s.writes = None
        con.close()
        db.execute("INSERT INTO b VALUES (1, 5)")  # while dsql is down
        con = connect()
        cur = con.cursor()
        same_as_upstream(cur, db)
        cur.execute("SELECT sum(n) FROM a")
        assert cur.fetchall() == [(Decimal("30.00"),)]
        db.execute("DELETE FROM a WHERE k = 1")
        same_as_upstream(cur, db)
        con.close()
        con = connect()
        cur = con.cursor()
        same_as_upstream(cur, db)
        cur.execute("DROP SOURCE s CASCADE")
        slots = db.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
        ).fetchone()
        assert slots == (0,)
        con.close()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def test_a_fetch_that_waits_polls_and_logs(upstream: PgServer, db: Any) -> None:
    """Changes a waiting FETCH brings are in the log like a statement's poll."""
    data_dir = Path(tempfile.mkdtemp(prefix="dsql-cdc-data-"))
    try:
        con = dsql.connect(data_dir=data_dir)
        cur = source(con, upstream, db)
        cur.execute("DECLARE c CURSOR FOR SUBSCRIBE (SELECT k FROM a)")
        db.execute("INSERT INTO a VALUES (1, 'x', 1)")
        cur.execute("FETCH ALL c WITH (timeout = '5s')")
        assert [row[1:] for row in cur.fetchall()] == [(1, 1)]
        con.close()
        con = dsql.connect(data_dir=data_dir)
        cur = con.cursor()
        db.execute("INSERT INTO a VALUES (2, 'y', 2)")
        cur.execute("SELECT k FROM a ORDER BY k")
        assert cur.fetchall() == [(1,), (2,)]
        cur.execute("DROP SOURCE s")
        con.close()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def test_snapshot_and_slot_agree(upstream: PgServer, db: Any) -> None:
    """Rows committed before CREATE SOURCE come from the snapshot, the ones after from
    the slot, none twice."""
    db.execute("INSERT INTO b SELECT g, g FROM generate_series(1, 500) g")
    con = dsql.connect()
    cur = source(con, upstream, db, "TABLES (b AS bb)")
    db.execute("INSERT INTO b SELECT g, g FROM generate_series(501, 600) g")
    cur.execute("SELECT count(*), sum(w) FROM bb")
    assert cur.fetchall() == [(600, 600 * 601 // 2)]


def test_for_all_tables_and_drop_source_drops_the_slot(upstream: PgServer, db: Any) -> None:
    con = dsql.connect()
    cur = source(con, upstream, db, "ALL TABLES")
    cur.execute("SHOW CONNECTIONS")
    (row,) = cur.fetchall()
    assert row[0] == "pg" and "password" not in repr(cur.description).lower()
    with pytest.raises(SchemaError, match="source"):
        cur.execute("DROP CONNECTION pg")
    cur.execute("DROP SOURCE s")
    assert db.execute("SELECT count(*) FROM pg_replication_slots").fetchone() == (0,)
    cur.execute("DROP CONNECTION pg")
    cur.execute("SHOW CONNECTIONS")
    assert cur.fetchall() == []


def test_a_lost_connection_is_a_notice_and_the_source_retries(upstream: PgServer, db: Any) -> None:
    con = dsql.connect()
    cur = source(con, upstream, db)
    cur.execute("SELECT 1")  # the source's connection is open
    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    db.execute("INSERT INTO a VALUES (1, 'x', 1)")
    cur.execute("SELECT count(*) FROM a")
    assert any("lost its connection" in n for n in cur.notices), cur.notices
    cur.execute("SELECT count(*) FROM a")
    assert cur.fetchall() == [(1,)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("ALTER TABLE a ADD COLUMN z int", "changed its columns"),
        ("ALTER TABLE a REPLICA IDENTITY DEFAULT", "lost REPLICA IDENTITY FULL"),
    ],
)
def test_an_upstream_change_the_source_cannot_follow_stops_it(
    upstream: PgServer, db: Any, change: str, message: str
) -> None:
    """The transactions from there on are not applied (each poll says why); the ones
    before are."""
    con = dsql.connect()
    cur = source(con, upstream, db)
    db.execute("INSERT INTO a VALUES (1, 'x', 1)")
    db.execute(change)
    db.execute("UPDATE a SET n = 2")
    cur.execute("SELECT * FROM a")
    assert any(message in n for n in cur.notices), cur.notices
    assert cur.fetchall() == [(1, "x", Decimal("1.00"))]
    cur.execute("DROP SOURCE s")


# --- errors -----------------------------------------------------------------------------


def test_unreachable_server_and_bad_login(upstream: PgServer, db: Any) -> None:
    cur = dsql.connect().cursor()
    with pytest.raises(SourceError, match="cannot connect") as refused:
        cur.execute(connection_sql(upstream, db.dbname, port=1))
    assert "HOST" in (refused.value.hint or "")
    with pytest.raises(SourceError, match="cannot connect") as refused:
        cur.execute(connection_sql(upstream, db.dbname, user="nobody"))
    assert "USER and PASSWORD" in (refused.value.hint or "")
    db.execute("CREATE ROLE pw LOGIN PASSWORD 'right'")
    hba = upstream.data / "pg_hba.conf"
    hba.write_text("local all pw scram-sha-256\n" + hba.read_text())
    db.execute("SELECT pg_reload_conf()")
    with pytest.raises(SourceError, match="password authentication failed") as refused:
        cur.execute(connection_sql(upstream, db.dbname, user="pw", password="wrong"))
    assert "PASSWORD" in (refused.value.hint or "")
    cur.execute(connection_sql(upstream, db.dbname, user="pw", password="right"))
    cur.execute("SHOW CONNECTIONS")
    assert "right" not in repr(cur.fetchall())
    with pytest.raises(SchemaError, match="unknown CONNECTION option"):
        cur.execute("CREATE CONNECTION q TO POSTGRES (HOST 'h', SSLMODE 'x')")


def test_refusals_name_what_is_missing(upstream: PgServer, db: Any) -> None:
    db.execute(
        "CREATE TABLE c (k int); CREATE TABLE d (p point); ALTER TABLE d REPLICA IDENTITY FULL"
    )
    db.execute("CREATE PUBLICATION q FOR TABLE c, d")
    cur = dsql.connect().cursor()
    cur.execute(connection_sql(upstream, db.dbname))
    cases = [
        ("(PUBLICATION 'nope') FOR ALL TABLES", SourceError, 'publication "nope" does not exist'),
        ("(PUBLICATION 'p') FOR TABLES (c)", SourceError, "not in publication"),
        ("(PUBLICATION 'q') FOR TABLES (c)", SourceError, "REPLICA IDENTITY FULL"),
        ("(PUBLICATION 'q') FOR TABLES (d)", SchemaError, "type point"),
        ("(PUBLICATION 'p', SLOT 'x') FOR TABLES (a)", SchemaError, "PUBLICATION"),
    ]
    for spec, kind, message in cases:
        with pytest.raises(kind, match=message) as refused:
            cur.execute(f"CREATE SOURCE s FROM POSTGRES CONNECTION pg {spec}")
        assert refused.value.hint or kind is SchemaError
    with pytest.raises(SchemaError, match="does not exist"):
        cur.execute(
            "CREATE SOURCE s FROM POSTGRES CONNECTION nope (PUBLICATION 'p') FOR ALL TABLES"
        )
    assert db.execute("SELECT count(*) FROM pg_replication_slots").fetchone() == (0,)
    cur.execute("SHOW TABLES")
    assert cur.fetchall() == []


def test_wal_level_not_logical(pg: PgServer) -> None:
    conn = pg.database("cdc_replica")
    conn.execute("CREATE TABLE t (k int); CREATE PUBLICATION p FOR TABLE t")
    cur = dsql.connect().cursor()
    cur.execute(connection_sql(pg, "cdc_replica"))
    with pytest.raises(SourceError, match="wal_level") as refused:
        cur.execute("CREATE SOURCE s FROM POSTGRES CONNECTION pg (PUBLICATION 'p') FOR ALL TABLES")
    assert "wal_level = logical" in (refused.value.hint or "")
    conn.close()
