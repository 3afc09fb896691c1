"""TVM target strings (`cuda -arch=sm_80`) and tags (`nvidia/nvidia-a100`) as `--target`:
each is another spelling of a JSON dict and resolves to its config, key and fingerprint;
what TVM does not know is refused in one line (exit 2 from the CLI)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autosched.errors import UserError
from autosched.target import parse_target_string, resolve_target

ROOT = Path(__file__).resolve().parents[2]
# the limits TVM's tags give these GPUs (tvm/target/tag_registry/cuda.py)
A100 = {"kind": "cuda", "arch": "sm_80", "max_num_threads": 1024, "thread_warp_size": 32,
        "max_shared_memory_per_block": 49152, "registers_per_block": 65536,
        "l2_cache_size_bytes": 41943040}
H100 = {**A100, "arch": "sm_90a", "l2_cache_size_bytes": 52428800}


def _same(a: str, b: str) -> None:
    x, y = resolve_target(a), resolve_target(b)
    assert (x.kind, x.key, x.config, x.fingerprint, x.hardware_key) == \
        (y.kind, y.key, y.config, y.fingerprint, y.hardware_key)


@pytest.mark.parametrize("text, json_text", [
    ("cuda -arch=sm_80", '{"kind": "cuda", "arch": "sm_80"}'),
    ("cuda --arch=sm_90a -max_num_threads=512",
     '{"kind": "cuda", "arch": "sm_90a", "max_num_threads": 512}'),
    ("llvm -mcpu=skylake-avx512", '{"kind": "llvm", "mcpu": "skylake-avx512"}'),
    ("  llvm -mcpu=skylake-avx512   -num-cores=4 ",
     '{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 4}'),
    ("llvm -mattr=+avx2,+fma -fast-math -opt-level=3",
     '{"kind": "llvm", "mattr": ["+avx2", "+fma"], "fast-math": true, "opt-level": 3}'),
    ("llvm -fast-math=false", '{"kind": "llvm", "fast-math": false}'),
    ("nvidia/nvidia-a100", '{"kind": "cuda", "arch": "sm_80", "max_num_threads": 1024, '
     '"thread_warp_size": 32, "max_shared_memory_per_block": 49152, '
     '"registers_per_block": 65536, "l2_cache_size_bytes": 41943040}'),
    ("aws/cpu/c5.xlarge", '{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}'),
    ("nvidia/nvidia-a100 -max_num_threads=512",
     '{"kind": "cuda", "arch": "sm_80", "max_num_threads": 512, "thread_warp_size": 32, '
     '"max_shared_memory_per_block": 49152, "registers_per_block": 65536, '
     '"l2_cache_size_bytes": 41943040}'),
])
def test_a_string_or_tag_resolves_as_its_json_twin(text, json_text):
    _same(text, json_text)


def test_the_string_form_says_only_what_it_says():
    assert parse_target_string("cuda -arch=sm_80") == {"kind": "cuda", "arch": "sm_80"}
    assert parse_target_string("llvm -mcpu=znver4 -num-cores=8 -mattr=+avx512f") == {
        "kind": "llvm", "mcpu": "znver4", "num-cores": 8, "mattr": ["+avx512f"]}


@pytest.mark.parametrize("tag, config", [("nvidia/nvidia-a100", A100),
                                         ("nvidia/nvidia-h100", H100)])
def test_a_cuda_tag_is_its_arch_and_limits(tag, config):
    from autosched.target import local_gpu

    assert parse_target_string(tag) == config
    if local_gpu() is None:  # with a GPU here, its own limits fill in the rest
        assert resolve_target(tag).config == config
        assert resolve_target(tag).fingerprint == {"device": "gpu", "arch": config["arch"],
                                                   "name": "none (no local GPU)"}


def test_a_tag_differs_from_the_bare_arch_by_its_limits():
    from autosched.target import local_gpu

    if local_gpu() is not None:
        pytest.skip("this machine has a GPU")
    tag, bare = resolve_target("nvidia/nvidia-a100"), resolve_target("cuda -arch=sm_80")
    assert tag.hardware_key == bare.hardware_key  # the same GPU (none here), sm_80
    assert tag.key != bare.key
    assert {k: v for k, v in tag.config.items() if bare.config.get(k) != v} == {
        "registers_per_block": 65536, "l2_cache_size_bytes": 41943040}


FORMS = ("use llvm, cuda, a JSON dict with a 'kind', 'KIND -key=value ...' "
         "(e.g. 'cuda -arch=sm_80') or a TVM tag (e.g. nvidia/nvidia-a100; "
         "tvm.target.list_tags() lists them)")


@pytest.mark.parametrize("text, message", [
    ("nvidia/nvidia-z9000", f"--target: unknown target or TVM tag 'nvidia/nvidia-z9000'; {FORMS}"),
    ("opencl -device=mali", f"--target: unknown target or TVM tag 'opencl'; {FORMS}"),
    ("apple/m1-gpu", "--target: TVM tag 'apple/m1-gpu' is a metal target; autosched tunes "
                     "llvm and cuda targets"),
    ("cuda arch=sm_80", "--target: 'arch=sm_80' in 'cuda arch=sm_80' is not of the form "
                        "-key=value"),
    ("cuda -arch", "--target: -arch of cuda needs a value (-arch=VALUE)"),
    ("cuda -arch=sm_80 -arch=sm_86",
     "--target: -arch is given twice in 'cuda -arch=sm_80 -arch=sm_86'"),
    ("cuda -max_num_threads=many",
     "--target: -max_num_threads of cuda takes an integer, not 'many'"),
    ("llvm -fast-math=maybe", "--target: -fast-math of llvm takes true or false, not 'maybe'"),
    ("cuda -arch=compute_80", "--target: cuda arch 'compute_80' is not of the form sm_XY "
                              "(e.g. sm_90, or sm_90a for Hopper's arch-specific features)"),
])
def test_bad_strings_are_refused_in_one_line(text, message):
    with pytest.raises(UserError) as e:
        resolve_target(text)
    assert str(e.value) == message


def test_an_unknown_attribute_names_the_kinds_attributes():
    with pytest.raises(UserError) as e:
        resolve_target("cuda -sm=80")
    text = str(e.value)
    assert text.startswith("--target: cuda has no attribute 'sm'; TVM's are: ")
    assert "\n" not in text and "arch" in text.split("TVM's are: ")[1].split(", ")


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("cc") is None,
                                reason="needs nvcc and cc")


@needs_nvcc
def test_dry_run_tunes_for_a_target_string(tmp_path):
    from conftest import run_cli

    done = run_cli("tune", str(ROOT / "examples" / "matmul.py"), "--workload", "matmul",
                   "--arg", "M=16", "--arg", "N=16", "--arg", "K=16", "--target",
                   "cuda -arch=sm_80", "--dry-run", "--trials", "2", "--work-dir",
                   str(tmp_path / "logs"), "--db", f"sqlite:///{tmp_path}/db.sqlite",
                   cwd=tmp_path, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert "dry run: matmul(M=16,N=16,K=16,dtype=float32): 2 candidates on cuda (sm_80)" \
        in done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("matmul("))
    assert row.split()[:4] == ["matmul(M=16,N=16,K=16,dtype=float32)", "2", "2", "2"]


def test_the_cli_refuses_a_bad_target_string_in_one_line(tmp_path):
    from conftest import run_cli

    done = run_cli("tune", str(ROOT / "examples" / "matmul.py"), "--target",
                   "nvidia/nvidia-z9000", "--dry-run", "--work-dir", str(tmp_path / "logs"),
                   "--db", f"sqlite:///{tmp_path}/db.sqlite", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"autosched: error: --target: unknown target or TVM tag 'nvidia/nvidia-z9000'; {FORMS}"]
