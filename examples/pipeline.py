"""A pipeline in one process: files arrive, a view follows them, a sink writes its
changes, and a restart picks up where the last run stopped.

    python examples/pipeline.py

A CSV file source with upserts by key feeds a materialized view; a FILES sink writes
each closed millisecond's changes of the view as Parquet. Everything lives in a data
directory, so the second connection finds the tables, the view, the source's progress
and the sink's, reads only the file that arrived while it was away, and writes each
millisecond once (its first run wrote times 0 and 1000). The manual clock keeps the
output the same on every run.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

import dsql


def land(directory: Path, name: str, text: str) -> None:
    """Write a file beside the source's directory and rename it in, as a producer
    should: a half-written file is never read."""
    tmp = directory.parent / f".{name}"
    tmp.write_text(text, encoding="utf-8")
    tmp.rename(directory / name)


def sink_rows(out: Path) -> list[tuple]:
    """The sink's rows so far, in time order."""
    rows = [r for f in sorted(out.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    return [(r["mz_timestamp"], r["mz_diff"], r["city"], r["stock"]) for r in rows]


def first_run(con: dsql.Connection, incoming: Path, out: Path) -> None:
    con.execute(
        f"CREATE SOURCE stock (item text, city text, qty int) FROM FILES '{incoming}' "
        "WITH (FORMAT = 'csv') KEY (item) ENVELOPE UPSERT"
    )
    con.execute(
        "CREATE MATERIALIZED VIEW by_city AS "
        "SELECT city, sum(qty) AS stock FROM stock GROUP BY city"
    )
    con.execute(f"CREATE SINK by_city_out FROM by_city INTO FILES '{out}'")
    land(incoming, "1.csv", "item,city,qty\nbolt,oslo,10\nnut,oslo,5\nscrew,rome,7\n")
    # The poll before each statement reads 1.csv at the current time, 0; the ADVANCE
    # closes time 0, and the sink writes its changes.
    con.execute("ADVANCE TO 1000")
    print("after 1.csv:", sorted(con.execute("SELECT * FROM by_city").fetchall()))
    land(incoming, "2.csv", "item,city,qty\nbolt,rome,10\nnut,,\n")  # a move and a delete
    con.execute("ADVANCE TO 2000")
    print("after 2.csv:", sorted(con.execute("SELECT * FROM by_city").fetchall()))


def second_run(con: dsql.Connection, incoming: Path) -> None:
    print("recovered:  ", sorted(con.execute("SELECT * FROM by_city").fetchall()))
    land(incoming, "3.csv", "item,city,qty\nscrew,rome,1\n")
    con.execute("ADVANCE TO 3000")  # 3.csv at 2000, which the sink writes once
    print("after 3.csv:", sorted(con.execute("SELECT * FROM by_city").fetchall()))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        incoming, out, data = root / "incoming", root / "out", root / "data"
        incoming.mkdir()
        con = dsql.connect(kernel="local", data_dir=str(data), allowed_paths=[str(root)])
        first_run(con, incoming, out)
        con.close()  # or a crash: the log holds every acknowledged write
        con = dsql.connect(kernel="local", data_dir=str(data), allowed_paths=[str(root)])
        second_run(con, incoming)
        con.close()
        print("sink (mz_timestamp, mz_diff, city, stock):")
        for row in sink_rows(out):
            print("  ", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
