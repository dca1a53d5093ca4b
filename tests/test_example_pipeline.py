"""examples/pipeline.py runs as documented: its output is its golden file, and the sink's
changes add up to the view the restarted session holds."""

from __future__ import annotations

import ast
import importlib.util
from collections import Counter
from pathlib import Path

from test_examples import EXAMPLES, check_golden


def test_the_pipeline_example_survives_its_restart_and_writes_each_time_once(capsys) -> None:
    spec = importlib.util.spec_from_file_location("pipeline", EXAMPLES / "pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capsys.readouterr()
    assert module.main() == 0
    out = capsys.readouterr().out
    check_golden("pipeline.out", out)
    # The sink's diffs accumulate to the last state the view printed.
    total: Counter = Counter()
    for line in out.split("sink (mz_timestamp, mz_diff, city, stock):")[1].strip().splitlines():
        _, diff, city, stock = ast.literal_eval(line.strip())
        total[(city, stock)] += diff
    last = [line for line in out.splitlines() if line.startswith("after 3.csv:")][0]
    assert sorted(k for k, n in total.items() if n) == ast.literal_eval(last.split(":", 1)[1])
    assert all(n in (0, 1) for n in total.values())
    assert Path(EXAMPLES / "pipeline.py").read_text().count("allowed_paths") == 2
