"""Host <-> device copy bandwidth: measured once per machine and device, kept in JSON.

On CUDA: pinned host memory to and from the device, timed with CUDA events, and copies can
run beside compute (copy engines): `overlap=True`. On the CPU there is no separate device
memory and no copy engine: the numbers stored are memcpy bandwidths of the CPU offload path
itself (offload.LayerOffload on 1-4 MiB tensors, steady state: into pooled host buffers on
the way out, into newly allocated tensors on the way back, page faults included; timed with
the profile's clock), and `overlap=False` (a copy occupies the core that would compute).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

FORMAT = 3


def default_path() -> Path:
    """~/.cache/autosched/bandwidth.json (read when a plan is made, not at import)."""
    return Path(os.path.expanduser("~/.cache/autosched/bandwidth.json"))


@dataclass(frozen=True)
class Bandwidth:
    d2h_bytes_per_s: float
    h2d_bytes_per_s: float
    overlap: bool          # can copies run beside compute (a copy engine)?
    source: str            # how it was measured
    device: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Bandwidth":
        return cls(float(d["d2h_bytes_per_s"]), float(d["h2d_bytes_per_s"]), bool(d["overlap"]),
                   str(d["source"]), str(d["device"]))


def device_identity(device: torch.device, clock: str = "wall") -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    return f"cpu:{cpu}:threads={torch.get_num_threads()}:clock={clock}"


def _time_cpu_copy(clock: str, rounds: int = 7) -> tuple[float, float]:
    """(d2h, h2d) bytes/s of the CPU offload path itself: saved tensors of 1-4 MiB packed
    into pooled host buffers (warm after the first round), then prefetched into newly
    allocated tensors. Those are kept until the end so every prefetch writes fresh pages,
    as it does inside a training step (page faults included: measured in-step, reusing
    freed memory was the exception)."""
    from .offload import HostPool, LayerOffload
    from .measured_step import clock_fn

    now = clock_fn(clock)
    srcs = [torch.ones(n << 18, dtype=torch.float32) for n in (1, 2, 4, 1, 3, 2, 4, 1)]
    total = sum(s.numel() * 4 for s in srcs)
    pool, d2h, h2d, fetched = HostPool(), [], [], []
    for _ in range(rounds):
        off = LayerOffload(set(), pool=pool)
        t0 = now()
        handles = [off.pack(s) for s in srcs]
        off.end_forward(release=True)
        t1 = now()
        off.prefetch()
        unpacked = [off.unpack(h) for h in handles]
        t2 = now()
        d2h.append(total / (t1 - t0))
        h2d.append(total / (t2 - t1))
        fetched.append(unpacked)
        del handles, off
    return statistics.median(d2h), statistics.median(h2d)


def _time_cuda_copy(device, to_device: bool, repeats: int = 10) -> float:
    host = torch.ones(64 << 20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(host.numel(), dtype=torch.uint8, device=device)
    src, dst = (host, dev) if to_device else (dev, host)
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize(device)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return host.numel() / statistics.median(times)


def measure(device: torch.device, clock: str = "wall") -> Bandwidth:
    """Measure now (a fraction of a second)."""
    ident = device_identity(device, clock)
    if device.type == "cuda":
        return Bandwidth(_time_cuda_copy(device, False), _time_cuda_copy(device, True), True,
                         "pinned host <-> device copies, CUDA events", ident)
    d2h, h2d = _time_cpu_copy(clock)
    return Bandwidth(d2h, h2d, False, f"CPU memcpy of the offload path ({clock} clock): no "
                     "separate device memory on the CPU", ident)


def host_device_bandwidth(device: torch.device, path: str | os.PathLike | None = None,
                          refresh: bool = False, clock: str = "wall",
                          measure: Callable[[torch.device, str], Bandwidth] = measure
                          ) -> Bandwidth:
    """The stored bandwidth for this device, measuring and storing it the first time.

    measure(device, clock) is how a missing or refreshed entry is measured.
    """
    path = Path(path) if path is not None else default_path()
    ident = device_identity(device, clock)
    table = _read(path)
    if not refresh and ident in table.get("devices", {}):
        return Bandwidth.from_json(table["devices"][ident])
    bw = measure(device, clock)
    table.setdefault("devices", {})[ident] = bw.to_json()
    table["format"] = FORMAT
    _write(path, table)
    return bw


def _read(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("format") == FORMAT else {}


def _write(path: Path, table: dict) -> None:
    # Atomic replace: a crash never leaves a half-written file behind.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(table, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass        # an unwritable cache only costs a re-measurement next time
