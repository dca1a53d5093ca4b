"""The kernel interface: placement asked of the kernel, optional steps as capabilities.

Every kernel says where a frame lives (`placement`, `owns`) and declares the optional
steps it implements (`Kernel.capabilities`); the auto kernel hands a step to the kernel
holding its frames only where that kernel declares it. Checked here: each kernel
declares exactly the optional methods it has; the auto kernel over a real in-process
kernel with one capability taken away declines that step and still keeps every view
equal to its query (DuckDB the oracle) through inserts, deletes and updates; the Spark
kernel's storage API writes, verifies, reads and releases; dsql/ reaches no kernel's
private names.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import dsql
from dsql.runtime.kernel.auto import AutoKernel
from dsql.runtime.kernel.base import Capability, Kernel, Placement
from dsql.runtime.kernel.local import LocalKernel
from dsql.runtime.kernel.spark import SparkKernel
from dsql.runtime.spark_session import SparkStart, running_message, start_message

ROOT = Path(__file__).resolve().parent.parent


def _method(capability: Capability) -> str:
    return capability.value


@pytest.mark.parametrize("cls", [LocalKernel, SparkKernel], ids=lambda c: c.__name__)
def test_each_kernel_declares_exactly_the_optional_steps_it_implements(cls: type) -> None:
    """A capability whose method the base class has is declared iff the kernel overrides
    it; one of Spark's own steps iff the kernel has the method at all. `reduce_small` is
    asked of every kernel (None declines: runtime/README's table), and its capability
    gates the settled step in Arrow alone, so only a kernel that declares it must have it."""
    for capability in Capability:
        name = _method(capability)
        if capability is Capability.REDUCE_SMALL:
            overrides = getattr(cls, name) is not getattr(Kernel, name)
            assert overrides or capability not in cls.capabilities, cls.__name__
            continue
        if hasattr(Kernel, name):
            has = getattr(cls, name) is not getattr(Kernel, name)
        else:
            has = hasattr(cls, name)
        assert (capability in cls.capabilities) == has, (cls.__name__, capability)


def test_the_auto_kernel_declares_only_steps_it_routes() -> None:
    """Every capability the auto kernel declares is a method it has of its own."""
    for capability in AutoKernel.capabilities:
        name = _method(capability)
        assert name in vars(AutoKernel), capability
    assert LocalKernel.capabilities <= AutoKernel.capabilities


def test_placement_is_what_the_kernels_answer() -> None:
    table = pa.table({"x": [1, 2]})
    local = LocalKernel()
    assert local.owns(table) and not local.owns(object())
    assert local.placement(table) is Placement.LOCAL == "local"
    auto = AutoKernel(threshold=10, notice=None)
    assert auto.placement(table) is Placement.LOCAL and auto.placement() is Placement.LOCAL
    assert not auto.started  # asking where a frame lives starts nothing


def test_the_auto_kernel_declines_a_step_its_local_kernel_lacks() -> None:
    """With `CONSOLIDATE_SMALL` taken from the in-process kernel, the auto kernel does not
    hand the step on (None: the caller runs the query); with it, it does."""
    auto = AutoKernel(notice=None)
    table = pa.table({"k": [1, 1, 2], "__time__": [0, 0, 0], "__diff__": [1, 1, -1]})
    done = auto.consolidate_small([table], ["k"], 1)
    assert done is not None and sorted(done.to_pylist(), key=str) == [
        {"k": 1, "__time__": 0, "__diff__": 2},
        {"k": 2, "__time__": 0, "__diff__": -1},
    ]
    auto.local.capabilities = LocalKernel.capabilities - {Capability.CONSOLIDATE_SMALL}
    assert auto.consolidate_small([table], ["k"], 1) is None
    auto.local.capabilities = frozenset()
    assert auto.key_index(table, ["k"]) is None and auto.bounds(table, "k") is None


#: Views whose rounds take the in-process kernel's optional steps: small consolidations
#: and merges, joins of a small delta against an indexed trace (keys of one and of two
#: columns), reduces, a loop (shifted times, key sums and matches), and many views over
#: one table (one shared query).
VIEWS = {
    "v_joined": "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k",
    "v_joined2": "SELECT a.k, b.w FROM a JOIN b ON a.k = b.k AND a.v = b.w",
    "v_grouped": "SELECT k, count(*) AS n, sum(v) AS s FROM a GROUP BY k",
    "v_distinct": "SELECT DISTINCT v FROM a WHERE k > 3",
    "v_mapped": "SELECT k + 1 AS k1, v FROM a WHERE v < 7",
    "v_low": "SELECT k, v FROM a WHERE v < 3",
    "v_high": "SELECT v, k * 2 AS k2 FROM a WHERE v > 6",
    "v_reach": (
        "WITH RECURSIVE r(x, y) AS (SELECT k, v FROM a UNION "
        "SELECT r.x, a.v FROM r JOIN a ON r.y = a.k) SELECT x, y FROM r"
    ),
}


def _bag(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in rows)


def _run_history(con: Any) -> None:
    """Fill tables `a` and `b`, then insert, delete and update over several ticks; after
    each, every view equals its query evaluated by DuckDB over the same rows."""
    rnd = random.Random(7)
    cur = con.cursor()
    cur.execute("CREATE TABLE a (k int, v int)")
    cur.execute("CREATE TABLE b (k int, w int)")
    for name, query in VIEWS.items():
        cur.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    a = [(rnd.randrange(40), rnd.randrange(10)) for _ in range(600)]
    b = [(rnd.randrange(40), rnd.randrange(10)) for _ in range(300)]
    oracle = duckdb.connect()
    oracle.execute("CREATE TABLE a (k int, v int)")
    oracle.execute("CREATE TABLE b (k int, w int)")

    def write(sql: str, rows: list[tuple[int, int]] | None = None) -> None:
        if rows is None:
            cur.execute(sql)
            oracle.execute(sql)
        else:
            cur.executemany(sql, rows)
            oracle.executemany(sql, rows)

    write("INSERT INTO a VALUES (?, ?)", a)
    write("INSERT INTO b VALUES (?, ?)", b)
    changes = [
        "INSERT INTO a VALUES (3, 4), (4, 3), (39, 0)",
        "DELETE FROM a WHERE k = 5",
        "UPDATE a SET v = v + 1 WHERE k = 7",
        "DELETE FROM b WHERE w = 2",
        "INSERT INTO b VALUES (5, 1), (7, 8)",
        "UPDATE b SET k = 11 WHERE k = 12",
    ]
    for step in [None, *changes]:
        if step is not None:
            write(step)
        for name, query in VIEWS.items():
            cur.execute(f"SELECT * FROM {name}")
            got = _bag(cur.fetchall())
            want = _bag(oracle.execute(query).fetchall())
            assert got == want, (step, name)


@pytest.mark.parametrize(
    "missing", sorted(LocalKernel.capabilities, key=lambda c: c.name), ids=lambda c: c.name
)
def test_views_stay_exact_on_the_auto_kernel_without_a_local_capability(
    missing: Capability,
) -> None:
    con = dsql.connect(kernel="auto")
    kernel = con.session.worker.kernel
    assert isinstance(kernel, AutoKernel)
    kernel.local.capabilities = LocalKernel.capabilities - {missing}
    assert not kernel.local.can(missing)
    _run_history(con)
    assert not kernel.started  # every step stayed in the driver


def test_dsql_reaches_no_private_name_of_a_kernel() -> None:
    """dsql/ uses the kernels' public interface only (storage through `store`, `read`,
    `driver_can_read`), never a name starting with `_` of a kernel object."""
    private = re.compile(r"kernel\w*\._[a-z]")
    found = [
        f"{path.name}:{number}"
        for path in sorted((ROOT / "dsql").glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert found == []


# --- what the start of Spark says ----------------------------------------------------------


@pytest.mark.parametrize(
    ("master", "remote", "said"),
    [
        ("local", None, "starting Spark (local mode, 1 core)"),
        ("local[3]", None, "starting Spark (local mode, 3 cores)"),
        ("local[2,4]", None, "starting Spark (local mode, 2 cores)"),
        ("local[*]", None, f"starting Spark (local mode, {os.cpu_count()} cores)"),
        ("local-cluster[2,1,1024]", None, "starting Spark (a local cluster: 2 workers of 1 core)"),
        ("spark://head:7077", None, "connecting to Spark master spark://head:7077"),
        ("yarn", None, "connecting to Spark master yarn"),
        (None, "sc://127.0.0.1:15002", "connecting to Spark Connect at sc://127.0.0.1:15002"),
    ],
)
def test_the_start_message_names_what_runs(
    master: str | None, remote: str | None, said: str
) -> None:
    assert start_message(master, remote) == said


def test_the_cli_says_it_starts_spark_in_local_mode_with_its_cores(tmp_path: Path) -> None:
    """A fresh process with `--kernel spark --master local[1]`: the line before Spark
    starts names local mode and its one core."""
    script = tmp_path / "s.sql"
    script.write_text("SELECT 1 AS one;\n")
    env = {k: v for k, v in os.environ.items() if k not in ("DSQL_REMOTE", "DSQL_KERNEL")}
    proc = subprocess.run(
        [sys.executable, "-m", "dsql.cli", "run", str(script), "--master", "local[1]"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "dsql: starting Spark (local mode, 1 core)..." in proc.stderr.splitlines()


# --- Spark ------------------------------------------------------------------------------


def test_a_running_session_is_named_as_running(spark: Any) -> None:  # noqa: ANN401
    """Where a session runs already, nothing starts: the notice is None and the CLI's
    line says the running session is used, with its master."""
    start = SparkStart()
    assert start.running() is spark and start.notice() is None
    master = spark.conf.get("spark.master")
    assert master.startswith("local")
    assert running_message(spark).startswith("using the running Spark session (local mode, ")


def test_spark_frames_are_placed_on_spark(spark: Any) -> None:  # noqa: ANN401
    kernel = SparkKernel(spark)
    frame = kernel.from_arrow(pa.table({"x": [1, 2]}))
    assert kernel.owns(frame) and not kernel.owns(pa.table({"x": [1]}))
    assert kernel.placement(frame) is Placement.SPARK
    auto = AutoKernel(threshold=1, spark=spark, notice=None)
    assert auto.placement(frame) is Placement.SPARK and auto.owns(frame)
    assert not LocalKernel().owns(frame)


def test_the_spark_storage_api_writes_verifies_reads_and_releases(spark: Any) -> None:  # noqa: ANN401
    kernel = SparkKernel(spark)
    frame = spark.range(10).selectExpr("id AS k", "id * id AS v")
    stored = kernel.store(frame, file_rows=3)
    assert stored.rows == 10 and len(stored.frame.inputFiles()) >= 4  # at most 3 a file
    parts = list(kernel.read(stored.frame, 2))
    assert all(p.num_rows <= 2 for p in parts)
    rows = pa.concat_tables(parts).to_pylist()
    assert sorted((r["k"], r["v"]) for r in rows) == [(i, i * i) for i in range(10)]
    assert kernel.driver_can_read()  # a local master shares the driver's disk
    files = [f for f in stored.frame.inputFiles() if f.startswith("file:")]
    kernel.release(stored.frame)
    assert files and not any(Path(f[len("file:") :].lstrip("/")).exists() for f in files)


def test_auto_without_spark_probes_or_driver_writes_keeps_views_exact(spark: Any) -> None:  # noqa: ANN401
    """Over a threshold small enough that the tables move to Spark, with the Spark
    kernel's `rows_with_key` (probes into the driver) and `store_arrow` (the driver's
    own writes) taken away: the steps run on Spark instead, and every view stays equal
    to its query."""
    con = dsql.connect(kernel="auto", spark=spark, placement_threshold=200)
    kernel = con.session.worker.kernel
    kernel.remote.capabilities = SparkKernel.capabilities - {
        Capability.ROWS_WITH_KEY,
        Capability.STORE_ARROW,
    }
    _run_history(con)
    assert kernel.started
