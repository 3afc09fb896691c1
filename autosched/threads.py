"""How many threads autosched's CPU kernels run on.

TVM's thread pool takes its size from `TVM_NUM_THREADS` (or `OMP_NUM_THREADS`) when the
pool starts, else from half the logical CPUs on x86, assuming two hyperthreads a core.
On a machine without SMT (a cloud VM's 2 vCPUs are 2 cores) that leaves half the cores
idle, while the schedules were made for the target's `num-cores` and torch, the peer
every kernel is compared with, uses every core. autosched sizes the pool to the physical
cores this process may run on, counting hyperthread siblings once; a size the user chose
through either variable is kept.

A pool is sized when it starts (the first parallel kernel of a process), so the size is
set in the environment before that: in the run workers' environment, and in this
process's before a kernel library is loaded.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

POOL_SIZE_VARS = ("TVM_NUM_THREADS", "OMP_NUM_THREADS")  # what TVM's pool reads, in order
_TOPOLOGY = Path("/sys/devices/system/cpu")


def _usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def physical_cores(topology: Path = _TOPOLOGY, cpus: list[int] | None = None) -> int:
    """The cores of `cpus` (default: the CPUs this process may run on), hyperthread
    siblings counted once, from the kernel's CPU topology under `topology`; the number
    of CPUs where the topology does not say."""
    cpus = _usable_cpus() if cpus is None else cpus
    cores = set()
    for cpu in cpus:
        base = topology / f"cpu{cpu}" / "topology"
        try:
            cores.add(((base / "physical_package_id").read_text().strip(),
                       (base / "core_id").read_text().strip()))
        except OSError:
            return len(cpus)
    return len(cores) or len(cpus)


@lru_cache(maxsize=1)
def machine_cores() -> int:
    """`physical_cores()` of this process, read once (every target resolution and
    worker start asks)."""
    return physical_cores()


def _pool_size(env) -> dict:
    """{variable: value} that sizes the pool, or {} where `env` already chooses a size."""
    if any(env.get(v) for v in POOL_SIZE_VARS):
        return {}
    return {POOL_SIZE_VARS[0]: str(machine_cores())}


def kernel_thread_env(env: dict) -> dict:
    """`env` with the kernel pool sized to this machine's physical cores, unless it
    already chooses a size; both variables are set alike, so TVM's pool and an OpenMP
    pool in the child (`kernel_pool.py`) take the same size."""
    size = next((env[v] for v in POOL_SIZE_VARS if env.get(v)), str(machine_cores()))
    return {**env, **{v: size for v in POOL_SIZE_VARS if not env.get(v)}}


def size_kernel_pool() -> None:
    """Size this process's kernel pool (see `kernel_thread_env`); takes effect if no
    parallel kernel has run in this process yet."""
    os.environ.update(_pool_size(os.environ))
