"""A bundle's baseline jobs: torch's own time for a model's tasks, taken where the
kernels are measured (`tune-model --target cuda --runner bundle:DIR`).

A round's manifest may list, under `baselines`, one job per task that has no baseline
record yet:

    {"id": "r1-b000", "task_key": KEY, "task": NAME, "workload": "aten_linear",
     "params": {...}, "inputs": [{"shape": [64, 32], "dtype": "float16"}, ...]}

and one per aten call whose outputs several tasks compute (a convolution's input, weight
and bias gradients): the same fields of its first task, the call's `outputs` (the tasks'
keys) and its `members` ({"workload", "params", "inputs"} of each task); its result file
carries the `outputs` too, and torch times its one call computing them all.

The measuring side (`python -m autosched.measure.bundle DIR`) times torch's twin of the
workload on CUDA tensors of those shapes and dtypes with the round's settings, in a
child process that imports torch (`python -m autosched.model.baseline`; this side must
start without torch or TVM), and writes one result file per job, `"kind": "baseline"`,
with the machine's fingerprint and its torch version. Where torch is missing or sees no
GPU the result is a `run_error` that says so, and the baseline stays missing: the next
round carries the job again. The next `tune-model` run imports the correct ones as
baseline records (`autosched/model/baseline.py`).
"""
from __future__ import annotations

import getpass
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time

from ...results import MeasureResult
from .format import read_results, result_path, write_json

BASELINE = "baseline"  # the "kind" of a baseline job's result file
CHILD = "autosched.model.baseline"  # the torch side, run as `python -m`
CHILD_SECONDS = 120.0  # besides run_timeout per job: starting torch and CUDA


def job_ids(number: int, jobs: list[dict]) -> list[dict]:
    """`jobs` with the ids of round `number`."""
    return [dict(job, id=f"r{number}-b{i:03d}") for i, job in enumerate(jobs)]


def pending_baselines(directory: str, manifest: dict) -> list[dict]:
    """The baseline jobs of the manifest's round without a result yet (a format-1
    manifest has none)."""
    done = read_results(directory)
    return [j for j in manifest.get("baselines", []) if j["id"] not in done]


def baseline_results(results: dict) -> list[dict]:
    """The result files of baseline jobs among `results` (`format.read_results`)."""
    return [r for r in results.values() if r.get("kind") == BASELINE]


def measure_baselines(manifest: dict, directory: str, jobs: list[dict], hardware: dict,
                      out=sys.stdout) -> int:
    """Time torch for `jobs` here and write their result files; returns how many were
    timed correctly."""
    answer = _run_child(jobs, manifest["settings"])
    done = answer.get("results", {})
    ok = 0
    for i, job in enumerate(jobs, 1):
        got = done.get(job["id"], {"error": answer.get("error", "not timed")})
        if "latencies" in got:
            result = MeasureResult(tuple(float(x) for x in got["latencies"]))
        else:
            result = MeasureResult.failure("run_error", f"torch's baseline: {got['error']}")
        write_json(result_path(directory, job["id"]),
                   _result_file(job, manifest, result, hardware, answer.get("torch")))
        ok += result.ok
        what = f"{result.median * 1e3:.4f} ms" if result.ok else result.error_msg
        print(f"[baseline {i}/{len(jobs)}] {job['id']} torch {job['task']}: {what}", file=out,
              flush=True)
    print(f"bundle {directory}: timed torch for {ok} of {len(jobs)} baseline jobs", file=out)
    return ok


def _run_child(jobs: list[dict], settings: dict) -> dict:
    """The child's answer (`autosched.model.baseline.time_jobs`), or {"error": why}."""
    with tempfile.TemporaryDirectory(prefix="autosched-baselines-") as scratch:
        request, answer = os.path.join(scratch, "jobs.json"), os.path.join(scratch, "out.json")
        with open(request, "w") as f:
            json.dump({"jobs": jobs, "settings": settings}, f)
        limit = CHILD_SECONDS + float(settings.get("run_timeout", 30.0)) * len(jobs)
        try:
            done = subprocess.run([sys.executable, "-m", CHILD, request, answer],
                                  capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return {"error": f"torch's timing did not finish within {limit:g}s"}
        try:
            with open(answer) as f:
                return json.load(f)
        except (OSError, ValueError):
            lines = done.stderr.strip().splitlines()
            return {"error": f"torch's timing process failed (exit {done.returncode})"
                    + (f": {lines[-1]}" if lines else "")}


def _result_file(job: dict, manifest: dict, result: MeasureResult, hardware: dict,
                 torch_version: str | None) -> dict:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in a container
        user = "unknown"
    return {"id": job["id"], "kind": BASELINE, "round": manifest["round"],
            "task_key": job["task_key"], "task": job["task"], "workload": job["workload"],
            "params": job["params"], **({"outputs": job["outputs"]} if "outputs" in job else {}),
            "result": result.to_json(), "hardware": hardware,
            "host": socket.gethostname(), "user": user, "time": time.time(),
            "settings": manifest["settings"],
            "runtime": {"torch": torch_version, "python": platform.python_version()}}
