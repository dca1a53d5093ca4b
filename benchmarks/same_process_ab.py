"""Same-process A/B of a runtime constant on the closure benchmark's one-edge rounds.

The development machine's speed drifts by 2x within minutes, so two processes run one
after the other measure the machine as much as the change. This script builds two
workers over the same graph in one process, one with the module constant `NAME` set to
`A` and one to `B`, and steps them through the same one-edge rounds alternately (the
order swapped every round), setting the constant before each worker's step. Both see
the same machine at nearly the same moment; their outputs must agree.

    python benchmarks/same_process_ab.py dsql.runtime.trace POSTPONE_SHARE 4 16
    python benchmarks/same_process_ab.py dsql.runtime.operators.reduce_chain SPLIT_DUE \\
        False True --rounds 24

A constant read once when a node is built, rather than at each step, is not compared
fairly: set it only where the runtime reads it per call. Prints the two totals, their
difference and whether every round's output was the same. Writes nothing.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import random
import time
from typing import Any

import recursion

from dsql.runtime.dataflow import Worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", help="the module holding the constant")
    parser.add_argument("name", help="the constant")
    parser.add_argument("a", help="its value for worker A (a Python literal)")
    parser.add_argument("b", help="its value for worker B (a Python literal)")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--edges", type=int, default=2000)
    args = parser.parse_args()
    module = importlib.import_module(args.module)
    if not hasattr(module, args.name):
        parser.error(f"{args.module} has no {args.name}")
    values = {"A": ast.literal_eval(args.a), "B": ast.literal_eval(args.b)}

    kernel = recursion.make_kernel("local")
    recursion.warm_up(kernel, "closure", args.nodes)
    first = recursion.random_edges(args.nodes, args.edges, 1)
    data = recursion.table(first)
    runs: dict[str, dict[str, Any]] = {}
    for label, value in values.items():
        setattr(module, args.name, value)
        worker = Worker(kernel)
        edges_in, roots_in, out = recursion.build(worker, "closure")
        recursion.load(worker, edges_in, roots_in, data)
        out.poll()
        runs[label] = {
            "worker": worker,
            "inputs": (edges_in, roots_in),
            "out": out,
            "edges": set(first),
            "rng": random.Random(2),
            "seconds": 0.0,
            "outputs": [],
        }

    for i in range(args.rounds):
        for label in ("A", "B") if i % 2 == 0 else ("B", "A"):
            setattr(module, args.name, values[label])
            _round(runs[label], i, args.nodes)
    setattr(module, args.name, values["A"])

    a, b = runs["A"]["seconds"], runs["B"]["seconds"]
    same = runs["A"]["outputs"] == runs["B"]["outputs"]
    print(
        f"{args.module}.{args.name}: A={args.a} {a * 1e3:.0f} ms, B={args.b} {b * 1e3:.0f} ms "
        f"({(b / a - 1) * 100:+.1f}%) over {args.rounds} rounds; same output: {same}"
    )


def _round(run: dict[str, Any], i: int, nodes: int) -> None:
    """Round `i` (`recursion.change_one_edge`), timed, its output kept."""
    recursion.change_one_edge(i, run["edges"], run["rng"], nodes, *run["inputs"])
    start = time.perf_counter()
    run["worker"].step()
    run["seconds"] += time.perf_counter() - start
    run["outputs"].append(sorted(map(str, run["out"].poll().to_pylist())))


if __name__ == "__main__":
    main()
