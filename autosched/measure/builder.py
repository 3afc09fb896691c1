"""LocalBuilder: compile candidates to shared libraries in parallel worker processes.

Each of `settings.build_workers` slots holds one long-lived build worker (see
`worker.py`). Modules travel to it as `tvm.ir.save_json` text and the worker answers
with the path of the exported `.so`. A build that runs past `settings.build_timeout`
has its worker killed (with any compiler it started) and is reported as
`build_timeout`; a worker that dies mid-build is `build_error` with how it died; a
compiler exception is `build_error` with its message. Later builds get a fresh worker.

`build(inputs)` blocks; `submit(inputs)` hands the builds to the idle workers and
returns at once, and `collect(batch)` waits for that batch: the workers compile in
their own processes meanwhile, so a caller can run the previous batch (see
`factory.BuildRunMeasurer.measure_stream`). Jobs beyond the idle workers wait here
until the next `collect`. A build's seconds and span are the worker's own, so a reply
read late still times the build alone; one that took longer than the timeout is a
`build_timeout` like one killed at it.

A failure that is the machine's (no compiler, a broken linker, a build folder that is
gone, full or read-only; decided in `faults.py`, if need be by building the task's
default candidate the same way) is raised as `InfrastructureError` for the whole batch,
never returned as a candidate's `build_error`. So is a worker that cannot start after
`_MAX_START_FAILURES` tries with backoff.
"""
from __future__ import annotations

import os
import select
import shutil
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, field

from ..errors import InfrastructureError
from . import faults
from .base import BuildArtifact
from .settings import MeasureInput, MeasureSettings
from .worker import STARTUP_TIMEOUT, WorkerDied, WorkerProcess, WorkerStartError

# Test-only fault injection: an IRModule attribute read by the build worker.
# "sleep:<seconds>" sleeps before compiling (a hanging build); "crash" kills the worker
# with SIGSEGV (a crashing compiler). Search spaces never set it.
TEST_FAULT_ATTR = "autosched.test_only.build_fault"
_MAX_START_FAILURES = 3


@dataclass(eq=False)
class BuildBatch:
    """The builds of one `submit`: an artifact per input once collected."""

    inputs: list[MeasureInput]
    artifacts: list[BuildArtifact | None]
    left: int = 0              # builds not finished yet
    cancelled: bool = False    # nobody collects it: its libraries are deleted as they come
    verdicts: dict[int, tuple[faults.Verdict, str]] = field(default_factory=dict)


@dataclass
class _Slot:
    worker: WorkerProcess | None = None
    job: tuple[BuildBatch, int, dict] | None = None
    deadline: float = 0.0
    started: float = 0.0
    start_failures: int = 0


class LocalBuilder:
    """Builds `MeasureInput.mod` for `MeasureInput.target` into `<folder>/builds/*.so`,
    worker logs in `<folder>/workers/`. `folder` is the run's own (`scratch.RunFolder`):
    `close()` removes `builds/`, which no other run may be using. The files live until
    the caller deletes them or `close()` removes the folder. `python` is the interpreter
    the build workers run (a wrapper may set limits)."""

    def __init__(self, settings: MeasureSettings, folder: str, python: str = sys.executable):
        self.settings = settings
        self.python = python
        self.out_dir = os.path.join(folder, "builds")
        self.log_dir = os.path.join(folder, "workers")
        os.makedirs(self.out_dir, exist_ok=True)
        self._slots = [_Slot() for _ in range(max(1, settings.build_workers))]
        self._jobs: deque[tuple[BuildBatch, int, dict]] = deque()

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the live build workers (for diagnostics)."""
        return [s.worker.pid for s in self._slots if s.worker is not None]

    def build(self, inputs: list[MeasureInput]) -> list[BuildArtifact]:
        """One artifact per input, in order. Never raises for a candidate's failure;
        raises InfrastructureError (and keeps no library of the batch) for the machine's."""
        return self.collect(self.submit(inputs))

    def submit(self, inputs: list[MeasureInput], first: bool = False) -> BuildBatch:
        """Start building `inputs` (before the batches already queued when `first`) and
        return without waiting; `collect` the batch, or `cancel` it."""
        batch = BuildBatch(list(inputs), [None] * len(inputs))
        jobs = []
        for i, inp in enumerate(inputs):
            try:
                jobs.append((batch, i, self._request(inp)))
            except Exception as e:  # the module cannot even be serialised
                batch.artifacts[i] = BuildArtifact(None, "build_error",
                                                   f"cannot serialise module: {e}")
        batch.left = len(jobs)
        if first:
            self._jobs.extendleft(reversed(jobs))
        else:
            self._jobs.extend(jobs)
        try:
            self._dispatch()
        except BaseException:
            self.cancel(batch)
            raise
        return batch

    def collect(self, batch: BuildBatch) -> list[BuildArtifact]:
        """Wait for `batch`'s builds: one artifact per input, in order (see `build`)."""
        try:
            self._complete(batch)
            machine = next((v for v, _ in batch.verdicts.values()
                            if v.side == faults.MACHINE), None)
            if machine is None:
                machine = self._probe(batch.inputs, {i: stage for i, (v, stage)
                                                     in batch.verdicts.items()
                                                     if v.side == faults.UNSURE})
        except BaseException:
            self.cancel(batch)
            raise
        if not self._jobs and not any(s.job for s in self._slots):
            self._settle()
        if machine is not None:
            self.cancel(batch)
            raise InfrastructureError(machine.cause, machine.remedy)
        return batch.artifacts

    def cancel(self, batch: BuildBatch) -> None:
        """Give up `batch`: its queued builds are dropped, its libraries deleted (those
        still being built, when their worker answers)."""
        batch.cancelled = True
        self._jobs = deque(j for j in self._jobs if j[0] is not batch)
        for art in batch.artifacts:
            if art is not None:
                _unlink(art.path)

    def _complete(self, batch: BuildBatch) -> None:
        while batch.left:
            self._dispatch()
            self._wait()

    def _probe(self, inputs: list[MeasureInput], unsure: dict[int, str]):
        """Build the default candidate of each task with a doubtful failure: the
        machine's Verdict when that fails too, else None (the candidates' fault)."""
        probed = set()
        for index, stage in unsure.items():
            inp = inputs[index]
            if inp.task.key in probed:
                continue
            probed.add(inp.task.key)
            baseline = inp.task.mod if inp.baseline is None else inp.baseline
            probe = self.submit([MeasureInput(inp.task, inp.target, None, baseline)],
                                first=True)
            self._complete(probe)
            (art,) = probe.artifacts
            _unlink(art.path)
            if art.ok or art.error_kind == "build_timeout":
                continue  # it builds (or proves nothing): the candidate's own failure
            own = probe.verdicts.get(0)
            if own is not None and own[0].side == faults.MACHINE:
                return own[0]
            return faults.judge_probe(art.error_msg, own[1] if own else stage,
                                      inp.target.kind)
        return None

    def _settle(self) -> None:
        """Let workers still importing TVM finish now, so that they do not load the
        CPU while the runner times kernels."""
        for slot in self._slots:
            if slot.worker is not None and not slot.worker.ready:
                try:
                    slot.worker.wait_ready(max(1.0, slot.deadline - time.monotonic()))
                except WorkerStartError:
                    slot.worker = None  # wait_ready killed it; the next build retries

    def _request(self, inp: MeasureInput) -> dict:
        import tvm

        mod = inp.mod if isinstance(inp.mod, tvm.IRModule) else tvm.IRModule({"main": inp.mod})
        out = os.path.join(self.out_dir, f"{uuid.uuid4().hex}.so")
        return {"mod": tvm.ir.save_json(mod), "target": inp.target.config, "out": out,
                "kind": inp.target.kind}

    def _dispatch(self) -> None:
        jobs = self._jobs
        now = time.monotonic()
        free = sum(1 for s in self._slots if s.worker is not None and s.job is None)
        for slot in self._slots:
            if slot.worker is None and len(jobs) > free:  # start only the workers needed
                try:
                    slot.worker = WorkerProcess("build", self.log_dir, self.python)
                except WorkerStartError as e:
                    self._start_failed(slot, e.cause)
                    continue
                slot.deadline = now + STARTUP_TIMEOUT
                free += 1
            if slot.worker and slot.worker.ready and slot.job is None and jobs:
                slot.job = jobs.popleft()
                slot.started = now
                slot.deadline = now + self.settings.build_timeout
                try:
                    slot.worker.send(slot.job[2])
                except WorkerDied as e:
                    self._finish(slot, "build_error", f"build worker died: {e}", judged=True)

    def _wait(self) -> None:
        waiting = [s for s in self._slots if s.worker and (s.job or not s.worker.ready)]
        if not waiting:
            return
        timeout = max(0.0, min(s.deadline for s in waiting) - time.monotonic())
        select.select([s.worker for s in waiting], [], [], timeout)
        for slot in waiting:
            self._poll(slot)

    def _poll(self, slot: _Slot) -> None:
        try:
            reply = slot.worker.poll_reply()
        except WorkerDied as e:
            if slot.job:
                self._finish(slot, "build_error", f"build worker {e}", judged=True)
            else:
                self._start_failed(slot, str(e))
            return
        if reply is None:
            if time.monotonic() < slot.deadline:
                return
            if slot.job:
                self._finish(slot, "build_timeout", self._timeout_msg())
            else:
                self._start_failed(slot, f"no answer within {STARTUP_TIMEOUT:g}s")
        elif not slot.worker.ready:
            slot.worker.ready = bool(reply.get("ready"))
            slot.start_failures = 0
        else:
            (batch, index, request), slot.job = slot.job, None
            seconds = float(reply.get("seconds", time.monotonic() - slot.started))
            span = (reply["started"], reply["finished"]) if "started" in reply \
                else (slot.started, time.monotonic())
            if seconds > self.settings.build_timeout:  # answered after its deadline
                _unlink(request["out"])
                art = BuildArtifact(None, "build_timeout", self._timeout_msg(), seconds, span)
            elif reply.get("ok"):
                art = BuildArtifact(request["out"], build_seconds=seconds, span=span)
            else:
                art = BuildArtifact(None, "build_error", reply.get("error", "?"), seconds, span)
                verdict = (faults.Verdict(faults.MACHINE, reply["machine"], reply["remedy"])
                           if reply.get("machine") else
                           faults.judge_reply(reply, self.out_dir, request["kind"]))
                batch.verdicts[index] = (verdict, reply.get("stage", "compile"))
            self._done(batch, index, art)

    def _timeout_msg(self) -> str:
        return f"build did not finish within {self.settings.build_timeout:g}s"

    def _done(self, batch: BuildBatch, index: int, art: BuildArtifact) -> None:
        batch.artifacts[index] = art
        batch.left -= 1
        if batch.cancelled:
            _unlink(art.path)

    def _finish(self, slot: _Slot, kind: str, msg: str, judged: bool = False) -> None:
        """Record a failure of the slot's job and replace its worker; `judged`: a death
        whose cause may be the machine's (a timeout is always the candidate's)."""
        (batch, index, request), slot.job = slot.job, None
        now = time.monotonic()
        if judged:
            batch.verdicts[index] = (faults.judge_death(msg, self.out_dir), "export")
        slot.worker.kill()
        slot.worker = None
        _unlink(request["out"])  # a half-written library
        self._done(batch, index, BuildArtifact(None, kind, msg, now - slot.started,
                                               (slot.started, now)))

    def _start_failed(self, slot: _Slot, why: str) -> None:
        """Retry a worker that did not start, with backoff; InfrastructureError when it
        never does (a broken interpreter or environment, not any candidate's fault)."""
        tail = ""
        if slot.worker is not None:
            tail = slot.worker.log_tail()
            slot.worker.kill()
        slot.worker = None
        slot.start_failures += 1
        if slot.start_failures >= _MAX_START_FAILURES:
            detail = " ".join(f"{why}; {tail}".split())[-400:] if tail else why
            raise InfrastructureError(
                f"the build worker failed to start {slot.start_failures} times ({detail})",
                f"check that `{self.python} -c 'import tvm, autosched'` works in this "
                "environment, then rerun")
        time.sleep(0.5 * 2 ** (slot.start_failures - 1))

    def close(self) -> None:
        """Kill the workers and delete every library this builder wrote."""
        for slot in self._slots:
            if slot.worker:
                slot.worker.kill()
            slot.worker, slot.job = None, None
        self._jobs.clear()
        shutil.rmtree(self.out_dir, ignore_errors=True)


# ----------------------------------------------------------------- worker side


def _inject_fault(fault: str) -> None:
    import signal

    if fault.startswith("sleep:"):
        time.sleep(float(fault.split(":", 1)[1]))
    elif fault == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)


def build_job(request: dict) -> dict:
    """In the build worker: JSON module -> compiled, exported `.so`, with the build's
    `seconds` and its span (`started`, `finished`: this machine's monotonic clock, which
    every process shares). A failure says at which stage (`compile` in TVM, `export`:
    linking) and, for linking, the evidence `faults.judge_reply` weighs: the compiler
    found here, the OSError's errno and file. CUDA device code is made here
    (`cuda.compiler.build_cuda`); a fault of the machine found there comes back as
    `machine` and `remedy`, raised for the whole batch."""
    started = time.monotonic()
    reply = _build(request)
    finished = time.monotonic()
    return dict(reply, seconds=finished - started, started=started, finished=finished)


def _build(request: dict) -> dict:
    import tvm

    from .worker import error_text

    try:
        mod = tvm.ir.load_json(request["mod"])
        if TEST_FAULT_ATTR in mod.attrs:
            _inject_fault(str(mod.attrs[TEST_FAULT_ATTR]))
            mod = mod.without_attr(TEST_FAULT_ATTR)
        exe = _compile(mod, request)
    except InfrastructureError as e:  # the machine's fault, whichever candidate it met
        return {"ok": False, "stage": "compile", "error": str(e), "machine": e.cause,
                "remedy": e.remedy}
    except Exception as e:
        return {"ok": False, "stage": "compile", "error": _compile_error_text(e)}
    try:
        exe.export_library(request["out"])
    except Exception as e:
        from tvm.support.cc import get_cc

        os_error = e if isinstance(e, OSError) else None
        return {"ok": False, "stage": "export", "error": error_text(e),
                "compiler": get_cc(), "errno": os_error.errno if os_error else None,
                "filename": os_error.filename if os_error else None}
    return {"ok": True, "path": request["out"]}


def _compile(mod, request: dict):
    """The executable of `mod`: CUDA through `cuda.compiler` (device code made here, for
    exactly the target's arch), anything else with `tvm.compile`."""
    import tvm

    if request.get("kind") == "cuda":
        from .cuda.compiler import build_cuda

        return build_cuda(mod, request["target"],
                          request.get("cuda_compiler", "auto")).executable
    return tvm.compile(mod, target=tvm.target.Target(request["target"]))


def _compile_error_text(e: Exception) -> str:
    from .cuda.compiler import CudaCompileError
    from .worker import error_text

    return str(e) if isinstance(e, CudaCompileError) else error_text(e)


def _unlink(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass
