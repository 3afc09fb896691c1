"""Export: the best record of each selected workload -> DIR/kernels.so + DIR/manifest.json.

Nothing is measured: each best record's candidate is replayed through the search space
(exactly the schedule that was measured) and compiled into one library; a CUDA library
holds device code for the target's arch (see `measure/cuda_compile.py`), and its
manifest says how it was made (`"cuda": {"arch", "binary", "compiler"}`). Only records
for this target, this hardware and compatible versions are used (the database filters).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass

from search_space import SPACE_VERSION, Candidate, InvalidCandidate, generate_space

from .errors import UserError
from .versions import current_versions, library_versions

MANIFEST_FORMAT = 1
LIBRARY_NAME = "kernels.so"
MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class KernelChoice:
    """The schedule a library holds for one task: a candidate (its JSON) and, when it
    comes from the database, the record that measured it."""

    candidate: dict
    record_id: int | None = None
    latency_s: float | None = None

    @staticmethod
    def of_record(record) -> "KernelChoice":
        return KernelChoice(record.candidate, record.id, record.latency)


def kernel_symbols(tasks) -> list[str]:
    """Workload name when a workload has one shape variant, else name__<key prefix>."""
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.workload] = counts.get(t.workload, 0) + 1
    return [t.workload if counts[t.workload] == 1 else f"{t.workload}__{t.key[:8]}" for t in tasks]


def _best_records(db, tasks, target, versions):
    records = []
    for task in tasks:
        rec = db.best(task.key, target.key, target.hardware_key, versions)
        if rec is None:
            raise UserError(f"no valid record for {task.name} on this {target.kind} target and "
                            f"machine in {db.url}; "
                            "run `autosched tune` first")
        records.append(rec)
    return records


def _scheduled_func(task, target, choice: KernelChoice, symbol):
    try:
        mod = generate_space(task, target).apply(Candidate.from_json(choice.candidate))
    except (InvalidCandidate, ValueError) as e:
        origin = f"record {choice.record_id}" if choice.record_id is not None else "candidate"
        raise UserError(f"{origin} of {task.name} does not replay: {e}") from None
    return mod["main"].with_attr("global_symbol", symbol)


def build_manifest(tasks, choices, symbols, target, versions, metas) -> dict:
    kernels = []
    for task, choice, sym, meta in zip(tasks, choices, symbols, metas):
        kernels.append({
            "symbol": sym, "workload": task.workload, "args": dict(task.args),
            "task_key": task.key, "inputs": [s.to_json() for s in task.inputs],
            "outputs": [s.to_json() for s in task.outputs], "record_id": choice.record_id,
            "latency_s": choice.latency_s, "flops": task.flops, "candidate": choice.candidate,
            "meta": meta})
    return {"format": MANIFEST_FORMAT, "library": LIBRARY_NAME, "target": target.config,
            "target_key": target.key, "hardware": target.fingerprint, "versions": versions,
            "kernels": kernels}


def export_tasks(tasks, target_text: str, out_dir: str, db_url: str | None = None,
                 metas: list[dict] | None = None) -> str:
    """Build the library for `tasks`; returns the manifest path. The output directory is
    replaced atomically: a failure leaves any previous library untouched."""
    from .db import DEFAULT_DB_URL, open_database
    from .target import resolve_target
    from .validation import check_tasks

    target = resolve_target(target_text)
    check_tasks(tasks, target)
    versions = current_versions(SPACE_VERSION)
    db = open_database(db_url or DEFAULT_DB_URL)
    try:
        records = _best_records(db, tasks, target, versions)
    finally:
        db.close()
    return write_library(tasks, [KernelChoice.of_record(r) for r in records], target,
                         out_dir, metas)


def write_library(tasks, choices: list[KernelChoice], target, out_dir: str,
                  metas: list[dict] | None = None) -> str:
    """Compile the chosen schedule of each task into `out_dir` (kernels.so and
    manifest.json, replaced atomically); returns the manifest path. `target` is a
    resolved TargetSpec."""
    import tvm

    symbols = kernel_symbols(tasks)
    funcs = {sym: _scheduled_func(t, target, c, sym) for t, c, sym in zip(tasks, choices, symbols)}
    manifest = build_manifest(tasks, choices, symbols, target, library_versions(SPACE_VERSION),
                              metas or [{}] * len(tasks))
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        cuda = _compile_library(tvm.IRModule(funcs), target, os.path.join(staging, LIBRARY_NAME))
        if cuda is not None:
            manifest["cuda"] = cuda
        write_manifest(os.path.join(staging, MANIFEST_NAME), manifest)
        _replace_dir(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return os.path.join(out_dir, MANIFEST_NAME)


def _compile_library(mod, target, path: str) -> dict | None:
    """Compile `mod` and export it to `path`. A CUDA library holds device code for
    exactly the target's arch (made here, by `cuda_compile`, never source to compile
    where it loads); returns what the manifest records about it (None for llvm)."""
    import tvm

    if target.kind != "cuda":
        tvm.compile(mod, target=target.tvm()).export_library(path)
        return None
    from .errors import InfrastructureError
    from .measure import fatbin
    from .measure.cuda_compile import CudaCompileError, build_cuda

    try:
        build = build_cuda(mod, target.config)
    except CudaCompileError as e:
        raise UserError(f"the best records do not compile for {target.config['arch']}: "
                        f"{e}") from None
    build.executable.export_library(path)
    if build.binary == "fatbin":
        archs = {e.arch for e in fatbin.library_entries(path) if e.kind == "sass"}
        if archs != {build.arch}:
            raise InfrastructureError(f"{path}: nvcc embedded device code for "
                                      f"{sorted(archs) or 'no arch'}, not {build.arch}",
                                      "check the CUDA toolkit (nvcc), then rerun")
    return build.describe()


def write_manifest(path: str, manifest: dict) -> None:
    """`manifest.json` as the loader reads it (callables named, anything else as text)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True, default=_json_default)


def _json_default(obj):
    if callable(obj):
        return getattr(obj, "__name__", str(obj))
    return str(obj)


def _replace_dir(staging: str, out_dir: str) -> None:
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UserError(f"-o {out_dir}: exists and is not a directory")
    old = None
    if os.path.isdir(out_dir):
        old = out_dir.rstrip("/") + ".old-export"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(out_dir, old)
    os.rename(staging, out_dir)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def export(op_file: str, target: str, out_dir: str, db_url: str | None = None,
           workloads: list[str] | None = None, args: list[str] | None = None,
           load_timeout_s: float | None = None) -> str:
    """`autosched export`: best records of the selected workloads -> a kernel library.
    `load_timeout_s` limits loading the op file (None: the loader's default)."""
    from .workload import LOAD_TIMEOUT_S, load_instances, make_task

    timeout = LOAD_TIMEOUT_S if load_timeout_s is None else load_timeout_s
    pairs = load_instances(op_file, workloads, args, timeout)
    tasks = [make_task(d, a, timeout) for d, a in pairs]
    return export_tasks(tasks, target, out_dir, db_url, [d.meta for d, _ in pairs])
