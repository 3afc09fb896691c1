"""Calling the kernels of one workload from PyTorch.

A workload may have several kernels in a library (shape and dtype variants). `OpKernels`
picks the one whose inputs match the tensors given, checks the device, makes the inputs
contiguous and aligned (TVM kernels assume both: a misaligned pointer can crash inside
vectorised code), allocates the outputs that TE kernels write into, and calls the kernel.
Tensors pass to the kernel zero-copy through DLPack. The same matching gives the fake
(meta) implementation that torch.compile traces with.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from .errors import KernelArgumentError, KernelDtypeError
from .manifest import KernelEntry, specs_text

log = logging.getLogger("autosched.torch")

ALIGNMENT = 64  # bytes; TVM's default buffer alignment on the CPU

_DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
    "float64": torch.float64, "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
}


def torch_dtype(name: str) -> torch.dtype | None:
    return _DTYPES.get(name)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class Variant:
    """One kernel: its manifest entry, the callable, and its output shapes and dtypes."""

    entry: KernelEntry
    function: Callable
    outputs: tuple[tuple[tuple[int, ...], torch.dtype], ...]


@dataclass(frozen=True)
class Reference:
    """The PyTorch implementation run for shapes that no kernel has (fallback=True)."""

    name: str
    function: Callable
    kwargs: dict


def _concrete(shape) -> tuple[int, ...]:
    # Symbolic sizes (torch.compile with dynamic shapes) are specialised here: a kernel
    # exists for fixed shapes only, so the compiled graph is guarded on them.
    return tuple(int(s) for s in shape)


class OpKernels:
    """The kernels of one workload, bound to one loaded library."""

    def __init__(self, workload: str, variants: list[Variant], device_type: str,
                 reference: Reference | None = None, stream_context: Callable | None = None):
        self.workload = workload
        self.device_type = device_type
        self.reference = reference
        self.input_names = tuple(s.name for s in variants[0].entry.inputs)
        self.output_names = tuple(s.name for s in variants[0].entry.outputs)
        self.variants = {self.key_of(v.entry): v for v in variants}
        self._stream_context = stream_context
        self._fallback_logged: set = set()

    @staticmethod
    def key_of(entry: KernelEntry) -> tuple:
        """The dispatch key of a manifest entry: its inputs' shapes and torch dtypes."""
        return tuple((s.shape, torch_dtype(s.dtype)) for s in entry.inputs)

    @property
    def qualname(self) -> str:
        return f"autosched.{self.workload}"

    # ------------------------------------------------------------------ matching
    def _given(self, tensors) -> str:
        return "(" + ", ".join(f"{n}: {_dtype_name(t.dtype)}{list(t.shape)}"
                               for n, t in zip(self.input_names, tensors)) + ")"

    def _known(self) -> str:
        entries = [v.entry for v in self.variants.values()]
        text = "; ".join(specs_text(e.inputs) for e in entries[:4])
        more = f" and {len(entries) - 4} more" if len(entries) > 4 else ""
        return text + more

    def _check_devices(self, tensors, allowed: tuple[str, ...]) -> None:
        devices = {t.device for t in tensors}
        bad = [(n, t.device) for n, t in zip(self.input_names, tensors)
               if t.device.type not in allowed]
        if bad or len(devices) > 1:
            given = ", ".join(f"{n} on {t.device}" for n, t in zip(self.input_names, tensors))
            raise KernelArgumentError(f"{self.qualname} runs on {self.device_type} tensors "
                                      f"(all on one device); got {given}")

    def match(self, tensors) -> tuple | None:
        """The key of the kernel for these tensors; None when only the fallback applies.
        Raises when no kernel matches and there is no fallback."""
        key = tuple((_concrete(t.shape), t.dtype) for t in tensors)
        if key in self.variants:
            return key
        if self.reference is not None:
            return None
        shapes = tuple(k[0] for k in key)
        if any(tuple(s for s, _ in k) == shapes for k in self.variants):
            raise KernelDtypeError(f"{self.qualname} expects dtypes {self._known()}, "
                                   f"got {self._given(tensors)}")
        raise KernelArgumentError(
            f"{self.qualname} has no kernel for {self._given(tensors)}; the library has "
            f"{self._known()} (export these shapes, or load the library with fallback=True "
            "and a torch_reference)")

    # ------------------------------------------------------------------ running
    def _prepare(self, t: torch.Tensor) -> torch.Tensor:
        if not t.is_contiguous() or t.data_ptr() % ALIGNMENT:
            return t.clone(memory_format=torch.contiguous_format)
        return t

    def run(self, tensors) -> tuple[torch.Tensor, ...]:
        """Run the matching kernel (or the reference) and return the outputs."""
        # the common call first, with no more Python than it needs: every microsecond
        # here is paid on each call of the kernel inside a model
        device = tensors[0].device
        variant = self.variants.get(tuple([(t.shape, t.dtype) for t in tensors]))
        if variant is None or device.type != self.device_type or \
                any(t.device != device for t in tensors):
            variant = self._checked_variant(tensors)
            if variant is None:
                return self._run_reference(tensors, fake=False)
        inputs = [self._prepare(t) for t in tensors]
        outputs = [torch.empty(shape, dtype=dtype, device=device)
                   for shape, dtype in variant.outputs]
        if self._stream_context is not None:
            with self._stream_context():
                variant.function(*inputs, *outputs)
        else:
            variant.function(*inputs, *outputs)
        return tuple(outputs)

    def _checked_variant(self, tensors) -> Variant | None:
        """The kernel for tensors the common call did not take, with every check and
        its error; None where the reference runs."""
        self._check_devices(tensors, (self.device_type,))
        key = self.match(tensors)
        return None if key is None else self.variants[key]

    def fake(self, tensors) -> tuple[torch.Tensor, ...]:
        """Outputs with the right shapes and dtypes and no data (FakeTensor / meta)."""
        self._check_devices(tensors, (self.device_type, "meta"))
        key = self.match(tensors)
        if key is None:
            return self._run_reference(tensors, fake=True)
        device = tensors[0].device
        return tuple(torch.empty(shape, dtype=dtype, device=device)
                     for shape, dtype in self.variants[key].outputs)

    def _run_reference(self, tensors, fake: bool) -> tuple[torch.Tensor, ...]:
        if not fake:
            key = tuple((tuple(t.shape), t.dtype) for t in tensors)
            if key not in self._fallback_logged:
                self._fallback_logged.add(key)
                log.info("%s: no kernel for %s, running the torch reference %s",
                         self.qualname, self._given(tensors), self.reference.name)
        result = self.reference.function(*tensors, **self.reference.kwargs)
        outs = result if isinstance(result, (tuple, list)) else (result,)
        if len(outs) != len(self.output_names) or \
                not all(isinstance(o, torch.Tensor) for o in outs):
            raise KernelArgumentError(f"{self.qualname}: reference {self.reference.name} "
                                      f"should return {len(self.output_names)} tensor(s)")
        if fake:
            return tuple(torch.empty(o.shape, dtype=o.dtype, device=o.device) for o in outs)
        # A custom op's outputs may not alias its inputs; references such as `x.t()` would.
        storages = {t.untyped_storage().data_ptr() for t in tensors}
        fresh = []
        for o in outs:
            o = o.contiguous()
            if o.untyped_storage().data_ptr() in storages:
                o = o.clone()
            fresh.append(o)
        return tuple(fresh)
