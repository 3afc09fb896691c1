"""How the tuning loop sizes batches when several tasks share one trial budget."""
from __future__ import annotations

from types import SimpleNamespace

from autosched.tuner import next_batch_size


def _states(histories):
    return [SimpleNamespace(history=h) for h in histories]


def test_untried_tasks_keep_a_share_of_the_budget():
    states = _states([[], [], []])
    assert next_batch_size(states, [0, 1, 2], 16, 3) == 1      # one trial each: the floor
    assert next_batch_size(states, [0, 1, 2], 16, 12) == 4
    assert next_batch_size(states, [0, 1, 2], 16, 100) == 16


def test_once_every_task_was_tried_batches_are_full():
    states = _states([[1.0], [2.0]])
    assert next_batch_size(states, [0, 1], 16, 100) == 16
    assert next_batch_size(states, [0, 1], 16, 5) == 5


def test_a_budget_smaller_than_the_task_count_still_makes_progress():
    assert next_batch_size(_states([[], [], []]), [0, 1, 2], 16, 2) == 1
