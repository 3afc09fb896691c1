"""The local NVIDIA GPU as this process would use it: device 0 after CUDA_VISIBLE_DEVICES.

Read without creating a CUDA context in the tuner's process (a context costs hundreds
of MB of GPU memory and pins the device for the process's life, and a forked or
threaded tuner must not own one). Two sources, both outside this process:

- `nvidia-smi -i <id> --query-gpu=...`: name, compute capability, driver version, total
  memory. `<id>` is the first entry of CUDA_VISIBLE_DEVICES (an index or a `GPU-`/`MIG-`
  UUID, as CUDA reads it), or 0 when it is unset.
- a short child interpreter that asks the driver (`libcuda.so.1`: cuInit,
  cuDeviceGetAttribute; no context) for the per-device limits in DEVICE_ATTRIBUTES.
  It inherits CUDA_VISIBLE_DEVICES, so the driver picks the same device.

No `nvidia-smi` on PATH means no GPU, decided without starting anything (`--target
cuda` on a laptop stays instant). CUDA_VISIBLE_DEVICES set to nothing usable ("", "-1",
a word) hides every GPU, as it does for CUDA.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from functools import lru_cache

# CUdevice_attribute / cudaDeviceAttr numbers (the same in both APIs; cuda.h)
DEVICE_ATTRIBUTES = {
    "max_threads_per_block": 1,
    "max_shared_memory_per_block": 8,
    "warp_size": 10,
    "max_registers_per_block": 12,
    "sm_count": 16,
    "l2_cache_bytes": 38,
    "max_threads_per_sm": 39,
    "compute_major": 75,
    "compute_minor": 76,
    "max_shared_memory_per_sm": 81,
    "max_registers_per_sm": 82,
    "max_shared_memory_per_block_optin": 97,
}
SMI_FIELDS = ("name", "compute_cap", "driver_version", "memory.total")
TIMEOUT = 20.0

# Run as `python -c PROBE '<attribute table as JSON>'`: prints the attributes of device 0
# as JSON, or {"error": "..."}.
PROBE = r"""
import ctypes, json, sys
def fail(msg):
    print(json.dumps({"error": msg}))
    sys.exit(0)
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    fail(f"libcuda.so.1: {e}")
def check(call, code):
    if code:
        fail(f"{call} returned CUDA error {code}")
check("cuInit", cu.cuInit(0))
dev = ctypes.c_int()
check("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
out = {}
for key, number in json.loads(sys.argv[1]).items():
    value = ctypes.c_int()
    check("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(ctypes.byref(value), number, dev))
    out[key] = value.value
name = ctypes.create_string_buffer(256)
check("cuDeviceGetName", cu.cuDeviceGetName(name, 256, dev))
out["name"] = name.value.decode(errors="replace")
memory = ctypes.c_size_t()
check("cuDeviceTotalMem_v2", cu.cuDeviceTotalMem_v2(ctypes.byref(memory), dev))
out["memory"] = memory.value
print(json.dumps(out))
"""


def visible_device(cuda_visible_devices: str | None) -> str | None:
    """The `nvidia-smi -i` id of the process's device 0: "0" when the variable is unset,
    else its first entry when that is an index or a GPU-/MIG- UUID; None when it hides
    every device."""
    if cuda_visible_devices is None:
        return "0"
    first = cuda_visible_devices.split(",")[0].strip()
    if first.isdigit() or first.startswith(("GPU-", "MIG-")):
        return first
    return None


def arch_of(compute_capability: str) -> str:
    """"9.0" -> "sm_90". Never the arch-specific "sm_90a": the search spaces emit no
    instruction that needs it (no wgmma, TMA or setmaxnreg), and code for sm_90 runs
    on every sm_90 part, while sm_90a code runs on nothing else."""
    major, _, minor = compute_capability.strip().partition(".")
    return f"sm_{int(major)}{int(minor or 0)}"


def query_smi(device: str) -> dict | None:
    """What nvidia-smi says of `device`, or None when it cannot say."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "-i", device, f"--query-gpu={','.join(SMI_FIELDS)}",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    rows = [line for line in out.splitlines() if line.strip()]
    fields = [x.strip() for x in rows[0].split(",")] if rows else []
    if len(fields) != len(SMI_FIELDS):
        return None
    name, cap, driver, memory_mib = fields
    try:
        return {"name": name, "arch": arch_of(cap), "driver": driver,
                "memory": int(float(memory_mib)) << 20}
    except ValueError:
        return None


def probe_driver() -> dict | None:
    """Device 0's attributes from the driver, in a child process; None when it fails."""
    try:
        out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(DEVICE_ATTRIBUTES)],
                             capture_output=True, text=True, timeout=TIMEOUT, check=True)
        reading = json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return None
    return None if "error" in reading else reading


@lru_cache(maxsize=8)
def read_gpu(cuda_visible_devices: str | None) -> dict | None:
    """The process's device 0 under this CUDA_VISIBLE_DEVICES value: name, arch, driver,
    memory (bytes) and every DEVICE_ATTRIBUTES limit; None when there is no GPU."""
    device = visible_device(cuda_visible_devices)
    if device is None or not shutil.which("nvidia-smi"):
        return None
    smi, attrs = query_smi(device), probe_driver()
    if smi is None and attrs is None:
        return None
    info = dict(attrs or {})
    major, minor = info.pop("compute_major", None), info.pop("compute_minor", None)
    if major is not None:
        info["arch"] = f"sm_{major}{minor}"
    info.update(smi or {})  # nvidia-smi names the driver; for the rest both agree
    return info
