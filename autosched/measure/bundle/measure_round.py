"""`python -m autosched.measure.bundle DIR`: measure a bundle's round on this machine.

This is the half of `--runner bundle:DIR` that runs where the kernels run: a machine
with TVM's runtime libraries, `tvm_ffi`, numpy (and maybe torch), and no TVM compiler
and no database. Each candidate of the round that has no result yet is loaded, run on
its task's reference inputs, checked and timed by the run worker's own code
(`run_job.run_job`), in a child process with the round's `run_timeout`: a kernel that
crashes or hangs is that candidate's `run_error` / `run_timeout`, and the next one gets
a fresh child. A task whose bundle carries a recipe instead of its reference arrays
(recipe.py) first has its reference made here (target_reference.py): checked at
the reduced shape, then computed by its reference kernel. Each result, with this
machine's fingerprint, is written atomically to
`DIR/results/<id>.json` as soon as it is known, so a measurement that is killed loses
at most the candidate in flight and a rerun measures only what is left. A candidate
that failed to build gets its result here too (its build failure), so every record
of a round names the machine that measured it. A round of `tune-model` also carries
baseline jobs: torch's own time for each task, taken here after the candidates by a
child process that imports torch (baselines.py); without torch, or without a GPU that
torch sees, their results say so.

Exit codes: 0 measured (or nothing left to measure), 2 not a bundle this machine can
measure (one line), 1 a fault of this machine (the worker cannot start; a reply that
is not the candidate's failure; a task whose reference kernel failed its check or its
run, after the other tasks were measured): nothing is written for the candidate in
flight, nor for that task's candidates.
"""
from __future__ import annotations

import getpass
import os
import platform
import shutil
import socket
import sys
import tempfile
import time

from ...errors import InfrastructureError, UserError
from ...results import MeasureResult
from ...target import cpu_fingerprint, local_gpu
from ...versions import AUTOSCHED_VERSION, tvm_ffi_version
from ..run_job import run_request
from ..worker import WorkerDied, WorkerProcess
from .baselines import measure_baselines, pending_baselines
from .format import (BundleError, BundleLock, one_machine, pending, read_results, remove_partial,
                     require_bundle, result_path, write_json)
from .target_reference import make_reference, remove_partial_references

PROG = "python -m autosched.measure.bundle"


def machine_fingerprint(target: dict) -> dict:
    """This machine as a record names it, for the bundle's target (`TargetSpec.to_json`):
    the same fingerprint `autosched tune --target` gives here."""
    if target["kind"] == "cuda":
        gpu = local_gpu()
        if gpu is None:
            raise InfrastructureError("no NVIDIA GPU found on this machine (nvidia-smi)",
                                      "measure the bundle on the GPU machine it was built for")
        return {"device": "gpu", **gpu}
    return cpu_fingerprint(target["config"].get("mcpu", "generic"))


def check_runtime(manifest: dict, directory: str) -> None:
    """BundleError unless this autosched and tvm_ffi are the ones that built the bundle."""
    built = manifest["versions"]
    here = {"autosched": AUTOSCHED_VERSION, "tvm_ffi": tvm_ffi_version()}
    for name, version in here.items():
        if built.get(name) != version:
            raise BundleError(f"bundle {directory} was built with {name} {built.get(name)}, "
                              f"this machine has {version}; install that version here")


class _RoundRunner:
    """Runs a round's candidates one at a time in a run worker (see module docstring)."""

    def __init__(self, manifest: dict, directory: str, log_dir: str):
        self.manifest, self.directory, self.log_dir = manifest, directory, log_dir
        self.settings = manifest["settings"]
        self._worker: WorkerProcess | None = None

    def measure(self, entry: dict) -> MeasureResult:
        """The candidate's result; InfrastructureError when it is not the candidate's."""
        if entry["lib"] is None:  # failed to build or to fit the target's limits
            return MeasureResult.from_json(entry["known"])
        result = self.run(self._request(entry))
        return MeasureResult(result.latencies, result.error_kind, result.error_msg,
                             float(entry["build_seconds"]), result.run_seconds)

    def _request(self, entry: dict) -> dict:
        task = self.manifest["tasks"][entry["task_key"]]
        return run_request(self.settings, os.path.abspath(os.path.join(self.directory,
                                                                       entry["lib"])),
                           os.path.abspath(os.path.join(self.directory, task["reference"])),
                           self.manifest["device"])

    def run(self, request: dict) -> MeasureResult:
        """Run one `run_job` request in the run worker, with the round's run_timeout."""
        worker = self._ready_worker()
        start, timeout = time.monotonic(), float(self.settings["run_timeout"])
        try:
            worker.send(request)
            reply = worker.wait_reply(timeout)
        except WorkerDied as e:
            return MeasureResult.failure("run_error", f"run worker {e}",
                                         run_seconds=time.monotonic() - start)
        seconds = time.monotonic() - start
        if not reply or not reply.get("ok"):
            self.close()  # a failed kernel may leave its process unusable (CUDA)
        if reply is None:
            return MeasureResult.failure("run_timeout", f"run did not finish within "
                                         f"{timeout:g}s; worker killed", run_seconds=seconds)
        if reply.get("ok"):
            return MeasureResult(tuple(float(x) for x in reply["latencies"]),
                                 run_seconds=seconds)
        if reply.get("infrastructure"):  # this machine cannot run anything
            self.close()
            raise InfrastructureError(reply["cause"], reply["remedy"])
        if "kind" not in reply:  # escaped run_job's own checks: this machine, not the kernel
            self.close()
            raise InfrastructureError(f"the run worker failed: {reply.get('error', '?')}",
                                      "check that tvm_ffi and TVM's runtime libraries load "
                                      "here, then rerun; results so far are kept")
        return MeasureResult.failure(reply["kind"], reply.get("error", "?"),
                                     run_seconds=seconds)

    def _ready_worker(self) -> WorkerProcess:
        if self._worker is None or not self._worker.alive():
            self.close()
            self._worker = WorkerProcess("run", self.log_dir)
            try:
                self._worker.wait_ready()
            except BaseException:
                self._worker = None
                raise
        return self._worker

    def close(self) -> None:
        """Kill the run worker."""
        if self._worker is not None:
            self._worker.kill()
            self._worker = None


def _result_file(entry: dict, manifest: dict, result: MeasureResult, hardware: dict) -> dict:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in a container
        user = "unknown"
    return {"id": entry["id"], "round": manifest["round"], "task_key": entry["task_key"],
            "task": entry["task"], "candidate": entry["candidate"],
            "candidate_key": entry["candidate_key"], "result": result.to_json(),
            "hardware": hardware, "host": socket.gethostname(), "user": user,
            "time": time.time(), "settings": manifest["settings"],
            "runtime": {"tvm_ffi": tvm_ffi_version(), "python": platform.python_version()}}


def measure_bundle(directory: str, out=sys.stdout) -> int:
    """Measure every candidate and baseline job (baselines.py) of DIR's round that has
    no result; returns how many were measured (0: nothing was pending, which is said on
    `out`). The baselines are timed after the candidates: a candidate's fault stops the
    run before them, and they are timed on the next try."""
    manifest = require_bundle(directory)
    check_runtime(manifest, directory)
    with BundleLock(directory):
        remove_partial(directory)  # a result whose writer was killed: measured again
        todo, jobs = pending(directory, manifest), pending_baselines(directory, manifest)
        if not todo and not jobs:
            print(f"bundle {directory}: nothing to measure: all {len(manifest['candidates'])} "
                  f"candidates of round {manifest['round']} have results; rerun the tune "
                  "command to record them", file=out)
            return 0
        hardware = machine_fingerprint(manifest["target"])
        earlier = one_machine(read_results(directory).values(), directory)
        if earlier is not None and earlier != hardware:
            raise BundleError(f"bundle {directory} has results from another machine "
                              f"({earlier}); measure the rest there, or build a new bundle")
        if todo:
            _measure_all(manifest, directory, todo, hardware, out)
        if jobs:
            measure_baselines(manifest, directory, jobs, hardware, out)
    return len(todo) + len(jobs)


def _measure_all(manifest, directory, todo, hardware, out) -> None:
    log_dir = tempfile.mkdtemp(prefix="autosched-bundle-")
    runner = _RoundRunner(manifest, directory, log_dir)
    ok = 0
    try:
        untrusted = _make_references(runner, manifest, directory, todo, log_dir, out)
        judged = [e for e in todo if e["task_key"] not in untrusted]
        for i, entry in enumerate(judged, 1):
            result = runner.measure(entry)
            write_json(result_path(directory, entry["id"]),
                       _result_file(entry, manifest, result, hardware))
            ok += result.ok
            what = f"{result.median * 1e3:.4f} ms" if result.ok else result.error_kind
            print(f"[{i}/{len(judged)}] {entry['id']} {entry['task']}: {what}", file=out,
                  flush=True)
    finally:
        runner.close()
        shutil.rmtree(log_dir, ignore_errors=True)
    print(f"bundle {directory}: measured {len(judged)} candidates ({ok} correct) on this "
          "machine; rerun the tune command to record them", file=out)
    if untrusted:
        names = ", ".join(manifest["tasks"][k]["name"] for k in untrusted)
        raise ReferenceUntrusted(
            f"the reference of {names} cannot be trusted on this machine "
            f"({next(iter(untrusted.values()))}); nothing was recorded for "
            f"{'its' if len(untrusted) == 1 else 'their'} {len(todo) - len(judged)} "
            "candidates",
            "measure the bundle where its reference kernel works, or build a new bundle "
            "with a --bundle-reference-mib above the task's reference data so that its "
            "arrays travel")


class ReferenceUntrusted(InfrastructureError):
    """A task's reference kernel failed its check or its run here: its candidates
    cannot be judged, so none is measured (they stay pending)."""


def _make_references(runner, manifest, directory, todo, log_dir, out) -> dict[str, str]:
    """Make the reference data of every task of `todo` that came as a recipe and has a
    candidate to run (target_reference.py); {task key: why not} of those that failed."""
    remove_partial_references(directory)
    untrusted = {}
    for key in dict.fromkeys(e["task_key"] for e in todo if e["lib"] is not None):
        task = manifest["tasks"][key]
        if task.get("recipe") is None:
            continue
        why, done = make_reference(runner, manifest, directory, key, log_dir)
        if why is None:
            print(f"reference of {task['name']}: {done}", file=out, flush=True)
        else:
            count = sum(e["task_key"] == key for e in todo)
            print(f"reference of {task['name']}: {why}; its {count} candidates are not "
                  "measured", file=out, flush=True)
            untrusted[key] = why
    return untrusted


def main(argv: list[str] | None = None) -> int:
    """`python -m autosched.measure.bundle DIR [--debug]`; returns the exit code."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise UserError(message)

    parser = Parser(prog=PROG, description="Measure the pending candidates of a bundle "
                    "built by `autosched tune --runner bundle:DIR`, on this machine.")
    parser.add_argument("directory", help="the bundle directory")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parser.parse_args(argv)
        measure_bundle(args.directory)
        return 0
    except (UserError, InfrastructureError) as e:
        if "--debug" in argv:
            raise
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, UserError) else 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; rerun to measure the rest", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
