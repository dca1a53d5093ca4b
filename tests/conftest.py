"""Shared pytest fixtures."""

from __future__ import annotations

import pytest

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


# --- Kernels ----------------------------------------------------------------------------
# Results never depend on placement (DESIGN §3.1): tests that take `kernel` run once on
# the in-process kernel and once on Spark (sharing the session-scoped `spark`).


@pytest.fixture(params=["local", "spark"])
def kernel(request):
    """A fresh runtime kernel: `LocalKernel()` (DuckDB) or `SparkKernel(spark)`."""
    if request.param == "local":
        from dsql.runtime.kernel.local import LocalKernel

        return LocalKernel()
    from dsql.runtime.kernel.spark import SparkKernel

    return SparkKernel(request.getfixturevalue("spark"))
