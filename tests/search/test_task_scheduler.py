"""The gradient-based task scheduler, driven by simulated latency histories."""
from __future__ import annotations

import math

import pytest

from autosched.task_scheduler import TaskScheduler


def simulate(scheduler, curves, batches, live=None):
    """Give `batches` batches; task i's best latency after its b-th batch is curves[i](b)."""
    history = [[] for _ in curves]
    order = []
    for _ in range(batches):
        i = scheduler.next_task(history, live)
        order.append(i)
        history[i].append(curves[i](len(history[i]) + 1))
    return order, history


def improving(b):  # keeps getting 10% faster every batch
    return 10.0 * 0.9 ** b


def flat(b):  # found its best at once
    return 10.0


def test_every_task_gets_a_batch_first_in_order():
    order, _ = simulate(TaskScheduler(4), [flat] * 4, 4)
    assert order == [0, 1, 2, 3]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_improving_task_gets_more_trials(seed):
    order, _ = simulate(TaskScheduler(["a", "b", "c"], seed=seed), [flat, improving, flat], 30)
    counts = [order.count(i) for i in range(3)]
    assert counts[1] > counts[0] and counts[1] > counts[2]
    assert counts[1] >= 13 and min(counts) >= 1


def test_a_low_alpha_would_not_follow_progress():
    # why the default is 0.8 (see the module docstring)
    order, _ = simulate(TaskScheduler(3, alpha=0.5, epsilon=0.0), [flat, improving, flat], 30)
    assert order.count(1) < 11


def test_flat_tasks_are_not_starved():
    # the 1/t forward term brings a flat task back when the others have had many batches
    order, _ = simulate(TaskScheduler(2, epsilon=0.0), [flat, improving], 40)
    assert order.count(0) >= 5


def test_weights_scale_the_gain():
    order, _ = simulate(TaskScheduler(2, weights=[1.0, 5.0], epsilon=0.0), [flat, flat], 20)
    assert order.count(1) > 2 * order.count(0)


def test_tasks_without_a_correct_kernel_get_patience_then_round_robin_only():
    failing = lambda b: math.inf  # noqa: E731
    order, _ = simulate(TaskScheduler(2, patience=3, epsilon=0.0), [flat, failing], 20)
    assert order[:4] == [0, 1, 1, 1]   # warm-up, then two more tries while it has no kernel
    assert order.count(1) == 3         # then it is hopeless: no gradient turns


def test_live_restricts_the_choice_and_matches_the_tuner_call():
    scheduler = TaskScheduler(3)
    order, _ = simulate(scheduler, [improving, improving, improving], 12, live=[0, 2])
    assert set(order) == {0, 2}
    with pytest.raises(ValueError):
        TaskScheduler(2, weights=[1.0])
    with pytest.raises(ValueError):
        scheduler.next_task([[1.0]] * 3, live=[])


def test_gain_follows_the_documented_formula():
    s = TaskScheduler(1, window=3)
    h = [8.0, 6.0, 5.0, 4.0, 3.5]
    backward = (6.0 - 3.5) / 3  # three batches back
    forward = 3.5 / 5
    assert s.gain(0, h) == pytest.approx(0.8 * backward + 0.2 * forward)
    assert s.gain(0, [2.0]) == pytest.approx(2.0)  # one batch: the forward term only
