"""The three forms of reduce's general step against the oracle.

A reduce step over few rows of plain types runs in Python in the driver
(`kernel.driver_reduce`); over more rows whose times form one chain per key, as
vectorized array operations (`kernel.chain_reduce`); otherwise it is one relational
pipeline (`reduce._queries`), which is what the Spark kernel runs. The suite's data is
small, so the other tests mostly take the Python form: here the same pipelines
(several times per batch, deletes, loops, a Python logic) run with each form forced,
each checked against the oracle.
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
from dsql.runtime.kernel import chain_reduce
from dsql.runtime.kernel import driver_reduce as reduce_small
from dsql.runtime.kernel.local import LocalKernel

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
def _limits(python_rows: int, chain_from: int, chain_to: int) -> Iterator[None]:
    saved = reduce_small.SMALL_ROWS, chain_reduce.MIN_ROWS, chain_reduce.MAX_ROWS
    reduce_small.SMALL_ROWS, chain_reduce.MIN_ROWS, chain_reduce.MAX_ROWS = (
        python_rows,
        chain_from,
        chain_to,
    )
    try:
        yield
    finally:
        reduce_small.SMALL_ROWS, chain_reduce.MIN_ROWS, chain_reduce.MAX_ROWS = saved


def general_step_only() -> Any:
    """Every reduce step as the relational pipeline, however few its rows."""
    return _limits(-1, -1, -1)


def chain_step_first() -> Any:
    """Every reduce step as the chain step when its times form chains, however few its
    rows (else the pipeline)."""
    return _limits(-1, -1, 10**9)


def _forms(name: str, pipeline: Pipeline, examples: int) -> tuple[Any, Any, Any]:
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

    @settings(LOCAL, max_examples=examples)
    @given(history=strategy)
    def chain(history: History) -> None:
        with chain_step_first():
            check_history(LocalKernel(), pipeline, history)

    general.__name__ = general.__qualname__ = f"test_{name}_general_step"
    small.__name__ = small.__qualname__ = f"test_{name}_driver_step"
    chain.__name__ = chain.__qualname__ = f"test_{name}_chain_step"
    return general, small, chain


for _name, _pipeline, _examples in (
    ("reduce", REDUCE, 20),
    ("count", COUNT, 10),
    ("distinct", DISTINCT, 10),
    ("threshold", THRESHOLD, 10),
    ("python_logic", PYTHON, 15),
    ("reach", REACH, 6),
    ("closure", CLOSURE, 6),
    ("components", COMPONENTS, 5),
    ("non_monotonic", NON_MONOTONIC, 5),
    ("parity", EVEN_ODD, 5),
):
    for _test in _forms(_name, _pipeline, _examples):
        globals()[_test.__name__] = _test
