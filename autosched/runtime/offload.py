"""Offloading a layer's saved activations to host memory, with prefetch before backward.

Inside an offloaded layer's forward, saved-tensor hooks copy each saved storage to host
memory once (views of one storage share the copy) and autograd keeps only a small handle.
Before that layer's backward the copies are brought back ("prefetch") and the handles
unpack to views of the device copy.

On CUDA the copies run on side streams: device-to-host on an offload stream (the device
copy is released when the next layer's forward has finished, the window the predictor
gives it), host-to-device on a prefetch stream started when the next layer's backward
begins; unpacking waits for the copy's event. On the CPU there is no copy engine: the
copies are plain memcpys on the calling thread, and host and device are the same memory,
so offloading moves activations out of the tensors autograd holds (what the budget counts)
without lowering the process's memory. Parameters and buffers are never offloaded.

Host buffers come from a pool (HostPool) and go back to it once backward has unpacked
them, so a training loop copies into warm memory (pinned on CUDA) instead of allocating
every step. A storage is therefore available to one backward per forward, as with
selective checkpointing; a second backward through an offloaded layer is an error.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from .layers import tensors_in
from .meter import report_saved, storage_key

MIN_OFFLOAD_BYTES = 1024      # smaller storages stay on the device (copy overhead > gain)


class HostPool:
    """Host buffers kept for reuse, by size in bytes (pinned when they serve a GPU)."""

    def __init__(self):
        self._free = defaultdict(list)

    def take(self, nbytes: int, pin: bool) -> torch.Tensor:
        free = self._free[(nbytes, pin)]
        if free:
            return free.pop()
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)

    def give(self, buf: torch.Tensor) -> None:
        self._free[(buf.numel(), buf.is_pinned())].append(buf)

    @property
    def bytes_held(self) -> int:
        return sum(n * len(v) for (n, _), v in self._free.items())


@dataclass
class _Handle:
    entry: "_Stored"
    dtype: torch.dtype
    size: tuple
    stride: tuple
    offset: int


class _Stored:
    """One storage: the original until its copy is safe, the host copy, the prefetched copy."""

    def __init__(self, original: torch.Tensor):
        self.original = original          # uint8 view of the whole device storage
        self.home = original.device       # where backward wants it back
        self.host = None
        self.device = None                # the prefetched copy
        self.event = None
        self.handles = 0                  # saved slots pointing here
        self.unpacked = 0

    def to_host(self, stream, pool: HostPool) -> None:
        """Copy to host memory: on CUDA on `stream` (None: the current stream)."""
        src = self.original
        self.host = pool.take(src.numel(), pin=src.is_cuda)   # a separate tensor
        if src.is_cuda:
            stream = stream or torch.cuda.current_stream(src.device)
            stream.wait_stream(torch.cuda.current_stream(src.device))
            with torch.cuda.stream(stream):
                self.host.copy_(src, non_blocking=True)
                self.event = torch.cuda.Event()
                self.event.record(stream)
        else:
            self.host.copy_(src)

    def drop_original(self) -> None:
        if self.event is not None:
            self.event.synchronize()
            self.event = None
        self.original = None

    def to_device(self, stream) -> None:
        """Start the copy back: on CUDA on `stream` (None: the current stream)."""
        if self.device is not None:
            return
        if self.host is None:
            raise RuntimeError("offloaded activations were already used by a backward: an "
                               "offloaded layer supports one backward per forward")
        if self.original is not None:     # never released (the copy was not needed yet)
            self.device = self.original
            return
        if self.home.type == "cuda":
            stream = stream or torch.cuda.current_stream(self.home)
            with torch.cuda.stream(stream):
                self.device = torch.empty(self.host.numel(), dtype=torch.uint8,
                                          device=self.home)
                self.device.copy_(self.host, non_blocking=True)
                self.event = torch.cuda.Event()
                self.event.record(stream)
        else:
            self.device = self.host.clone()

    def ready(self) -> torch.Tensor:
        if self.event is not None:
            current = torch.cuda.current_stream(self.device.device)
            current.wait_event(self.event)
            self.device.record_stream(current)   # allocated on the prefetch stream
            self.event = None
        return self.device


class LayerOffload:
    """Saved-tensor hooks for one layer's forward, plus its prefetch and release."""

    def __init__(self, excluded_keys: set, streams=None, pool: HostPool | None = None):
        self.excluded = excluded_keys
        self.streams = streams          # (offload stream, prefetch stream) on CUDA
        self.pool = pool if pool is not None else HostPool()
        self.entries: list[_Stored] = []
        self._by_key: dict = {}         # only while the forward runs: keys are unique then

    def hooks(self):
        """The saved-tensor hooks (pack, unpack) for the layer's forward."""
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def pack(self, t: torch.Tensor):
        """Pack hook: copy `t`'s storage to the host (once per storage), keep a handle."""
        key = storage_key(t)
        if (key is None or key in self.excluded or t.layout != torch.strided
                or key[3] < MIN_OFFLOAD_BYTES):
            report_saved(t)
            return t
        entry = self._by_key.get(key)
        if entry is None:
            raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
            entry = self._by_key[key] = _Stored(raw)
            entry.to_host(self.streams[0] if self.streams else None, self.pool)
            report_saved(entry.host, "host")
            self.entries.append(entry)
        entry.handles += 1
        return _Handle(entry, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())

    def unpack(self, packed):
        """Unpack hook: a view of the prefetched device copy (prefetching it if needed)."""
        if not isinstance(packed, _Handle):
            return packed
        entry = packed.entry
        entry.to_device(self.streams[1] if self.streams else None)
        raw = entry.ready()
        out = torch.empty(0, dtype=packed.dtype, device=raw.device)
        out.set_(raw.untyped_storage(), packed.offset, packed.size, packed.stride)
        entry.unpacked += 1
        if entry.unpacked >= entry.handles:
            # Backward holds what it unpacked: our device copy and the host buffer can go.
            entry.device = None
            self.pool.give(entry.host)
            entry.host = None
        return out

    def end_forward(self, release: bool) -> None:
        """The layer's forward is over: storage keys may be reused from now on. With
        `release` (always on the CPU) the originals go now, else at release_device_copies."""
        self._by_key.clear()
        if release or not self.streams:
            self.release_device_copies()

    def release_device_copies(self) -> None:
        """End of the offload window: wait for the device-to-host copies, free the originals."""
        for entry in self.entries:
            entry.drop_original()

    def prefetch(self) -> None:
        """Start bringing every stored storage back to the device."""
        for entry in self.entries:
            entry.to_device(self.streams[1] if self.streams else None)


class SideStreams:
    """The (offload, prefetch) side streams of a CUDA device, made on first use; None on
    the CPU."""

    def __init__(self):
        self._streams = None

    def get(self, device: torch.device):
        if self._streams is None:
            self._streams = ((torch.cuda.Stream(device), torch.cuda.Stream(device))
                             if device.type == "cuda" else ())
        return self._streams or None


class OffloadSchedule:
    """Coordinates offloaded layers: when device copies are freed and prefetches start.

    Layer i's device-to-host copies have until layer i+1's forward ends (the last layer:
    its own forward end); its host-to-device prefetch starts when layer i+1's backward
    begins (the last layer: its own backward start). These are the windows the predictor
    (prediction.py) hides transfers in.
    """

    def __init__(self, n_layers: int):
        self.n_layers = n_layers
        self.live: dict[int, LayerOffload] = {}
        self.pool = HostPool()
        self.side_streams = SideStreams()

    def forward_end(self, index: int, output) -> None:
        prev = self.live.get(index - 1)
        if prev is not None:
            prev.release_device_copies()
        if index == self.n_layers - 1 and index in self.live:
            self.live[index].release_device_copies()
        for t in tensors_in(output):
            if t.requires_grad:
                t.register_hook(lambda grad, i=index: self.backward_start(i))
                break

    def backward_start(self, index: int) -> None:
        # Popped: the graph's unpack hooks keep what they need; the schedule lets go.
        for i in (index, index - 1):
            off = self.live.pop(i, None)
            if off is not None:
                off.prefetch()


def prefetch_on_backward(out, off: LayerOffload):
    """Without a schedule (a layer on its own): prefetch when its backward starts."""
    for t in tensors_in(out):
        if t.requires_grad:
            t.register_hook(lambda grad: off.prefetch())
            break
    return out
