"""`load_library`: a kernel library directory -> `torch.ops.autosched.<workload>` ops.

The loaded `KernelLibrary` is the one door from a library to a torch model: load it once
and hand it to what uses its kernels (`autosched.model.backend`, the module swap of
`runtime/library_modules.py`, `runtime.memeff_library_kernels`), so every user sees the
same checks, the same ops and the same manifest.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .compat import check_library
from .dispatch import OpKernels, Variant, torch_dtype
from .errors import LibraryError
from .loader import load_kernels
from .manifest import GRAD_PREFIX, KernelEntry, Manifest, read_manifest
from .ops import backward_plan, bind, check_bindable, graph_op
from .reference import resolve_reference

log = logging.getLogger("autosched.torch")


@dataclass(frozen=True)
class KernelLibrary:
    """A loaded library: its manifest and the torch ops it bound, by workload name."""

    path: Path
    manifest: Manifest
    ops: dict
    fallback: bool

    def __getitem__(self, workload: str):
        return self.ops[workload]

    def __contains__(self, workload: str) -> bool:
        return workload in self.ops

    def graph_op(self, workload: str):
        """The op's overload for graphs AOTAutograd has differentiated: the same kernels
        without an autograd layer, cheaper to call (`ops.graph_op`)."""
        if workload not in self.ops:
            raise KeyError(workload)
        return graph_op(workload)

    def entries(self, workload: str) -> list[KernelEntry]:
        """The manifest's kernels (shape variants) of one workload, in manifest order."""
        return [e for e in self.manifest.kernels if e.workload == workload]

    def source(self, workload: str, kind: str = "tir", variant: int = 0) -> str:
        """The kernel of `workload` as text: its scheduled TIR as TVMScript ("tir"), or
        for a CUDA library the CUDA source ("cuda") or SASS ("sass") of its device
        functions. `variant` picks a shape variant, in manifest order (`entries`).
        What `autosched db show` prints for a record, read from the library itself."""
        from .kernel_text import kernel_text

        entries = self.entries(workload)
        if not entries:
            raise LibraryError(f"{self.path}: no workload {workload!r} (it holds "
                               f"{', '.join(sorted(self.ops)) or 'none'})")
        if not 0 <= variant < len(entries):
            raise LibraryError(f"{workload}: variant {variant} of {len(entries)}")
        return kernel_text(self.manifest, entries[variant], kind)

    def record_ids(self) -> dict[str, str]:
        """{"autosched::<workload>": its kernels' record ids, comma-separated in manifest
        order}: how a plan names the records of the ops it runs."""
        ids: dict[str, list[str]] = {}
        for e in self.manifest.kernels:
            ids.setdefault(f"autosched::{e.workload}", []).append(str(e.record_id))
        return {op: ",".join(v) for op, v in ids.items()}


def _check_group(workload: str, entries: list[KernelEntry]) -> None:
    """All kernels of a workload take and return the same tensors (names and count), and
    no two take the same input shapes and dtypes (the choice would be ambiguous)."""
    first = entries[0]
    names = ([s.name for s in first.inputs], [s.name for s in first.outputs])
    seen = {}
    for e in entries:
        if ([s.name for s in e.inputs], [s.name for s in e.outputs]) != names:
            raise LibraryError(f"workload {workload!r}: kernels {first.symbol} and {e.symbol} "
                               "take different tensors")
        for s in e.inputs + e.outputs:
            if torch_dtype(s.dtype) is None:
                raise LibraryError(f"workload {workload!r}: dtype {s.dtype} of {s.name} has no "
                                   "torch equivalent")
        key = tuple((s.shape, s.dtype) for s in e.inputs)
        if key in seen:
            raise LibraryError(f"workload {workload!r}: kernels {seen[key]} and {e.symbol} take "
                               "the same input shapes; the op could not choose between them")
        seen[key] = e.symbol


def _variant(entry: KernelEntry, module) -> Variant:
    outputs = tuple((s.shape, torch_dtype(s.dtype)) for s in entry.outputs)
    return Variant(entry, module[entry.symbol], outputs)


def _stream_context(device_type: str) -> Callable | None:
    if device_type != "cuda":
        return None
    import tvm_ffi

    return tvm_ffi.use_torch_stream  # kernels run on torch's current stream


def _warn_backward_gaps(manifest: Manifest, groups: dict) -> None:
    """Log forward shapes whose gradient kernels are missing from the library."""
    for workload, entries in groups.items():
        for e in entries:
            for g in e.backward:
                if g.workload not in groups:
                    continue  # reported per input when the gradient is needed
                env = {s.name: s for s in e.inputs + e.outputs}
                env.update({GRAD_PREFIX + s.name: s for s in e.outputs})
                want = tuple((env[t].shape, env[t].dtype) for t in g.inputs)
                have = {tuple((s.shape, s.dtype) for s in b.inputs) for b in groups[g.workload]}
                if want not in have:
                    log.warning("%s: %s%s has no %s kernel for its gradient of %s",
                                manifest.directory, workload, dict(e.args), g.workload, g.input)


def load_library(directory, fallback: bool = False, references: dict | None = None,
                 check_hardware: bool = True) -> KernelLibrary:
    """Load a kernel library made by `autosched export` and register its workloads as
    `torch.ops.autosched.<workload>`.

    Each op dispatches over the workload's shape (and dtype) variants. For other shapes it
    raises a ValueError, or with `fallback=True` runs the workload's `torch_reference`
    (logged once per shape). `references` maps workload names to reference functions and
    overrides those the op file declared. `check_hardware=False` skips the check that this
    CPU or GPU runs the code the library was built for (its instruction set is still
    needed). Raises LibraryError when the library does not fit this process.
    """
    manifest = read_manifest(directory)
    check_library(manifest, check_hardware)
    module = load_kernels(manifest)
    groups = manifest.by_workload()
    references = dict(references or {})
    unknown = sorted(set(references) - set(groups))
    if unknown:
        raise LibraryError(f"references given for workloads the library lacks: {unknown}")
    device_type = manifest.device_type
    prepared = []
    for workload, entries in groups.items():  # check everything before binding anything
        _check_group(workload, entries)
        reference = resolve_reference(entries, references.get(workload)) if fallback else None
        kernels = OpKernels(workload, [_variant(e, module) for e in entries], device_type,
                            reference, _stream_context(device_type))
        check_bindable(kernels)
        prepared.append((kernels, backward_plan(kernels, entries[0].backward, set(groups))))
    ops = {kernels.workload: bind(kernels, plan) for kernels, plan in prepared}
    _warn_backward_gaps(manifest, groups)
    log.info("loaded %d kernels of %d workloads from %s", len(manifest.kernels), len(ops),
             manifest.directory)
    return KernelLibrary(Path(directory), manifest, ops, fallback)
