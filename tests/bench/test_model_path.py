"""The GPU model-path script (bench/gpu/model_path.py) and bench/model_e2e.py's new
arguments and peers, without tuning: the plan of steps each mode runs, what is refused,
how time shares and summaries read, and a peer the installed autosched refuses."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench" / "gpu"), str(ROOT / "bench")]

import model_e2e  # noqa: E402
import model_e2e_peers as peers  # noqa: E402
import model_path as mp  # noqa: E402


def _plan(*argv) -> dict[str, list[str]]:
    args = mp.parse(list(argv))
    return mp.commands(args, mp.settings(args), Path("/o"))


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_the_device_plan_runs_bf16_training_steps_on_cuda_and_the_plans_with_wall_time():
    cmds = _plan("--trials", "32")
    assert list(cmds) == ["e2e_gpt", "e2e_resnet", "training_plans"]
    for model in ("gpt", "resnet"):
        cmd = cmds[f"e2e_{model}"]
        assert cmd[1] == "bench/model_e2e.py"
        assert [_flag(cmd, f) for f in ("--models", "--modes", "--device", "--dtype",
                                        "--size", "--trials", "--peers", "-o")] == [
            model, "train", "cuda", "bf16", "gpu", "32",
            "eager,inductor,max-autotune,autosched", f"/o/model_e2e_{model}.json"]
        assert _flag(cmd, "--db").endswith("bench/gpu/run/model_path.db")
    plans = cmds["training_plans"]
    assert plans[1] == "bench/training_plans.py"
    assert [_flag(plans, f) for f in ("--device", "--clock", "--models", "--json")] == [
        "cuda", "wall", "gpt_gpu", "/o/training_plans.json"]
    assert "--tune-trials" not in plans
    tuned = _plan("--plans-tune-trials", "64", "--steps", "training_plans")["training_plans"]
    assert _flag(tuned, "--tune-trials") == "64"
    assert _flag(tuned, "--work-dir").endswith("bench/gpu/run/model_path/plans")


def test_the_rehearsal_plan_runs_the_same_steps_on_the_cpu_at_tiny_sizes():
    cmds = _plan("--rehearse", "--steps", "training_plans,e2e_gpt")
    assert list(cmds) == ["e2e_gpt", "training_plans"]       # the script's order
    gpt = cmds["e2e_gpt"]
    assert [_flag(gpt, f) for f in ("--device", "--dtype", "--size", "--trials", "--peers")] \
        == ["cpu", "fp32", "tiny", "4", "eager,inductor,autosched"]
    assert _flag(gpt, "--db").endswith("model_path_rehearsal.db")
    plans = cmds["training_plans"]
    assert _flag(plans, "--device") == "cpu" and _flag(plans, "--models") == ""
    assert _flag(plans, "--model-file").endswith("model_path/bench_mlp.py")


@pytest.mark.parametrize("argv, message", [
    (["--steps", "e2e_gpt,tune"], "unknown step(s) ['tune']"),
    (["--budget-s", "0"], "--budget-s must be > 0"),
    (["--trials", "0"], "--trials must be >= 1"),
    (["--plans-tune-trials", "-1"], "--plans-tune-trials must be >= 0"),
    (["--dtype", "int8"], "invalid choice: 'int8'"),
])
def test_bad_arguments_exit_2_with_the_reason(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        mp.parse(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_dry_run_prints_the_plan_and_measures_nothing(tmp_path, capsys):
    assert mp.main(["--dry-run", "--out", str(tmp_path), "--steps", "e2e_resnet"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].startswith("e2e_resnet (weight 3): ")
    assert list(tmp_path.iterdir()) == []


def test_summary_reads_each_peer_against_inductor_and_names_a_cut_step():
    peers_row = {"eager": {"median_s": 0.004}, "inductor": {"median_s": 0.002},
                 "autosched+cudagraphs": {"not_available": "refused"}}
    steps = {"e2e_gpt": {"result": {"models": {"gpt": {"train_step": {"peers": peers_row}}}},
                         "killed_at_limit": True, "time_share_s": 190},
             "training_plans": {"killed_at_limit": False}}
    assert mp.summary(steps) == [
        "gpt train_step: eager 4.000 ms (2.00x inductor); inductor 2.000 ms (1.00x "
        "inductor); autosched+cudagraphs -",
        "e2e_gpt: stopped at its 190 s share"]


def test_peer_names_add_cuda_graph_twins_on_cuda_only():
    assert peers.peer_names(["eager", "inductor", "autosched"], "cpu") == [
        "eager", "inductor", "autosched"]
    assert peers.peer_names(["eager", "max-autotune", "autosched"], "cuda") == [
        "eager", "max-autotune", "max-autotune+cudagraphs", "autosched",
        "autosched+cudagraphs"]
    with pytest.raises(SystemExit, match="unknown peer"):
        peers.peer_names(["tensorrt"], "cuda")


def test_bucket_lengths_pad_a_quarter_of_each_bucket():
    assert peers.bucket_lengths(512) == ([128, 256, 512], [96, 192, 384])
    assert peers.bucket_lengths(16) == ([4, 8, 16], [3, 6, 12])


def test_a_refused_cudagraphs_keyword_is_a_row_not_a_failure():
    def without_cudagraphs(library):          # a backend maker without the keyword
        raise AssertionError("not called without cudagraphs here")

    model = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    result = peers.measure(model, (x,), lambda out: out.sum(), "lib", True,
                           ["eager", "autosched+cudagraphs"], rounds=2, calls=1, device="cpu",
                           make_backend=without_cudagraphs)
    assert result["autosched+cudagraphs"]["not_available"].startswith(
        "autosched.model.backend(DIR, cudagraphs=True): ")
    assert result["eager"]["max_abs_diff_vs_eager"] == 0.0
    assert len(result["eager"]["times_s"]) == 2


def test_model_e2e_writes_a_cast_model_file_and_refuses_a_missing_gpu(tmp_path, capsys,
                                                                    monkeypatch):
    path = model_e2e.write_model(tmp_path, "gpt", "tiny", "bf16")
    assert "DTYPE = getattr(torch, 'bfloat16')" in path.read_text()
    assert "DTYPE" not in model_e2e.write_model(tmp_path, "resnet", "tiny", "fp32").read_text()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        model_e2e.parse(["--device", "cuda"])
    assert e.value.code == 2 and "torch sees no CUDA GPU here" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        model_e2e.parse(["--models", "gpt,vit"])
    assert "unknown model(s) ['vit']" in capsys.readouterr().err
