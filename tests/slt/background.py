"""Running sqllogictest files in child processes while the rest of a test run goes on.

SQLite's select3-5.test take minutes of CPU each per mode; run one after another inside
pytest they would nearly double CI's time, while the machine's second core is often idle
(most tests wait on one Python thread). A `Pool` runs each `Job` (a file in a mode, or
one chunk of its queries) as `python -m tests.slt.runner FILE --engine dsql --mode M
--kernel local [--chunk I/N] --json OUT` in a child process, at most `workers` at once,
the longest (by `Job.seconds`) first. The children are niced, so they take the CPU the
foreground tests leave; `widen` lets more run once the foreground is only waiting for
them. `result` waits for one job and returns its JSON report (`SuiteReport.as_json`),
or `{"error": ...}` with the end of its log if it crashed or ran past `timeout`.

`jobs_for(path, mode)` splits a file of `PLAN` into chunks of about a minute, so the
pool's work packs onto the cores and no single file is the run's long pole.

    pool = Pool(jobs_for(Path("select3.test"), "direct"), Path("/tmp/x"))
    pool.start()
    reports = [pool.result(job) for job in jobs_for(Path("select3.test"), "direct")]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .execute import Chunk

__all__ = ["Job", "Pool", "PLAN", "jobs_for"]

#: The repository root: the runner is started as the module `tests.slt.runner` from it.
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Job:
    """One sqllogictest file (or one `chunk` of its queries) run by dsql in one mode.

    `seconds` (the expected wall time, not part of the job's identity) orders the pool.
    """

    path: Path
    mode: str
    chunk: Chunk | None = None
    seconds: float = field(default=0.0, compare=False)

    @property
    def name(self) -> str:
        """`select4-incremental`, or `select4-incremental-2of3` for a chunk."""
        name = f"{self.path.stem}-{self.mode}"
        return name if self.chunk is None else f"{name}-{self.chunk.index}of{self.chunk.count}"


#: How many chunks each big file runs as per mode, and the seconds of one chunk run alone
#: (local kernel; CPU seconds of one chunk of each, session 16, on the 2-core CI machine:
#: tests/slt/README.md), so the pool starts the longest first and the short select5
#: chunks fill the end. Each chunk repeats the file's statements (select4: 1,025, a few
#: seconds), so more chunks cost more in all: select4 direct in 5 chunks of 57 s against
#: 3 of 86 s; its incremental chunks cost their share (6 of 56.5 s, 4 of 80-88 s).
PLAN: dict[tuple[str, str], tuple[int, float]] = {
    ("select3.test", "direct"): (4, 45.0),
    ("select3.test", "incremental"): (3, 77.0),
    ("select4.test", "direct"): (3, 86.0),
    ("select4.test", "incremental"): (4, 84.0),
    ("select5.test", "direct"): (8, 33.0),
    ("select5.test", "incremental"): (8, 37.0),
}


def jobs_for(path: Path, mode: str) -> list[Job]:
    """The jobs that run all of `path` in `mode`: its chunks if `PLAN` has it, else one.

    >>> [j.name for j in jobs_for(Path("select4.test"), "incremental")][-1]
    'select4-incremental-4of4'
    """
    count, seconds = PLAN.get((path.name, mode), (1, 0.0))
    if count == 1:
        return [Job(path, mode, None, seconds)]
    return [Job(path, mode, Chunk(i, count), seconds) for i in range(1, count + 1)]


@dataclass
class _Running:
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    started: float


class Pool:
    """Runs jobs in niced child processes, longest first, `workers` at a time."""

    def __init__(
        self, jobs: Sequence[Job], workdir: Path, workers: int = 1, timeout: float = 1800.0
    ) -> None:
        self.workdir = workdir
        self.timeout = timeout
        self._pending = sorted(jobs, key=lambda j: -j.seconds)  # stable: ties keep their order
        self._running: dict[Job, _Running] = {}
        self._done: dict[Job, dict[str, Any]] = {}
        self._workers = workers
        self._stopped = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="slt-background", daemon=True)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def widen(self, workers: int) -> None:
        """Let up to `workers` jobs run at once (never fewer than now)."""
        with self._changed:
            self._workers = max(self._workers, workers)
            self._changed.notify_all()

    def result(self, job: Job) -> dict[str, Any]:
        """Wait for `job` and return its report, or `{"error": ...}`."""
        with self._changed:
            if job not in self._done and job not in self._running and job not in self._pending:
                return {"error": f"{job.name} was never scheduled"}
            while job not in self._done:
                self._changed.wait(1.0)
            return self._done[job]

    def stop(self) -> None:
        """Kill running jobs and forget pending ones."""
        with self._changed:
            self._stopped = True
            self._pending.clear()
            for job, run in list(self._running.items()):
                run.process.kill()
                self._finish(job, run, {"error": "stopped"})
            self._changed.notify_all()

    def _loop(self) -> None:
        with self._changed:
            while not self._stopped and (self._pending or self._running):
                for job, run in list(self._running.items()):
                    code = run.process.poll()
                    if code is not None:
                        self._finish(job, run, self._report(job, code))
                    elif time.monotonic() - run.started > self.timeout:
                        run.process.kill()
                        run.process.wait()
                        self._finish(job, run, {"error": f"timed out after {self.timeout:.0f} s"})
                while self._pending and len(self._running) < self._workers:
                    job = self._pending.pop(0)
                    self._running[job] = self._launch(job)
                self._changed.wait(0.5)

    def _launch(self, job: Job) -> _Running:
        log = (self.workdir / f"{job.name}.log").open("wb")
        command = [
            sys.executable,
            "-m",
            "tests.slt.runner",
            str(job.path),
            "--engine",
            "dsql",
            "--mode",
            job.mode,
            "--kernel",
            "local",
            *(["--chunk", str(job.chunk)] if job.chunk is not None else []),
            "--json",
            str(self._json(job)),
            "--exit-with-parent",  # a killed test run leaves no runner behind
        ]
        nice = shutil.which("nice")
        if nice is not None:
            command = [nice, "-n", "10", *command]
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        return _Running(process, log, time.monotonic())

    def _json(self, job: Job) -> Path:
        return self.workdir / f"{job.name}.json"

    def _report(self, job: Job, code: int) -> dict[str, Any]:
        path = self._json(job)
        if path.is_file():
            report: dict[str, Any] = json.loads(path.read_text())
            return report
        tail = (self.workdir / f"{job.name}.log").read_text(errors="replace")[-3000:]
        return {"error": f"exit status {code} and no report; the log ends:\n{tail}"}

    def _finish(self, job: Job, run: _Running, report: dict[str, Any]) -> None:
        run.log.close()
        report.setdefault("seconds_wall", round(time.monotonic() - run.started, 1))
        self._done[job] = report
        del self._running[job]
        self._changed.notify_all()
