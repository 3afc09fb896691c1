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
