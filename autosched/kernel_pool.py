"""Which threads run the parallel loops of autosched's CPU kernels.

A CPU kernel runs a parallel loop by calling TVM's runtime through a pointer its library
holds (`__TVMBackendParallelLaunch`, filled when the library is loaded). TVM serves it
from its own thread pool, whose threads spin for a while after each loop before they
sleep. In a PyTorch process that pool is a second set of threads on the cores that
torch's OpenMP threads (its intra-op parallelism, its BLAS) also spin on after each
operator: a model alternates our kernels and torch's operators, and each side then waits
for cores the other's idle threads still hold, so a kernel runs much slower in the model
than alone. `AUTOSCHED_KERNEL_POOL` chooses what serves the loops:

    openmp     (default) the process's OpenMP pool, through a small launcher compiled on
               first use (`kernel_pool.c`, see `native.py`); in a torch process that is
               torch's own pool (libgomp is loaded once per process), so our loops and
               torch's run on one set of threads. A loop takes as many threads as the
               calling thread's OpenMP setting: torch.set_num_threads in a torch
               process, the kernel pool's size in autosched's measuring workers.
    tvm-yield  TVM's pool, its threads sleeping at once after a loop
               (TVM_THREAD_POOL_SPIN_COUNT=0 unless the user set it): no launcher to
               build, slower per loop.
    tvm        TVM's pool as TVM sets it up.

The choice is made per loaded library (`route_parallel_loops`) by the doors that load
one into a torch process: `autosched.torch.load_library` (so the backend and the
training runtime), and the run worker that times a model's candidates as the model
calls them (`measure/beside_torch.py`, what `tune-model` asks for), so a model's records
are made on the pool its kernels run on. A kernel timed alone (`autosched tune`) keeps
TVM's own pool: its worker runs nothing but the candidate. Where the launcher cannot be
built (no C compiler, no OpenMP runtime) openmp falls back to tvm-yield and says why
once. torch's own settings are never changed.
"""
from __future__ import annotations

import ctypes
import logging
import os
from functools import lru_cache
from importlib import resources

from .errors import InfrastructureError, UserError

log = logging.getLogger("autosched")

POOL_VAR = "AUTOSCHED_KERNEL_POOL"
OPENMP, TVM_YIELD, TVM = "openmp", "tvm-yield", "tvm"
POOLS = (OPENMP, TVM_YIELD, TVM)
SPIN_VAR = "TVM_THREAD_POOL_SPIN_COUNT"


def requested_pool(env=None) -> str:
    """The pool `AUTOSCHED_KERNEL_POOL` asks for (default openmp); a bad value is one
    UserError line."""
    value = (os.environ if env is None else env).get(POOL_VAR, "").strip().lower() or OPENMP
    if value not in POOLS:
        raise UserError(f"{POOL_VAR}={value!r}: expected one of {', '.join(POOLS)}")
    return value


@lru_cache(maxsize=1)
def launcher() -> ctypes.CDLL:
    """The OpenMP launcher, built on first use and loaded once per process; raises
    InfrastructureError when it cannot be built or loaded."""
    from .native import built_library

    source = resources.files("autosched").joinpath("kernel_pool.c").read_text()
    path = built_library("kernel-pool", "libautosched_pool.so", source, ("-O2", "-fopenmp"),
                         "the OpenMP launcher of the CPU kernels' parallel loops")
    try:
        functions = ctypes.CDLL(path)
    except OSError as e:
        raise InfrastructureError(f"cannot load the OpenMP launcher {path}: {e}",
                                  "install the OpenMP runtime (libgomp), or set "
                                  f"{POOL_VAR}=tvm-yield") from None
    functions.autosched_pool_launches.restype = ctypes.c_longlong
    return functions


def route_parallel_loops(library_path: str, env=None) -> str:
    """Make the loaded library at `library_path` run its parallel loops on the requested
    pool (see the module doc); returns the pool that serves them. Call it after loading
    the library (loading fills the pointers this replaces) and before its first call."""
    pool = requested_pool(env)
    if pool == OPENMP:
        try:
            functions = launcher()
        except InfrastructureError as e:
            _warn_fallback(str(e))
            pool = TVM_YIELD
        else:
            _point_at(library_path, functions)
            return OPENMP
    if pool == TVM_YIELD:
        os.environ.setdefault(SPIN_VAR, "0")  # read when TVM's pool starts its threads
    return pool


def _point_at(library_path: str, functions: ctypes.CDLL) -> None:
    """Point the library's pointers to the runtime's launcher and barrier at ours."""
    lib = ctypes.CDLL(library_path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # the loaded copy
    routes = {"__TVMBackendParallelLaunch": functions.autosched_parallel_launch,
              "__TVMBackendParallelBarrier": functions.autosched_parallel_barrier}
    for pointer_name, function in routes.items():
        try:
            pointer = ctypes.c_void_p.in_dll(lib, pointer_name)
        except ValueError:  # this library has no parallel loop (or no barrier)
            continue
        pointer.value = ctypes.cast(function, ctypes.c_void_p).value


def launches() -> int:
    """Parallel loops the OpenMP launcher has run in this process (0 when not loaded)."""
    if launcher.cache_info().currsize == 0:
        return 0
    return launcher().autosched_pool_launches()


@lru_cache(maxsize=None)
def _warn_fallback(reason: str) -> None:
    log.warning("autosched: CPU kernels run their parallel loops on TVM's thread pool "
                "(threads sleeping at once), not on the process's OpenMP pool: %s", reason)
