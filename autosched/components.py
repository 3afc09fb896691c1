"""The one place where the names a user types become objects.

- `--strategy NAME` -> `make_strategy` (`STRATEGIES`)
- a cost model's name (`"xgb"`) -> `make_cost_model` (`COST_MODELS`)
- `--runner local | rpc://HOST:PORT/KEY | bundle:DIR` -> `autosched.measure.runners`
  (`runner_factory`, `RUNNERS`: measurement resolves its own names, below this floor)
- `--db URL` -> `autosched.db.open_database`, `--target` -> `autosched.target.resolve_target`
  (each validates and resolves its own kind of string; nothing else parses them).

Every table maps a name to a factory that imports its implementation when called, so
resolving a name never loads a heavy module that the run does not use.
"""
from __future__ import annotations

from typing import Callable

from .errors import UserError


def _evolutionary(**options):
    from .search import EvolutionarySearch

    model = options.pop("cost_model", "xgb")
    path, seed = options.pop("cost_model_path", None), options.pop("seed", 0)
    if isinstance(model, str):
        model = make_cost_model(model, path, seed=seed)
    elif path:
        load_cost_model(model, path)
    return EvolutionarySearch(model, **options)


def _random(**options):
    from .search import RandomSearch

    return RandomSearch(**options)


STRATEGIES: dict[str, Callable] = {"random": _random, "evolutionary": _evolutionary}


def make_strategy(name: str, **options):
    """`name` -> a SearchStrategy; options are the strategy's constructor arguments
    (for "evolutionary", `cost_model` may be a model or a name, `cost_model_path` a saved
    model to load into it and `seed` the seed of a new model)."""
    factory = _lookup(STRATEGIES, name, "--strategy")
    return factory(**options)


def _xgb(**options):
    from cost_model import CostModelError, XGBRanker

    try:
        return XGBRanker(**options)
    except CostModelError as e:  # xgboost is not installed
        raise UserError(str(e)) from None


COST_MODELS: dict[str, Callable] = {"xgb": _xgb}


def make_cost_model(name: str, path: str | None = None, **options):
    """`name` -> a fresh CostModel; with `path`, the model saved there is loaded into it
    (a file that is no such model is a UserError)."""
    model = _lookup(COST_MODELS, name, "cost model")(**options)
    return load_cost_model(model, path) if path else model


def load_cost_model(model, path: str):
    """Load the model saved at `path` into `model`; a file that is no such model is a
    UserError (the cost model's own `CostModelError`, said on one line)."""
    from cost_model import CostModelError

    try:
        return model.load(path)
    except CostModelError as e:
        raise UserError(str(e)) from None


def _lookup(table: dict, name: str, what: str):
    try:
        return table[name]
    except (KeyError, TypeError):
        raise UserError(f"unknown {what} {name!r}; choose from {', '.join(table)}") from None
