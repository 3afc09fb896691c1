"""The model path on `--target cuda` without a GPU: `tune-model --runner bundle:DIR`
builds a round for sm_90a (fatbins, one baseline job per task), the measuring side's
results (faked here: some kernels faster than torch, some slower) are imported by the
next run as kernel and baseline records, and `export-model` on this host, where torch
sees no GPU, builds the library of exactly the faster kernels and says in
model_ops.json that the records decided and the step check did not run. The local
runner without a GPU is refused in one line.

The CUDA builds run in subprocesses with the stand-in driver (support.cuda_standin): a
process that registered TVM's CUDA runtime stays that way.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.cuda_standin import build_standin, gpu_machine_env

ROOT = Path(__file__).resolve().parents[2]
TARGET = json.dumps({"kind": "cuda", "arch": "sm_90a"})
GPU = {"device": "gpu", "name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "driver": "580.65"}
# (kernel, torch) seconds per call on the faked GPU: the fused linear + ReLU kernel wins,
# the plain linear one loses
LATENCY = {"aten_linear_relu": (1e-5, 2e-5), "aten_linear": (3e-5, 1e-5)}
MODEL = '''
import torch


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 8))


def make_inputs():
    return (torch.randn(4, 32, generator=torch.Generator().manual_seed(1)),)
'''

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("cc") is None,
                                reason="needs nvcc and cc")


def _env(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _cli(work: Path, env: dict, *args: str):
    return subprocess.run([sys.executable, "-m", "autosched", *args], env=env, cwd=work,
                          capture_output=True, text=True, timeout=600)


def _tune(work: Path, env: dict):
    return _cli(work, env, "tune-model", "tiny.py", "--target", TARGET, "--runner",
                "bundle:round", "--trials", "2", "--batch-size", "1", "--build-workers", "1",
                "--db", f"sqlite:///{work / 'records.db'}", "--work-dir", str(work / "logs"))


@pytest.fixture(scope="module")
def first_round(tmp_path_factory):
    """The working folder after the first `tune-model` run, its output, and the env."""
    work = tmp_path_factory.mktemp("cuda_model")
    (work / "tiny.py").write_text(MODEL)
    env = gpu_machine_env(build_standin(str(work / "driver")), _env())
    done = _tune(work, env)
    assert done.returncode == 0, done.stderr[-3000:]
    return work, done.stdout, env


@needs_nvcc
@pytest.mark.slow
def test_a_cuda_round_carries_fatbins_for_the_arch_and_one_baseline_job_per_task(first_round):
    from autosched.measure.cuda import fatbin

    work, out, _ = first_round
    manifest = json.loads((work / "round" / "manifest.json").read_text())
    assert (manifest["format"], manifest["round"], manifest["spent"]) == (2, 1, 2)
    assert manifest["target"]["config"]["arch"] == "sm_90a"
    tasks = {c["task"] for c in manifest["candidates"]}
    assert tasks == {"aten_linear_relu(M=4,N=16,K=32,dtype=float32)",
                     "aten_linear(M=4,N=8,K=16,dtype=float32)"}
    for c in manifest["candidates"]:
        entries = fatbin.library_entries(str(work / "round" / c["lib"]))
        assert [(e.kind, e.arch) for e in entries] == [("sass", "sm_90a")]
    jobs = sorted(manifest["baselines"], key=lambda j: j["id"])
    assert [(j["id"], j["workload"], j["params"]) for j in jobs] == [
        ("r1-b000", "aten_linear_relu", {"M": 4, "N": 16, "K": 32, "dtype": "float32"}),
        ("r1-b001", "aten_linear", {"M": 4, "N": 8, "K": 16, "dtype": "float32"})]
    assert jobs[0]["inputs"] == [{"shape": [4, 32], "dtype": "float32"},
                                 {"shape": [16, 32], "dtype": "float32"},
                                 {"shape": [16], "dtype": "float32"}]
    assert {j["task_key"] for j in jobs} == {c["task_key"] for c in manifest["candidates"]}
    assert "2 candidates of 2 task(s), 2 baseline jobs" in out
    assert "torch baselines imported from the bundle: 0" in out


def _fake_results(bundle: Path) -> None:
    """What `python -m autosched.measure.bundle` would write on an H100 (LATENCY)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    common = {"round": 1, "hardware": GPU, "host": "gpu01", "user": "someone", "time": 1.0,
              "settings": manifest["settings"]}
    for c in manifest["candidates"]:
        kernel = LATENCY[c["task"].split("(")[0]][0]
        (bundle / "results" / f"{c['id']}.json").write_text(json.dumps(dict(
            common, id=c["id"], task_key=c["task_key"], task=c["task"],
            candidate=c["candidate"], candidate_key=c["candidate_key"],
            result={"latencies": [kernel] * 3})))
    for j in manifest["baselines"]:
        torch_s = LATENCY[j["workload"]][1]
        (bundle / "results" / f"{j['id']}.json").write_text(json.dumps(dict(
            common, id=j["id"], kind="baseline", task_key=j["task_key"], task=j["task"],
            workload=j["workload"], params=j["params"],
            result={"latencies": [torch_s * 1.5] + [torch_s] * 6},
            runtime={"torch": "2.11.0+cu130", "python": "3.12.1"})))


@needs_nvcc
@pytest.mark.slow
def test_the_next_run_imports_the_results_and_export_keeps_exactly_the_faster_kernels(
        first_round):
    from autosched.db import open_database

    work, _, env = first_round
    _fake_results(work / "round")
    again = _tune(work, env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "torch baselines imported from the bundle: 2" in again.stdout
    assert "bundle round: all 2 trials measured and recorded; nothing left to build" \
        in again.stdout
    with open_database(f"sqlite:///{work / 'records.db'}") as db:
        baselines = [r for r in db.records(ok_only=True) if r.task_key.startswith("torch:")]
    assert sorted((r.workload, min(r.result.latencies)) for r in baselines) == [
        ("torch:aten_linear", 1e-5), ("torch:aten_linear_relu", 2e-5)]
    assert {(r.candidate["device"], r.candidate["torch"], r.candidate["threads"],
             r.provenance["host"], r.hardware["name"]) for r in baselines} == {
        ("cuda", "2.11.0+cu130", 0, "gpu01", GPU["name"])}

    done = _cli(work, env, "export-model", "tiny.py", "--target", TARGET, "--db",
                f"sqlite:///{work / 'records.db'}", "-o", "lib")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 of 2 operators run autosched kernels" in done.stdout
    library = json.loads((work / "lib" / "manifest.json").read_text())
    assert [k["workload"] for k in library["kernels"]] == ["aten_linear_relu"]
    assert library["cuda"] == {"arch": "sm_90a", "binary": "fatbin", "compiler": "nvcc"}
    assert library["hardware"] == GPU
    ops = json.loads((work / "lib" / "model_ops.json").read_text())
    assert [(o["workload"], o["chosen"], o["kernel_s"], o["torch_s"], o["decided_by"])
            for o in ops["ops"]] == [
        ("aten_linear_relu", "autosched", 1e-5, 2e-5, "records"),
        ("aten_linear", "torch", 3e-5, 1e-5, "records")]
    import torch

    why = f"torch {torch.__version__} sees no CUDA GPU here"
    assert ops["decided_on"] == f"records (kernel record against torch's baseline record): {why}"
    assert ops["step_check_skipped"] == f"no GPU to run the step on: {why}"
    assert "step_check" not in ops


def test_the_measuring_side_without_a_gpu_for_torch_says_so_and_records_no_baseline(tmp_path):
    import torch

    from autosched.measure.bundle.baselines import measure_baselines, pending_baselines
    from autosched.measure.bundle.format import read_results

    (tmp_path / "results").mkdir()
    jobs = [{"id": "r3-b000", "task_key": "k1", "task": "aten_mm(M=2,N=2,K=2)",
             "workload": "aten_mm", "params": {"M": 2, "N": 2, "K": 2, "dtype": "float32"},
             "inputs": [{"shape": [2, 2], "dtype": "float32"}] * 2}]
    manifest = {"round": 3, "settings": {"repeat": 3, "run_timeout": 30.0},
                "candidates": [], "baselines": jobs}
    out = io.StringIO()
    assert measure_baselines(manifest, str(tmp_path), jobs, GPU, out) == 0
    (result,) = read_results(str(tmp_path)).values()
    why = f"torch {torch.__version__} sees no CUDA GPU here"
    assert (result["kind"], result["task_key"], result["hardware"]) == ("baseline", "k1", GPU)
    assert result["result"]["error_kind"] == "run_error"
    assert result["result"]["error_msg"] == f"torch's baseline: {why}"
    assert result["runtime"]["torch"] == torch.__version__
    assert pending_baselines(str(tmp_path), manifest) == []
    assert out.getvalue().splitlines() == [
        f"[baseline 1/1] r3-b000 torch aten_mm(M=2,N=2,K=2): torch's baseline: {why}",
        f"bundle {tmp_path}: timed torch for 0 of 1 baseline jobs"]


def test_a_format_1_bundle_is_still_read_and_has_no_baseline_jobs(tmp_path):
    from autosched.measure.bundle.baselines import pending_baselines
    from autosched.measure.bundle.format import BundleError, read_manifest

    (tmp_path / "manifest.json").write_text(json.dumps({"format": 1, "candidates": []}))
    assert pending_baselines(str(tmp_path), read_manifest(str(tmp_path))) == []
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 3, "candidates": []}))
    with pytest.raises(BundleError, match="bundle format 3, this autosched reads formats "
                                          "1 to 2; build a new bundle"):
        read_manifest(str(tmp_path))


def test_the_local_runner_on_cuda_without_a_gpu_is_refused_in_one_line(tmp_path):
    import torch

    (tmp_path / "tiny.py").write_text(MODEL)
    done = _cli(tmp_path, _env(), "tune-model", "tiny.py", "--target", "cuda", "--trials", "1",
                "--db", f"sqlite:///{tmp_path / 'records.db'}")
    assert done.returncode == 2
    assert done.stderr == (
        "autosched: error: tune-model --target cuda times torch's baselines with the "
        f"kernels, and torch {torch.__version__} sees no CUDA GPU here; build a round for "
        "the GPU machine with --runner bundle:DIR\n")
    assert not (tmp_path / "records.db").exists()


def _torch_sees_a_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _torch_sees_a_gpu(), reason="needs a CUDA GPU that torch sees")
def test_torch_is_timed_on_the_gpu_by_the_kernels_harness():
    from autosched.measure.settings import MeasureSettings
    from autosched.model.baseline import MIN_REPEATS, random_inputs, time_torch_cuda, twin_call

    inputs = random_inputs([((512, 512), "float16")] * 2, "cuda")
    call = twin_call("aten_mm", {"M": 512, "N": 512, "K": 512, "dtype": "float16"})
    first, second = time_torch_cuda([call, call], inputs, MeasureSettings(min_repeat_ms=1))
    assert len(first) == len(second) == MIN_REPEATS
    # a 512^3 half GEMM is microseconds on any recent GPU; zero would mean no event pair
    assert all(0 < s < 1e-3 for s in first + second)
