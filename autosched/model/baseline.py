"""Torch's own latency for a task, measured once and kept in the tuning database.

A baseline is an ordinary record of the task it times, so it lives beside the kernels'
records, travels with `db export/import` and is filtered like them by target, machine
and versions. Its candidate is not a schedule but a description of what was timed:

    {"baseline": "torch", "format": 1, "torch": "2.13.0+cpu", "threads": 2,
     "function": "aten_linear"}

On a CUDA target the candidate also says `"device": "cuda"` (threads 0): torch's call on
CUDA tensors, timed with CUDA events on the measuring stream with L2 flushed before each
call (`time_torch_cuda`, the kernels' own `measure/cuda/timing.py` harness). Such a
baseline is taken on the GPU machine, by `tune-model` there or, for a bundle, by
`python -m autosched.measure.bundle` there (which runs this module as a child:
`python -m autosched.model.baseline JOBS OUT`, see `main`); its torch is the GPU machine's,
so a CUDA baseline is found whatever torch this process has (the newest one wins).

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


def baseline_threads(target) -> int:
    """The threads torch gets when timed: as many as the kernels' thread pool."""
    import torch

    return int(target.config.get("num-cores") or torch.get_num_threads())


def baseline_key(task) -> str:
    return PREFIX + task.key


def _candidate(task, threads: int, device: str = "cpu",
               torch_version: str | None = None, outputs=()) -> dict:
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    out = {"baseline": "torch", "format": BASELINE_FORMAT, "torch": torch_version,
           "threads": int(threads), "function": task.workload}
    if device != "cpu":
        out["device"] = device
    if outputs:
        out["outputs"] = list(outputs)
    return out


def joint_outputs(tasks) -> tuple:
    """Where torch's one call computing the outputs of `tasks` (joint_calls.py) keeps its
    baseline: (the task of the first of their keys, sorted, under whose pseudo-task it is
    stored; the sorted keys, its candidate's `outputs`), the same whichever model or
    order named the call."""
    keys = sorted(t.key for t in tasks)
    return next(t for t in tasks if t.key == keys[0]), tuple(keys)


def device_of(target) -> str:
    """Where torch's baseline of a task on `target` runs: "cuda" or "cpu"."""
    return "cuda" if target.kind == "cuda" else "cpu"


def _candidate_key(candidate: dict) -> str:
    text = json.dumps(candidate, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def register(db, task) -> None:
    """Make the baseline's pseudo-task known to the database (once per task)."""
    db.register_task(dict(task.to_json(), key=baseline_key(task),
                          workload=PREFIX + task.workload))


def record_baseline(db, task, target, versions: dict, latencies, threads: int,
                    settings: dict | None = None, torch_version: str | None = None,
                    origin: dict | None = None, outputs=()) -> int | None:
    """Store torch's latencies (seconds, one per repeat) for `task`; returns the id.
    `torch_version` and `origin` (host, user, time) name where they were measured when
    that is not this process (a bundle's result). With `outputs` (`joint_outputs`) they
    are those of torch's one call computing the outputs of those tasks."""
    register(db, task)
    device = device_of(target)
    candidate = _candidate(task, 0 if device == "cuda" else threads, device, torch_version,
                           outputs)
    record = Record(task_key=baseline_key(task), workload=PREFIX + task.workload,
                    args=dict(task.args), target_key=target.key,
                    hardware=dict(target.fingerprint), hardware_key=target.hardware_key,
                    versions=dict(versions), candidate=candidate,
                    candidate_key=_candidate_key(dict(candidate, time=time.time())),
                    result=MeasureResult(tuple(float(x) for x in latencies)),
                    provenance=dict(provenance(settings), **(origin or {})))
    return db.add_records([record])[0]


def lookup(db, task, target, versions: dict, threads: int,
           outputs=()) -> Baseline | None:
    """The newest baseline of `task` measured here with this torch and thread count
    (on a CUDA target: the newest of this GPU, whatever torch measured it); with
    `outputs` (`joint_outputs`), that of torch's one call computing those outputs."""
    device = device_of(target)
    want = _candidate(task, threads, device, "" if device == "cuda" else None)
    want["outputs"] = list(outputs) if outputs else None
    if device == "cuda":  # measured where the model runs, by that machine's torch
        want = {k: v for k, v in want.items() if k not in ("torch", "threads")}
    found = None
    for rec in db.records(task_key=baseline_key(task), target_key=target.key,
                          hardware_key=target.hardware_key, ok_only=True):
        same = {k: rec.candidate.get(k) for k in want} == want \
            and rec.candidate.get("device", "cpu") == device
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


# ---------------------------------------------------------------- torch on the GPU

def random_inputs(specs, device: str) -> list:
    """Torch tensors of `specs` ((shape, dtype name) pairs, kernel order), seeded, on
    `device`: the inputs a baseline and a side-by-side timing run on."""
    import torch

    from ..torch.dispatch import torch_dtype

    g = torch.Generator().manual_seed(0)
    return [torch.randn(tuple(shape), generator=g, dtype=torch_dtype(dtype)).to(device)
            for shape, dtype in specs]


def twin_call(workload: str, params: dict):
    """The torch twin of `workload` at `params`, as a callable on kernel-ordered tensors."""
    from .workloads import WORKLOADS

    twin = WORKLOADS[workload]
    return lambda *tensors: twin.torch_call(tensors, params)


def joint_twin(members, device: str):
    """torch's one call computing the outputs of `members`, [(workload, params, input
    specs as (shape, dtype name) pairs)], on seeded tensors on `device`
    (`joint_calls.joint_call`), as a callable without arguments."""
    from .joint_calls import joint_call

    return joint_call([(w, dict(p), random_inputs(specs, device)) for w, p, specs in members])


def time_torch_cuda(funcs, inputs, settings) -> list[list[float]]:
    """`time_side_by_side` on the GPU: each callable (torch calls, or our torch ops, which
    launch on torch's current stream) run on CUDA tensors with the kernels' harness
    (`measure/cuda/timing.CudaTimer`: its stream made torch's current one, CUDA events
    around each call, L2 flushed before it per `settings.flush_l2`, `number` grown until
    a repeat lasts `min_repeat_ms`); the callables' repeats alternate. Per callable, its
    latencies (seconds per call, one per repeat)."""
    import torch
    import tvm_ffi

    from ..measure.cuda.timing import CudaTimer, repeat_latency

    index = torch.cuda.current_device()
    timer = CudaTimer(index, stream=settings.stream, flush_l2=settings.flush_l2)
    stream = (torch.cuda.ExternalStream(timer.stream) if timer.stream
              else torch.cuda.default_stream())
    dev = tvm_ffi.device("cuda", index)
    try:
        with torch.no_grad(), torch.cuda.stream(stream):
            calls = [_bound(f, inputs) for f in funcs]
            for call in calls:
                timer.warm_up(dev, call, settings.warmup)
            number = max(_cuda_number(timer, dev, call, settings) for call in calls)
            latencies = [[] for _ in calls]
            for _ in range(max(MIN_REPEATS, settings.repeat)):
                for out, call in zip(latencies, calls):
                    out.append(repeat_latency(timer.time_repeat(dev, call, number), number))
    finally:
        timer.close()
    return latencies


def _bound(func, inputs):
    return lambda: func(*inputs)


def _cuda_number(timer, dev, call, settings) -> int:
    """Calls per repeat for `call` to last `min_repeat_ms` (as `CudaTimer.measure`)."""
    from ..measure.cuda.timing import MAX_CALIBRATIONS, MAX_FLUSHED_NUMBER, MAX_NUMBER, next_number

    number, cap = max(1, settings.number), MAX_FLUSHED_NUMBER if timer.flush_bytes else MAX_NUMBER
    for _ in range(MAX_CALIBRATIONS):
        grown = next_number(number, sum(timer.time_repeat(dev, call, number)),
                            settings.min_repeat_ms, cap)
        if grown == number:
            break
        number = grown
    return number


def no_gpu_reason() -> str | None:
    """Why torch cannot time on a GPU in this process; None when it can."""
    try:
        import torch
    except ImportError as e:
        return f"torch is not importable here ({e})"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA GPU here"
    return None


def _torch_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.__version__


def time_jobs(jobs: list[dict], settings) -> dict:
    """Time torch for a bundle's baseline jobs on this machine's GPU (see
    `measure/bundle/baselines.py` for a job): {"torch": version or None, "error": why
    nothing was timed, or "results": {job id: {"latencies": [...]} or {"error": ...}}}."""
    why = no_gpu_reason()
    if why is not None:
        return {"torch": _torch_version(), "error": why}
    import torch

    def specs(inputs):
        return [(s["shape"], s["dtype"]) for s in inputs]

    results = {}
    for job in jobs:
        try:
            if "members" in job:  # torch's one call computing several outputs
                call, inputs = joint_twin([(m["workload"], m["params"], specs(m["inputs"]))
                                           for m in job["members"]], "cuda"), []
            else:
                call = twin_call(job["workload"], dict(job["params"]))
                inputs = random_inputs(specs(job["inputs"]), "cuda")
            results[job["id"]] = {"latencies": time_torch_cuda([call], inputs, settings)[0]}
        except Exception as e:  # this job's failure; the others are still timed
            text = str(e).strip().splitlines()
            results[job["id"]] = {"error": f"{type(e).__name__}: {text[0] if text else ''}"}
    return {"torch": torch.__version__, "results": results}


def main(argv: list[str] | None = None) -> int:
    """`python -m autosched.model.baseline JOBS.json OUT.json`: the measuring side of a
    bundle's baseline jobs, a child of `python -m autosched.measure.bundle` (which
    must not import this floor). JOBS holds {"jobs": [...], "settings": {...}}; OUT gets
    `time_jobs`'s answer."""
    import sys

    from ..measure.settings import MeasureSettings

    jobs_path, out_path = sys.argv[1:3] if argv is None else argv
    with open(jobs_path) as f:
        data = json.load(f)
    known = MeasureSettings.__dataclass_fields__
    settings = MeasureSettings(**{k: v for k, v in data["settings"].items() if k in known})
    answer = time_jobs(data["jobs"], settings)
    with open(out_path, "w") as f:
        json.dump(answer, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
