"""Iteration against the oracle: loops to a fixpoint at every outer time of random histories.

Each pipeline builds a loop with the runtime (`iterate` or a scope with variables)
and states its meaning with `oracle.iterate` on the inputs accumulated at each outer
time. The histories insert AND delete edges, put several outer times in one flush
and some in the future (`update_at`), so loops run over many times at once and keys
are re-checked at later interesting times `(t, i)`.
"""

from __future__ import annotations

import random
from typing import Any

import oracle
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import Multiset, multiset
from test_runtime_oracle import LOCAL, History, Pipeline, check_history, example, histories

from dsql.runtime.collection import Collection
from dsql.runtime.dataflow import Worker
from dsql.runtime.iterate import EnterArrangedNode
from dsql.runtime.kernel.base import Kernel
from dsql.runtime.kernel.local import LocalKernel
from dsql.runtime.scope import ScopeNode

NODE_ID = st.integers(0, 5)
NODE = st.tuples(NODE_ID)
EDGE = st.tuples(NODE_ID, NODE_ID)
EDGES = {"src": "int", "dst": "int"}
ROOTS = {"node": "int"}
ITERATION = settings(LOCAL, max_examples=8)


# --- reachability from a root set ---------------------------------------------------------


def _reach(edges: Collection, roots: Collection) -> dict[str, Collection]:
    by_src = edges.arrange_by_key("src")  # entered without a copy

    def body(scope: Any, reach: Collection) -> Collection:
        step = reach.map("node AS src").arrange_by_key("src").join_core(by_src.enter(scope))
        return step.map("dst AS node").concat(roots.enter(scope)).distinct()

    return {"reach": roots.iterate(body, name="reach")}


def _succ(x: Multiset, edges: Multiset) -> Multiset:
    return oracle.map(oracle.join(x, edges, [0], [0]), lambda r: (r[1],))


def _reach_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    edges, roots = inputs
    body = lambda x: oracle.distinct(oracle.concat(_succ(x, edges), roots))  # noqa: E731
    return {"reach": oracle.iterate(roots, body)}


REACH = Pipeline((EDGES, ROOTS), _reach, _reach_expected, (EDGE, NODE), nonnegative=True)


@given(histories(REACH.rows, nonnegative=True))
@ITERATION
def test_reachability(history: History) -> None:
    check_history(LocalKernel(), REACH, history)


# --- transitive closure ------------------------------------------------------------------


def _closure(edges: Collection) -> dict[str, Collection]:
    def body(scope: Any, tc: Collection) -> Collection:
        inner = edges.enter(scope)
        far = tc.map("src", "dst AS mid").join(inner.map("src AS mid", "dst AS far"), on=["mid"])
        return far.map("src", "far AS dst").concat(inner).distinct()

    return {"tc": edges.iterate(body, name="closure")}


def _closure_body(edges: Multiset) -> Any:
    def body(tc: Multiset) -> Multiset:
        far = oracle.map(oracle.join(tc, edges, [1], [0]), lambda r: (r[0], r[2]))
        return oracle.distinct(oracle.concat(far, edges))

    return body


def _closure_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    (edges,) = inputs
    return {"tc": oracle.iterate(edges, _closure_body(edges))}


CLOSURE = Pipeline((EDGES,), _closure, _closure_expected, (EDGE,), nonnegative=True)


@given(histories(CLOSURE.rows, nonnegative=True))
@ITERATION
def test_transitive_closure(history: History) -> None:
    check_history(LocalKernel(), CLOSURE, history)


# --- connected components by label propagation (the book's graph computation) -------------


def components(edges: Collection) -> Collection:
    """Per node, the least node id in its (undirected) component."""
    nodes = edges.map("src AS n").concat(edges.map("dst AS n")).distinct()
    both = edges.concat(edges.map("dst AS src", "src AS dst"))
    start = nodes.map("n", "n AS l")

    def body(scope: Any, labels: Collection) -> Collection:
        sent = labels.join(both.enter(scope).map("src AS n", "dst"), on=["n"])
        offered = sent.map("dst AS n", "l").concat(start.enter(scope))
        return offered.reduce(["n"], aggregates=["min(l) AS l"])

    return start.iterate(body, name="components")


def _components_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    (edges,) = inputs
    nodes = oracle.distinct(
        oracle.concat(oracle.map(edges, lambda r: (r[0],)), oracle.map(edges, lambda r: (r[1],)))
    )
    both = oracle.concat(edges, oracle.map(edges, lambda r: (r[1], r[0])))
    start = oracle.map(nodes, lambda r: (r[0], r[0]))

    def body(labels: Multiset) -> Multiset:
        sent = oracle.map(oracle.join(labels, both, [0], [0]), lambda r: (r[2], r[1]))
        return oracle.reduce(oracle.concat(sent, start), [0], [("min", 1)])

    return {"labels": oracle.iterate(start, body)}


COMPONENTS = Pipeline(
    (EDGES,), lambda e: {"labels": components(e)}, _components_expected, (EDGE,), nonnegative=True
)


@given(histories(COMPONENTS.rows, nonnegative=True))
@ITERATION
def test_connected_components(history: History) -> None:
    check_history(LocalKernel(), COMPONENTS, history)


# --- non-monotonic bodies: an antijoin, a reduce over the variable --------------------------


def _non_monotonic(edges: Collection, roots: Collection) -> dict[str, Collection]:
    def fresh(scope: Any, x: Collection) -> Collection:
        # Newly discovered nodes only: oscillates, so the round limit defines the result.
        succ = x.map("node AS src").join(edges.enter(scope), on=["src"]).map("dst AS node")
        return succ.antijoin(x, on=["node"]).concat(roots.enter(scope)).distinct()

    def hops(scope: Any, d: Collection) -> Collection:
        # Fewest hops from a root, up to 4: a min inside the loop.
        step = (
            d.filter("h < 4").map("node AS src", "h + 1 AS h").join(edges.enter(scope), on=["src"])
        )
        start = roots.enter(scope).map("node", "0 AS h")
        return step.map("dst AS node", "h").concat(start).reduce(["node"], ["min(h) AS h"])

    return {
        "fresh": roots.iterate(fresh, limit=3, on_limit="return", name="fresh"),
        "hops": roots.map("node", "0 AS h").iterate(hops, name="hops"),
    }


def _non_monotonic_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    edges, roots = inputs

    def fresh(x: Multiset) -> Multiset:
        new = oracle.antijoin(_succ(x, edges), x, [0], [0])
        return oracle.distinct(oracle.concat(new, roots))

    start = oracle.map(roots, lambda r: (r[0], 0))

    def hops(d: Multiset) -> Multiset:
        near = oracle.filter(d, lambda r: r[1] < 4)
        step = oracle.map(oracle.join(near, edges, [0], [0]), lambda r: (r[2], r[1] + 1))
        return oracle.reduce(oracle.concat(step, start), [0], [("min", 1)])

    return {
        "fresh": oracle.iterate(roots, fresh, limit=3, on_limit="return"),
        "hops": oracle.iterate(start, hops),
    }


NON_MONOTONIC = Pipeline(
    (EDGES, ROOTS), _non_monotonic, _non_monotonic_expected, (EDGE, NODE), nonnegative=True
)


@given(histories(NON_MONOTONIC.rows, nonnegative=True))
@ITERATION
def test_non_monotonic_bodies(history: History) -> None:
    check_history(LocalKernel(), NON_MONOTONIC, history)


# --- mutual recursion with variables -----------------------------------------------------


def _even_odd(edges: Collection, roots: Collection) -> dict[str, Collection]:
    with edges.worker.scope(name="parity") as s:
        even = s.variable(roots)  # starts as the roots
        odd = s.variable({"node": "int"})  # starts empty
        inner = edges.enter(s)
        even_next = odd.map("node AS src").join(inner, on=["src"]).map("dst AS node")
        odd_next = even.map("node AS src").join(inner, on=["src"]).map("dst AS node")
        even.set(even_next.concat(roots.enter(s)).distinct())
        odd.set(odd_next.distinct())
    return {"even": even.leave(), "odd": odd.leave()}


def _even_odd_expected(inputs: list[Multiset], t: int) -> dict[str, Multiset]:
    edges, roots = inputs
    # Both variables in one multiset, each row tagged with its binding.
    tagged = oracle.map(roots, lambda r: ("even", r[0]))

    def body(x: Multiset) -> Multiset:
        even = multiset((r[1:], c) for r, c in x.items() if r[0] == "even")
        odd = multiset((r[1:], c) for r, c in x.items() if r[0] == "odd")
        e2 = oracle.distinct(oracle.concat(_succ(odd, edges), roots))
        o2 = oracle.distinct(_succ(even, edges))
        return oracle.concat(
            oracle.map(e2, lambda r: ("even", r[0])), oracle.map(o2, lambda r: ("odd", r[0]))
        )

    both = oracle.iterate(tagged, body)
    pick = lambda tag: multiset((r[1:], c) for r, c in both.items() if r[0] == tag)  # noqa: E731
    return {"even": pick("even"), "odd": pick("odd")}


EVEN_ODD = Pipeline((EDGES, ROOTS), _even_odd, _even_odd_expected, (EDGE, NODE), nonnegative=True)


@given(histories(EVEN_ODD.rows, nonnegative=True))
@ITERATION
def test_mutual_recursion(history: History) -> None:
    check_history(LocalKernel(), EVEN_ODD, history)


def test_a_root_inserted_then_retracted_leaves_the_loop_converged() -> None:
    """Found by hypothesis: once every input update of a reduce in the loop cancels out
    (its trace then holds no batch), its pending times must still retract its output;
    the loop ran to its round limit when that step was skipped."""
    history = example(
        (([], 0), ([], 0)),
        (([], 0), ([((0,), 0, 1)], 0)),
        (([], 0), ([((0,), 0, -1)], 0)),
    )
    check_history(LocalKernel(), EVEN_ODD, history)


# --- both kernels: fixed histories --------------------------------------------------------

#: Edges inserted and deleted, several times per flush, one update in the future.
GRAPH_HISTORY = example(
    (
        ([((0, 1), 0, 1), ((1, 2), 0, 1), ((2, 3), 1, 1), ((4, 5), 2, 1)], 1),
        ([((0,), 0, 1)], 1),
    ),
    (([((3, 4), 1, 1), ((1, 2), 2, -1), ((0, 2), 3, 1)], 3), ([((4,), 2, 1)], 3)),
    (([((2, 3), 3, -1), ((5, 0), 5, 1)], 4), ([((0,), 4, -1)], 4)),
)


#: Two rounds for both kernels (on Spark each inner step costs several jobs); the
#: fraud example in test_iteration_cases.py is the other loop run on Spark.
SHORT_HISTORY = example(
    (([((0, 1), 0, 1), ((1, 2), 0, 1), ((2, 0), 0, 1), ((3, 4), 0, 1)], 1), ([((0,), 0, 1)], 1)),
    (([((1, 2), 1, -1), ((2, 3), 2, 1)], 3), ([], 3)),
)


def test_reachability_on_kernel(kernel: Kernel) -> None:
    check_history(kernel, REACH, SHORT_HISTORY)


def test_components_fixed_history() -> None:
    edges_only = History(tuple((rnd[0],) for rnd in GRAPH_HISTORY.rounds))
    check_history(LocalKernel(), COMPONENTS, edges_only)


def test_reachability_and_parity_fixed_history() -> None:
    both = Pipeline(
        (EDGES, ROOTS),
        lambda e, r: {**_reach(e, r), **_even_odd(e, r)},
        lambda i, t: {**_reach_expected(i, t), **_even_odd_expected(i, t)},
        (),
    )
    check_history(LocalKernel(), both, GRAPH_HISTORY)


def test_an_entered_arrangement_read_through_one_index(monkeypatch) -> None:
    # Enough edges (a few hundred) that each inner step reads the entered arrangement,
    # outer round's batch included, through one index made per outer round; edges
    # inserted and deleted at several times per flush, the oracle at every time.
    made = []
    whole_index = EnterArrangedNode._whole_index

    def spy(self: EnterArrangedNode) -> Any:
        index = whole_index(self)
        made.append(index is not None)
        return index

    monkeypatch.setattr(EnterArrangedNode, "_whole_index", spy)
    rng = random.Random(7)
    edges = sorted({(rng.randrange(40), rng.randrange(40)) for _ in range(400)})
    first = [(e, 0, 1) for e in edges]
    later = [(e, 1 + i % 3, -1) for i, e in enumerate(edges[:12])]
    later += [((40 + i, i), 2 + i % 2, 1) for i in range(6)] + [((3, 45), 3, 1)]
    # A path of new nodes: reached at later inner steps through edges of this batch.
    later += [((3, 50), 2, 1), ((50, 51), 2, 1), ((51, 52), 4, 1), ((52, 53), 2, 1)]
    history = example(
        ((first, 1), ([((0,), 0, 1), ((41,), 0, 1)], 1)),
        ((later, 5), ([((0,), 3, -1)], 5)),
    )
    check_history(LocalKernel(), REACH, history)
    assert any(made)


# --- compaction: a loop's state does not grow with the rounds of input ---------------------


def _loop_rows(worker: Worker) -> int:
    """The update rows held by every trace inside the worker's loops."""
    loops = [n.loop for n in worker.nodes if isinstance(n, ScopeNode)]
    traces = [getattr(node, "_trace", None) for loop in loops for node in loop.nodes]
    return sum(t.rows for t in traces if t is not None)


def test_a_loops_state_does_not_grow_with_rounds() -> None:
    # A path of 12 nodes whose middle edge is deleted and put back, round after round: the
    # closure changes by dozens of pairs at several inner rounds each time, yet once
    # outer times are compacted the loop's traces hold about what they held early on.
    worker = Worker(LocalKernel())
    edges_in = worker.new_input(EDGES)
    out = _closure(edges_in.to_collection())["tc"].capture()
    for i in range(11):
        edges_in.insert((i, i + 1))
    sizes = []
    for t in range(1, 121):
        if t % 2:
            edges_in.remove((5, 6))
        else:
            edges_in.insert((5, 6))
        edges_in.advance_to(t)
        edges_in.flush()
        worker.step()
        out.poll()
        sizes.append(_loop_rows(worker))
    early, late = max(sizes[10:30]), max(sizes[90:])
    assert late <= 2 * early, (early, late)
