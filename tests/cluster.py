"""A real Spark standalone cluster for tests: a master and two workers on loopback.

Each worker runs in a mount namespace of its own with a private tmpfs on /tmp
(`unshare -m`), so a file the driver writes under its /tmp is not the worker's, and
the reverse: what a cluster whose nodes share no temp directory does. The state root
the tests give dsql (`state_uri`) is a directory outside /tmp, which every process
sees. The workers and master come from PySpark's own jars (`SPARK_HOME` is the pyspark
package); making a mount namespace needs root (CI runs as root): where `unshare` is
refused the fixture fails, naming the cause, rather than skip the tier.

A process holds one SparkContext, and the test process's is the local one of the
`spark` fixture, so the cluster's driver is a process of its own (`Cluster.run`
calls a module-level function there, the driver's SparkSession kept between calls).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Seconds the master and both workers get to come up.
START_TIMEOUT = 120


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def driver_conf() -> dict[str, str]:
    """The cluster driver's Spark settings: loopback only, each executor one core and
    less memory than its worker offers, the venv's Python on the executors, shuffle
    blocks fetched from their executor."""
    return {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "1g",
        "spark.executor.memory": "768m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        # Executors on one host read each other's shuffle files from disk by default;
        # here each worker's disk (/tmp) is its own, as on hosts of their own.
        "spark.shuffle.readHostLocalDisk": "false",
    }


@dataclass
class Cluster:
    """A running master and two workers, and the driver process that talks to them."""

    root: Path
    master_url: str = ""
    #: The storage root every process sees (outside /tmp), as a `file://` URI.
    state_uri: str = ""
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _driver: ProcessPoolExecutor | None = None

    def start(self, workers: int = 2) -> None:
        """Start the master, then `workers` workers in private mount namespaces; wait
        until the master has registered them all."""
        from dsql.runtime.spark_session import ensure_java

        ensure_java()
        self.root.mkdir(parents=True, exist_ok=True)
        state = self.root / "state"
        state.mkdir(exist_ok=True)
        self.state_uri = state.as_uri()
        env = {**os.environ, "SPARK_HOME": str(_spark_home()), "SPARK_LOCAL_IP": "127.0.0.1"}
        env.pop("PYSPARK_GATEWAY_PORT", None)
        spark_class = str(_spark_home() / "bin" / "spark-class")
        port = _free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        master_log = self.root / "master.log"
        self._spawn(
            [spark_class, "org.apache.spark.deploy.master.Master",
             "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
            master_log, env,
        )  # fmt: skip
        self._wait(master_log, "I have been elected leader", 1)
        for i in range(workers):
            worker = [
                spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", "0", "--work-dir", "/tmp/spark-work",
            ]  # fmt: skip
            command = "mount -t tmpfs tmpfs /tmp && exec " + " ".join(map(_quoted, worker))
            self._spawn(["unshare", "-m", "sh", "-c", command], self.root / f"worker-{i}.log", env)
        self._wait(master_log, "Registering worker", workers)

    def _spawn(self, command: list[str], log: Path, env: dict[str, str]) -> None:
        with open(log, "wb") as out:  # the child keeps its own descriptor
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self._processes.append(process)

    def _wait(self, log: Path, line: str, count: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if log.read_text(errors="replace").count(line) >= count:
                return
            dead = [p for p in self._processes if p.poll() is not None]
            if dead:
                break
            time.sleep(0.2)
        logs = "\n".join(
            f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
            for f in sorted(self.root.glob("*.log"))
        )
        self.stop()
        raise RuntimeError(
            f"the Spark cluster did not start ({count} x {line!r} missing from {log.name});"
            " workers need `unshare -m` and `mount` (root)\n" + logs
        )

    def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(cluster_url, state_uri, *args)` called in the cluster's driver
        process (a module-level function, pickled by name); its result or exception."""
        if self._driver is None:
            context = multiprocessing.get_context("spawn")
            self._driver = ProcessPoolExecutor(1, mp_context=context)
        return call_in(self._driver, function, self.master_url, self.state_uri, *args)

    def stop(self) -> None:
        """Stop the driver process, then the workers and the master (process groups)."""
        if self._driver is not None:
            self._driver.shutdown(wait=True, cancel_futures=True)
            self._driver = None
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self._processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def call_in(process: ProcessPoolExecutor, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` called in `process` (a module-level function, pickled by name):
    its result, or its exception with the child's traceback as a note."""
    future = process.submit(function, *args)
    try:
        return future.result()
    except Exception as error:
        remote = getattr(error.__cause__, "tb", None)  # the child process's traceback
        if remote:
            error.add_note(remote)
        raise


def in_own_process(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` called in a fresh Python process (spawned: nothing of this
    process's Spark state is inherited), which ends with the call."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as process:
        return call_in(process, function, *args)


def _quoted(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def cluster_session(master_url: str) -> Any:
    """The driver process's SparkSession on the cluster (built on first call)."""
    from dsql.runtime.spark_session import get_spark

    return get_spark(master=master_url, conf=driver_conf())


def _bag(rows: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(int(x) if isinstance(x, int) else x for x in row) for row in rows)


def agree_with_duckdb(
    con: Any, mirror: Any, views: dict[str, str], history: tuple[str, ...], subscribed: str
) -> None:
    """Run `history` (one logical time a change) on the dsql connection `con` and the
    DuckDB connection `mirror`, which hold the same tables, `con` the `views` created
    and time 1 reached; after loading and after each change, every view and the
    updates of a SUBSCRIBE to view `subscribed` must equal DuckDB's answer."""
    updates = con.subscribe(subscribed)
    seen: Counter[tuple[Any, ...]] = Counter()
    for now, change in enumerate(("", *history), start=1):
        if change:
            con.execute(change)
            mirror.execute(change)
            con.execute(f"ADVANCE TO {now}")
        for name, query in views.items():
            got = _bag(con.execute(f"SELECT * FROM {name}").fetchall())
            want = _bag(mirror.execute(query).fetchall())
            assert got == want, (
                f"view {name} after {change or 'loading'}: {got - want} extra, {want - got} missing"
            )
        for row in updates.rows():
            _, diff, *values = row
            seen[tuple(values)] += diff
        want = _bag(mirror.execute(views[subscribed]).fetchall())
        assert +seen == want and all(n >= 0 for n in seen.values()), (
            f"SUBSCRIBE after {change or 'loading'}: {seen} against {want}"
        )
