"""The CostModel protocol and the one table from names to implementations."""
from __future__ import annotations

from typing import Protocol

from autosched.errors import UserError


class CostModel(Protocol):
    """Ranks candidates of a task by predicted speed and learns from measurements."""

    def predict(self, task, candidates: list, mods: list):
        """One score per candidate (numpy array); higher means predicted faster."""

    def update(self, task, candidates: list, mods: list, results: list) -> None:
        """Learn from measured candidates (a MeasureResult each, failures included)."""

    def save(self, path: str) -> None:
        """Persist as JSON (never pickle)."""

    def load(self, path: str) -> "CostModel":
        """Replace this model's state with the one saved at `path`; returns self."""


def _xgb(**options):
    from .xgb_ranker import XGBRanker

    return XGBRanker(**options)


COST_MODELS = {"xgb": _xgb}


def make_cost_model(name: str, path: str | None = None, **options) -> CostModel:
    """`name` -> a fresh model; with `path`, the model saved there is loaded into it."""
    try:
        factory = COST_MODELS[name]
    except KeyError:
        raise UserError(f"unknown cost model {name!r}; choose from {', '.join(COST_MODELS)}") from None
    model = factory(**options)
    return model.load(path) if path else model
