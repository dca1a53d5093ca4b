"""Both forms of reduce's general step against the oracle.

A reduce step over few rows of plain types runs in the driver
(`kernel.driver_reduce`); otherwise it is one relational pipeline
(`reduce._queries`), which is what bigger steps and the Spark kernel run. The suite's
data is small, so the other tests mostly take the driver's form: here the same
pipelines (several times per batch, deletes, loops, a Python logic) run with the
driver's form switched off, and with it on, each checked against the oracle.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import oracle
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import Multiset
from test_iteration import CLOSURE, COMPONENTS, EVEN_ODD, NON_MONOTONIC, REACH
from test_runtime_oracle import (
    COUNT,
    DISTINCT,
    KV,
    LOCAL,
    NULLABLE_KEY,
    REDUCE,
    THRESHOLD,
    VALUE,
    History,
    Pipeline,
    check_history,
    histories,
)

from dsql.runtime.collection import Collection
from dsql.runtime.kernel.local import LocalKernel
from dsql.runtime.kernel import driver_reduce as reduce_small

# --- a Python logic: the slow path, over each group as an Arrow table ----------------------

_TOTAL = pa.schema([("total", pa.int64())])


def _total(key: tuple, group: pa.Table) -> pa.Table:
    weighted = pc.multiply(group["v"], group["__diff__"])
    return pa.table({"total": [pc.sum(weighted).as_py()]}, schema=_TOTAL)


def _python(a: Collection) -> dict[str, Collection]:
    return {"total": a.reduce(["k"], logic=_total, output=_TOTAL)}


def _python_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    return {"total": oracle.reduce(inputs[0], [0], [("sum", 1)])}


PYTHON = Pipeline((KV,), _python, _python_expected, (st.tuples(NULLABLE_KEY, VALUE),))


@contextmanager
def general_step_only() -> Iterator[None]:
    """Every reduce step as the relational pipeline, however few its rows."""
    saved = reduce_small.SMALL_ROWS
    reduce_small.SMALL_ROWS = -1
    try:
        yield
    finally:
        reduce_small.SMALL_ROWS = saved


def _both(name: str, pipeline: Pipeline, examples: int) -> tuple[Any, Any]:
    strategy = histories(pipeline.rows, nonnegative=pipeline.nonnegative)

    @settings(LOCAL, max_examples=examples)
    @given(history=strategy)
    def general(history: History) -> None:
        with general_step_only():
            check_history(LocalKernel(), pipeline, history)

    @settings(LOCAL, max_examples=examples)
    @given(history=strategy)
    def small(history: History) -> None:
        check_history(LocalKernel(), pipeline, history)

    general.__name__ = general.__qualname__ = f"test_{name}_general_step"
    small.__name__ = small.__qualname__ = f"test_{name}_driver_step"
    return general, small


test_reduce_general_step, test_reduce_driver_step = _both("reduce", REDUCE, 20)
test_count_general_step, test_count_driver_step = _both("count", COUNT, 10)
test_distinct_general_step, test_distinct_driver_step = _both("distinct", DISTINCT, 10)
test_threshold_general_step, test_threshold_driver_step = _both("threshold", THRESHOLD, 10)
test_python_general_step, test_python_driver_step = _both("python_logic", PYTHON, 15)
test_reach_general_step, test_reach_driver_step = _both("reach", REACH, 6)
test_closure_general_step, test_closure_driver_step = _both("closure", CLOSURE, 6)
test_components_general_step, test_components_driver_step = _both("components", COMPONENTS, 5)
test_min_loop_general_step, test_min_loop_driver_step = _both("non_monotonic", NON_MONOTONIC, 5)
test_parity_general_step, test_parity_driver_step = _both("parity", EVEN_ODD, 5)
