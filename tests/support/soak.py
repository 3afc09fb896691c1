"""A fault soak: `autosched tune` processes sharing one working directory and one
database while tuners are killed with SIGKILL, the PostgreSQL server restarts and the
work dir's filesystem fills up; each tuner is rerun until its task has all its trials.
Then the checks that the shared database still tells the truth (`Figures`).

Used by tests/core/test_fault_soak.py (short) and bench/fault_soak.py (long).
"""
from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MATMUL = str(ROOT / "examples" / "matmul.py")


@dataclass(frozen=True)
class Job:
    """One tuner's work: a task and the trials its records must reach."""

    url: str
    args: tuple[str, ...]          # --arg values of examples/matmul.py
    trials: int

    def task(self):
        from autosched.workload import load_tasks

        return load_tasks(MATMUL, None, list(self.args))[0]

    def argv(self, trials: int, seed: int) -> list[str]:
        out = [sys.executable, "-m", "autosched", "tune", MATMUL, "--target", "llvm",
               "--trials", str(trials), "--batch-size", "4", "--seed", str(seed),
               "--db", self.url, "--strategy", "random"]
        for a in self.args:
            out += ["--arg", a]
        return out


@dataclass
class Figures:
    """What happened and what the database holds afterwards."""

    tuners: int = 0
    runs: int = 0                 # tuner processes started, reruns included
    kills: int = 0                # SIGKILLed by the soak
    restarts: int = 0             # PostgreSQL restarts
    fills: int = 0                # times the work dir's filesystem was filled
    stopped: int = 0              # runs that stopped (or refused to start) with one line
    bad_exits: list = field(default_factory=list)  # any other exit: (code, stderr tail)
    expected: int = 0             # records the tasks must hold
    found: int = 0
    duplicates: int = 0
    failures: dict = field(default_factory=dict)   # recorded failure kind -> count
    poisoned: int = 0             # failure records that measure fine when tried again
    integrity: dict = field(default_factory=dict)  # url -> "ok" or what is wrong
    exported: int = 0             # tasks `autosched export` built a library for
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


@contextlib.contextmanager
def small_filesystem(path: Path, megabytes: int):
    """A tmpfs of `megabytes` mounted at `path` (needs root), unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(path)],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path) -> Path | None:
    """Write zeros under `path` until its filesystem is full; the filler's path (None
    when the filesystem was full already and no filler could be created)."""
    filler = path / "filler.bin"
    block = b"\0" * (1 << 20)
    try:
        with open(filler, "wb") as f:
            while True:
                f.write(block)
                f.flush()
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    return filler if filler.exists() else None


class Soak:
    """Run `jobs` from `cwd`, with `kills` SIGKILLs of running tuners, a restart of
    `pg` (a support.pgserver.PgServer) and one fill of `fill_dir`, at random moments."""

    def __init__(self, jobs: list[Job], cwd: Path, rng: random.Random, *, kills: int,
                 pg=None, fill_dir: Path | None = None, max_runs_per_job: int = 8):
        self.jobs, self.cwd, self.rng = jobs, cwd, rng
        self.kills_left = kills
        self.pg, self.fill_dir = pg, fill_dir
        self.max_runs = max_runs_per_job
        self.env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.figures = Figures(tuners=len(jobs))
        self._runs = [0] * len(jobs)
        self._killed: set[int] = set()  # pids the soak killed

    # -- running -------------------------------------------------------------------
    def run(self, limit_s: float = 1500) -> Figures:
        start = time.monotonic()
        procs: dict[int, subprocess.Popen] = {}
        pending = set(range(len(self.jobs)))
        chaos = self._chaos_plan()
        while pending or procs:
            if time.monotonic() - start > limit_s:
                for p in procs.values():
                    p.kill()
                raise AssertionError(f"soak did not finish in {limit_s:.0f} s: "
                                     f"{self.figures.to_json()}")
            for i in sorted(pending):
                remaining = self._remaining(self.jobs[i])
                if remaining is None:
                    continue  # the database is down: ask again later
                pending.discard(i)
                if remaining > 0:
                    procs[i] = self._start(i, remaining)
            for i, p in list(procs.items()):
                if p.poll() is not None:
                    self._finished(p)
                    del procs[i]
                    pending.add(i)
            chaos = self._maybe_chaos(chaos, time.monotonic() - start, procs)
            time.sleep(0.2)
        self.figures.seconds = time.monotonic() - start
        return self.figures

    def _start(self, i: int, trials: int) -> subprocess.Popen:
        if self._runs[i] >= self.max_runs:
            raise AssertionError(f"job {self.jobs[i].args} needed more than "
                                 f"{self.max_runs} runs: {self.figures.to_json()}")
        self._runs[i] += 1
        self.figures.runs += 1
        return subprocess.Popen(self.jobs[i].argv(trials, seed=self.figures.runs),
                                cwd=self.cwd, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)

    def _finished(self, p: subprocess.Popen) -> None:
        err = p.stderr.read()
        p.stderr.close()
        if p.pid in self._killed:
            return
        said = [ln for ln in err.splitlines() if ln.startswith("autosched:")]
        one_line = len(said) == 1 and "Traceback" not in err
        # exit 1: stopped itself for a fault; exit 2 "cannot connect": refused to start
        # while the server was down (it cannot tell a down server from a wrong URL)
        if one_line and (p.returncode == 1 or
                         (p.returncode == 2 and "cannot connect" in said[0])):
            self.figures.stopped += 1
        elif p.returncode != 0:
            self.figures.bad_exits.append((p.returncode, err[-600:]))

    def _remaining(self, job: Job) -> int | None:
        from autosched.db import open_database

        try:
            with open_database(job.url) as db:
                return job.trials - len(db.records(task_key=job.task().key))
        except Exception:  # noqa: BLE001 - a restarting server: the soak asks again
            return None

    # -- faults --------------------------------------------------------------------
    def _chaos_plan(self) -> list[tuple[float, str]]:
        events = [(self.rng.uniform(4, 20), "kill") for _ in range(self.kills_left)]
        if self.pg is not None:
            events.append((self.rng.uniform(6, 14), "restart"))
        if self.fill_dir is not None:
            events.append((self.rng.uniform(6, 14), "fill"))
        return sorted(events)

    def _maybe_chaos(self, plan, now: float, procs: dict) -> list:
        if not plan or plan[0][0] > now or not procs:
            return plan  # an event waits for a moment when tuners are running
        _, what = plan[0]
        if what == "kill":
            victim = procs[self.rng.choice(sorted(procs))]
            self._killed.add(victim.pid)
            os.kill(victim.pid, signal.SIGKILL)
            self.figures.kills += 1
        elif what == "restart":
            self.pg.restart(down_seconds=2.0)
            self.figures.restarts += 1
        else:
            filler = fill(self.fill_dir)
            time.sleep(3.0)
            if filler is not None:
                filler.unlink()
            self.figures.fills += 1
        return plan[1:]

    # -- checks --------------------------------------------------------------------
    def verify(self, export_dir: Path) -> Figures:
        """Count what the database holds, re-measure every recorded failure in a healthy
        environment (a failure that now measures fine was not the candidate's), check
        integrity and export every task."""
        from autosched.db import open_database

        f = self.figures
        failed = []
        for job in self.jobs:
            task = job.task()
            with open_database(job.url) as db:
                records = db.records(task_key=task.key)
            f.expected += job.trials
            f.found += len(records)
            f.duplicates += len(records) - len({r.candidate_key for r in records})
            for r in records:
                if not r.ok:
                    f.failures[r.result.error_kind] = f.failures.get(r.result.error_kind, 0) + 1
                    failed.append((task, r))
        f.poisoned = self._remeasure_fine(failed)
        for url in sorted({job.url for job in self.jobs}):
            f.integrity[url.split(":", 1)[0]] = _integrity(url)
        for n, job in enumerate(self.jobs):
            argv = [sys.executable, "-m", "autosched", "export", MATMUL, "--target", "llvm",
                    "--db", job.url, "-o", str(export_dir / f"lib{n}")]
            for a in job.args:
                argv += ["--arg", a]
            done = subprocess.run(argv, cwd=self.cwd, env=self.env, capture_output=True)
            f.exported += done.returncode == 0
        return f

    def _remeasure_fine(self, failed) -> int:
        if not failed:
            return 0
        from autosched.measure import MeasureInput, MeasureSettings
        from autosched.measure.factory import make_measurer
        from autosched.target import resolve_target
        from search_space import Candidate, generate_space

        target = resolve_target("llvm")
        inputs = [MeasureInput(task, target, c, generate_space(task, target).apply(c))
                  for task, c in ((t, Candidate.from_json(r.candidate)) for t, r in failed)]
        with make_measurer(MeasureSettings()) as measurer:
            return sum(res.ok for res in measurer.measure(inputs))


def _integrity(url: str) -> str:
    from autosched.db import open_database

    with open_database(url) as db:
        if url.startswith("sqlite"):
            return db.integrity_check()
        records, count = db.records(), db.count()
    unique = {(r.task_key, r.target_key, r.hardware_key, r.candidate_key) for r in records}
    return "ok" if len(unique) == len(records) == count else \
        f"{count} counted, {len(records)} listed, {len(unique)} unique"
