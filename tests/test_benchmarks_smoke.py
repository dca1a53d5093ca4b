"""Benchmarks that cannot rot: every script in benchmarks/ runs, at its smallest sizes.

Each script runs as a subprocess with tiny sizes, few rounds and `--no-write` (RESULTS.md
is left alone); it must exit 0 and print its table. Timings are not checked (the
benchmarks measure them; the suite only keeps the scripts working).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from dsql.runtime.kernel import key_index
from dsql.runtime.kernel.local import LocalKernel
from dsql.runtime.trace import Trace


def test_trace_size_counts_a_slot_table() -> None:
    # An index large enough for a slot table: its 4 bytes a slot count in the trace's size
    # (the size `benchmarks/skip_level.py` reports at its end).
    n = max(key_index.INDEX_ROWS, key_index.SLOT_KEYS)
    schema = pa.schema([("k", pa.int64()), ("__time__", pa.int64()), ("__diff__", pa.int64())])
    batch = pa.table({"k": range(n), "__time__": [0] * n, "__diff__": [1] * n}, schema=schema)
    trace = Trace(LocalKernel(), ("k",), ("k",), 1)
    trace.insert(batch, n)
    before = trace.nbytes()
    picked = trace.rows_with_keys(pa.table({"k": [3, n + 1]}), ("k",))
    assert picked is not None and [f.column("k").to_pylist() for f in picked] == [[3]]
    # n distinct keys, n + 1 run bounds, n positions at 8 bytes; n slots at 4.
    assert trace.nbytes() == before + 8 * (3 * n + 1) + 4 * n


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

#: Per script: its smallest run, and a line its table prints. Each leaves RESULTS.md
#: alone (`--no-write`, `--no-results`; same_process_ab.py writes nothing) and uses the
#: in-process kernel only (`--kernel local`, `--no-spark`), except spark_rounds.py, whose
#: figures are Spark's: it runs under a local master.
SMOKE = {
    "skip_level.py": (
        ["--n", "1000", "--kernel", "local", "--rounds", "2", "--warmup", "1", "--changes",
         "100", "--profile-rounds", "1", "--reps", "1", "--book", "--pathway", "--no-write"],
        "check",
    ),
    "big_groupby.py": (
        ["--n", "1000", "--rounds", "3", "--warmup", "1", "--reps", "1", "--no-spark",
         "--no-write"],
        "## big_groupby",
    ),
    "small_views.py": (
        ["--customers", "10", "--orders", "50", "--rounds", "3", "--warmup", "1", "--reps",
         "1", "--views", "5", "--rows", "100", "--no-spark", "--no-write"],
        "## small_views",
    ),
    "recursion.py": (
        ["--kernel", "local", "--reach-nodes", "50", "--reach-edges", "100", "--tc-nodes",
         "30", "--tc-edges", "60", "--rounds", "2", "--reps", "1", "--no-write"],
        "## recursion",
    ),
    "same_process_ab.py": (
        ["dsql.runtime.trace", "POSTPONE_SHARE", "4", "16", "--rounds", "2", "--nodes", "50",
         "--edges", "100"],
        "same output: True",
    ),
    "spark_rounds.py": (
        ["--orders", "200", "--customers", "20", "--w1-n", "500", "--rounds", "1", "--warmup",
         "0", "--changes", "5", "--reps", "1", "--no-write"],
        "## spark_rounds",
    ),
    "slt_speed.py": (["--queries", "5", "--no-results"], "| dsql | incremental |"),
    "durable.py": (
        ["--writes", "20", "--log-lengths", "10", "--view-rows", "100", "--latency-files",
         "3", "--no-write"],
        "## durable",
    ),
}  # fmt: skip


def _run(script: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    results = (BENCHMARKS / "RESULTS.md").read_bytes()
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        cwd=BENCHMARKS.parent,
        timeout=300,
    )
    assert (BENCHMARKS / "RESULTS.md").read_bytes() == results, f"{script} wrote RESULTS.md"
    return done


def test_every_benchmark_has_a_smoke_run() -> None:
    # pathway_peer.py has its own test below; driver_memory.py runs scaled down (2M rows,
    # a 512m driver) in tests/test_spark_driver_memory.py; connect_vs_classic.py against
    # the Connect server of tests/test_spark_connect.py.
    others = ["pathway_peer.py", "driver_memory.py", "connect_vs_classic.py"]
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == sorted([*SMOKE, *others])


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_runs_at_its_smallest(script: str) -> None:
    args, marker = SMOKE[script]
    done = _run(script, args)
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert marker in done.stdout, done.stdout[-3000:]
    # Every benchmark checks its answer against a recomputation; a wrong one is no figure.
    for wrong in ("MISMATCH", "DIFFER"):
        assert wrong not in done.stdout, done.stdout[-3000:]


def test_pathway_peer_runs_or_says_pathway_is_missing() -> None:
    args = ["--n", "200", "--rounds", "2", "--warmup", "1", "--changes", "20"]
    done = _run("pathway_peer.py", args)
    if importlib.util.find_spec("pathway") is None:
        assert done.returncode == 2 and "pip install pathway" in done.stderr, done.stderr
        return
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Pathway" in done.stdout and "MISMATCH" not in done.stdout, done.stdout
