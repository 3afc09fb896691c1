"""Pipeline stages on GPUs (runtime/pipeline/placement.py): which backend and device each
stage process gets, and the refusal of device "cuda" where torch sees no GPU, before any
process starts. The GPU runs themselves are the device script's
(bench/pipeline_plans.py --device cuda)."""
from __future__ import annotations

import pytest
import torch

from autosched.errors import UserError
from autosched.runtime.pipeline.placement import Placement, check_device, placement


def test_cpu_stages_use_gloo():
    assert placement("cpu", 1, 2, gpus=8) == Placement("gloo", "cpu", "cpu", "gloo")


@pytest.mark.parametrize("gpus", [2, 4])
def test_a_gpu_per_stage_uses_nccl_on_the_local_ranks_device(gpus):
    assert [placement("cuda", r, 2, gpus) for r in range(2)] == [
        Placement("nccl", "cuda:0", "cuda:0", "gloo"),
        Placement("nccl", "cuda:1", "cuda:1", "gloo")]
    assert not placement("cuda", 1, 2, gpus).staged


def test_stages_sharing_one_gpu_use_gloo_through_host_memory():
    """NCCL refuses two ranks on one GPU: the stages compute on cuda:0 and send over gloo
    from the host."""
    places = [placement("cuda", r, 4, gpus=1) for r in range(4)]
    assert set(places) == {Placement("gloo", "cuda:0", "cpu", "gloo")}
    assert places[0].staged and places[0].cuda


@pytest.mark.parametrize("device, message", [
    ("cuda", "device cuda: torch sees no GPU here (torch.cuda.is_available() is False); "
             "use device cpu"),
    ("tpu", "device 'tpu' is not one of cpu, cuda")])
def test_an_impossible_device_is_one_line(device, message):
    with pytest.raises(UserError) as e:
        placement(device, 0, 2, gpus=0)
    assert str(e.value) == message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_run_pipeline_on_cuda_without_a_gpu_is_refused_before_any_process(tmp_path):
    from autosched.runtime.pipeline import run_pipeline

    doc = {"format": "autosched-pipeline-plan", "version": 1, "stages": 2,
           "micro_batches": 2, "schedule": "1F1B", "layers": ["0", "1"],
           "boundaries": [0, 1, 2], "actions": {"0": "keep", "1": "keep"},
           "transfers": [], "budget_bytes": 1, "predicted": {}}
    with pytest.raises(UserError) as e:
        run_pipeline("no_such_model.py", doc, tmp_path / "work", device="cuda")
    assert str(e.value).startswith("device cuda: torch sees no GPU here")
    assert not (tmp_path / "work").exists()          # no process, no work directory
    assert check_device("cpu") == 0
