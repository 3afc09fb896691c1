"""Load-time checks of CUDA libraries that need no GPU: a library holding CUDA source
(an older export) is refused, and so is a GPU that cannot run the library's SASS."""
from __future__ import annotations

import json
import shutil

import pytest

import autosched.torch as at
from autosched.torch import compat, loader
from autosched.torch.manifest import read_manifest


@pytest.mark.parametrize("built,device,runs", [
    ("sm_90", "sm_90", True), ("sm_80", "sm_86", True), ("sm_86", "sm_80", False),
    ("sm_90", "sm_100", False), ("sm_100", "sm_90", False), ("sm_90a", "sm_90", True),
    ("sm_90a", "sm_91", False), ("sm_100f", "sm_103", True), ("sm_103f", "sm_100", False),
    ("sm_120", "sm_120", True), ("compute_90", "sm_90", False), ("", "sm_90", False),
])
def test_which_gpus_run_the_librarys_sass(built, device, runs):
    assert compat.arch_runs_on(built, device) is runs


@pytest.fixture
def cuda_library(nn_library, tmp_path):
    """A copy of the test library whose manifest says it was built for `arch`."""
    def make(arch: str, cuda: dict | None):
        target = tmp_path / arch
        shutil.copytree(nn_library, target)
        path = target / "manifest.json"
        data = json.loads(path.read_text())
        data["target"] = {"kind": "cuda", "arch": arch}
        if cuda is not None:
            data["cuda"] = cuda
        path.write_text(json.dumps(data))
        return read_manifest(target)
    return make


FATBIN = {"arch": "sm_90a", "binary": "fatbin", "compiler": "nvcc"}


def test_a_gpu_of_another_arch_is_refused_in_one_line(cuda_library):
    manifest = cuda_library("sm_90a", FATBIN)
    with pytest.raises(at.LibraryError) as e:
        compat.check_gpu(manifest, gpu=compat.HostGPU("NVIDIA A100", "sm_80"))
    assert str(e.value) == (f"{manifest.directory}: built for sm_90a, which does not run on "
                            "this GPU (NVIDIA A100, sm_80); export the library for sm_80")
    compat.check_gpu(manifest, check_hardware=False,
                     gpu=compat.HostGPU("NVIDIA H200", "sm_90"))  # runs: no error


def test_a_newer_minor_version_loads_with_a_warning(cuda_library, caplog):
    manifest = cuda_library("sm_80", dict(FATBIN, arch="sm_80"))
    with caplog.at_level("WARNING", logger="autosched.torch"):
        compat.check_gpu(manifest, gpu=compat.HostGPU("NVIDIA A10", "sm_86"))
    assert [r.getMessage() for r in caplog.records] == [
        f"{manifest.directory} was built for sm_80, running on sm_86"]


def test_a_library_holding_cuda_source_is_refused_before_loading(cuda_library):
    manifest = cuda_library("sm_90", None)
    with pytest.raises(at.LibraryError, match="holds kernel source, not device code .* "
                                              "re-export it with `autosched export`"):
        loader.load_kernels(manifest)
    assert read_manifest(cuda_library("sm_90a", FATBIN).directory).cuda == FATBIN
