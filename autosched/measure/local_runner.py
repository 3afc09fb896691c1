"""LocalRunner: run built candidates one at a time on this machine, check, then time.

One long-lived run worker (see `worker.py`) loads each `.so`, runs it on the task's
reference inputs (outputs prefilled with NaN / the integer maximum so unwritten
elements show), compares every output with the reference (`check.compare`), checks
that no input was overwritten, and only then times the kernel with TVM's
`time_evaluator` (on CUDA: events on the worker's own stream, L2 flushed; see
`cuda.timing`); with `settings.beside` (a model's tasks, `tune-model`) a CPU candidate is
timed as the model calls it instead, alternating with torch's operator in a worker that
imports torch (`beside_torch.py`). Candidates run strictly one after another: timing wants a quiet
machine. A candidate past `settings.run_timeout` has its worker killed (`run_timeout`);
a worker that dies (a wild store, SIGSEGV) gives `run_error` with the signal; a CUDA
error (an illegal address, a launch failure) leaves the worker's CUDA context unusable,
so it is that candidate's `run_error` and the worker is replaced. Either way the next
candidate gets a fresh worker, whose start-up does not count against it.

A machine that cannot run anything (no TVM runtime, no CUDA driver, runtime or device)
is not a candidate's failure: `run` raises `InfrastructureError` and records nothing.
"""
from __future__ import annotations

import os
import time

from ..errors import InfrastructureError
from ..results import MeasureResult
from ..target import TargetSpec
from ..threads import machine_cores
from .base import BuildArtifact
from .reference.data import Reference
from .reference.store import ensure_reference
from .run_job import TEST_FAULT_KEY, run_request
from .settings import MeasureInput, MeasureSettings
from .worker import WorkerDied, WorkerProcess

DEVICES = {"llvm": "cpu", "cuda": "cuda"}  # target kind -> TVM device type
# A worker keeps every library it loaded mapped; start a fresh one now and then.
RUNS_PER_WORKER = 500
# Test-only fault injection: an IRModule attribute whose value the run worker receives
# as `run_job.TEST_FAULT_KEY` (e.g. "cuda_error:700:cudaErrorIllegalAddress:an illegal
# memory access was encountered"). Search spaces never set it.
TEST_RUN_FAULT_ATTR = "autosched.test_only.run_fault"


class LocalRunner:
    """Runs artifacts built for a target whose device is on this machine."""

    concurrency = 1  # one candidate at a time: timing wants a quiet machine

    def __init__(self, settings: MeasureSettings, work_dir: str, *,
                 scratch_dir: str | None = None, runs_per_worker: int = RUNS_PER_WORKER):
        """Reference data under `work_dir` (shared); worker logs and unpublished
        reference files in `scratch_dir`, the run's own folder (None: `work_dir`)."""
        self.settings = settings
        self.work_dir = work_dir
        self.scratch_dir = scratch_dir
        self.runs_per_worker = runs_per_worker
        self.log_dir = os.path.join(scratch_dir or work_dir, "workers")
        self._worker: WorkerProcess | None = None
        self._runs = 0  # candidates run by the current worker
        self._references: dict[str, Reference] = {}

    @property
    def worker_pid(self) -> int | None:
        """Process id of the current run worker (None before the first run); a failure
        replaces it with a fresh one (for diagnostics)."""
        return self._worker.pid if self._worker is not None else None

    def hardware(self, target: TargetSpec) -> dict:
        """This machine, as the target resolved it."""
        return target.fingerprint

    def run(self, inputs: list[MeasureInput],
            artifacts: list[BuildArtifact]) -> list[MeasureResult]:
        """One result per input, in order (see `base.Runner.run`)."""
        results = []
        for inp, art in zip(inputs, artifacts, strict=True):
            if not art.ok:
                results.append(art.failure())
                continue
            results.append(self._run_one(self._reference(inp.task, inp.target), inp, art))
        return results

    def _reference(self, task, target) -> Reference:
        ref = self._references.get(task.key)
        if ref is None:
            ref = self._references[task.key] = ensure_reference(
                task, self.work_dir, scratch_dir=self.scratch_dir, target=target,
                timeout=self.settings.reference_timeout)
        return ref

    def _request(self, ref: Reference, inp: MeasureInput, art: BuildArtifact) -> dict:
        request = run_request(self.settings, art.path, ref.directory,
                              DEVICES[inp.target.kind], self._beside(inp))
        attrs = inp.mod.attrs if inp.mod is not None else None
        if attrs is not None and TEST_RUN_FAULT_ATTR in attrs:
            request[TEST_FAULT_KEY] = str(attrs[TEST_RUN_FAULT_ATTR])
        return request

    def _beside(self, inp: MeasureInput) -> dict | None:
        """What a CPU candidate is timed beside, when the settings ask (see
        `MeasureSettings.beside`): torch's operator, on as many threads as the kernel."""
        if not self.settings.beside or DEVICES[inp.target.kind] != "cpu":
            return None
        threads = int(inp.target.config.get("num-cores") or machine_cores())
        return {"peer": self.settings.beside, "workload": inp.task.workload,
                "args": dict(inp.task.args), "threads": threads}

    @property
    def _role(self) -> str:
        return "run_torch" if self.settings.beside else "run"

    def _run_one(self, ref: Reference, inp: MeasureInput, art: BuildArtifact) -> MeasureResult:
        request = self._request(ref, inp, art)
        if self._runs >= self.runs_per_worker:
            self._replace_worker()
        worker = self._ready_worker()
        self._runs += 1
        start = time.monotonic()
        try:
            worker.send(request)
            reply = worker.wait_reply(self.settings.run_timeout)
        except WorkerDied as e:
            self._replace_worker()
            return MeasureResult.failure("run_error", f"run worker {e}",
                                         run_seconds=time.monotonic() - start)
        seconds = time.monotonic() - start
        if reply is None:
            self._replace_worker()
            return MeasureResult.failure(
                "run_timeout", f"run did not finish within {self.settings.run_timeout:g}s; "
                "worker killed", run_seconds=seconds)
        if reply.get("ok"):
            return MeasureResult(tuple(float(x) for x in reply["latencies"]), run_seconds=seconds)
        if reply.get("infrastructure"):
            self._drop_worker()
            raise InfrastructureError(reply["cause"], reply["remedy"])
        if reply.get("restart"):  # a CUDA error: this worker's context is unusable
            self._replace_worker()
        return MeasureResult.failure(reply.get("kind", "run_error"), reply.get("error", "?"),
                                     run_seconds=seconds)

    def _ready_worker(self) -> WorkerProcess:
        if self._worker is None or not self._worker.alive():
            self._replace_worker()
        if not self._worker.ready:
            try:
                self._worker.wait_ready()
            finally:
                if not self._worker.ready:
                    self._worker = None
        return self._worker

    def _replace_worker(self) -> None:
        """Kill the current worker and start the next one now: it imports TVM while
        the caller records this result (nothing is being timed meanwhile)."""
        self._drop_worker()
        self._worker = WorkerProcess(self._role, self.log_dir)
        self._runs = 0

    def _drop_worker(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def close(self) -> None:
        """Kill the run worker."""
        self._drop_worker()
