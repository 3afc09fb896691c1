"""The per-task decision: a kernel runs only where it beats torch's recorded time, and
where it was timed beside torch at export, torch's time there."""
from __future__ import annotations

import pytest


def _choice(workload, params, count, torch_s, kernel_s, call_s=None, key="k",
            torch_call_s=None):
    from autosched.model.choice import OpChoice

    return OpChoice(workload, params, count, {"aten.x": count}, key, torch_s, kernel_s, 1, 2,
                    call_s, torch_call_s)


@pytest.mark.parametrize("torch_s, kernel_s, call_s, torch_call_s, chosen", [
    (2e-6, 1e-6, None, None, "autosched"),
    (2e-6, 1e-6, 3e-6, None, "torch"),          # the call through torch.ops costs more
    (1e-6, 2e-6, None, None, "torch"),
    (None, 1e-6, None, None, "torch"),          # no baseline: nothing is assumed
    (1e-6, None, None, None, "torch"),          # no kernel recorded
    # timed beside torch at export: that pair decides, not torch's older baseline
    (2e-6, 1e-6, 1.5e-6, 1.4e-6, "torch"),
    (1e-6, 0.9e-6, 1.5e-6, 1.6e-6, "autosched"),
])
def test_kernel_only_where_it_beats_torch(torch_s, kernel_s, call_s, torch_call_s, chosen):
    c = _choice("aten_mm", {"M": 1}, 1, torch_s, kernel_s, call_s, torch_call_s=torch_call_s)
    assert c.chosen == chosen
    assert ("side by side" in c.reason) == (torch_call_s is not None and kernel_s is not None)
    from autosched.model.choice import OpChoice

    assert OpChoice.from_json(c.to_json()) == c


def test_same_shapes_of_one_workload_keep_the_larger_saving():
    from autosched.model.choice import exclude_ambiguous
    from autosched.model.workloads import WORKLOADS
    from autosched.workload import make_task

    ln = WORKLOADS["aten_layer_norm"].definition()
    tasks = [make_task(ln, {"M": 4, "N": 8, "eps": eps, "dtype": "float32"})
             for eps in (1e-5, 1e-6)]
    mm = make_task(WORKLOADS["aten_mm"].definition(), {"M": 4, "N": 8, "K": 8,
                                                       "dtype": "float32"})
    choices = [_choice("aten_layer_norm", t.args, n, 5e-6, 1e-6, key=t.key)
               for t, n in zip(tasks, (1, 3))] + [_choice("aten_mm", mm.args, 1, 5e-6, 1e-6)]
    out = exclude_ambiguous(tasks + [mm], choices)
    assert [c.chosen for c in out] == ["torch", "autosched", "autosched"]
    assert "same shapes" in out[0].reason


def test_a_kernel_whose_call_has_an_output_left_to_torch_stays_torch():
    """The backend replaces an aten call's outputs together or not at all, so export
    decides the same: one gradient of a layer norm backward left to torch keeps its
    siblings on torch (and the exclusion spreads through a chain of siblings)."""
    from autosched.model.choice import SPLIT_CALL
    from autosched.model.extract import ModelOp, ModelOps
    from autosched.model.choice import exclude_split_calls

    parts = ("input", "gamma", "beta")
    ops = [ModelOp(f"aten_layer_norm_grad_{p}", {"M": 4, "N": 8}, 1) for p in parts]
    ops.append(ModelOp("aten_mm", {"M": 4, "N": 8, "K": 8}, 1))
    ops[0].siblings = {ops[1].key}
    ops[1].siblings = {ops[0].key, ops[2].key}
    ops[2].siblings = {ops[1].key}
    model_ops = ModelOps("m.py", True, ops, None, None)

    def choices(torch_wins):
        return [_choice(op.workload, op.params, 1, 1e-9 if op.workload in torch_wins
                        else 5e-6, 1e-6) for op in ops]

    out = exclude_split_calls(model_ops, choices({"aten_layer_norm_grad_beta"}))
    assert [c.chosen for c in out] == ["torch", "torch", "torch", "autosched"]
    assert [c.reason for c in out[:2]] == [SPLIT_CALL] * 2
    assert out[2].reason.startswith("torch recorded faster")
    assert exclude_split_calls(model_ops, choices(set())) == choices(set())
