"""Target resolution and hardware fingerprints."""
from __future__ import annotations

import pytest

from autosched.errors import UserError
from autosched.target import resolve_target


def test_llvm_is_this_cpu():
    t = resolve_target("llvm")
    assert t.kind == "llvm" and t.has_local_device
    assert t.config["mcpu"] and t.config["num-cores"] >= 1
    assert t.fingerprint["device"] == "cpu" and t.fingerprint["model"]
    assert t.key == resolve_target("llvm").key
    assert t.hardware_key == resolve_target("llvm").hardware_key


def test_cuda_without_gpu_defaults_to_sm90_and_can_be_overridden():
    from autosched.target import local_gpu

    if local_gpu() is not None:
        pytest.skip("this machine has a GPU")
    t = resolve_target("cuda")
    assert t.config["arch"] == "sm_90" and not t.has_local_device
    o = resolve_target('{"kind": "cuda", "arch": "sm_80"}')
    assert o.config["arch"] == "sm_80" and o.key != t.key and o.hardware_key != t.hardware_key


def test_json_dict_passes_through():
    t = resolve_target('{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}')
    assert t.config == {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
    assert t.tvm().attrs["mcpu"] == "skylake-avx512"


@pytest.mark.parametrize("text", ["opencl", "", "{bad json", '{"mcpu": "x"}', "[1]"])
def test_unknown_targets_are_user_errors(text):
    with pytest.raises(UserError):
        resolve_target(text)


# ------------------------------------------- the local GPU, from a pretend nvidia-smi and driver


@pytest.fixture
def child_env():
    """Environment for a child interpreter that imports this checkout."""
    import os
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


H200_ATTRIBUTES = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
                   "warp_size": 32, "max_registers_per_block": 65536, "sm_count": 132,
                   "l2_cache_bytes": 52428800, "max_threads_per_sm": 2048,
                   "compute_major": 9, "compute_minor": 0, "max_shared_memory_per_sm": 233472,
                   "max_registers_per_sm": 65536, "max_shared_memory_per_block_optin": 232448}
SMI_ROWS = [("0", "GPU-aaaa", "NVIDIA H200, 9.0, 570.124.06, 143771"),
            ("1", "GPU-bbbb", "NVIDIA A100-SXM4-80GB, 8.0, 570.124.06, 81920")]
# In a child: resolve `cuda` under each CUDA_VISIBLE_DEVICES value (None: unset) and
# report the target and the nvidia-smi calls it made.
RESOLVE = """
import json, os, sys
from autosched.target import resolve_target
log = sys.argv[1]
out = []
for visible in json.loads(sys.argv[2]):
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    t = resolve_target("cuda")
    calls = open(log).read().splitlines() if os.path.exists(log) else []
    open(log, "w").close()
    out.append({"config": t.config, "fingerprint": t.fingerprint, "local": t.has_local_device,
                "devices": [c.split()[1] for c in calls]})
print(json.dumps(out))
"""


def _resolve_in_child(tmp_path, child_env, visible, driver=True):
    import json
    import os
    import subprocess
    import sys

    from support.fake_gpu import build_driver, write_smi

    from autosched.gpu_info import DEVICE_ATTRIBUTES

    log = write_smi(str(tmp_path), SMI_ROWS)
    if driver:
        build_driver(str(tmp_path), "NVIDIA H200", 143771 << 20,
                     {DEVICE_ATTRIBUTES[k]: v for k, v in H200_ATTRIBUTES.items()})
    env = dict(child_env, PATH=f"{tmp_path}{os.pathsep}{child_env['PATH']}",
               LD_LIBRARY_PATH=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", RESOLVE, log, json.dumps(visible)],
                          check=False, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


H200_FINGERPRINT = {"device": "gpu", "name": "NVIDIA H200", "arch": "sm_90",
                    "driver": "570.124.06", "memory": 143771 << 20,
                    **{k: v for k, v in H200_ATTRIBUTES.items() if not k.startswith("compute_")}}


def test_cuda_reads_the_gpu_and_sets_the_limits_from_it(tmp_path, child_env):
    (h200,) = _resolve_in_child(tmp_path, child_env, [None])
    assert h200["local"] and h200["devices"] == ["0"]
    assert h200["fingerprint"] == H200_FINGERPRINT  # with the 227 KiB opt-in maximum
    # static shared memory for `__shared__` arrays; the opt-in maximum for `shared.dyn`
    assert h200["config"] == {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024,
                              "thread_warp_size": 32, "max_shared_memory_per_block": 49152,
                              "max_dynamic_shared_memory_per_block":
                                  H200_ATTRIBUTES["max_shared_memory_per_block_optin"],
                              "registers_per_block": 65536, "sm_count": 132,
                              "l2_cache_size_bytes": 52428800}


def test_cuda_visible_devices_picks_the_gpu_by_index_or_uuid(tmp_path, child_env):
    by_index, by_uuid, first_of_two = _resolve_in_child(
        tmp_path, child_env, ["1", "GPU-bbbb", "GPU-aaaa,GPU-bbbb"])
    assert by_index["devices"] == ["1"] and by_uuid["devices"] == ["GPU-bbbb"]
    for t in (by_index, by_uuid):
        assert t["fingerprint"]["name"] == "NVIDIA A100-SXM4-80GB"
        assert t["fingerprint"]["arch"] == t["config"]["arch"] == "sm_80"
        assert t["fingerprint"]["memory"] == 81920 << 20
    assert first_of_two["devices"] == ["GPU-aaaa"]
    assert first_of_two["fingerprint"] == H200_FINGERPRINT


TODAYS_DEFAULT = {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024,
                  "thread_warp_size": 32, "max_shared_memory_per_block": 49152}


def test_hidden_gpus_are_no_gpu_and_nothing_is_asked(tmp_path, child_env):
    for t in _resolve_in_child(tmp_path, child_env, ["", "-1", "NoDevFiles"]):
        assert not t["local"] and t["devices"] == []
        assert t["config"] == TODAYS_DEFAULT
        assert t["fingerprint"] == {"device": "gpu", "name": "none (no local GPU)",
                                    "arch": "sm_90"}


def test_without_the_driver_nvidia_smi_alone_names_the_gpu(tmp_path, child_env):
    (t,) = _resolve_in_child(tmp_path, child_env, [None], driver=False)
    assert t["local"] and t["config"] == TODAYS_DEFAULT  # limits only from the driver
    assert t["fingerprint"] == {"device": "gpu", "name": "NVIDIA H200", "arch": "sm_90",
                                "driver": "570.124.06", "memory": 143771 << 20}


NO_SMI = """
import json, time
from autosched.gpu_info import read_gpu
start = time.monotonic()
found = [read_gpu(None), read_gpu("0")]
print(json.dumps({"found": found, "seconds": time.monotonic() - start}))
"""


def test_without_nvidia_smi_there_is_no_gpu_and_nothing_is_started(tmp_path, child_env):
    import json
    import subprocess
    import sys

    env = dict(child_env, PATH=str(tmp_path))  # an empty folder: no nvidia-smi
    proc = subprocess.run([sys.executable, "-c", NO_SMI], check=False, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["found"] == [None, None] and out["seconds"] < 0.5  # no process was started


def test_the_process_device_follows_cuda_visible_devices():
    from autosched.gpu_info import arch_of, visible_device

    assert [visible_device(v) for v in (None, "2", " 3 ,0", "GPU-ab12", "MIG-cd34", "",
                                        "-1", "none")] == \
        ["0", "2", "3", "GPU-ab12", "MIG-cd34", None, None, None]
    assert [arch_of(c) for c in ("9.0", "8.6", "10.0", "12")] == \
        ["sm_90", "sm_86", "sm_100", "sm_120"]
