"""export-model's step check: the whole compiled step with the chosen kernels against
inductor alone, and the greedy undo of the groups of kernels that keep it from being
faster beyond noise.

The decision is tested on synthetic samples with known answers (no timing); one end to
end export of a small MLP, its kernels recorded without tuning, shows the measurements
land in model_ops.json, agree with the decision rule and leave a library that loads.
"""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from autosched.model.choice import STEP_SLOWER, OpChoice  # noqa: E402
from autosched.model.step_check import (  # noqa: E402
    greedy_undo, median_interval, min_rounds, verdict)

ROUNDS = 15
# a machine whose speed swings by up to 2x between rounds, equally for every side
DRIFT = [1.0 + 0.5 * ((r * 7) % 5) / 4 for r in range(ROUNDS)]


def synthetic(effects: dict, jitter: float = 0.0):
    """A `measure` for greedy_undo: inductor takes DRIFT[r] in round r; a variant
    (1 + the sum of its groups' effects) times that, times (1 + jitter) in even rounds
    and (1 - jitter) in odd ones. Calls are logged in `.calls`."""
    def measure(candidates):
        measure.calls.append(list(candidates))
        sign = [1 if r % 2 == 0 else -1 for r in range(ROUNDS)]
        timed = {c: [d * (1 + sum(effects[g] for g in c)) * (1 + s * jitter)
                     for d, s in zip(DRIFT, sign)] for c in candidates}
        return timed, list(DRIFT)

    measure.calls = []
    return measure


def test_median_interval_takes_sign_test_order_statistics():
    values = [float(v) for v in range(15, 0, -1)]   # any order
    assert median_interval(values) == (8.0, 4.0, 12.0)   # s[3], s[11] of 15
    assert median_interval(list(range(9))) == (4, 1, 7)  # s[1], s[7] of 9
    assert min_rounds() == 6
    assert median_interval([3, 1, 2, 6, 5, 4]) == (3.5, 1, 6)  # all six: the extremes
    with pytest.raises(ValueError, match="5 rounds give no 95% interval; at least 6"):
        median_interval([1.0] * 5)


def test_rounds_pair_with_inductor_so_a_drifting_machine_cancels():
    v = verdict([0.9 * d for d in DRIFT], DRIFT)
    assert (v.ratio, v.low, v.high) == pytest.approx((0.9, 0.9, 0.9))
    assert v.faster
    assert not verdict(DRIFT, DRIFT).faster   # the same speed is not faster


def test_a_group_that_helps_stays_and_nothing_more_is_timed():
    measure = synthetic({"aten_mm": -0.2, "aten_linear": -0.1}, jitter=0.02)
    undone, variants = greedy_undo(["aten_mm", "aten_linear"], measure)
    assert undone == []
    assert measure.calls == [[("aten_linear", "aten_mm")]]
    assert [(v.stage, v.groups, v.verdict.faster) for v in variants] == [
        (0, ("aten_linear", "aten_mm"), True)]
    assert variants[0].verdict.ratio == pytest.approx(0.7 * 1.02)


def test_a_group_that_slows_the_step_is_undone_and_the_helping_one_stays():
    measure = synthetic({"aten_mm": -0.2, "aten_gelu": 0.3}, jitter=0.02)
    undone, variants = greedy_undo(["aten_mm", "aten_gelu"], measure)
    assert undone == ["aten_gelu"]
    assert measure.calls == [[("aten_gelu", "aten_mm")], [("aten_mm",), ("aten_gelu",)]]
    assert [(v.stage, v.groups, v.verdict.faster) for v in variants] == [
        (0, ("aten_gelu", "aten_mm"), False), (1, ("aten_mm",), True),
        (1, ("aten_gelu",), False)]
    assert [round(v.verdict.ratio, 4) for v in variants] == [1.122, 0.816, 1.326]


def test_noise_level_differences_undo_every_group_largest_effect_first():
    """Within +-5 % noise no variant is faster beyond noise: the group whose removal
    helps most goes first, and the last one goes without a measurement."""
    measure = synthetic({"a": 0.001, "b": 0.002, "c": 0.003}, jitter=0.05)
    undone, variants = greedy_undo(["c", "a", "b"], measure)
    assert undone == ["c", "b", "a"]
    assert measure.calls == [[("a", "b", "c")], [("b", "c"), ("a", "c"), ("a", "b")],
                             [("b",), ("a",)]]
    assert len(variants) == 6 and not any(v.verdict.faster for v in variants)
    assert [v.stage for v in variants] == [0, 1, 1, 1, 2, 2]


def test_undoing_the_slow_group_may_still_leave_a_step_at_noise_level():
    measure = synthetic({"slow": 0.3, "even": 0.0}, jitter=0.05)
    undone, variants = greedy_undo(["slow", "even"], measure)
    assert undone == ["slow", "even"]
    assert len(measure.calls) == 2 and len(variants) == 3


def _choice(workload, key, chosen=True):
    return OpChoice(workload, {"M": 4}, 1, {"aten.x": 1}, key, 1.0 if chosen else 1e-9,
                    1e-6, 1, 2)


def test_groups_are_workloads_joined_where_one_call_has_outputs_in_both():
    from autosched.model.extract import ModelOp, ModelOps
    from autosched.model.step_check import chosen_groups, undo

    names = ["aten_linear", "aten_linear", "aten_mm", "aten_layer_norm_grad_input",
             "aten_layer_norm_grad_gamma", "aten_gelu"]
    ops = [ModelOp(w, {"M": i}, 1) for i, w in enumerate(names)]
    ops[3].siblings, ops[4].siblings = {ops[4].key}, {ops[3].key}
    choices = [_choice(w, f"k{i}", chosen=w != "aten_gelu") for i, w in enumerate(names)]
    groups = chosen_groups(ModelOps("m.py", True, ops, None, None), choices)
    ln = "aten_layer_norm_grad_gamma+aten_layer_norm_grad_input"
    assert groups == {ln: (3, 4), "aten_linear": (0, 1), "aten_mm": (2,)}
    out = undo(choices, groups, [ln, "aten_mm"])
    assert [c.chosen for c in out] == ["autosched"] * 2 + ["torch"] * 4
    assert [c.reason for c in out[2:5]] == [STEP_SLOWER] * 3
    assert out[5] == choices[5]


def test_choices_file_reads_with_and_without_the_step_check(tmp_path):
    from autosched.model.choice import read_choices, read_step_check, write_choices
    from autosched.model.step_check import StepCheck, Variant, report_lines

    choices = [_choice("aten_mm", "k0")]
    write_choices(str(tmp_path), "m.py", False, choices)
    assert read_choices(tmp_path) == choices and read_step_check(tmp_path) is None
    v = Variant(0, ("aten_mm",), (2e-3,) * 6, (1e-3,) * 6, verdict([2.0] * 6, [1.0] * 6))
    check = StepCheck("inference", ("aten_mm",), ("aten_mm",), (v,), threads=2)
    write_choices(str(tmp_path), "m.py", False, choices, check.to_json())
    assert read_choices(tmp_path) == choices
    doc = read_step_check(tmp_path)
    assert doc["undone"] == ["aten_mm"] and doc["kept"] == [] and doc["threads"] == 2
    assert doc["variants"][0]["rounds"] == 6 and doc["variants"][0]["interval"] == [2.0, 2.0]
    assert report_lines(doc) == [
        "step check (inference, compiled with kernels against inductor, 95% interval of "
        "the median ratio over the rounds):",
        "  stage 0: kernels of aten_mm: 2.000 ms vs inductor 1.000 ms (2.000x, "
        "2.000-2.000, 6 rounds): not faster beyond noise",
        f"step check undid ({STEP_SLOWER}): aten_mm; kept: none (inductor alone)"]


MLP = '''
import torch
from torch import nn

def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))

def make_inputs():
    return torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
'''


def _record_untuned(path, db_url):
    """Each inference task of the model file: its space's default kernel recorded at
    1 ns and torch's baseline at 1 s, so the records choose every kernel."""
    from search_space import SPACE_VERSION, generate_space

    from autosched.db import make_record, open_database
    from autosched.model.baseline import record_baseline
    from autosched.model.extract import extract
    from autosched.model.modelfile import load_model_file
    from autosched.model.baseline import baseline_threads
    from autosched.model.extract import model_tasks
    from autosched.results import MeasureResult
    from autosched.target import resolve_target
    from autosched.versions import current_versions

    target, versions = resolve_target("llvm"), current_versions(SPACE_VERSION)
    tasks = model_tasks(extract(load_model_file(str(path)), False))
    with open_database(db_url) as db:
        for task in tasks:
            db.register_task(task.to_json())
            cand = generate_space(task, target).default_candidate()
            db.add_records([make_record(task, target, cand, MeasureResult((1e-9,) * 3),
                                        versions)])
            record_baseline(db, task, target, versions, [1.0], baseline_threads(target))
    return sorted(t.workload for t in tasks)


def test_export_model_with_the_step_check_records_it_and_the_library_loads(
        tmp_path, cli_here):
    import autosched.model
    from autosched.model.choice import read_choices

    path, out = tmp_path / "mlp.py", tmp_path / "lib"
    path.write_text(MLP)
    db = f"sqlite:///{tmp_path}/db.sqlite"
    workloads = _record_untuned(path, db)
    assert workloads == ["aten_linear", "aten_linear_gelu"]
    done = cli_here("export-model", str(path), "--db", db, "-o", str(out),
                    "--decide-on", "records", "--step-rounds", "6")
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "model_ops.json").read_text())
    check = doc["step_check"]
    assert check["step"] == "inference" and check["groups"] == workloads
    assert check["variants"][0]["groups"] == workloads
    assert all(v["rounds"] == 6 == len(v["samples_s"]) == len(v["inductor_samples_s"])
               for v in check["variants"])
    # the recorded samples, replayed through the decision, give the recorded undo
    by_stage = {}
    for v in check["variants"]:
        by_stage.setdefault(v["stage"], {})[tuple(v["groups"])] = v

    def replay(candidates):
        stage = next(s for s in by_stage.values() if set(s) == set(candidates))
        return ({c: stage[c]["samples_s"] for c in candidates},
                stage[candidates[0]]["inductor_samples_s"])

    undone, _ = greedy_undo(check["groups"], replay)
    assert undone == check["undone"]
    assert check["kept"] == [g for g in workloads if g not in undone]
    choices = read_choices(out)
    assert sorted(c.workload for c in choices if c.chosen == "autosched") == check["kept"]
    assert all(c.reason == STEP_SLOWER for c in choices if c.workload in undone)
    for line in (f"  stage 0: kernels of {', '.join(workloads)}: ",
                 "step check undid (slower in the whole compiled step): "):
        assert line in done.stdout
    # the directory as written serves the backend: its outputs are eager torch's
    from autosched.model.modelfile import load_model_file

    spec = load_model_file(str(path))
    backend = autosched.model.backend(out)
    torch._dynamo.reset()
    model = spec.model.eval()
    with torch.no_grad():
        got = torch.compile(model, backend=backend, dynamic=False)(*spec.inputs)
        torch.testing.assert_close(got, model(*spec.inputs), rtol=1e-4, atol=1e-5)
    ran = sorted({d.workload for d in backend.decisions if d.chosen == "autosched"})
    assert ran == check["kept"]
    assert (out / "manifest.json").is_file() == bool(check["kept"])
    torch._dynamo.reset()


def test_too_few_rounds_is_one_line_and_exit_2(tmp_path, cli_here):
    done = cli_here("export-model", str(tmp_path / "none.py"), "-o", str(tmp_path / "lib"),
                    "--step-rounds", "5")
    assert done.returncode == 2
    assert done.stderr == ("autosched: error: --step-rounds 5: the step check needs at "
                           "least 6 rounds\n")


def test_a_variant_faster_beyond_noise_wins_over_a_lower_but_noisy_median():
    """Of the steps without one group, the one faster beyond noise is kept although
    another has the lower median ratio: the undo stops there, keeping more kernels."""
    ratios = {("a", "b", "c"): [1.0] * ROUNDS,
              ("b", "c"): [0.85] * 8 + [1.2] * 7,    # median 0.85, interval up to 1.2
              ("a", "c"): [0.95] * ROUNDS,            # faster beyond noise
              ("a", "b"): [1.3] * ROUNDS}

    def measure(candidates):
        return {c: ratios[c] for c in candidates}, [1.0] * ROUNDS

    undone, variants = greedy_undo(["a", "b", "c"], measure)
    assert undone == ["b"]
    assert [(v.groups, v.verdict.ratio, v.verdict.faster) for v in variants[1:]] == [
        (("b", "c"), 0.85, False), (("a", "c"), 0.95, True), (("a", "b"), 1.3, False)]
