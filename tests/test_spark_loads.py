"""Loads read by Spark's executors, and results handed out without collecting them.

A table created from a Spark DataFrame, a Spark table, or a Parquet, CSV or JSON file
under kernel="spark" (or under "auto" once it outgrows the placement threshold) is read,
stamped and stored by executors (`dsql.loads`); the views over it must give exactly what
the in-process kernel gives from the same source, before and after changes. Run these
under `flock /tmp/dsql-heavy.lock`: they start Spark.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dsql
from dsql import errors

#: Rows of the loaded table: over the tests' placement threshold, small enough for CI.
ROWS = 3_000
THRESHOLD = 1_000

VIEWS = {
    "by_g": "SELECT g, count(*) AS n, sum(k) AS total, min(s) AS lo, max(d) AS last "
    "FROM t GROUP BY g",
    "joined": "SELECT t.k, t.x, w.label FROM t JOIN w ON t.g = w.g WHERE t.k % 97 = 0",
    "nulls": "SELECT k, s FROM t WHERE s IS NULL OR x IS NULL",
}

CHANGES = [
    "DELETE FROM t WHERE k % 5 = 0",
    "INSERT INTO t VALUES (100001, 3, 'new', DATE '2024-02-29', 1.5), "
    "(100002, NULL, NULL, NULL, NULL)",
    "UPDATE t SET s = 'changed', g = 6 WHERE k % 7 = 1",
]


def source_rows() -> pa.Table:
    """The table every source holds: NULLs in each column, an empty string, dates."""
    k = list(range(ROWS))
    return pa.table(
        {
            "k": pa.array(k, pa.int64()),
            "g": pa.array([None if i % 50 == 0 else i % 6 for i in k], pa.int64()),
            "s": pa.array(
                [None if i % 31 == 0 else "" if i % 37 == 0 else f"s{i % 13}" for i in k]
            ),
            "d": pa.array(
                [datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 40) for i in k],
                pa.date32(),
            ),
            "x": pa.array([None if i % 23 == 0 else i / 8 for i in k], pa.float64()),
        }
    )


def write_csv(rows: pa.Table, path: Path) -> None:
    """CSV as PostgreSQL's COPY writes it: NULL unquoted empty, the empty string quoted."""
    lines = [",".join(rows.column_names)]
    for row in rows.to_pylist():
        fields = []
        for value in row.values():
            if value is None:
                fields.append("")
            elif isinstance(value, str):
                fields.append(f'"{value}"' if value == "" else value)
            else:
                fields.append(str(value))
        lines.append(",".join(fields))
    path.write_text("\n".join(lines) + "\n")


def write_json(rows: pa.Table, path: Path) -> None:
    import json

    with path.open("w") as out:
        for row in rows.to_pylist():
            out.write(json.dumps({k: v if not isinstance(v, datetime.date) else str(v)
                                  for k, v in row.items()}) + "\n")  # fmt: skip


@pytest.fixture(scope="module")
def sources(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each kind of source, holding `source_rows()`."""
    root = tmp_path_factory.mktemp("loads")
    rows = source_rows()
    frame = spark.createDataFrame(rows)
    frame.write.parquet(str(root / "written_by_spark"))
    frame.createOrReplaceTempView("dsql_loads_source")
    write_csv(rows, root / "t.csv")
    write_json(rows, root / "t.json")
    return {
        "frame": (frame, None),
        "table": ("dsql_loads_source", "table"),
        "parquet": (str(root / "written_by_spark"), None),
        "parquet_uri": ((root / "written_by_spark").as_uri(), None),
        "csv": (root / "t.csv", None),
        "json": (str(root / "t.json"), None),
    }


def connect(kernel: str, spark: Any) -> dsql.Connection:
    if kernel == "spark":
        return dsql.connect(kernel="spark", spark=spark)
    if kernel == "auto":
        return dsql.connect(kernel="auto", placement_threshold=THRESHOLD)
    return dsql.connect(kernel="local")


def answers(con: dsql.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {
        name: sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr) for name in VIEWS
    }


def load(con: dsql.Connection, source: Any, format: str | None) -> None:  # noqa: A002
    con.create_table("t", source, format=format)
    con.execute("CREATE TABLE w (g bigint, label text)")
    con.execute("INSERT INTO w VALUES (0, 'zero'), (1, 'one'), (3, 'three'), (6, 'six')")
    for name, query in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")


def table_kernel(con: dsql.Connection) -> str:
    shown = con.execute("SHOW ARRANGEMENTS").fetchall()
    return next(row[2] for row in shown if row[0] == "t")


@pytest.mark.parametrize(
    ("kernel", "kind"),
    [
        ("spark", "frame"),
        ("spark", "csv"),
        ("auto", "table"),
        ("auto", "parquet"),
        ("auto", "parquet_uri"),
        ("auto", "json"),
    ],
)
def test_a_load_read_by_spark_agrees_with_the_local_kernel(
    spark: Any, sources: dict[str, Any], kernel: str, kind: str
) -> None:
    source, format = sources[kind]
    reference = connect("local", spark)
    load(reference, source, format)
    con = connect(kernel, spark)
    load(con, source, format)
    assert table_kernel(con) == "spark"
    assert con.table("t").columns == ["k", "g", "s", "d", "x"]
    assert [c[1] for c in con.execute("SELECT * FROM t LIMIT 0").description] == [
        c[1] for c in reference.execute("SELECT * FROM t LIMIT 0").description
    ]
    assert answers(con) == answers(reference)
    for change in CHANGES:
        reference.execute(change)
        con.execute(change)
        assert answers(con) == answers(reference), change
    assert (
        con.execute("SELECT count(*) FROM t").fetchall()
        == reference.execute("SELECT count(*) FROM t").fetchall()
    )


def test_a_small_load_under_auto_is_read_in_the_driver_without_spark(tmp_path: Path) -> None:
    """At most the threshold's rows (known from the Parquet footers or the line breaks of a
    text file, with no Spark) stay in the driver, and Spark does not start."""
    pq.write_table(source_rows(), tmp_path / "small.parquet")
    write_csv(source_rows(), tmp_path / "small.csv")
    con = dsql.connect(kernel="auto", placement_threshold=ROWS + 1)
    con.create_table("t", tmp_path / "small.parquet")
    con.create_table("c", tmp_path / "small.csv")
    assert table_kernel(con) == "local"
    assert not con.session.worker.kernel.started
    assert con.execute("SELECT count(*), count(s), count(x) FROM c").fetchall() == [
        (ROWS, ROWS - 97, ROWS - 131)
    ]


def test_csv_nulls_and_empty_strings_read_as_postgresql_copy_reads_them(
    spark: Any, tmp_path: Path
) -> None:
    """Unquoted empty: NULL; quoted empty: ''; 'NULL' and 'NA' are text. Alike in the
    driver and on Spark."""
    path = tmp_path / "n.csv"
    path.write_text('a,b\n1,\n2,""\n3,NULL\n4,NA\n,x\n')
    want = [(1, None), (2, ""), (3, "NULL"), (4, "NA"), (None, "x")]
    for kernel in ("local", "spark"):
        con = connect(kernel, spark)
        con.create_table("n", path)
        assert con.execute("SELECT a, b FROM n ORDER BY a").fetchall() == want, kernel


def test_load_errors_leave_no_table_behind(spark: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,1\n")
    con = connect("spark", spark)
    with pytest.raises(errors.SourceError, match="no Spark table"):
        con.create_table("missing", "dsql_no_such_table", format="table")
    with pytest.raises(errors.TypeMismatchError):
        con.create_table("mapped", spark.sql("SELECT map('a', 1) AS m"))
    with pytest.raises(errors.SourceError, match="unknown format"):
        con.create_table("odd", bad, format="xml")
    assert con.session.relations.keys() == set()
    local = connect("local", spark)
    with pytest.raises(errors.SourceError, match="read by Spark only"):
        local.create_table("remote", "s3a://bucket/t.parquet")


# --- results handed out without collecting them ----------------------------------------------


def big_view(con: dsql.Connection, source: Any) -> None:
    """Table `t` loaded from `source`, and a view of rows held twice each (counts above
    one), 1,200 distinct: over the threshold, so on Spark under "auto" too."""
    con.create_table("t", source)
    con.execute(
        "CREATE MATERIALIZED VIEW v AS SELECT k % 1500 AS m, k % 3 AS r FROM t WHERE k % 5 <> 0"
    )


def both(spark: Any, source: Any, kernel: str) -> tuple[dsql.Connection, dsql.Connection]:
    """The view `big_view` makes from `source`, on the local kernel and on `kernel`."""
    reference = connect("local", spark)
    big_view(reference, source)
    con = connect(kernel, spark)
    big_view(con, source)
    return reference, con


def multiset(rows: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in rows), key=repr)


@pytest.mark.parametrize("kernel", ["auto", "spark"])
def test_a_view_on_spark_goes_out_as_a_dataframe_its_executors_wrote(
    spark: Any, sources: dict[str, Any], kernel: str
) -> None:
    """`to_spark` of a view on Spark reads a copy the executors wrote (it has input files;
    a DataFrame made from the driver's Arrow has none), which stays what the view held
    while the view changes, and is deleted when the connection closes."""
    reference, con = both(spark, sources["parquet"][0], kernel)
    out = con.table("v").to_spark()
    files = out.inputFiles()
    assert files and out.columns == ["m", "r"]
    before = reference.table("v").fetchall()
    assert multiset(out.collect()) == multiset(before)
    for change in CHANGES:
        con.execute(change)
    con.execute("SELECT count(*) FROM v").fetchall()  # the trace merges and compacts
    assert multiset(out.collect()) == multiset(before)
    con.close()
    assert not any(os.path.exists(f.removeprefix("file:")) for f in files)


@pytest.mark.parametrize("kernel", ["auto", "spark"])
def test_a_view_on_spark_streams_in_bounded_batches(
    spark: Any, sources: dict[str, Any], kernel: str
) -> None:
    reference, con = both(spark, sources["parquet"][0], kernel)
    con.execute("SET fetch_rows = 400")
    con.execute(CHANGES[0])
    reference.execute(CHANGES[0])
    parts = list(con.table("v").batches())
    assert len(parts) > 1 and all(0 < p.num_rows <= 400 for p in parts)
    streamed = [tuple(r.values()) for p in parts for r in p.to_pylist()]
    assert multiset(streamed) == multiset(reference.table("v").fetchall())
    assert con.session.exports == []  # the copy is gone once streamed


#: A fresh process (its memory measured from a baseline after Spark started and a small
#: load warmed every path): a table loaded from Parquet files Spark wrote, a view over
#: it, changes, reads, and the table streamed out. Prints the driver's growth in bytes.
MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys, tempfile
    import pyarrow as pa
    import dsql
    from dsql.runtime.spark_session import get_spark

    rows, memory = int(sys.argv[1]), sys.argv[2]
    spark = get_spark(conf={"spark.driver.memory": memory} if memory != "-" else None)
    root = tempfile.mkdtemp()
    spark.range(0, rows).selectExpr(
        "id AS k", "id % 1000 AS g", "concat('row-', sha1(cast(id AS string))) AS s"
    ).write.parquet(root + "/big")
    spark.range(0, 10).selectExpr("id AS k", "id AS g", "'x' AS s").write.parquet(root + "/warm")

    def run(source, threshold):
        con = dsql.connect(kernel="auto", placement_threshold=threshold)
        con.create_table("t", source)
        con.execute("CREATE MATERIALIZED VIEW v AS "
                    "SELECT g, count(*) AS n, sum(k) AS total, max(s) AS hi FROM t GROUP BY g")
        con.execute("DELETE FROM t WHERE k < 5")
        con.execute("INSERT INTO t VALUES (-1, 7, 'new')")
        answer = con.execute("SELECT sum(n), count(*) FROM v").fetchall()
        streamed = sum(part.num_rows for part in con.table("t").batches())
        con.close()
        return answer, streamed

    run(root + "/warm", 1)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    base_arrow = pa.default_memory_pool().max_memory()
    answer, streamed = run(root + "/big", 1_000_000)
    print(json.dumps({
        "answer": [[int(v) for v in row] for row in answer], "streamed": streamed,
        "rss_growth": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base_rss,
        "arrow_growth": pa.default_memory_pool().max_memory() - base_arrow,
    }))
    """
)


def measure_driver(rows: int, driver_memory: str = "-") -> dict[str, Any]:
    """`MEMORY_SCRIPT` run for `rows` rows (manually: `python -c 'from
    tests.test_spark_loads import measure_driver as m; print(m(20_000_000, "1g"))'`)."""
    import json

    done = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(rows), driver_memory],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_drivers_memory_is_bounded_by_the_change_not_the_data() -> None:
    """3M rows (about 200 MB as Arrow) loaded, maintained, changed and streamed out: the
    driver's Python process grows by a small part of that (the bound is wide: a funnel
    through the driver would hold all of it at once; what the driver does hold, about
    an eighth of it, is a reduce's matched rows and the auto kernel's sizing sample)."""
    rows = 3_000_000
    measured = measure_driver(rows)
    assert measured["answer"] == [[rows - 4, 1000]]
    assert measured["streamed"] == rows - 4
    data_bytes = rows * (8 + 8 + 4 + 44)  # k, g, s (offset and 44 characters)
    assert measured["arrow_growth"] < data_bytes / 4, measured
    assert measured["rss_growth"] < data_bytes / 2, measured


@pytest.mark.parametrize("kernel", ["auto", "spark"])
def test_a_select_over_a_view_on_spark_is_fetched_in_bounded_batches(
    spark: Any, sources: dict[str, Any], kernel: str
) -> None:
    """The cursor holds at most what was fetched and one file of the executors' copy."""
    reference, con = both(spark, sources["parquet"][0], kernel)
    con.execute("SET fetch_rows = 300")
    query = "SELECT m, r + 1 AS h FROM v WHERE r <> 0"
    cur = con.execute(query)
    want = reference.execute(query)
    assert cur.description == want.description
    first = cur.fetchmany(250)
    assert len(first) == 250 and cur._table.num_rows <= 250 + 300
    rest = cur.fetchall()
    assert multiset(first + rest) == multiset(want.fetchall())
    assert con.session.exports == []
    cur.execute(query)
    cur.fetchmany(10)
    cur.close()  # the rest's copy deleted unread
    assert con.session.exports == []
