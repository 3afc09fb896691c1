"""The planner's predicted cost of a plan against the measured one (a small GPT, CPU clock).

What the planner decides on is how much slower a plan is than keeping everything; the test
checks that prediction, the plan's step over the keep-everything step, against the same
ratio measured side by side (planned and original steps alternate, so a slow spell of the
shared machine slows both). An absolute step time read minutes after the profile moved by
up to 44% late in a long suite on the CI machine (three false failures); the bench
(bench/runtime_plans.py) checks the absolute 15% claim on the 6-layer GPT on a quiet
machine. The profile takes the median of 7 runs; time is the calling thread's CPU time
(torch runs on one thread here), which leaves out the threads earlier tests leave behind.
"""
from __future__ import annotations

import statistics

import pytest

import autosched.runtime as rt
from autosched.runtime.model_profile import profile_model
from autosched.runtime.training_step import measure_step


@pytest.mark.parametrize("spec", ["40%", "25%"])
def test_predicted_slowdown_over_keeping_everything_is_close(spec, gpt, bw_path):
    model = gpt.make_model(n_layer=3, d_model=96, n_head=2, seq_len=48, vocab=64)
    inputs = gpt.make_inputs(batch=4, seq_len=48, vocab=64)
    prof = profile_model(model, inputs, gpt.loss_fn, repeats=7, clock="thread",
                         actions=["keep", "memeff", "recompute", "selective"],
                         bandwidth_path=bw_path)
    plan = rt.plan(model, inputs, spec, gpt.loss_fn, profile=prof)
    assert set(plan.actions) != {"keep"}, plan.actions       # the budget forces a trade
    planned = rt.apply(model, plan)
    kept, under_plan = [], []
    for _ in range(4):
        kept += measure_step(model, inputs, gpt.loss_fn, repeats=3, clock="thread").times_s
        under_plan += measure_step(planned, inputs, gpt.loss_fn, repeats=3,
                                   clock="thread").times_s
    measured = statistics.median(under_plan) / statistics.median(kept)
    predicted = plan.predicted["step_time_s"] / plan.reference["step_time_s"]
    assert measured > 1.0 and predicted > 1.0, (plan.actions, predicted, measured)
    assert abs(predicted - measured) / measured < 0.2, (plan.actions, predicted, measured)


def test_the_thread_clock_refuses_more_than_one_torch_thread():
    """With two threads the caller's CPU time would miss the other thread's work."""
    import torch

    from autosched.errors import UserError
    from autosched.runtime.training_step import clock_fn

    assert clock_fn("thread")() >= 0         # the runtime tests run torch on one thread
    torch.set_num_threads(2)
    try:
        with pytest.raises(UserError, match="runs on 2"):
            clock_fn("thread")
    finally:
        torch.set_num_threads(1)
