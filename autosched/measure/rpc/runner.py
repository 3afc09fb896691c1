"""RPCRunner: measure built candidates on the RPC servers of one tracker key, several
at once (`--runner rpc://HOST:PORT/KEY`).

Per batch, one thread per concurrent session (as many as the key has servers, at most
`RPCAddress.sessions`) takes candidates from a shared queue. For each it asks the
tracker for a free server of the key, then hands the server's address to its own
session worker process (`session.py`), which uploads, checks and times the
candidate there. The worker is a separate process so that a hung server can always be
let go: killing the worker closes the connection, however the remote end behaves.

Faults:
- a kernel slower than the session timeout (`settings.run_timeout`, enforced by the
  server) is `run_timeout`; a kernel that fails or computes wrongly is `run_error` /
  `wrong_answer`; none of these is retried;
- a server that dies, or does not answer within the timeout plus a grace period, is
  let go (TVM's tracker drops a dead server by itself, and never hands out a hung one
  again, since it cannot re-register) and its candidate goes back to the queue for
  another server, at most `retries` times, then it is `run_error` with every reason;
- a kernel that crashes takes TVM's server down with it: the session process dies and
  the server, though its process lives on, stops serving and leaves the tracker. When a
  session is lost while the kernel ran and the server then shows exactly that (gone
  from the tracker, its port still open), the candidate is `run_error` and is not sent
  to another server to crash that one too;
- every session first reads the server's hardware (`session.read_hardware`); the
  first reading is what `hardware(target)` reports for the run's records, and a server
  of the key that reads otherwise stops the run with a UserError before its result is
  used: one key must name one kind of machine, or a database would mix them;
- when the key has no server left, or the tracker is gone, `run` raises `NoServersLeft`
  and the tuning loop stops; a bad tracker address or a key without servers is a
  `UserError` when the runner is made, before any tuning.
"""
from __future__ import annotations

import os
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from ...errors import NoServersLeft, UserError
from ...results import MeasureResult
from ...target import TargetSpec, server_fingerprint
from ..base import BuildArtifact
from ..local_runner import DEVICES
from ..reference.data import Reference
from ..reference.store import ensure_reference
from ..settings import MeasureInput, MeasureSettings
from ..worker import WorkerDied, WorkerProcess
from .session import KERNEL_PHASES
from .tracker import RPCAddress, ServerRequest, TrackerError, port_open, servers_by_key, summary

GRACE = 5.0   # seconds past the session timeout before a silent server counts as hung
POLL = 1.0    # how often a request waiting for a free server checks that servers remain
SETTLE = 3.0  # how long a server that lost a session may take to leave the tracker


@dataclass
class _Job:
    index: int
    request: dict
    losses: list[str] = field(default_factory=list)


class _Batch:
    """The jobs of one `run` call, shared by the session threads."""

    def __init__(self, jobs: list[_Job], results: list):
        self.queue = deque(jobs)
        self.results = results
        self.open = len(jobs)
        self.error: BaseException | None = None
        self.cond = threading.Condition()

    def take(self) -> _Job | None:
        """The next job; None once every job is done or the batch failed."""
        with self.cond:
            while not self.queue and self.open and self.error is None:
                self.cond.wait()
            return self.queue.popleft() if self.queue and self.error is None else None

    def done(self, job: _Job, result: MeasureResult | None) -> None:
        with self.cond:
            self.results[job.index] = result
            self.open -= 1
            self.cond.notify_all()

    def retry(self, job: _Job) -> None:
        with self.cond:
            self.queue.append(job)
            self.cond.notify_all()

    def fail(self, error: BaseException) -> None:
        with self.cond:
            self.error = self.error or error
            self.cond.notify_all()

    @property
    def stopped(self) -> bool:
        return self.error is not None


class RPCRunner:
    """Runs artifacts on the servers registered under `address.key` at the tracker.
    `concurrency` is how many candidates it measures at once (servers of the key at the
    last look, at most `address.sessions`); `stats` counts sessions that gave a result
    ("measured"), sessions whose server was lost ("lost"), candidates sent to another
    server ("retried") and servers a kernel took down ("crashed"); `servers_used` counts
    results per server address, `lost_servers` holds the addresses lost."""

    def __init__(self, settings: MeasureSettings, work_dir: str, address: RPCAddress, *,
                 scratch_dir: str | None = None):
        self.settings = settings
        self.address = address
        self.work_dir = work_dir  # the shared reference data
        self.scratch_dir = scratch_dir  # the run's own folder (None: work_dir)
        self.log_dir = os.path.join(scratch_dir or work_dir, "workers")
        self.stats: Counter = Counter()
        self.servers_used: Counter = Counter()
        self.lost_servers: set[str] = set()
        self._references: dict[str, Reference] = {}
        self._hardware: dict[str, tuple[dict, str]] = {}  # device -> (reading, server)
        self._workers: list[WorkerProcess | None] = []
        self._lock = threading.Lock()
        self.concurrency = min(address.sessions, self._check_farm())

    # ------------------------------------------------------------------ the farm

    def _servers(self) -> list[str]:
        info = summary(self.address.host, self.address.port)
        return servers_by_key(info).get(self.address.key, [])

    def _check_farm(self) -> int:
        """How many servers our key has; UserError unless the tracker answers and the key
        has at least one."""
        a = self.address
        try:
            info = summary(a.host, a.port)
        except TrackerError as e:
            raise UserError(f"--runner {a}: {e}") from None
        keys = servers_by_key(info)
        if not keys.get(a.key):
            there = f"keys there: {', '.join(sorted(keys))}" if keys else "it has no servers"
            raise UserError(f"--runner {a}: no RPC server is registered under key "
                            f"'{a.key}' at tracker {a.tracker} ({there})")
        return len(keys[a.key])

    def _count_or_stop(self) -> int:
        """How many servers of our key are registered; NoServersLeft when none."""
        a = self.address
        try:
            servers = self._servers()
        except TrackerError as e:
            raise NoServersLeft(f"{e}; cannot measure any more") from None
        if not servers:
            lost = f" (lost during this run: {', '.join(sorted(self.lost_servers))})" \
                if self.lost_servers else ""
            raise NoServersLeft(f"no RPC server of key '{a.key}' is left at tracker "
                                f"{a.tracker}{lost}")
        return len(servers)

    # ------------------------------------------------------------------ hardware

    def hardware(self, target: TargetSpec) -> dict:
        """The fingerprint of the servers of our key for `target`, read over a session
        with one of them unless a session already did (see `base.Runner.hardware`).
        NoServersLeft when no server could be read."""
        device = DEVICES[target.kind]
        if device not in self._hardware:
            results: list[MeasureResult | None] = [None]
            probe = {"probe": True, "device": device,
                     "session_timeout": self.settings.run_timeout}
            self._run_batch(_Batch([_Job(0, probe)], results))
            if device not in self._hardware:
                raise NoServersLeft(f"could not read the hardware of any RPC server of key "
                                    f"'{self.address.key}': {results[0].error_msg}")
        return server_fingerprint(target, self._hardware[device][0])

    def _same_hardware(self, device: str, reading: dict, where: str) -> None:
        """Remember the first server's hardware; UserError for a server that differs."""
        with self._lock:
            first, there = self._hardware.setdefault(device, (reading, where))
        if reading != first:
            diff = sorted(k for k in first.keys() | reading.keys()
                          if first.get(k) != reading.get(k))
            raise UserError(f"--runner {self.address}: the servers of key '{self.address.key}' "
                            f"are different machines ({there}: {_fields(first, diff)}; "
                            f"{where}: {_fields(reading, diff)}); give each kind of machine "
                            "its own key")

    # ------------------------------------------------------------------ running

    def run(self, inputs: list[MeasureInput],
            artifacts: list[BuildArtifact]) -> list[MeasureResult]:
        """One result per input, in order (see `base.Runner.run`); NoServersLeft when
        nothing can be measured any more."""
        results: list[MeasureResult | None] = [None] * len(inputs)
        jobs = []
        for i, (inp, art) in enumerate(zip(inputs, artifacts, strict=True)):
            if art.ok:
                jobs.append(_Job(i, self._request(inp, art)))
            else:
                results[i] = art.failure()
        if jobs:
            self._run_batch(_Batch(jobs, results))
        return results  # type: ignore[return-value]

    def _request(self, inp: MeasureInput, art: BuildArtifact) -> dict:
        ref = self._references.get(inp.task.key)
        if ref is None:
            ref = self._references[inp.task.key] = ensure_reference(
                inp.task, self.work_dir, scratch_dir=self.scratch_dir, target=inp.target,
                timeout=self.settings.reference_timeout)
        s = self.settings
        return {"lib": art.path, "reference": ref.directory, "device": DEVICES[inp.target.kind],
                "session_timeout": s.run_timeout, "warmup": s.warmup, "number": s.number,
                "repeat": s.repeat, "min_repeat_ms": s.min_repeat_ms,
                "check": s.check_correctness}

    def _run_batch(self, batch: _Batch) -> None:
        self.concurrency = min(self.address.sessions, self._count_or_stop())
        sessions = min(len(batch.queue), self.concurrency)
        self._start_workers(sessions)
        threads = [threading.Thread(target=self._serve, args=(slot, batch), daemon=True,
                                    name=f"autosched-rpc-{slot}") for slot in range(sessions)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join()
        except BaseException as e:  # Ctrl-C: the threads stop at their next step
            batch.fail(e)
            raise
        if batch.error is not None:
            raise batch.error

    def _serve(self, slot: int, batch: _Batch) -> None:
        """A session thread: measure jobs until the batch is done or has failed."""
        try:
            while (job := batch.take()) is not None:
                self._attempt(slot, job, batch)
        except BaseException as e:
            batch.fail(e)

    def _attempt(self, slot: int, job: _Job, batch: _Batch) -> None:
        worker = self._ready_worker(slot)  # start-up never counts against a candidate
        server = self._acquire(batch)
        if server is None:  # another thread stopped the batch
            return
        host, port, matchkey = server
        limit = self.settings.run_timeout + GRACE
        start = time.monotonic()
        try:
            worker.send(dict(job.request, host=host, port=port, matchkey=matchkey))
            reply = worker.wait_reply(limit)
        except WorkerDied as e:
            self._drop_worker(slot)
            reply = {"ok": False, "lost": True, "phase": "session", "error": f"worker {e}"}
        if reply is None:
            self._drop_worker(slot)  # killing it is the one sure way to let go of the server
            reply = {"ok": False, "lost": True, "phase": "?",
                     "error": f"no answer within {limit:g}s (hung)"}
        self._settle(job, reply, f"{host}:{port}", time.monotonic() - start, batch)

    def _acquire(self, batch: _Batch) -> tuple[str, int, str] | None:
        """A free server of our key from the tracker, checking while waiting that the
        key still has servers; None when the batch stopped meanwhile."""
        a = self.address
        deadline = time.monotonic() + a.wait
        try:
            request = ServerRequest(a.host, a.port, a.key)
        except TrackerError as e:
            raise NoServersLeft(f"{e}; cannot measure any more") from None
        try:
            while not batch.stopped:
                try:
                    server = request.poll(POLL)
                except TrackerError as e:
                    raise NoServersLeft(f"{e}; cannot measure any more") from None
                if server is not None:
                    return server
                count = self._count_or_stop()
                if time.monotonic() > deadline:
                    raise NoServersLeft(f"none of the {count} RPC servers of key '{a.key}' "
                                        f"at tracker {a.tracker} became free within {a.wait:g}s")
            return None
        finally:
            request.close()

    def _settle(self, job: _Job, reply: dict, where: str, seconds: float,
                batch: _Batch) -> None:
        """Record the job's result, or put it back for another server."""
        if reply.get("misconfigured"):
            raise UserError(f"--runner {self.address}: {reply['misconfigured']}")
        if not reply.get("lost"):
            if "hardware" in reply:  # absent only where the server was never reached
                self._same_hardware(job.request["device"], reply["hardware"], where)
            if job.request.get("probe"):  # nothing was measured: no result, no count
                batch.done(job, None)
                return
            with self._lock:
                self.stats["measured"] += 1
                self.servers_used[where] += 1
            batch.done(job, _result(reply, seconds))
            return
        with self._lock:
            self.stats["lost"] += 1
            self.lost_servers.add(where)
        phase, error = reply.get("phase"), reply.get("error")
        job.losses.append(f"{where} lost during {phase}: {error}")
        if phase in KERNEL_PHASES and self._crashed(where):
            with self._lock:
                self.stats["crashed"] += 1
            batch.done(job, MeasureResult.failure(
                "run_error", f"the kernel took RPC server {where} down ({error}): its session "
                "died while the kernel ran and the server stopped serving, as TVM's server "
                "does after a crash; restart it", run_seconds=seconds))
        elif len(job.losses) > self.address.retries:
            batch.done(job, MeasureResult.failure(
                "run_error", f"lost {len(job.losses)} RPC servers while measuring this "
                "candidate: " + "; ".join(job.losses), run_seconds=seconds))
        else:
            with self._lock:
                self.stats["retried"] += 1
            batch.retry(job)
        self._count_or_stop()

    def _crashed(self, where: str) -> bool:
        """Whether a server that lost a session stopped serving while its process lives
        on (what a crash in the session does to TVM's server), rather than died (its
        port closed with it) or carried on (it stays registered)."""
        deadline = time.monotonic() + SETTLE
        try:
            while where in self._servers():
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.1)
        except TrackerError:
            return False
        host, port = where.rsplit(":", 1)
        return port_open(host, int(port))

    # ------------------------------------------------------------------ workers

    def _start_workers(self, n: int) -> None:
        """Workers for slots 0..n-1, started side by side."""
        self._workers += [None] * (n - len(self._workers))
        fresh = []
        for slot in range(n):
            worker = self._workers[slot]
            if worker is None or not worker.alive():
                self._drop_worker(slot)
                self._workers[slot] = WorkerProcess("rpc", self.log_dir)
                fresh.append(self._workers[slot])
        for worker in fresh:
            worker.wait_ready()

    def _ready_worker(self, slot: int) -> WorkerProcess:
        worker = self._workers[slot]
        if worker is None or not worker.alive():
            self._drop_worker(slot)
            worker = WorkerProcess("rpc", self.log_dir)
            worker.wait_ready()
            self._workers[slot] = worker
        return worker

    def _drop_worker(self, slot: int) -> None:
        worker = self._workers[slot]
        if worker is not None:
            worker.kill()
            self._workers[slot] = None

    def close(self) -> None:
        """Kill every session worker (their connections close with them)."""
        for slot in range(len(self._workers)):
            self._drop_worker(slot)


def _fields(reading: dict, keys: list[str]) -> str:
    return ", ".join(f"{k}={reading.get(k)}" for k in keys)


def _result(reply: dict, seconds: float) -> MeasureResult:
    if reply.get("ok"):
        return MeasureResult(tuple(float(x) for x in reply["latencies"]), run_seconds=seconds)
    return MeasureResult.failure(reply.get("kind", "run_error"), reply.get("error", "?"),
                                 run_seconds=seconds)
