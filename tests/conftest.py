"""Shared pytest fixtures."""

from __future__ import annotations

import os

import pytest

# --- The default kernel -------------------------------------------------------------------
# DSQL_TEST_KERNEL=auto|local|spark runs the suite on that kernel: it becomes $DSQL_KERNEL
# (the kernel of `dsql.connect()`, the CLI and subprocesses), a session that names
# another non-Spark kernel gets it too, and so does the `kernel` fixture's in-process
# run. DSQL_TEST_PLACEMENT_THRESHOLD (rows, $DSQL_PLACEMENT_THRESHOLD) makes relations
# move to Spark sooner under auto.
FORCED_KERNEL = os.environ.get("DSQL_TEST_KERNEL") or None
if os.environ.get("DSQL_TEST_PLACEMENT_THRESHOLD"):
    os.environ["DSQL_PLACEMENT_THRESHOLD"] = os.environ["DSQL_TEST_PLACEMENT_THRESHOLD"]
if FORCED_KERNEL:
    import dsql.session

    os.environ["DSQL_KERNEL"] = FORCED_KERNEL
    _make_kernel = dsql.session._make_kernel

    def _forced_kernel(kind, spark, threshold, start):  # noqa: ANN001, ANN202
        if FORCED_KERNEL == "spark" and spark is None and start is not None:
            spark = start()  # the session auto would start, with the connection's settings
        return _make_kernel(kind if kind == "spark" else FORCED_KERNEL, spark, threshold, start)

    dsql.session._make_kernel = _forced_kernel


# --- Spark ------------------------------------------------------------------------------
# One SparkSession per test run (per xdist worker), shared by every test that asks for
# it: starting Spark costs seconds. Tests that change runtime settings restore them.


@pytest.fixture(scope="session")
def spark():
    """The process's SparkSession, built by `dsql.runtime.spark_session.get_spark()`."""
    from dsql.runtime.spark_session import get_spark, stop_spark

    session = get_spark()
    yield session
    stop_spark()


# --- A standalone cluster -----------------------------------------------------------------
# A master and two workers on loopback, each worker with a private /tmp (tests/cluster.py),
# started when a test first asks for it and stopped at the end of the run. State lives
# under /var/tmp, outside the workers' private /tmp. Needs root (`unshare -m`, `mount`).


@pytest.fixture(scope="session")
def cluster():  # noqa: ANN201
    """The run's `cluster.Cluster`: `cluster.run(function, ...)` calls a module-level
    function in the cluster's driver process."""
    from pathlib import Path

    from cluster import Cluster

    running = Cluster(Path(f"/var/tmp/dsql-cluster-{os.getpid()}"))
    running.start()
    yield running
    running.stop()


# --- Kernels ----------------------------------------------------------------------------
# Results never depend on placement (DESIGN §3.1): tests that take `kernel` run once on
# the in-process kernel and once on Spark (sharing the session-scoped `spark`).


@pytest.fixture(params=["local", "spark"])
def kernel(request):
    """A fresh runtime kernel: `LocalKernel()` (DuckDB) or `SparkKernel(spark)`."""
    if request.param == "local" and FORCED_KERNEL in (None, "local"):
        from dsql.runtime.kernel.local import LocalKernel

        return LocalKernel()
    if request.param == "local" and FORCED_KERNEL == "auto":
        from dsql.session import _make_kernel

        return _make_kernel("auto", None, None, None)
    from dsql.runtime.kernel.spark import SparkKernel

    return SparkKernel(request.getfixturevalue("spark"))


# --- Longer oracle campaigns -------------------------------------------------------------
# CI runs each hypothesis test's few examples, many derandomized, so every run checks the
# same histories. DSQL_HYPOTHESIS_SCALE=N multiplies every selected test's `max_examples`
# by N and draws them at random (no derandomizing, no example database, no deadline or
# health checks): a campaign against the oracles, e.g.
#   DSQL_HYPOTHESIS_SCALE=8 python -m pytest -q tests/test_sql.py tests/test_sql_recursive.py
HYPOTHESIS_SCALE = int(os.environ.get("DSQL_HYPOTHESIS_SCALE") or 1)


def _scale_hypothesis(items) -> None:  # noqa: ANN001
    """Each hypothesis test's settings, widened by `HYPOTHESIS_SCALE` (see above)."""
    from hypothesis import HealthCheck, settings

    # One test function per parametrization's item: each is widened once.
    tests = {id(t): t for t in (getattr(i, "obj", None) for i in items)}
    for test in tests.values():
        if getattr(test, "hypothesis", None) is None:
            continue
        # The settings `@settings` attached; hypothesis reads them when the test runs.
        old = getattr(test, "_hypothesis_internal_use_settings", None)
        if old is None:
            raise pytest.UsageError(
                "DSQL_HYPOTHESIS_SCALE: this hypothesis version keeps a test's settings "
                "elsewhere; run without it"
            )
        test._hypothesis_internal_use_settings = settings(
            old,
            max_examples=old.max_examples * HYPOTHESIS_SCALE,
            derandomize=False,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        )


# --- sqllogictest files in background processes ---------------------------------------------
# Tests marked `slt_background` (SQLite's largest files, tests/test_slt_runner.py) wait for
# runs started in child processes as soon as the run's tests are collected (slt/background.py):
# the files run beside the rest of the suite, big ones split into chunks of their queries,
# and those tests are moved to its end. DSQL_SLT_WORKERS (default 2) runners run at once from
# the start: they are niced, so they take only the CPU the foreground leaves.

_POOL = pytest.StashKey["object"]()


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: only selected files start
def pytest_collection_modifyitems(session, config, items):  # noqa: ANN001, ANN201
    if HYPOTHESIS_SCALE > 1:
        _scale_hypothesis(items)
    waiting = [i for i in items if i.get_closest_marker("slt_background")]
    if not waiting or config.option.collectonly:
        return
    import tempfile
    from pathlib import Path

    from slt.background import Pool, jobs_for

    items[:] = [i for i in items if not i.get_closest_marker("slt_background")] + waiting
    params = [i.callspec.params for i in waiting]
    jobs = list(dict.fromkeys(j for p in params for j in jobs_for(p["path"], p["mode"])))
    workers = int(os.environ.get("DSQL_SLT_WORKERS") or 2)
    pool = Pool(jobs, Path(tempfile.mkdtemp(prefix="dsql-slt-")), workers=workers)
    pool.start()
    config.stash[_POOL] = pool


def pytest_unconfigure(config):  # noqa: ANN001, ANN201
    pool = config.stash.get(_POOL, None)
    if pool is not None:
        pool.stop()


@pytest.fixture(scope="session")
def slt_background(request):
    """The pool running the selected `slt_background` tests' files (see above)."""
    return request.config.stash[_POOL]


# --- PostgreSQL, the SQL oracle ----------------------------------------------------------------
# One private PostgreSQL server per test run (per xdist worker), on a unix socket in its own
# temp dir (tests/pg_oracle.py): not under pytest's, which only root may enter, and short
# enough for a socket's path. Without PostgreSQL installed the tests that ask for it fail
# and say how to install it: CI installs it (.ci/run) and must never skip them.


@pytest.fixture(scope="session")
def pg():  # noqa: ANN201
    """The session's `pg_oracle.PgServer`: `pg.database(name)` is a fresh database."""
    import shutil
    import tempfile
    from pathlib import Path

    from pg_oracle import PgMissing, PgServer

    root = Path(tempfile.mkdtemp(prefix="dsql-pg-"))
    try:
        server = PgServer.start(root)
    except PgMissing as missing:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(str(missing), pytrace=False)
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)
