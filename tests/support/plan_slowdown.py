"""Run as a script: profile and plan the small GPT at a budget, then measure the plan's
step against the original's, alternating; prints the plan's actions and the predicted
and measured slowdowns over keeping everything as one JSON line.

It runs in a process of its own (test_prediction.py): late in the suite's long-lived
process the same measurement read the keep-everything step 30-40% off its profile (heap
and leftover threads of earlier tests), a false prediction error three times in CI.
Usage: python plan_slowdown.py SPEC BANDWIDTH_JSON
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def main(spec: str, bw_path: str) -> dict:
    import torch

    import autosched.runtime as rt
    from autosched.runtime.model_profile import profile_model
    from autosched.runtime.measured_step import measure_step

    sys.path.insert(0, str(TESTS))
    from support.modules import load_by_path

    torch.set_num_threads(1)
    gpt = load_by_path(TESTS.parent / "examples" / "gpt.py", "plan_slowdown_gpt")
    model = gpt.make_model(n_layer=3, d_model=96, n_head=2, seq_len=48, vocab=64)
    inputs = gpt.make_inputs(batch=4, seq_len=48, vocab=64)
    prof = profile_model(model, inputs, gpt.loss_fn, repeats=7, clock="thread",
                         actions=["keep", "memeff", "recompute", "selective"],
                         bandwidth_path=bw_path)
    plan = rt.plan(model, inputs, spec, gpt.loss_fn, profile=prof)
    planned = rt.apply(model, plan)
    kept, under_plan = [], []
    for _ in range(4):
        kept += measure_step(model, inputs, gpt.loss_fn, repeats=3, clock="thread").times_s
        under_plan += measure_step(planned, inputs, gpt.loss_fn, repeats=3,
                                   clock="thread").times_s
    return {"actions": plan.actions,
            "predicted": plan.predicted["step_time_s"] / plan.reference["step_time_s"],
            "measured": statistics.median(under_plan) / statistics.median(kept)}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:3])))
