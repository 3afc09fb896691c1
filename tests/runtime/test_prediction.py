"""The planner's predicted cost of a plan against the measured one (a small GPT, CPU clock).

What the planner decides on is how much slower a plan is than keeping everything; the test
checks that prediction, the plan's step over the keep-everything step, against the same
ratio measured side by side (planned and original steps alternate, so a slow spell of the
shared machine slows both). It runs in a fresh process (support/plan_slowdown.py): in the
suite's long-lived process, late in a CI run, the profile and the steps after it disagreed
by 30-44% (three false failures; alone the error is under 5%). The bench
(bench/runtime_plans.py) checks the absolute 15% claim on the 6-layer GPT on a quiet
machine. Time is the calling thread's CPU time, torch on one thread.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "plan_slowdown.py"


@pytest.mark.parametrize("spec", ["40%", "25%"])
def test_predicted_slowdown_over_keeping_everything_is_close(spec, bw_path):
    done = subprocess.run([sys.executable, str(SCRIPT), spec, str(bw_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    actions, predicted, measured = got["actions"], got["predicted"], got["measured"]
    assert set(actions) != {"keep"}, actions               # the budget forces a trade
    assert measured > 1.0 and predicted > 1.0, (actions, predicted, measured)
    assert abs(predicted - measured) / measured < 0.2, (actions, predicted, measured)


def test_the_thread_clock_refuses_more_than_one_torch_thread():
    """With two threads the caller's CPU time would miss the other thread's work."""
    import torch

    from autosched.errors import UserError
    from autosched.runtime.measured_step import clock_fn

    assert clock_fn("thread")() >= 0         # the runtime tests run torch on one thread
    torch.set_num_threads(2)
    try:
        with pytest.raises(UserError, match="runs on 2"):
            clock_fn("thread")
    finally:
        torch.set_num_threads(1)
