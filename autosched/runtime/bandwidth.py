"""Host <-> device copy bandwidth: measured once per machine and device, kept in JSON.

On CUDA: pinned host memory to and from the device, timed with CUDA events, and copies can
run beside compute (copy engines): `overlap=True`. On the CPU there is no separate device
memory and no copy engine: the number stored is the bandwidth of the copy the CPU offload
path makes (a clone of a few-MiB buffer, fresh allocation included), and `overlap=False`
(a copy occupies the core that would compute).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

FORMAT = 1
DEFAULT_PATH = Path(os.path.expanduser("~/.cache/autosched/bandwidth.json"))
CHUNK_BYTES = 4 << 20


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


def device_identity(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    return f"cpu:{cpu}:threads={torch.get_num_threads()}"


def _time_cpu_copy(repeats: int = 15) -> float:
    src = torch.ones(CHUNK_BYTES, dtype=torch.uint8)
    for _ in range(3):
        src.clone()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        src.clone()
        times.append(time.perf_counter() - t0)
    return CHUNK_BYTES / statistics.median(times)


def _time_cuda_copy(device, to_device: bool, repeats: int = 10) -> float:
    host = torch.ones(16 * CHUNK_BYTES, dtype=torch.uint8, pin_memory=True)
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


def measure(device: torch.device) -> Bandwidth:
    """Measure now (about a tenth of a second)."""
    ident = device_identity(device)
    if device.type == "cuda":
        return Bandwidth(_time_cuda_copy(device, False), _time_cuda_copy(device, True), True,
                         "pinned host <-> device copies, CUDA events", ident)
    bw = _time_cpu_copy()
    return Bandwidth(bw, bw, False, "CPU memcpy (clone of 4 MiB buffers): no separate "
                     "device memory on the CPU", ident)


def host_device_bandwidth(device: torch.device, path: str | os.PathLike | None = None,
                          refresh: bool = False) -> Bandwidth:
    """The stored bandwidth for this device, measuring and storing it the first time."""
    path = Path(path) if path is not None else DEFAULT_PATH
    ident = device_identity(device)
    table = _read(path)
    if not refresh and ident in table.get("devices", {}):
        return Bandwidth.from_json(table["devices"][ident])
    bw = measure(device)
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
