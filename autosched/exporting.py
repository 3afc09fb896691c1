"""Export: the best record of each selected workload -> DIR/kernels.so + DIR/manifest.json.

Nothing is measured: each best record's candidate is replayed through the search space
(exactly the schedule that was measured) and compiled into one library; a CUDA library
holds device code for the target's arch (see `measure/cuda/compiler.py`), and its
manifest says how it was made (`"cuda": {"arch", "binary", "compiler"}`). Only records
of this target and compatible versions are used (the database filters).

Whose measurements (`choose_records`): by default this machine's. A build host often
has none (no GPU there): when exactly one other machine measured a task on this target,
its records are taken and that is said in one line; when several did, export stops and
names them, and `hardware=` (`--hardware KEY_OR_NAME`: a hardware key or its first
characters, or the GPU / CPU name) picks one. For cuda, "this target" on another machine
is the same config apart from the limits a GPU sets (`target.CONFIG_FROM_GPU`): the GPU's
records carry its own limits, and the library is compiled with the config they were
measured under. The manifest names the machine (`hardware`, and each kernel's
`hardware_key`).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable

from search_space import SPACE_VERSION, Candidate, InvalidCandidate, generate_space

from .errors import UserError
from .versions import current_versions, library_versions

MANIFEST_FORMAT = 1
LIBRARY_NAME = "kernels.so"
MANIFEST_NAME = "manifest.json"
# the kernels as text, beside the library (exporting._write_sources)
SOURCE_DIR = "source"


@dataclass(frozen=True)
class KernelChoice:
    """The schedule a library holds for one task: a candidate (its JSON) and, when it
    comes from the database, the record that measured it."""

    candidate: dict
    record_id: int | None = None
    latency_s: float | None = None
    hardware_key: str | None = None  # the machine that measured it, and its fingerprint
    hardware: dict | None = None

    @staticmethod
    def of_record(record) -> "KernelChoice":
        return KernelChoice(record.candidate, record.id, record.latency,
                            record.hardware_key, dict(record.hardware))


def kernel_symbols(tasks) -> list[str]:
    """Workload name when a workload has one shape variant, else name__<key prefix>."""
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.workload] = counts.get(t.workload, 0) + 1
    return [t.workload if counts[t.workload] == 1 else f"{t.workload}__{t.key[:8]}" for t in tasks]


def machine_label(fingerprint: dict, hardware_key: str) -> str:
    """How a message names a machine: its GPU or CPU name and hardware key."""
    name = fingerprint.get("name") or fingerprint.get("model") or "unnamed machine"
    return f"{name} (hardware {hardware_key})"


def _same_target(target, target_key: str) -> bool:
    """Whether records of `target_key` are of `target` (on whichever machine)."""
    if target_key == target.key:
        return True
    if target.kind != "cuda":
        return False
    from .target import CONFIG_FROM_GPU

    try:
        config = json.loads(target_key)
    except json.JSONDecodeError:
        return False
    mine = {k: v for k, v in target.config.items() if k not in CONFIG_FROM_GPU}
    return isinstance(config, dict) and \
        {k: v for k, v in config.items() if k not in CONFIG_FROM_GPU} == mine


def _machines(db, task, target, versions) -> dict:
    """(hardware key, target key) -> fingerprint of every machine with a correct record
    of `task` on `target` (see `_same_target`) under compatible versions."""
    from .db import compatible_versions

    found: dict = {}
    for rec in db.iter_records(task_key=task.key, ok_only=True):
        if _same_target(target, rec.target_key) and compatible_versions(rec.versions,
                                                                        versions):
            found.setdefault((rec.hardware_key, rec.target_key), rec.hardware)
    return found


def _named(hardware: str, key: str, fingerprint: dict) -> bool:
    text = hardware.strip().lower()
    names = {str(fingerprint.get(f, "")).lower() for f in ("name", "model")} - {""}
    return text in names or (len(text) >= 4 and key.startswith(text))


def _labels(machines: dict) -> str:
    """The machines of `_machines`, each with its target config where they differ."""
    several_targets = len({tk for _, tk in machines}) > 1
    return "; ".join(machine_label(fp, hw) + (f" for target {tk}" if several_targets else "")
                     for (hw, tk), fp in sorted(machines.items()))


def choose_records(db, tasks, target, versions, hardware: str | None = None,
                   say: Callable[[str], None] = lambda line: None) -> list:
    """The best record of each task: this machine's, or the machine `hardware` names,
    or the one other machine that measured it (said through `say`). A UserError when
    there is none, or when the choice is not clear (several machines: named)."""
    return [_choose(db, task, target, versions, hardware, say) for task in tasks]


def _choose(db, task, target, versions, hardware, say):
    if hardware is None:
        rec = db.best(task.key, target.key, target.hardware_key, versions)
        if rec is not None:
            return rec
    machines = _machines(db, task, target, versions)
    where = f"{task.name} on this {target.kind} target in {db.url}"
    if hardware is not None:
        picked = {m: fp for m, fp in machines.items() if _named(hardware, m[0], fp)}
        if not picked:
            others = f"machines with records: {_labels(machines)}" if machines else \
                "no machine has one; run `autosched tune` first"
            raise UserError(f"--hardware {hardware}: no valid record of {where} from that "
                            f"machine; {others}")
    else:
        picked = machines
        if not picked:
            raise UserError(f"no valid record for {where} from this machine or another; "
                            "run `autosched tune` first")
    if len(picked) > 1 and hardware is None:
        raise UserError(f"no valid record for {where} from this machine, and "
                        f"{len(picked)} other machines measured it: {_labels(picked)}; "
                        "choose one with --hardware KEY_OR_NAME")
    if len(picked) > 1:
        raise UserError(f"--hardware {hardware}: {len(picked)} machines match for {where}: "
                        f"{_labels(picked)}; name one by its hardware key")
    ((hw, tk), fingerprint), = picked.items()
    rec = db.best(task.key, tk, hw, versions)
    if hw != target.hardware_key:
        say(f"{task.name}: records of {machine_label(fingerprint, hw)}, measured on "
            "another machine")
    return rec


def _records_target(target, records):
    """The target the chosen records were measured under: `target` itself, or for cuda
    records of another GPU, the config with that GPU's limits (one for the library)."""
    keys = {r.target_key for r in records}
    if keys == {target.key}:
        return target
    if len(keys) > 1:
        raise UserError("the chosen records were measured under different target configs "
                        f"({', '.join(sorted(keys))}); export them one machine at a time "
                        "with --hardware")
    from .target import TargetSpec

    return TargetSpec(target.kind, json.loads(keys.pop()), target.fingerprint,
                      target.has_local_device)


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
            "hardware_key": choice.hardware_key, "meta": meta})
    return {"format": MANIFEST_FORMAT, "library": LIBRARY_NAME, "target": target.config,
            "target_key": target.key, "hardware": _measuring_machine(choices, target),
            "versions": versions, "kernels": kernels}


def _measuring_machine(choices, target) -> dict:
    """The fingerprint of the machine that measured every chosen kernel (records of
    another machine: that one's); this machine's when they are not all of one."""
    machines = {c.hardware_key: c.hardware for c in choices if c.hardware_key}
    if len(machines) == 1 and len([c for c in choices if c.hardware_key]) == len(choices):
        (fingerprint,) = machines.values()
        return dict(fingerprint or {})
    return target.fingerprint


def export_tasks(tasks, target_text: str, out_dir: str, db_url: str | None = None,
                 metas: list[dict] | None = None, hardware: str | None = None,
                 say: Callable[[str], None] | None = None) -> str:
    """Build the library for `tasks`; returns the manifest path. The output directory is
    replaced atomically: a failure leaves any previous library untouched. Whose records
    are used: see `choose_records` (`hardware`, and `say` for the line that says another
    machine's are taken; default: standard error)."""
    from .db import DEFAULT_DB_URL, open_database
    from .target import resolve_target
    from .validation import check_tasks

    target = resolve_target(target_text)
    check_tasks(tasks, target)
    versions = current_versions(SPACE_VERSION)
    db = open_database(db_url or DEFAULT_DB_URL)
    try:
        records = choose_records(db, tasks, target, versions, hardware, say or _stderr)
    finally:
        db.close()
    return write_library(tasks, [KernelChoice.of_record(r) for r in records],
                         _records_target(target, records), out_dir, metas)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


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
        lib_path = os.path.join(staging, LIBRARY_NAME)
        cuda = _compile_library(tvm.IRModule(funcs), target, lib_path)
        if cuda is not None:
            manifest["cuda"], cuda_text = cuda
        manifest["source"] = _write_sources(staging, manifest, funcs,
                                            cuda_text if cuda is not None else None, lib_path)
        write_manifest(os.path.join(staging, MANIFEST_NAME), manifest)
        replace_dir(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return os.path.join(out_dir, MANIFEST_NAME)


def _write_sources(staging: str, manifest: dict, funcs: dict, cuda_text: str | None,
                   lib_path: str) -> dict:
    """The library's kernels as text, beside it, so they can be read without the database
    or the op file (`KernelLibrary.source`): each kernel's scheduled TIR as TVMScript
    (`source/<symbol>.py`, named in its manifest entry), and for CUDA the generated
    source and, where cuobjdump is installed, the SASS of the library's fatbin. Returns
    the manifest's "source" map of the library-wide files."""
    import tvm

    os.makedirs(os.path.join(staging, SOURCE_DIR))
    for entry in manifest["kernels"]:
        rel = f"{SOURCE_DIR}/{entry['symbol']}.py"
        script = tvm.IRModule({entry["symbol"]: funcs[entry["symbol"]]}).script()
        _write_text(os.path.join(staging, rel), script)
        entry["source"] = {"tir": rel}
    found = {}
    if cuda_text is not None:
        found["cuda"] = f"{SOURCE_DIR}/kernels.cu"
        _write_text(os.path.join(staging, found["cuda"]), cuda_text)
        from .measure.cuda import sass

        if manifest.get("cuda", {}).get("binary") == "fatbin" and sass.available():
            found["sass"] = f"{SOURCE_DIR}/kernels.sass"
            _write_text(os.path.join(staging, found["sass"]), sass.dump_sass(lib_path))
    return found


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _compile_library(mod, target, path: str) -> tuple[dict, str] | None:
    """Compile `mod` and export it to `path`. A CUDA library holds device code for
    exactly the target's arch (made here, by `measure.cuda.compiler`, never source to compile
    where it loads); returns what the manifest records about it and the generated CUDA
    source (None for llvm)."""
    import tvm

    if target.kind != "cuda":
        tvm.compile(mod, target=target.tvm()).export_library(path)
        return None
    from .errors import InfrastructureError
    from .measure.cuda import fatbin
    from .measure.cuda.compiler import CudaCompileError, build_cuda, cuda_source

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
    return build.describe(), cuda_source(build.executable)


def write_manifest(path: str, manifest: dict) -> None:
    """`manifest.json` as the loader reads it (callables named, anything else as text)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True, default=_json_default)


def _json_default(obj):
    if callable(obj):
        return getattr(obj, "__name__", str(obj))
    return str(obj)


def replace_dir(staging: str, out_dir: str) -> None:
    """Put the finished `staging` directory at `out_dir`, replacing what was there, so
    that a reader sees the old output or the new one, never half of either."""
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
           load_timeout_s: float | None = None, hardware: str | None = None,
           say: Callable[[str], None] | None = None) -> str:
    """`autosched export`: best records of the selected workloads -> a kernel library.
    `load_timeout_s` limits loading the op file (None: the loader's default); `hardware`
    and `say`: see `export_tasks`."""
    from .workload import LOAD_TIMEOUT_S, load_instances, make_task

    timeout = LOAD_TIMEOUT_S if load_timeout_s is None else load_timeout_s
    pairs = load_instances(op_file, workloads, args, timeout)
    tasks = [make_task(d, a, timeout) for d, a in pairs]
    return export_tasks(tasks, target, out_dir, db_url, [d.meta for d, _ in pairs],
                        hardware, say)
