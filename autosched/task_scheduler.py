"""Which task gets the next batch of trials when several tasks share one budget.

The objective is the weighted total latency sum_i w_i * g_i, where g_i is task i's best
latency and w_i how often the kernel runs (say, its count in a model). A batch should go
where it is expected to reduce that sum the most. Following Ansor's gradient-based task
scheduler, the expected reduction of task i's next batch is estimated from its history
(best latency after each of its batches):

    backward_i = (g_i[-1-k] - g_i[-1]) / k      recent improvement per batch, k <= window
    forward_i  = g_i[-1] / t_i                  optimistic: the average batch so far
                                                could take this much off again
    gain_i     = w_i * (alpha * backward_i + (1 - alpha) * forward_i)

and the task with the largest gain gets the batch. The backward term follows tasks that
keep improving; the forward term keeps tasks with high latency and few trials in play,
and decays as 1/t so a task that stopped improving is not starved forever (a pure
backward rule would never return to a flat task). Both are in latency units, so a batch
goes where it buys the most absolute time: a task that already got 10x faster stops
attracting batches even while it still improves in relative terms.

Ansor weights backward by 0.2, but its forward term is bounded by the speed of similar
tasks (FLOP rates across tasks); ours is that optimistic guess alone, so we trust the
observed rate more: alpha = 0.8 by default. With 0.5 or less a task that keeps getting
10% faster per batch gets fewer batches than flat tasks of the same starting latency,
because g/t of the flat tasks stays larger than the real progress.

Rules around the gradient:
- warm-up: every task gets one batch, in order, before any gradient is used;
- a task with no correct kernel yet has infinite latency: it gets batches first, for
  `patience` batches, then only round-robin turns (it may be hopeless);
- with probability `epsilon` the batch goes round-robin to the task with the fewest
  batches, so an estimate that is wrong (noise, a plateau before a drop) is revisited.
"""
from __future__ import annotations

import math
import random
from typing import Sequence


class TaskScheduler:
    """Shares a trial budget among tasks: `next_task(history) -> index`."""

    def __init__(self, tasks, weights: Sequence[float] | None = None, alpha: float = 0.8,
                 window: int = 3, epsilon: float = 0.05, patience: int = 3, seed: int = 0):
        n = tasks if isinstance(tasks, int) else len(tasks)
        if n < 1:
            raise ValueError("the task scheduler needs at least one task")
        self.n_tasks = n
        self.weights = [1.0] * n if weights is None else [float(w) for w in weights]
        if len(self.weights) != n or any(w < 0 for w in self.weights):
            raise ValueError(f"need {n} non-negative weights, got {list(self.weights)}")
        self.alpha, self.window, self.epsilon = float(alpha), max(1, int(window)), float(epsilon)
        self.patience = int(patience)
        self._rng = random.Random(seed)

    def next_task(self, history: Sequence[Sequence[float]],
                  live: Sequence[int] | None = None) -> int:
        """The index of the task that gets the next batch. `history[i]` lists task i's best
        latency (seconds, inf while none is correct) after each of its batches; `live`
        restricts the choice (tasks whose space is exhausted are left out)."""
        candidates = list(range(self.n_tasks)) if live is None else list(live)
        if not candidates:
            raise ValueError("no task left to schedule")
        for i in candidates:
            if not history[i]:
                return i
        if self._rng.random() < self.epsilon:
            return min(candidates, key=lambda i: (len(history[i]), i))
        return max(candidates, key=lambda i: (self.gain(i, history[i]), -len(history[i]), -i))

    def gain(self, i: int, h: Sequence[float]) -> float:
        """Expected reduction of the weighted total latency from task i's next batch."""
        g = h[-1]
        if not math.isfinite(g):
            return math.inf if len(h) < self.patience else 0.0
        k = min(self.window, len(h) - 1)
        if k > 0:
            before = h[-1 - k]
            backward = (before - g) / k if math.isfinite(before) else g / k
        else:
            backward = 0.0
        forward = g / len(h)
        alpha = self.alpha if k > 0 else 0.0
        return self.weights[i] * (alpha * backward + (1.0 - alpha) * forward)
