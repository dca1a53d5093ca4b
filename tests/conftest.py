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
