"""Connected components by label propagation, with interactive queries over the labels.

The differential dataflow book's graph computation: every node starts labelled with
its own id; each round a node takes the least label among its own and its
neighbours'. The loop body is non-monotonic (a `reduce` computing a min), and stays
exact as edges are added and removed: a removed edge that split a component makes
its far side fall back to its own least id. Queries (`labels.semijoin(queries)`)
come and go like any other input and are answered from the maintained labels.

    python examples/graph_components.py            # in-process DuckDB kernel
    python examples/graph_components.py --spark    # Spark kernel
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
    queries_in = worker.new_input({"node": "int"})
    edges = edges_in.to_collection()
    nodes = edges.map("src AS n").concat(edges.map("dst AS n")).distinct()
    both_ways = edges.concat(edges.map("dst AS src", "src AS dst"))
    start = nodes.map("n", "n AS l")

    def body(scope, labels):
        sent = labels.join(both_ways.enter(scope).map("src AS n", "dst"), on=["n"])
        offered = sent.map("dst AS n", "l").concat(start.enter(scope))
        return offered.reduce(["n"], aggregates=["min(l) AS l"])

    labels = start.iterate(body, name="components")
    answers = labels.semijoin(queries_in.to_collection(), on=[("n", "node")]).capture()

    def advance(t: int) -> None:
        for session in (edges_in, queries_in):
            session.advance_to(t)
            session.flush()
        worker.step()
        for row in sorted(answers.poll().to_pylist(), key=lambda r: (r["__time__"], r["n"])):
            print(
                f"  time {row['__time__']}: node {row['n']} label {row['l']} {row['__diff__']:+d}"
            )

    print("two components {1, 2, 3} and {7, 8}; ask about 3 and 8")
    for a, b in [(1, 2), (2, 3), (7, 8)]:
        edges_in.insert((a, b))
    queries_in.insert((3,))
    queries_in.insert((8,))
    advance(1)
    print("connect 3 - 7: node 8 joins component 1")
    edges_in.insert((3, 7))
    advance(2)
    print("remove 2 - 3 and ask about 2 as well")
    edges_in.remove((2, 3))
    queries_in.insert((2,))
    advance(3)


if __name__ == "__main__":
    main(use_spark="--spark" in sys.argv)
