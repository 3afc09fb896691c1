"""The kernel thread pool is sized to the machine's physical cores (TVM's own default
halves the logical CPUs on x86, leaving half of a machine without SMT idle), and a size
the user chose is kept."""
from __future__ import annotations

import os
import subprocess
import sys

from autosched.threads import POOL_SIZE_VARS, kernel_thread_env, physical_cores


def _topology(tmp_path, cores: dict[int, tuple[int, int]]):
    """A fake /sys/devices/system/cpu: cpu -> (package, core)."""
    for cpu, (package, core) in cores.items():
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{package}\n")
        (d / "core_id").write_text(f"{core}\n")
    return tmp_path


def test_hyperthread_siblings_count_once(tmp_path):
    # two packages of two cores, two hyperthreads each
    topo = _topology(tmp_path, {c: (c // 4, (c // 2) % 2) for c in range(8)})
    assert physical_cores(topo, list(range(8))) == 4
    assert physical_cores(topo, [0, 1]) == 1          # one core's two threads
    assert physical_cores(topo, [0, 2, 4, 6]) == 4    # one thread of every core


def test_cores_without_smt_all_count(tmp_path):
    topo = _topology(tmp_path, {0: (0, 0), 1: (0, 1)})
    assert physical_cores(topo, [0, 1]) == 2


def test_an_unreadable_topology_counts_cpus(tmp_path):
    assert physical_cores(tmp_path / "missing", [0, 1, 2]) == 3


def test_the_pool_size_is_set_unless_the_user_chose_one():
    clean = {k: v for k, v in os.environ.items() if k not in POOL_SIZE_VARS}
    sized = kernel_thread_env(clean)
    assert sized["TVM_NUM_THREADS"] == sized["OMP_NUM_THREADS"] == str(physical_cores())
    chosen = kernel_thread_env({**clean, "TVM_NUM_THREADS": "3"})
    assert chosen["TVM_NUM_THREADS"] == chosen["OMP_NUM_THREADS"] == "3"
    chosen = kernel_thread_env({**clean, "OMP_NUM_THREADS": "1"})
    assert chosen["TVM_NUM_THREADS"] == chosen["OMP_NUM_THREADS"] == "1"


def test_a_process_started_with_that_environment_runs_kernels_on_every_core():
    clean = {k: v for k, v in os.environ.items() if k not in POOL_SIZE_VARS}
    probe = "import tvm; print(tvm.get_global_func('runtime.NumThreads')())"
    out = subprocess.run([sys.executable, "-c", probe], env=kernel_thread_env(clean),
                         capture_output=True, text=True, check=True, timeout=300)
    assert int(out.stdout.split()[-1]) == physical_cores()
