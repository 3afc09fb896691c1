"""A pipeline plan run on torch.distributed (gloo, one process per stage, torchrun):
gradients equal one process's, the stages' saved bytes are the ones the actions leave,
and a killed stage ends the run with one line. Serial (tests/conftest.py): each run
starts two torch processes."""
from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from autosched.errors import UserError
from autosched.model.modelfile import load_model_file
from autosched.runtime.layers import CallCapture, find_layers
from autosched.runtime.pipeline.launch import StageFailure, read_plan
from autosched.runtime.pipeline.run import (compare_with_single_process, run_pipeline,
                                            single_process_step)
from autosched.runtime.pipeline.worker import KILL_ENV, StageModel, check_boundaries

# Four layers Linear(16, 32) -> GELU -> Linear(32, 16) on an 8 x 16 fp32 input; four
# micro-batches of 2 rows. Kept, a layer saves its input (2x16 fp32, 128 B; layer 0's is
# a view of the whole 8x16 input, whose 512 B storage counts), the GELU's input and the
# second Linear's input (2x32 fp32, 256 B each): 640 B, layer 0 1024 B. Recomputed, a
# layer saves its input only. The last stage also holds what the loss saves (pow saves
# the 2x16 output, 128 B), as a one-device step's meter counts it.
MODEL = '''
import torch
from torch import nn

def make_model():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
                           for _ in range(4)])

def make_inputs():
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(1))

def loss_fn(out):
    return out.pow(2).mean()
'''
LAYERS = ["0", "1", "2", "3"]


def plan(acts=("keep",) * 4, **changes):
    doc = {"format": "autosched-pipeline-plan", "version": 1, "stages": 2,
           "micro_batches": 4, "schedule": "1F1B", "layers": LAYERS, "boundaries": [0, 2, 4],
           "actions": dict(zip(LAYERS, acts)), "transfers": [], "budget_bytes": 1 << 20,
           "predicted": {}}
    return {**doc, **changes}


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pipeline") / "tiny.py"
    path.write_text(MODEL)
    return str(path)


@pytest.mark.parametrize("change, message", [
    ({"transfers": [{"from": 0, "to": 0, "micro_batches": [0], "bytes": 640}]},
     "pipeline plan: transfer 0 -> 0 must join two different stages of 0..1"),
    ({"transfers": [{"from": 0, "to": 1, "micro_batches": [1, 4], "bytes": 640}]},
     "pipeline plan: transfer 0 -> 1: micro-batch 4 is parked twice or is not one of 0..3"),
    ({"boundaries": [0, 4, 4]},
     "pipeline plan: boundaries [0, 4, 4] must rise from 0 to 4 in 2 steps (every stage "
     "runs a layer)"),
    ({"micro_batches": 1},
     "pipeline plan: 2 stages and 1 micro-batches; 1F1B needs at least one stage and at "
     "least as many micro-batches"),
    ({"actions": {"0": "keep", "1": "keep", "2": "keep", "3": "offload"}},
     "pipeline plan: layer 3: offload is not run in a pipeline stage (host offload is a "
     "single-device action)"),
    ({"actions": {"0": "keep", "1": "keep", "2": "keep"}},
     "pipeline plan: no action for layer 3"),
])
def test_a_plan_it_cannot_run_is_refused_in_one_line_before_any_process(change, message):
    with pytest.raises(UserError) as e:
        read_plan(plan(**change))
    assert str(e.value) == message


def test_two_stages_give_one_process_gradients_and_count_each_stage_saved_bytes(
        model_file, tmp_path):
    result = run_pipeline(model_file, plan(), tmp_path)
    check = compare_with_single_process(model_file, plan(), result)
    # the same ops on the same micro-batches in the same order on one thread: bitwise
    assert (check.max_abs, check.max_rel, check.loss_diff, check.within) == (0.0, 0.0, 0.0, True)
    _, ref_losses = single_process_step(model_file, 4)
    assert result.losses == ref_losses and len(ref_losses) == 4
    assert len(result.grads) == 4 * 4          # every layer's 2 weights and 2 biases
    assert [s["layers"] for s in result.stages] == [["0", "1"], ["2", "3"]]
    assert [s["saved_bytes_per_micro_batch"] for s in result.stages] == [[1664] * 4,
                                                                          [1408] * 4]
    # 1F1B: stage 0 holds 2 micro-batches at once (they share the input's storage), the
    # last stage 1
    assert result.peak_saved_bytes == [2 * 1664 - 512, 1408]
    assert all(len(s["forward_s"]) == len(s["backward_s"]) == 4 for s in result.stages)


def test_recompute_on_a_stage_gives_the_same_gradients_and_saves_only_layer_inputs(
        model_file, tmp_path):
    doc = plan(("recompute", "recompute", "keep", "keep"))
    result = run_pipeline(model_file, doc, tmp_path)
    check = compare_with_single_process(model_file, doc, result)
    assert (check.max_abs, check.within) == (0.0, True)
    assert result.stages[0]["saved_bytes_per_micro_batch"] == [512 + 128] * 4   # was 1664
    assert result.peak_saved_bytes == [512 + 2 * 128, 1408]                    # was 2816


def test_parked_micro_batches_go_to_the_other_stage_and_come_back_for_their_backward(
        model_file, tmp_path):
    doc = plan(transfers=[{"from": 0, "to": 1, "micro_batches": [1, 2, 3], "bytes": 1152}])
    result = run_pipeline(model_file, doc, tmp_path)
    check = compare_with_single_process(model_file, doc, result)
    assert (check.max_abs, check.within) == (0.0, True)      # put back bit for bit
    first, last = result.stages
    # what stage 0 saves, less its input's storage (pipelining holds it anyway)
    moved = 1664 - 512
    parks = [(r["park"], r["to"], r["bytes"]) for r in first["transfers"] if "park" in r]
    fetches = {r["fetch"]: r for r in first["transfers"] if "fetch" in r}
    hosted = [(r["hosted"], r["from"], r["bytes"]) for r in last["transfers"]]
    assert parks == [(1, 1, moved), (2, 1, moved), (3, 1, moved)]
    assert sorted((m, r["bytes"]) for m, r in fetches.items()) == [(1, moved), (2, moved),
                                                                   (3, moved)]
    assert hosted == [(1, 0, moved), (2, 0, moved), (3, 0, moved)]
    assert all(r["from"] == 1 for r in fetches.values())
    for m, r in fetches.items():                    # back before its backward began
        assert r["end_s"] <= first["backward_start_s"][m]
    # 1F1B's two micro-batches at stage 0's second forward end, before any park can
    # start: the peak stays; the host held at least one parked micro-batch
    assert first["peak_saved_bytes"] == 2 * 1664 - 512
    assert last["peak_saved_bytes"] >= moved


def test_a_killed_stage_ends_the_run_with_one_line_naming_it(model_file, tmp_path):
    start = time.monotonic()
    with pytest.raises(StageFailure) as e:
        run_pipeline(model_file, plan(), tmp_path, limit_s=90, comm_timeout_s=30,
                     extra_env={KILL_ENV: "1"})
    assert time.monotonic() - start < 60
    assert e.value.stage == 1
    assert str(e.value) == ("stage 1 process exited with code 9 (no error reported by the "
                            "stage; the others were stopped)")


def _captured(model, inputs):
    with torch.no_grad(), CallCapture(find_layers(model)) as capture:
        model(*inputs)
    return capture.single_calls()


def test_a_plan_for_other_layers_is_refused_by_the_stage_in_one_line(model_file):
    spec = load_model_file(model_file)
    doc = read_plan(plan(layers=["0", "1", "2", "x"],
                         actions={"0": "keep", "1": "keep", "2": "keep", "x": "keep"}))
    with pytest.raises(UserError) as e:
        StageModel(spec.model, doc, 1, _captured(spec.model, spec.inputs))
    assert str(e.value) == ("the plan is for 4 layers, the model has 4; they differ at "
                            "position 3 (plan 'x', model '3')")


class _TwoInputs(nn.Module):
    """Layers that also receive the model's first activation: no boundary between them."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.blocks = nn.ModuleList(nn.Bilinear(4, 4, 4) for _ in range(2))

    def forward(self, x):
        h = first = self.stem(x)
        for block in self.blocks:
            h = block(h, first)
        return h


def test_a_boundary_where_more_than_one_tensor_flows_is_refused_in_one_line():
    model = _TwoInputs()
    doc = read_plan(plan(layers=["blocks.0", "blocks.1"], boundaries=[0, 1, 2],
                         actions={"blocks.0": "keep", "blocks.1": "keep"}))
    with pytest.raises(UserError) as e:
        check_boundaries(doc, _captured(model, (torch.randn(4, 4),)))
    assert str(e.value) == ("no stage boundary can sit before layer blocks.1: it receives "
                            "2 tensor(s), not only blocks.0's output; move the boundary")


def _parking_plan(stages, micro, bounds, options_index=0):
    """A plan parking stage 0's micro-batches on the last stage as bpipe chooses for
    (stages, micro): the document and the Parking option."""
    from autosched.runtime.pipeline.bpipe import parking_options

    option = parking_options(stages, micro, 0, stages - 1)[options_index]
    doc = plan(stages=stages, micro_batches=micro, boundaries=bounds,
               transfers=[{"from": 0, "to": stages - 1,
                           "micro_batches": list(option.micro_batches)}])
    return doc, option


@pytest.mark.parametrize("stages, micro, bounds", [(3, 4, [0, 1, 2, 4]),
                                                   (4, 8, [0, 1, 2, 3, 4])])
def test_a_parking_stage_holds_what_the_plan_counts(model_file, tmp_path, stages, micro,
                                                    bounds):
    """Stage 0 runs layer 0: per micro-batch it saves the input's storage (shared by all
    micro-batches, and kept: pipelining holds it) and what it parks. Under 1F1B it holds
    S micro-batches; parking bpipe's fewest-transfer choice it must hold `resident`, as
    the plan's own simulation counts: 3 stages, 4 micro-batches, parking 0, 1, 3 gives
    2 (the fetch of 1 issued at forward 3 waits for 3's park: out, then in); 4 stages,
    8 micro-batches, parking the even ones gives 3."""
    from autosched.runtime.pipeline.parking import planned

    doc, option = _parking_plan(stages, micro, bounds)
    assert (option.micro_batches, option.resident) == {
        3: ((0, 1, 3), 2), 4: ((0, 2, 4, 6), 3)}[stages]
    assert planned(read_plan(doc)).stages[0].peak_bytes == option.resident
    result = run_pipeline(model_file, doc, tmp_path)
    check = compare_with_single_process(model_file, doc, result)
    assert (check.max_abs, check.within) == (0.0, True)
    first = result.stages[0]
    saved = first["saved_bytes_per_micro_batch"]
    assert saved == [{4: 1024, 8: 768}[micro]] * micro     # 2 rows a micro-batch, or 1
    moved = saved[0] - 512
    assert sorted(r["park"] for r in first["transfers"] if "park" in r) == \
        list(option.micro_batches)
    assert first["peak_saved_bytes"] == 512 + option.resident * moved
    # unparked it would hold S: 512 + S * moved (the 1F1B count, tested above)



def test_stages_compiled_at_their_fractions_give_one_process_gradients(model_file, tmp_path):
    """torch.compile's memory budget per stage, at the fractions the search chooses for
    1408 B (test_pipeline_compiled.py: 0 and 1): stage 0 saves only its layers' inputs
    (the whole input's 512 B storage, layer 1's 128 B each micro-batch; 2 held), stage 1
    what eager keeping saves; the peaks are the search's measured bytes, and the compiled
    arithmetic rounds like eager's within the stated tolerance."""
    result = run_pipeline(model_file, plan(), tmp_path, compile_budgets=[0.0, 1.0])
    assert [s["compile_budget"] for s in result.stages] == [0.0, 1.0]
    assert [s["saved_bytes_per_micro_batch"] for s in result.stages] == [[640] * 4,
                                                                          [1408] * 4]
    assert result.peak_saved_bytes == [768, 1408]
    assert compare_with_single_process(model_file, plan(), result).within


def test_an_interleaved_plan_runs_torchs_schedule_with_each_rank_holding_its_chunks(
        model_file, tmp_path):
    """Four chunks of one layer on two ranks (rank 0: layers 0 and 2, rank 1: 1 and 3)
    under ScheduleInterleaved1F1B: each layer's micro-batches still run in order, so the
    gradients are one process's bit for bit. Rank 0 holds 5 chunk micro-batches at once
    (interleaved.held_chunk_counts): 3 of layer 0 (512 B each beside the shared 512 B
    input) and 2 of layer 2 (640 B each): 3328 B; rank 1 holds 3: 2 of layer 1 and one of
    layer 3 with the loss (768 B): 2048 B."""
    doc = plan(version=2, schedule="interleaved-1F1B", virtual_stages=2,
               boundaries=[0, 1, 2, 3, 4])
    result = run_pipeline(model_file, doc, tmp_path)
    check = compare_with_single_process(model_file, doc, result)
    assert (check.max_abs, check.loss_diff, check.within) == (0.0, 0.0, True)
    assert [s["layers"] for s in result.stages] == [["0", "2"], ["1", "3"]]
    assert [[c["saved_bytes_per_micro_batch"] for c in s["chunks"]]
            for s in result.stages] == [[[1024] * 4, [640] * 4], [[640] * 4, [768] * 4]]
    assert result.peak_saved_bytes == [3328, 2048]
    assert [s["backend"] for s in result.stages] == ["gloo", "gloo"]
