"""What the user sees while tuning: a progress line, a final table, and a log file."""
from __future__ import annotations

import json
import math
import os
import sys
import time

from ..tables import format_table, latency_label
from ..tuner import Callback


class ProgressBar(Callback):
    """One self-rewriting line on stderr: trials, best GFLOP/s so far, failures, time
    spent and an estimate of the time left. The estimate is the run's rate of trials so
    far applied to the trials left (the first line comes after the first batch), and with a
    time budget never more than what is left of it: no batch starts once it is spent.
    `clock` (seconds) is injectable for tests; the time budget counts from construction,
    made just before the run starts."""

    def __init__(self, stream=None, width: int = 24, time_budget_s: float | None = None,
                 clock=time.perf_counter):
        self.stream = stream or sys.stderr
        self.width = width
        self.clock = clock
        self.start = clock()
        self.deadline = None if time_budget_s is None else self.start + time_budget_s
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._shown = 0  # length of the line on screen, to blank what a shorter one leaves

    def on_start(self, states, budget):
        # No line yet: a run that stops before its first batch (bad input the runner
        # finds, a machine's fault) says so in one line of its own.
        self.start = self.clock()

    def on_batch(self, states, done, budget):
        now = self.clock()
        eta = None
        if done < budget:
            left = (now - self.start) / done * (budget - done) if done else math.inf
            if self.deadline is not None and left >= self.deadline - now:
                eta = f"~{duration(max(0.0, self.deadline - now))} left (time budget)"
            elif math.isfinite(left):
                eta = f"~{duration(left)} left"
            else:
                eta = "estimating"
        self._show(states, done, budget, eta, now)

    def _show(self, states, done, budget, eta, now=None):
        filled = min(self.width, int(self.width * done / budget)) if budget else self.width
        gflops = max((s.best_gflops for s in states), default=0.0)
        failures = sum(sum(s.failures.values()) for s in states)
        spent = duration((self.clock() if now is None else now) - self.start)
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{budget} trials | "
                f"best {gflops:.1f} GFLOP/s | failures {failures} | {spent}"
                + (f", {eta}" if eta else ""))
        if self.tty:
            self.stream.write("\r" + line.ljust(self._shown))
            self._shown = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def on_end(self, result):
        if self.tty and self._shown:
            self.stream.write("\n")


def duration(seconds: float) -> str:
    """Seconds for a person: 41s, 1m20s, 2h05m."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class JsonLog(Callback):
    """Every measurement as one JSON line in `<work_dir>/tune-<time>.log`, a file of
    this run's own (`tune-<time>-2.log` when another run started in the same second)."""

    def __init__(self, work_dir: str):
        os.makedirs(work_dir, exist_ok=True)
        stamp = time.strftime("tune-%Y%m%d-%H%M%S")
        for n in range(1, 1000):
            self.path = os.path.join(work_dir, f"{stamp}.log" if n == 1 else f"{stamp}-{n}.log")
            try:
                self.file = open(self.path, "x", encoding="utf-8")
                break
            except FileExistsError:
                continue
        else:
            raise RuntimeError(f"cannot make a new log file in {work_dir}")

    def on_result(self, state, candidate, result):
        self.file.write(json.dumps({"time": time.time(), "task": state.task.name,
                                    "task_key": state.task.key, "candidate": candidate.to_json(),
                                    "result": result.to_json()}) + "\n")
        self.file.flush()

    def on_end(self, result):
        self.file.close()


class DryRunLog(Callback):
    """What a dry run says on stderr: each task as it starts, its first errors after."""

    def __init__(self, count: int, stream=None):
        self.count = count
        self.stream = stream or sys.stderr

    def on_dry_run_start(self, task, target):
        detail = target.config.get("arch") or target.config.get("mcpu")
        print(f"dry run: {task.name}: {self.count} candidates on {target.kind} ({detail})",
              file=self.stream)

    def on_dry_run(self, report):
        for msg in report.first_errors:
            print(f"  {msg}", file=self.stream)


def dry_run_table(reports) -> str:
    """One row a task: how many candidates were generated, fit the limits, compiled."""
    rows = [(r.task.name, r.generated, r.passed_check, r.compiled,
             f"{100 * r.compile_rate:.0f}%", f"{r.seconds:.1f}s") for r in reports]
    return format_table(("task", "generated", "passed limits", "compiled", "rate", "time"),
                        rows)


def summary_table(result) -> str:
    """The final per-task table: task, FLOPs, best latency, GFLOP/s, trials, failures."""
    header = ("task", "GFLOP", "best latency", "GFLOP/s", "trials", "failures")
    rows = []
    for s in result.tasks:
        fails = ", ".join(f"{k}={v}" for k, v in sorted(s.failures.items())) or "0"
        rows.append((s.task.name, f"{s.task.flops / 1e9:.3f}", latency_label(s.best_latency),
                     f"{s.best_gflops:.1f}", str(s.trials), fails))
    return format_table(header, rows)

