"""Reachability from a set of roots, kept up to date while edges come and go.

The differential dataflow book's `iterate` example: the nodes reachable from the
roots are the fixpoint of "roots, plus the successors of what is reachable". The
edges are arranged once, outside the loop, and entered into it without a copy.
Deleting an edge retracts exactly what was reachable only through it, with no
self-supporting derivations left behind (seed "differential dataflow", the fraud
example).

    python examples/graph_reachability.py            # in-process DuckDB kernel
    python examples/graph_reachability.py --spark    # Spark kernel
"""

from __future__ import annotations

import sys

from dsql.runtime.dataflow import Worker


def main(use_spark: bool = False) -> None:
    if use_spark:
        from dsql.runtime.kernel.spark import SparkKernel

        worker = Worker(SparkKernel())
    else:
        from dsql.runtime.kernel.local import LocalKernel

        worker = Worker(LocalKernel())
    edges_in = worker.new_input({"src": "int", "dst": "int"})
    roots_in = worker.new_input({"node": "int"})
    edges, roots = edges_in.to_collection(), roots_in.to_collection()
    by_src = edges.arrange_by_key("src")  # one arrangement, shared with the loop

    def body(scope, reach):  # reach: the loop variable, a collection in the scope
        step = reach.map("node AS src").arrange_by_key("src").join_core(by_src.enter(scope))
        return step.map("dst AS node").concat(roots.enter(scope)).distinct()

    reach = roots.iterate(body, name="reach")
    out = reach.capture()

    def advance(t: int) -> None:
        for session in (edges_in, roots_in):
            session.advance_to(t)
            session.flush()
        worker.step()
        changes = sorted(out.poll().to_pylist(), key=lambda r: (r["__time__"], r["node"]))
        for row in changes:
            print(f"  time {row['__time__']}: node {row['node']} {row['__diff__']:+d}")

    print("a chain 1 -> 2 -> 3 -> 4 and an edge 5 -> 6; root 1")
    for a, b in [(1, 2), (2, 3), (3, 4), (5, 6)]:
        edges_in.insert((a, b))
    roots_in.insert((1,))
    advance(1)
    print("delete 2 -> 3: nodes 3 and 4 are no longer reachable")
    edges_in.remove((2, 3))
    advance(2)
    print("insert 4 -> 5 and 2 -> 4, at two times in one batch")
    edges_in.update_at((4, 5), 2, +1)
    edges_in.update_at((2, 4), 3, +1)
    advance(4)


if __name__ == "__main__":
    main(use_spark="--spark" in sys.argv)
