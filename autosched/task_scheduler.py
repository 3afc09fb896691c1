"""Which task gets the next batch of trials (placeholder: round robin).

The gradient-based rule replaces this module."""
from __future__ import annotations


class TaskScheduler:
    def __init__(self, n_tasks: int):
        self.n_tasks = n_tasks
        self._turn = 0

    def next_task(self, histories: list[list[float]], live: list[int]) -> int:
        pick = live[self._turn % len(live)]
        self._turn += 1
        return pick
