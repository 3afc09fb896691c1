"""Learned cost model: features of a scheduled program, an XGBoost ranker over them,
and training from other tasks' records (transfer).

Public surface: `CostModel`, `CostModelError`, `XGBRanker`, `FeatureConfig`,
`extract_features`, `feature_names`, `train_from_records` (and its `TransferReport`),
`FEATURE_VERSION`.
The package imports only `search_space`, numpy, TVM and (when a model trains or
predicts) xgboost; names become models in `autosched.components.make_cost_model`.
Importing this package does not import xgboost or tvm.
"""
import importlib

from .base import CostModel
from .errors import CostModelError
from .features import FEATURE_VERSION, FeatureConfig, feature_names
from .features import extract as extract_features

__all__ = ["CostModel", "CostModelError", "XGBRanker", "FeatureConfig", "extract_features",
           "feature_names", "train_from_records", "TransferReport", "FEATURE_VERSION"]

# the names whose modules import xgboost, resolved on first use (as autosched.lazy does;
# a leaf cannot use it)
_LAZY = {"XGBRanker": ".xgb_ranker", "train_from_records": ".transfer",
         "TransferReport": ".transfer"}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(name)
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
