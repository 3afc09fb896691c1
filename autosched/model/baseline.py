"""Torch's own latency for a task, measured once and kept in the tuning database.

A baseline is an ordinary record of the task it times, so it lives beside the kernels'
records, travels with `db export/import` and is filtered like them by target, machine
and versions. Its candidate is not a schedule but a description of what was timed:

    {"baseline": "torch", "format": 1, "torch": "2.13.0+cpu", "threads": 2,
     "function": "aten_linear"}

The search never proposes it and `Database.best` never returns it: it is stored under its
own task key (the task key prefixed with ``torch:``), registered as workload
``torch:<workload>``, so exports, warm starts and cost-model training (which look tasks
up by workload name) do not mistake it for a kernel. A baseline applies only with the
same torch version and thread count; the newest such record wins (a re-measurement
replaces an older one). What is compared with a kernel's median is torch's best repeat
(see `lookup`).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

from ..db.record import Record, provenance
from ..results import MeasureResult

BASELINE_FORMAT = 1
PREFIX = "torch:"
MIN_REPEATS = 7


@dataclass(frozen=True)
class Baseline:
    """Torch's measured latency (its best repeat, seconds) for one task, and its record
    id (the record keeps every repeat)."""

    latency_s: float
    record_id: int | None


def baseline_key(task) -> str:
    return PREFIX + task.key


def _candidate(task, threads: int) -> dict:
    import torch

    return {"baseline": "torch", "format": BASELINE_FORMAT, "torch": torch.__version__,
            "threads": int(threads), "function": task.workload}


def _candidate_key(candidate: dict) -> str:
    text = json.dumps(candidate, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def register(db, task) -> None:
    """Make the baseline's pseudo-task known to the database (once per task)."""
    db.register_task(dict(task.to_json(), key=baseline_key(task),
                          workload=PREFIX + task.workload))


def record_baseline(db, task, target, versions: dict, latencies, threads: int,
                    settings: dict | None = None) -> int | None:
    """Store torch's latencies (seconds, one per repeat) for `task`; returns the id."""
    register(db, task)
    candidate = _candidate(task, threads)
    record = Record(task_key=baseline_key(task), workload=PREFIX + task.workload,
                    args=dict(task.args), target_key=target.key,
                    hardware=dict(target.fingerprint), hardware_key=target.hardware_key,
                    versions=dict(versions), candidate=candidate,
                    candidate_key=_candidate_key(dict(candidate, time=time.time())),
                    result=MeasureResult(tuple(float(x) for x in latencies)),
                    provenance=provenance(settings))
    return db.add_records([record])[0]


def lookup(db, task, target, versions: dict, threads: int) -> Baseline | None:
    """The newest baseline of `task` measured here with this torch and thread count."""
    want = _candidate(task, threads)
    found = None
    for rec in db.records(task_key=baseline_key(task), target_key=target.key,
                          hardware_key=target.hardware_key, ok_only=True):
        same = {k: rec.candidate.get(k) for k in want} == want
        if same and rec.versions.get("tvm") == versions.get("tvm"):
            found = rec  # insertion order: the last one is the newest
    # torch's best repeat, not the median: on a busy machine one of torch's threads is
    # often descheduled for a whole time slice, and a baseline made slow by that would
    # hand operators to kernels that are slower on a quiet machine; the kernel's side is
    # its median, so the comparison errs toward torch
    return Baseline(min(found.result.latencies), found.id) if found is not None else None


def time_torch(func, inputs, settings, threads: int) -> list[float]:
    """Latencies of `func(*inputs)` (seconds per call, one per repeat) timed as the
    runner times kernels: warm-up calls, then calls added until one repeat lasts
    `min_repeat_ms`, with torch limited to `threads` threads. At least MIN_REPEATS
    repeats: a baseline is measured once and decides for every later export, so one
    stalled repeat (a busy machine deschedules one of torch's threads) must not be the
    median."""
    return time_side_by_side([func], inputs, settings, threads)[0]


def time_side_by_side(funcs, inputs, settings, threads: int) -> list[list[float]]:
    """`time_torch` of several callables on the same inputs, called in turn, one call of
    each after the other, every call timed on its own: so each runs as a model runs it,
    right after the others (a kernel after torch's operator, whose threads may still be
    spinning), and a machine that slows down or speeds up meanwhile weighs on all of them
    alike. Per callable, its latencies (seconds per call, one per repeat: the calls of a
    repeat summed)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            number = max(_calls_per_repeat(f, inputs, settings) for f in funcs)
            latencies = [[] for _ in funcs]
            for _ in range(max(MIN_REPEATS, settings.repeat)):
                for out, seconds in zip(latencies, _repeat_in_turn(funcs, inputs, number)):
                    out.append(seconds)
    finally:
        torch.set_num_threads(previous)
    return latencies


def _repeat_in_turn(funcs, inputs, number: int) -> list[float]:
    """Seconds per call of each callable over `number` rounds of one call of each."""
    clock = time.perf_counter
    spent = [0.0] * len(funcs)
    for _ in range(number):
        for i, f in enumerate(funcs):
            start = clock()
            f(*inputs)
            spent[i] += clock() - start
    return [t / number for t in spent]


def _calls_per_repeat(func, inputs, settings) -> int:
    """After the warm-up, the calls one repeat needs to last `min_repeat_ms`."""
    for _ in range(max(1, settings.warmup)):
        func(*inputs)
    number = max(1, settings.number)
    while _repeat(func, inputs, number) * number * 1e3 < settings.min_repeat_ms \
            and number < 1 << 20:
        number *= 2
    return number


def _repeat(func, inputs, number: int) -> float:
    """Seconds per call over `number` calls."""
    start = time.perf_counter()
    for _ in range(number):
        func(*inputs)
    return (time.perf_counter() - start) / number
