"""Exact accounting of the activation memory a forward pass saves for backward.

"Activation memory" throughout the runtime means: the bytes of the distinct storages that
the autograd graph holds for backward when the forward pass ends, leaving out parameters
and buffers (model state that is resident anyway). Views of one storage count it once;
a storage saved by several ops counts once.

The meter sees saved tensors through `torch.autograd.graph.saved_tensors_hooks`, pushed
outermost around the forward pass. Two mechanisms hold tensors for backward outside the
saved-tensor slots that hooks see, and report them here themselves:

* selective checkpointing caches op outputs in its dispatch mode (reported in
  `checkpointing.py`: by the policy from `SelectiveCheckpointContext.op_output`, or on
  older torch from the cache after the forward);
* offloading replaces a saved tensor by a host copy inside its own, inner hooks
  (reported by `offload.py` as host bytes).

Non-reentrant checkpointing needs no help: it saves its inputs through the outer hooks
and keeps only recipes (no memory) for what it recomputes.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

_ACTIVE: list["SavedTensorMeter"] = []
OUTSIDE = "<outside layers>"


def storage_key(t: torch.Tensor):
    """Identity of the storage behind a tensor (views share it), or None if it has none."""
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return (t.device.type, t.device.index, s.data_ptr(), s.nbytes())


def storage_nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


@dataclass
class SavedStorage:
    """One distinct storage saved for backward: its size, where it lives, who saved it."""

    nbytes: int
    where: str                      # "device" or "host"
    contexts: set = field(default_factory=set)


class SavedTensorMeter:
    """Counts bytes saved for backward while active (a context manager around a forward).

    `exclude` are tensors never counted (the model's parameters and buffers). `context`
    is a label the caller may change while the meter runs (the profiler sets it to the
    layer being executed); every saved storage records the labels that saved it.
    """

    def __init__(self, exclude=()):
        self._excluded = {k for k in (storage_key(t) for t in exclude) if k is not None}
        self.storages: dict = {}
        self.context = OUTSIDE
        self._refs: list = []   # keeps saved storages alive: their keys stay unique
        self._stack: contextlib.ExitStack | None = None

    # -- recording -------------------------------------------------------------------
    def record(self, t: torch.Tensor, where: str = "device") -> None:
        """Count `t`'s storage as saved for backward (once, whoever saves it again)."""
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            return
        key = storage_key(t)
        if key is None or key in self._excluded or key[3] == 0:
            return
        entry = self.storages.get(key)
        if entry is None:
            entry = self.storages[key] = SavedStorage(key[3], where)
            self._refs.append(t)
        entry.contexts.add(self.context)

    def _pack(self, t):
        self.record(t)
        return t

    @staticmethod
    def _unpack(t):
        return t

    # -- context ------------------------------------------------------------------------
    def __enter__(self):
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack,
                                                                           self._unpack))
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        self._stack.close()
        self._stack = None
        return False

    def release(self) -> None:
        """Drop the references that kept saved storages alive (totals stay readable)."""
        self._refs.clear()

    # -- results ------------------------------------------------------------------------
    @property
    def device_bytes(self) -> int:
        return sum(s.nbytes for s in self.storages.values() if s.where == "device")

    @property
    def host_bytes(self) -> int:
        return sum(s.nbytes for s in self.storages.values() if s.where == "host")

    def keys(self, where: str = "device") -> set:
        return {k for k, s in self.storages.items() if s.where == where}


def report_saved(t: torch.Tensor, where: str = "device") -> None:
    """Tell the active meters that a mechanism holds `t` for backward outside autograd's
    saved-tensor slots (a selective-checkpoint cache entry, an offloaded host copy)."""
    for meter in _ACTIVE:
        meter.record(t, where)


def model_state(model: torch.nn.Module) -> list:
    """The tensors a meter must leave out: parameters and buffers."""
    return [*model.parameters(), *model.buffers()]

