"""The kernel library's manifest.json: reading it and checking that it is well formed.

This module knows the format only; whether the library fits this machine is `compat.py`'s
question and turning kernels into torch ops is `ops.py`'s. Nothing here imports torch or tvm.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..task import TensorSpec
from .errors import LibraryError

FORMAT = 1
MANIFEST = "manifest.json"
GRAD_PREFIX = "grad:"


@dataclass(frozen=True)
class GradSpec:
    """How the gradient of one forward input is computed: by `workload`, called with the
    forward tensors and incoming gradients that `inputs` names (``x``, ``y``, ``grad:y``)."""

    input: str
    workload: str
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class KernelEntry:
    """One compiled kernel: a shape variant of a workload."""

    symbol: str
    workload: str
    args: dict
    task_key: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    record_id: int | None = None
    latency_s: float | None = None
    meta: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)  # {"tir": path in the library directory}

    @property
    def signature(self) -> str:
        """``(A: float32[64, 64], B: float32[64, 64]) -> (C: float32[64, 64])``"""
        return f"{specs_text(self.inputs)} -> {specs_text(self.outputs)}"

    @property
    def backward(self) -> tuple[GradSpec, ...]:
        return _grad_specs(self)

    @property
    def torch_reference(self) -> str | None:
        return self.meta.get("torch_reference")


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest.json and the directory it came from."""

    directory: Path
    library: str
    target: dict
    target_key: str
    hardware: dict
    versions: dict
    kernels: tuple[KernelEntry, ...]
    cuda: dict = field(default_factory=dict)   # how CUDA device code was made (export)
    source: dict = field(default_factory=dict)  # {"cuda": path, "sass": path} (export)

    @property
    def library_path(self) -> Path:
        return self.directory / self.library

    @property
    def device_type(self) -> str:
        """The torch device type the kernels run on: ``cpu`` or ``cuda``."""
        return "cuda" if self.target.get("kind") == "cuda" else "cpu"

    def by_workload(self) -> dict[str, list[KernelEntry]]:
        """Kernels grouped by workload, in manifest order."""
        groups: dict[str, list[KernelEntry]] = {}
        for k in self.kernels:
            groups.setdefault(k.workload, []).append(k)
        return groups


def specs_text(specs) -> str:
    return "(" + ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in specs) + ")"


def _need(d: dict, key: str, kind, where: str):
    if key not in d:
        raise LibraryError(f"{where}: missing field {key!r}")
    value = d[key]
    if not isinstance(value, kind):
        raise LibraryError(f"{where}: field {key!r} should be {_kind_name(kind)}, "
                           f"got {type(value).__name__}")
    return value


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _tensor_specs(items: list, where: str) -> tuple[TensorSpec, ...]:
    specs = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise LibraryError(f"{at}: expected an object")
        name = _need(item, "name", str, at)
        shape = _need(item, "shape", list, at)
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            raise LibraryError(f"{at}: shape must be a list of non-negative integers")
        specs.append(TensorSpec(name, tuple(shape), _need(item, "dtype", str, at)))
    return tuple(specs)


def _kernel(item, i: int, where: str) -> KernelEntry:
    at = f"{where}: kernels[{i}]"
    if not isinstance(item, dict):
        raise LibraryError(f"{at}: expected an object")
    entry = KernelEntry(
        symbol=_need(item, "symbol", str, at),
        workload=_need(item, "workload", str, at),
        args=_need(item, "args", dict, at),
        task_key=_need(item, "task_key", str, at),
        inputs=_tensor_specs(_need(item, "inputs", list, at), f"{at}.inputs"),
        outputs=_tensor_specs(_need(item, "outputs", list, at), f"{at}.outputs"),
        record_id=item.get("record_id"),
        latency_s=item.get("latency_s"),
        meta=dict(item.get("meta") or {}),
        source=_source_paths(item.get("source"), at),
    )
    if not entry.workload.isidentifier():
        raise LibraryError(f"{at}: workload name {entry.workload!r} is not an identifier")
    if not entry.inputs or not entry.outputs:
        raise LibraryError(f"{at}: a kernel needs at least one input and one output")
    names = [s.name for s in entry.inputs + entry.outputs]
    if len(set(names)) != len(names):
        raise LibraryError(f"{at}: tensor names repeat: {names}")
    _grad_specs(entry)  # validates the backward metadata early
    return entry


def _grad_specs(entry: KernelEntry) -> tuple[GradSpec, ...]:
    """Parse and check `meta["backward"]` against the kernel's tensor names."""
    spec = entry.meta.get("backward") or {}
    where = f"workload {entry.workload!r}: backward metadata"
    if not isinstance(spec, dict):
        raise LibraryError(f"{where} should map input names to gradient kernels")
    inputs = {s.name for s in entry.inputs}
    known = inputs | {s.name for s in entry.outputs} | \
        {GRAD_PREFIX + s.name for s in entry.outputs}
    grads = []
    for name, g in spec.items():
        if name not in inputs:
            raise LibraryError(f"{where} names {name!r}, which is not an input "
                               f"(inputs: {', '.join(sorted(inputs))})")
        if not isinstance(g, dict) or not isinstance(g.get("workload"), str) \
                or not isinstance(g.get("inputs"), list):
            raise LibraryError(f"{where} for {name!r} should be "
                               "{'workload': NAME, 'inputs': [TOKEN, ...]}")
        bad = [t for t in g["inputs"] if t not in known]
        if bad:
            raise LibraryError(f"{where} for {name!r}: unknown tensor {bad[0]!r} "
                               f"(use one of {', '.join(sorted(known))})")
        grads.append(GradSpec(name, g["workload"], tuple(g["inputs"])))
    return tuple(grads)


def read_manifest(directory) -> Manifest:
    """Read and check DIR/manifest.json; raise LibraryError naming what is wrong."""
    directory = Path(directory)
    path = directory / MANIFEST
    if not directory.is_dir():
        raise LibraryError(f"kernel library not found: {directory} is not a directory")
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise LibraryError(f"{path}: no manifest (is {directory} a kernel library "
                           "made by `autosched export`?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LibraryError(f"{path}: unreadable manifest ({e})") from None
    where = str(path)
    if not isinstance(data, dict):
        raise LibraryError(f"{where}: expected a JSON object")
    fmt = data.get("format")
    if fmt != FORMAT:
        raise LibraryError(f"{where}: library format {fmt!r}; this autosched reads format "
                           f"{FORMAT} (re-export the library with this version)")
    kernels = tuple(_kernel(item, i, where)
                    for i, item in enumerate(_need(data, "kernels", list, where)))
    if not kernels:
        raise LibraryError(f"{where}: the library holds no kernels")
    symbols = [k.symbol for k in kernels]
    if len(set(symbols)) != len(symbols):
        raise LibraryError(f"{where}: kernel symbols repeat")
    library = _need(data, "library", str, where)
    if Path(library).name != library:
        raise LibraryError(f"{where}: library name {library!r} must be a file in the "
                           "library directory")
    target = _need(data, "target", dict, where)
    _need(target, "kind", str, f"{where}: target")
    return Manifest(directory=directory, library=library,
                    target=target, target_key=str(data.get("target_key", "")),
                    hardware=dict(data.get("hardware") or {}),
                    versions=_need(data, "versions", dict, where), kernels=kernels,
                    cuda=dict(data.get("cuda") or {}),
                    source=_source_paths(data.get("source"), where))


def _source_paths(value, where: str) -> dict:
    """The "source" map of a manifest or kernel entry: kind -> a relative path inside
    the library directory (a library exported before sources were written has none)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise LibraryError(f"{where}: source should map kinds to files")
    for kind, rel in value.items():
        if not isinstance(rel, str) or Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise LibraryError(f"{where}: source {kind!r} must be a path inside the "
                               "library directory")
    return dict(value)
