"""Dropping a dataflow leaves nothing behind: a session answering many reads (each a
short-lived dataflow over the tables' arrangements, loops included) keeps only the
nodes of what it maintains, and the tables' arrangements keep only live readers."""

from __future__ import annotations

import dsql

REACH = (
    "WITH RECURSIVE r(n) AS (SELECT 0 UNION SELECT e.dst FROM r JOIN e ON r.n = e.src) "
    "SELECT count(*) FROM r"
)


def _live(con: dsql.api.Connection) -> list:
    return [n for n in con.session.worker.nodes if n is not None]


def test_reads_leave_no_nodes_or_readers_behind() -> None:
    con = dsql.connect(kernel="local")
    con.execute("CREATE TABLE e (src int, dst int)")
    con.execute("INSERT INTO e VALUES (0, 1), (1, 2)")
    con.execute("CREATE MATERIALIZED VIEW v AS SELECT src, count(*) AS n FROM e GROUP BY src")
    arrangement = con.session.relations["e"].arrangement.node
    before, readers = len(_live(con)), len(arrangement.readers)
    for i in range(5):
        assert con.execute(REACH).fetchall() == [(3 + i,)]
        assert con.execute("SELECT a.src FROM e a JOIN e b ON a.dst = b.src").fetchall()
        con.execute(f"INSERT INTO e VALUES ({i + 2}, {i + 3})")
    assert len(_live(con)) == before
    assert len(arrangement.readers) == readers
    assert all(not n.dropped for n in _live(con))
    assert sorted(con.execute("SELECT * FROM v").fetchall()) == [(s, 1) for s in range(7)]
