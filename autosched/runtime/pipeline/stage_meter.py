"""A pipeline stage's activation memory, measured: bytes saved for backward and still alive.

Per micro-batch, the stage's forward runs under StageMeter, the runtime's
meter.SavedTensorMeter (distinct storages autograd saves, selective-checkpoint caches
included) that also keeps LiveBytes: the bytes of saved storages not yet released, at
every moment of the step, and their peak (the stage's activation memory under 1F1B,
where several micro-batches are in flight). A tensor autograd saves is released when
autograd drops it (the pack hook wraps it in a Held); a selective checkpoint's cache
with its micro-batch's backward, which consumes it. Activations parked on another stage
(parking.py) leave this stage's count while away and enter the host's.
"""
from __future__ import annotations

import threading

import torch

from ..meter import SavedTensorMeter, storage_key


class Held:
    """A tensor saved for backward, counted as alive until autograd drops it. Parking may
    take the tensor away (tensor None) and put a restored copy back."""

    __slots__ = ("tensor", "key", "live", "__weakref__")

    def __init__(self, tensor, key, live):
        self.tensor, self.key, self.live = tensor, key, live

    def __del__(self):
        if self.key is not None:
            self.live.drop(self.key)


class LiveBytes:
    """Bytes alive by key (a storage key, whose last item is its size in bytes, or any
    tuple shaped alike), counted once however many holders a key has; and their peak.
    Thread-safe: parking's transfer threads add and drop too."""

    def __init__(self):
        self.count: dict = {}
        self.reported: dict = {}     # micro-batch -> keys reported in its forward
        self.current: list = []
        self.alive = self.peak = 0
        self.lock = threading.RLock()

    def add(self, key):
        with self.lock:
            n = self.count.get(key, 0)
            self.count[key] = n + 1
            if n == 0:
                self.alive += key[-1]
                self.peak = max(self.peak, self.alive)

    def drop(self, key):
        with self.lock:
            self.count[key] -= 1
            if self.count[key] == 0:
                del self.count[key]
                self.alive -= key[-1]

    def replace(self, old_keys, key) -> None:
        """Drop `old_keys`, then add `key`: the same memory changing owner (a parked
        micro-batch's storages becoming a send in flight) is never counted twice."""
        with self.lock:
            for old in old_keys:
                self.drop(old)
            self.add(key)

    def hold(self, t, key) -> Held:
        self.add(key)
        return Held(t, key, self)

    def hold_reported(self, key):
        if key not in self.current:
            self.current.append(key)
            self.add(key)

    def end_forward(self, micro_batch: int):
        self.reported[micro_batch], self.current = self.current, []

    def end_backward(self, micro_batch: int):
        for key in self.reported.pop(micro_batch, []):
            self.drop(key)


class StageMeter(SavedTensorMeter):
    """The runtime's meter for one micro-batch's forward, also keeping the live count and
    the list of Held it made (what parking may move)."""

    def __init__(self, exclude, live: LiveBytes):
        super().__init__(exclude)
        self.live, self._packing = live, False
        self.held: list = []

    def _key(self, t):
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            return None
        key = storage_key(t)
        return None if key is None or key in self._excluded or key[3] == 0 else key

    def record(self, t, where: str = "device") -> None:
        super().record(t, where)
        key = self._key(t)
        if not self._packing and where == "device" and key is not None:
            self.live.hold_reported(key)

    def _pack(self, t):
        self._packing = True
        try:
            self.record(t)
        finally:
            self._packing = False
        key = self._key(t)
        if key is None:
            return t
        held = self.live.hold(t, key)
        self.held.append(held)
        return held

    @staticmethod
    def _unpack(t):
        return t.tensor if isinstance(t, Held) else t
