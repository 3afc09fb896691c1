"""Starting a pipeline plan's stage processes with torchrun, and what passes between them.

The launcher and its workers (worker.py) agree on a work directory:

    plan.json           the plan document, as given (every worker reads it)
    stage<r>.json       stage r's measurements (worker.py writes it, atomically, last;
                        its keys: worker._result)
    stage<r>.npz        stage r's parameter gradients by qualified name (numpy, no pickle)
    stage<r>.error      one JSON line when stage r failed: its kind and message
    torchrun.log        torchrun's own output (its summary names a killed process)

`launch()` starts one process per stage under `python -m torch.distributed.run` (torch's
elastic agent: a worker that dies makes the agent stop the others), waits under a
wall-clock limit, and turns any failure into one line naming the stage and why
(StageFailure, or UserError when a stage refused its input). `read_plan()` checks the
plan document before any process starts, so a malformed plan costs no process.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ...errors import UserError
from .document import INTERLEAVED, SCHEDULE, check_pipeline_header

SCHEDULES = (SCHEDULE, INTERLEAVED)
# torchrun's failure summary: one block per failed process, "rank : R" then "exitcode : C"
_FAILED = re.compile(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


class StageFailure(RuntimeError):
    """A stage process failed, was killed, or the run outlived its limit (one line)."""

    def __init__(self, message: str, stage: int | None = None):
        super().__init__(message)
        self.stage = stage


@dataclass(frozen=True)
class RunPlan:
    """The parts of a pipeline plan document that running it needs."""

    stages: int
    micro_batches: int
    schedule: str
    layers: tuple            # layer names in model order (runtime/layers.py's names)
    boundaries: tuple        # stage s runs layers[boundaries[s]:boundaries[s + 1]]
    actions: tuple           # one action name per layer, in model order
    transfers: tuple         # BPipe transfers: {"from", "to", "micro_batches", ...}
    timing: tuple = ()       # per stage (forward_s, backward_s, bytes, send_s) as
                             # planned; () when the document predicts none
    virtual: int = 1         # interleaved-1F1B: chunks per rank (boundaries: S * v
                             # chunks, chunk c on rank c % S)


def _need(doc: dict, key: str, kind, what: str):
    value = doc.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise UserError(f"pipeline plan: {key!r} must be {what}, got {value!r}"[:200])
    return value


def read_plan(doc) -> RunPlan:
    """The plan document `doc` (a dict) checked and read; any fault is one UserError line.
    Transfers are checked for stages and micro-batches that exist (worker.py runs
    them through parking.py)."""
    from ..actions import ACTIONS

    from .interleaved_schedule import interleaving_problem

    check_pipeline_header(doc)
    stages = _need(doc, "stages", int, "a positive integer")
    micro = _need(doc, "micro_batches", int, "a positive integer")
    if stages < 1 or micro < stages:
        raise UserError(f"pipeline plan: {stages} stages and {micro} micro-batches; 1F1B "
                        "needs at least one stage and at least as many micro-batches")
    schedule = doc.get("schedule")
    if schedule not in SCHEDULES:
        raise UserError(f"pipeline plan: schedule {schedule!r} is not one of {SCHEDULES}")
    virtual = doc.get("virtual_stages", 1)
    if (schedule == SCHEDULE) != (virtual == 1) or not isinstance(virtual, int):
        raise UserError(f"pipeline plan: schedule {schedule} with {virtual!r} virtual "
                        "stages per stage (1F1B: 1, interleaved: 2 or more)")
    problem = interleaving_problem(stages, virtual, micro) if virtual > 1 else None
    if problem or (virtual > 1 and doc.get("transfers")):
        raise UserError(f"pipeline plan: {problem or 'an interleaved plan has no transfers'}")
    chunks = stages * virtual
    layers = _need(doc, "layers", list, "a list of layer names")
    if not layers or not all(isinstance(n, str) for n in layers) or len(set(layers)) < len(layers):
        raise UserError("pipeline plan: 'layers' must be distinct layer names")
    bounds = _need(doc, "boundaries", list, "a list of layer indices")
    if (len(bounds) != chunks + 1 or bounds[0] != 0 or bounds[-1] != len(layers)
            or any(not isinstance(b, int) or isinstance(b, bool) for b in bounds)
            or any(b >= c for b, c in zip(bounds, bounds[1:]))):
        raise UserError(f"pipeline plan: boundaries {bounds} must rise from 0 to "
                        f"{len(layers)} in {chunks} steps (every "
                        f"{'stage' if virtual == 1 else 'chunk'} runs a layer)")
    actions = _need(doc, "actions", dict, "a mapping from layer name to action")
    unknown = sorted(set(actions) - set(layers))
    missing = [n for n in layers if n not in actions]
    if unknown or missing:
        raise UserError(f"pipeline plan: actions name layers {unknown[:3]} not in 'layers'"
                        if unknown else f"pipeline plan: no action for layer {missing[0]}")
    for name in layers:
        action = ACTIONS.get(actions[name])
        if action is None:
            raise UserError(f"pipeline plan: layer {name}: unknown action {actions[name]!r}")
        if action.offload:
            raise UserError(f"pipeline plan: layer {name}: {action.name} is not run in a "
                            "pipeline stage (host offload is a single-device action)")
    transfers = doc.get("transfers") or []
    if not isinstance(transfers, list):
        raise UserError("pipeline plan: 'transfers' must be a list")
    parked: set = set()
    for t in transfers:
        _check_transfer(t, stages, micro, parked)
    return RunPlan(stages, micro, schedule, tuple(layers), tuple(bounds),
                   tuple(actions[n] for n in layers), tuple(transfers),
                   _timing(doc, stages) if virtual == 1 else (), virtual)


def _timing(doc: dict, stages: int) -> tuple:
    """The planned per-stage costs (predicted.stages), or () where the document has
    none in full (a plan written by hand): parking.py then follows the schedule's
    structure alone."""
    rows = (doc.get("predicted") or {}).get("stages") if isinstance(
        doc.get("predicted"), dict) else None
    keys = ("forward_s", "backward_s", "saved_bytes_per_micro_batch", "send_s")
    if not isinstance(rows, list) or len(rows) != stages or not all(
            isinstance(r, dict) and all(isinstance(r.get(k), (int, float)) for k in keys)
            for r in rows):
        return ()
    return tuple(tuple(float(r[k]) for k in keys) for r in rows)


def _check_transfer(t, stages: int, micro: int, parked: set) -> None:
    """A transfer names two different stages and micro-batches that exist, each parked
    once by its stage."""
    ok = isinstance(t, dict) and all(isinstance(t.get(k), int) for k in ("from", "to"))
    mbs = t.get("micro_batches") if ok else None
    if not ok or not isinstance(mbs, list) or not all(isinstance(m, int) for m in mbs):
        raise UserError(f"pipeline plan: transfer {t!r} needs integer 'from', 'to' and a "
                        "list of 'micro_batches'"[:200])
    src, dst = t["from"], t["to"]
    if not (0 <= src < stages and 0 <= dst < stages) or src == dst:
        raise UserError(f"pipeline plan: transfer {src} -> {dst} must join two different "
                        f"stages of 0..{stages - 1}")
    for m in mbs:
        if not 0 <= m < micro or (src, m) in parked:
            raise UserError(f"pipeline plan: transfer {src} -> {dst}: micro-batch {m} is "
                            f"parked twice or is not one of 0..{micro - 1}")
        parked.add((src, m))


def check_fractions(fractions, stages: int) -> list[float]:
    """One activation_memory_budget fraction in [0, 1] per stage, or a UserError line."""
    fractions = list(fractions)
    if len(fractions) != stages or not all(
            isinstance(f, (int, float)) and not isinstance(f, bool) and 0 <= f <= 1
            for f in fractions):
        raise UserError(f"compile budgets {fractions} must be {stages} fractions in [0, 1], "
                        "one per stage")
    return [float(f) for f in fractions]


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the whole file or none."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def launch(model_file: str, plan_doc: dict, workdir, *, seed: int = 0, threads: int = 1,
           limit_s: float = 300.0, comm_timeout_s: float = 60.0, warmup: int = 0,
           bound_parks: bool = True, extra_env: dict | None = None,
           compile_budgets=None, device: str = "cpu") -> list[dict]:
    """Run `plan_doc` on `model_file` with one process per stage; each stage's measurements
    (its stage<r>.json), in stage order. Gradients stay in workdir (stage<r>.npz).

    threads: torch threads per stage process. limit_s: wall-clock limit of the whole run;
    comm_timeout_s: gloo's timeout for one collective or transfer (a stage waiting on a
    peer that hangs fails after it). warmup: unmeasured steps before the measured one
    (torch's first step also infers shapes and opens the links: its time is not a
    step's). bound_parks: a stage's forward waits for the parks the plan has ended by
    its start (parking.py), so its activation memory holds whatever the link's speed.
    extra_env: added to the workers' environment. compile_budgets: one
    activation_memory_budget fraction per stage, each stage's layers run under
    torch.compile at its own (compiled_stage.py); None runs them eager. Inductor then
    compiles on the stage's own thread (TORCHINDUCTOR_COMPILE_THREADS=1, unless
    extra_env says otherwise): the stages share the machine's cores already. device:
    "cpu" or "cuda" (placement.py; "cuda" where torch sees no GPU is a UserError here,
    before any process starts).
    """
    from .placement import check_device

    plan = read_plan(plan_doc)
    check_device(device)
    budgets = check_fractions(compile_budgets, plan.stages) if compile_budgets is not None \
        else None
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("stage*.*"):
        old.unlink()
    atomic_write(work / "plan.json", json.dumps(plan_doc).encode())
    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads),
           **({"TORCHINDUCTOR_COMPILE_THREADS": "1"} if budgets else {}), **(extra_env or {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(plan.stages), "--max-restarts", "0",
           "--monitor-interval", "0.2", "-m", "autosched.runtime.pipeline.worker",
           "--model-file", str(Path(model_file).resolve()), "--workdir", str(work.resolve()),
           "--seed", str(seed), "--threads", str(threads),
           "--comm-timeout-s", str(comm_timeout_s), "--warmup", str(warmup),
           "--device", device,
           *(["--bound-parks"] if bound_parks else []),
           *(["--compile-budgets", ",".join(repr(f) for f in budgets)] if budgets else [])]
    with open(work / "torchrun.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise StageFailure(f"the pipeline run outlived its {limit_s:g} s wall-clock "
                               f"limit (stages still running: {_unfinished(work, plan)})")
    if rc != 0:
        _raise_failure(work, plan, rc)
    results = []
    for stage in range(plan.stages):
        path = work / f"stage{stage}.json"
        if not path.exists():
            raise StageFailure(f"stage {stage} ended without writing its results", stage)
        results.append(json.loads(path.read_text()))
    return results


def _unfinished(work: Path, plan: RunPlan) -> str:
    left = [str(s) for s in range(plan.stages) if not (work / f"stage{s}.json").exists()]
    return ", ".join(left) or "none"


def _raise_failure(work: Path, plan: RunPlan, rc: int):
    """One line for a failed run: the stage whose own fault it was, preferred over stages
    that only saw a peer vanish (kind "peer"), then a stage that died without a word
    (killed: torchrun's summary has its exit code), then the earliest peer error."""
    errors = {}
    for stage in range(plan.stages):
        path = work / f"stage{stage}.error"
        if path.exists():
            errors[stage] = json.loads(path.read_text())
    own = sorted((e["time"], s) for s, e in errors.items() if e["kind"] != "peer")
    if own:
        stage = own[0][1]
        error = errors[stage]
        message = f"stage {stage}: {error['message']}"
        if error["kind"] == "user":
            raise UserError(message)
        raise StageFailure(message, stage)
    log = (work / "torchrun.log").read_text(errors="replace")
    summary = log[log.find("Root Cause"):] if "Root Cause" in log else ""
    for rank, code in _FAILED.findall(summary):
        stage, code = int(rank), int(code)
        if stage not in errors:
            raise StageFailure(f"stage {stage} process {_how(code)} (no error reported "
                               "by the stage; the others were stopped)", stage)
    if errors:
        stage = min((e["time"], s) for s, e in errors.items())[1]
        raise StageFailure(f"stage {stage}: {errors[stage]['message']}", stage)
    raise StageFailure(f"torchrun exited with code {rc} and no stage reported an error "
                       f"(see {work / 'torchrun.log'})")


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
