"""The CostModel protocol: everything the search and the transfer training rely on."""
from __future__ import annotations

from typing import Protocol

import numpy as np


class CostModel(Protocol):
    """Ranks candidates of a task by predicted speed and learns from measurements.

    Besides learning online (`update`), a model learns from other tasks' records:
    `add_group` adds one task's measured rows, `fit` trains on everything added, and
    `for_transfer` switches it to the settings for many tasks' data.
    """

    summary: dict  # what the model was last trained on (tasks, rows, failures, ...)

    @property
    def trained(self) -> bool:
        """Whether the model has learned anything (an untrained one scores all alike)."""

    def predict(self, task, candidates: list, mods: list) -> np.ndarray:
        """One score per candidate; higher means predicted faster."""

    def update(self, task, candidates: list, mods: list, results: list) -> None:
        """Learn from measured candidates (a MeasureResult each, failures included)."""

    def features(self, task, candidates: list, mods: list) -> np.ndarray:
        """The feature rows the model learns from (one per candidate)."""

    def add_group(self, task_key: str, feats: np.ndarray, latencies: np.ndarray) -> None:
        """Add one task's rows (latency +inf for a failure) to learn from; `fit` trains."""

    def fit(self) -> None:
        """Train on every group added and every measurement learned so far."""

    def for_transfer(self, rounds: int | None = None) -> "CostModel":
        """Switch to the settings for training on many tasks' records (`rounds`: the
        model's own default when None); returns self."""

    def save(self, path: str) -> None:
        """Persist as JSON (never pickle)."""

    def load(self, path: str) -> "CostModel":
        """Replace this model's state with the one saved at `path`; returns self."""
