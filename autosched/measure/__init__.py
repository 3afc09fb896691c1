"""Measurement: build candidates in parallel worker processes, run them in an isolated
worker with timeouts, check every output against the reference, time the correct ones.

Where things are (the core here, a sub-package per wing):
- base.py: the interfaces. `Builder`, `Runner`, and `Measurer`, what the tuning loop
  holds: `measure(inputs) -> [MeasureFuture]`, done now (a `MeasureResult`, see
  `autosched.results`) or `Pending` until a later run collects it;
- factory.py: `make_measurer(settings, runner="local", work_dir=None)`; runners.py: the
  one table where runner names (`local`, `rpc://HOST:PORT/KEY`, `bundle:DIR`) become
  runners;
- build_run.py: `BuildRunMeasurer`, build then run (the next chunk builds while one
  runs); builder.py: `LocalBuilder`; local_runner.py: `LocalRunner`;
- worker.py: the worker processes and their protocol; run_job.py: what the run worker
  does (load, check, time); faults.py: faults of the machine told from the candidate's;
- settings.py: `MeasureInput`, `MeasureSettings`; scratch.py: each run's own folder;
- simulated.py: `SimulatedMeasurer`, a replay of a log of records;
- device_arrays.py: tensors on a device through TVM's runtime alone; asm.py: the hot
  loop of a CPU kernel's assembly;
- reference/: the reference data every output is checked against;
- cuda/: the CUDA compile path, CUDA timing, SASS;
- rpc/: `--runner rpc://...`, TVM RPC servers behind a tracker;
- bundle/: `--runner bundle:DIR`, rounds measured on another machine.

Importing this package loads none of them: each public name is resolved on first use.
"""
from __future__ import annotations

from ..lazy import lazy_names

__all__ = ["MeasureInput", "MeasureSettings", "Measurer", "MeasureFuture", "Pending",
           "Builder", "Runner", "BuildArtifact", "make_measurer", "BuildRunMeasurer",
           "LocalBuilder", "LocalRunner", "RPCRunner", "parse_rpc_address",
           "SimulatedMeasurer", "NotInLog", "load_reference", "build_cuda",
           "ensure_cuda_runtime", "kernel_asm", "hot_loop"]

__getattr__ = lazy_names(__name__, {
    "MeasureInput": ".settings", "MeasureSettings": ".settings",
    "Measurer": ".base", "MeasureFuture": ".base", "Pending": ".base", "Builder": ".base",
    "Runner": ".base", "BuildArtifact": ".base", "make_measurer": ".factory",
    "BuildRunMeasurer": ".build_run", "LocalBuilder": ".builder",
    "LocalRunner": ".local_runner", "RPCRunner": ".rpc.runner",
    "parse_rpc_address": ".rpc.tracker", "SimulatedMeasurer": ".simulated",
    "NotInLog": ".simulated", "load_reference": ".reference.data",
    "build_cuda": ".cuda.compiler", "ensure_cuda_runtime": ".cuda.compiler",
    "kernel_asm": ".asm", "hot_loop": ".asm"})
