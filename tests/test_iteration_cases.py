"""Iteration: the book's cases, round limits, nested loops and the errors a user reads."""

from __future__ import annotations

from typing import Any

import oracle
import pytest
from oracle import Multiset, updates_from_arrow
from test_iteration import EDGES, GRAPH_HISTORY, ROOTS, _succ, components
from test_runtime_oracle import Pipeline, check_history

from dsql.errors import RecursionLimitError, SchemaError
from dsql.runtime.collection import Collection, import_arrangement
from dsql.runtime.dataflow import DEFAULT_RECURSION_LIMIT, Worker
from dsql.runtime.kernel.base import Kernel
from dsql.runtime.kernel.local import LocalKernel
from dsql.runtime.lattice import DIFF, TIME

# --- the fraud example of seed 000 -------------------------------------------------------


def test_fraud_retraction_leaves_no_self_supporting_derivations(kernel: Kernel) -> None:
    """Risk spreads along transactions; deleting the fact it started from retracts it all."""
    worker = Worker(kernel)
    fraud = worker.new_input({"who": "string"})
    paid = worker.new_input({"a": "string", "b": "string"})
    links = paid.to_collection().concat(paid.to_collection().map("b AS a", "a AS b"))

    def spread(scope: Any, risky: Collection) -> Collection:
        near = risky.map("who AS a").join(links.enter(scope), on=["a"]).map("b AS who")
        return near.concat(fraud.to_collection().enter(scope)).distinct()

    out = fraud.to_collection().iterate(spread, name="risk").capture()
    for a, b in [("ann", "bob"), ("bob", "cy"), ("cy", "dee"), ("eve", "fay")]:
        paid.insert((a, b))
    fraud.insert(("ann",))
    fraud.update_at(("ann",), 1, -1)  # the correction, at the next time, in the same batch
    fraud.update_at(("dee",), 2, +1)
    for session in (fraud, paid):
        session.advance_to(3)
        session.flush()
    worker.step()
    updates = updates_from_arrow(out.poll())
    everyone = {("ann",): 1, ("bob",): 1, ("cy",): 1, ("dee",): 1}
    assert oracle.accumulate(updates, 0) == everyone
    assert oracle.accumulate(updates, 1) == {}
    assert oracle.accumulate(updates, 2) == everyone


# --- interactive queries over a loop's output -----------------------------------------------


def _labels_for_queries(edges: Collection, queries: Collection) -> dict[str, Collection]:
    labels = components(edges)
    return {"answers": labels.semijoin(queries, on=[("n", "node")])}


def _answers_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    from test_iteration import _components_expected

    edges, queries = inputs
    labels = _components_expected([edges], t)["labels"]
    return {"answers": oracle.semijoin(labels, queries, [0], [0])}


def test_interactive_queries_over_labels() -> None:
    """The book's `labels.semijoin(queries)`: queries come and go while the graph changes."""
    pipeline = Pipeline((EDGES, ROOTS), _labels_for_queries, _answers_expected, ())
    check_history(LocalKernel(), pipeline, GRAPH_HISTORY)


# --- round limits ------------------------------------------------------------------------


def _counter(worker: Worker, limit: int | None, on_limit: str) -> tuple[Any, Any]:
    start = worker.new_input({"x": "int"})
    first = start.to_collection()
    out = first.iterate(
        lambda s, v: v.map("x + 1 AS x").concat(first.enter(s)).distinct(),
        limit=limit,
        on_limit=on_limit,
        name="counter",
    ).capture()
    start.insert((1,))
    start.advance_to(1)
    start.flush()
    return start, out


def _counter_body(x: Multiset) -> Multiset:
    return oracle.distinct(oracle.concat(oracle.map(x, lambda r: (r[0] + 1,)), {(1,): 1}))


def test_limit_return_keeps_the_values_at_the_limit() -> None:
    worker = Worker(LocalKernel())
    _, out = _counter(worker, 5, "return")
    worker.step()
    have = oracle.accumulate(updates_from_arrow(out.poll()), 0)
    want = oracle.iterate(oracle.multiset([((1,), 1)]), _counter_body, 5, "return")
    assert have == want == {(i,): 1 for i in range(1, 7)}


def test_limit_error_names_the_loop() -> None:
    worker = Worker(LocalKernel())
    _counter(worker, 5, "error")
    with pytest.raises(RecursionLimitError, match="loop 'counter'.*its limit of 5") as info:
        worker.step()
    assert info.value.hint and "on_limit='return'" in info.value.hint


def test_a_converging_loop_at_its_limit_is_no_error() -> None:
    worker = Worker(LocalKernel())
    start = worker.new_input({"x": "int"})
    first = start.to_collection()
    body = lambda s, v: v.map("x + 1 AS x").filter("x <= 4").concat(first.enter(s)).distinct()  # noqa: E731
    out = first.iterate(body, limit=3).capture()
    start.insert((1,))
    start.advance_to(1)
    start.flush()
    worker.step()
    assert oracle.accumulate(updates_from_arrow(out.poll()), 0) == {(i,): 1 for i in range(1, 5)}


def test_default_limit_ends_a_non_converging_loop() -> None:
    worker = Worker(LocalKernel())
    assert worker.recursion_limit == DEFAULT_RECURSION_LIMIT
    worker.recursion_limit = 20  # the same path as the default, reached sooner
    _counter(worker, None, "return")  # without a limit the mode is "error"
    with pytest.raises(RecursionLimitError, match="loop 'counter'.*the default limit of 20"):
        worker.step()


# --- nested loops -----------------------------------------------------------------------


def _nested(edges: Collection, roots: Collection) -> dict[str, Collection]:
    def outer(scope: Any, x: Collection) -> Collection:
        inner_edges = edges.enter(scope)

        def inner(scope2: Any, y: Collection) -> Collection:
            step = y.map("node AS src").join(inner_edges.enter(scope2), on=["src"])
            return step.map("dst AS node").concat(y).distinct()

        # Everything reachable from x, then one more hop: the outer loop converges too.
        closed = x.iterate(inner, name="inner")
        hop = closed.map("node AS src").join(inner_edges, on=["src"]).map("dst AS node")
        return hop.concat(roots.enter(scope)).distinct()

    return {"nested": roots.iterate(outer, name="outer")}


def _nested_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    edges, roots = inputs

    def outer(x: Multiset) -> Multiset:
        closed = oracle.iterate(x, lambda y: oracle.distinct(oracle.concat(_succ(y, edges), y)))
        return oracle.distinct(oracle.concat(_succ(closed, edges), roots))

    return {"nested": oracle.iterate(roots, outer)}


def test_nested_loops() -> None:
    """A loop inside a loop: times (outer, round, inner round)."""
    pipeline = Pipeline((EDGES, ROOTS), _nested, _nested_expected, ())
    check_history(LocalKernel(), pipeline, GRAPH_HISTORY)


# --- errors -------------------------------------------------------------------------------


def test_scope_errors_say_what_to_do() -> None:
    worker = Worker(LocalKernel())
    edges = worker.new_input(EDGES).to_collection()
    with pytest.raises(SchemaError, match="never set"):
        with worker.scope(name="unset") as s:
            s.variable(ROOTS)
    with worker.scope(name="early") as s:
        v = s.variable(ROOTS)
        with pytest.raises(SchemaError, match="only after the loop is closed"):
            v.leave()
        with pytest.raises(SchemaError, match="enter"):
            v.map("node AS src").join(edges, on=["src"])
        with pytest.raises(SchemaError, match="columns"):
            v.set(edges.enter(s))
        v.set(v.distinct())
        with pytest.raises(SchemaError, match="set twice"):
            v.set(v)
    with pytest.raises(SchemaError, match="closed"):
        v.map("node + 1 AS node")
    with pytest.raises(SchemaError, match="on_limit"):
        edges.iterate(lambda s, x: x, on_limit="ignore")


def test_reduce_rechecks_a_key_at_a_later_interesting_time() -> None:
    """Node 3 is reached at round 3 at time 0, and directly at round 1 at time 1.

    Its `distinct` must be re-checked at `(1, 3)`, the join of `(1, 1)` with `(0, 3)`,
    after the changes at time 1 have died out (round 2): the loop runs to step 3 for
    that pending time alone, or node 3 would be counted twice at time 1.
    """
    from test_iteration import REACH
    from test_runtime_oracle import example

    chain = example(
        (([((0, 1), 0, 1), ((1, 2), 0, 1), ((2, 3), 0, 1)], 1), ([((0,), 0, 1)], 1)),
        (([((0, 3), 1, 1)], 2), ([], 2)),
    )
    check_history(LocalKernel(), REACH, chain)


def test_a_loop_over_imported_history_converges() -> None:
    """History imported behind the worker's frontier is replayed at the frontier.

    The loop is built after its inputs' updates were made final (as a SQL view
    created over existing tables is); were the replay at the old times, the loop's
    traces would compact those times during its rounds and never converge on a cycle.
    """
    worker = Worker(LocalKernel())
    worker.recursion_limit = 20
    edges, roots = worker.new_input({"src": "int", "dst": "int"}), worker.new_input({"n": "int"})
    edge_arr, root_arr = (s.to_collection().arrange_by_self() for s in (edges, roots))
    roots.insert((0,))
    for s in (edges, roots):
        s.advance_to(2)
    for e in [(0, 1), (1, 2), (2, 0)]:
        edges.insert(e)
    for s in (edges, roots):
        s.advance_to(3)
        s.flush()
    worker.step()
    src = import_arrangement(edge_arr.trace_handle()).as_collection()
    start = import_arrangement(root_arr.trace_handle()).as_collection()
    with worker.scope(name="reach") as s:
        v = s.variable({"n": "int"})
        step = v.join(src.enter(s), on=[("n", "src")]).map("dst AS n")
        v.set(step.concat(start.enter(s)).distinct())
    out = v.leave().capture()
    for s in (edges, roots):
        s.advance_to(4)
        s.flush()
    worker.step()
    rows = out.poll().to_pylist()
    assert sorted((r["n"], r[TIME], r[DIFF]) for r in rows) == [(0, 3, 1), (1, 3, 1), (2, 3, 1)]
