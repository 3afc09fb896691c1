"""Learned cost model: features of a scheduled program, an XGBoost ranker over them,
and training from other tasks' records (transfer).

Public surface: `CostModel`, `CostModelError`, `XGBRanker`, `FeatureConfig`,
`extract_features`, `feature_names`, `train_from_records`, `FEATURE_VERSION`.
The package imports only `search_space`, numpy, TVM and (when a model trains or
predicts) xgboost; names become models in `autosched.components.make_cost_model`.
Importing this package does not import xgboost or tvm.
"""
from .base import CostModel
from .errors import CostModelError
from .features import FEATURE_VERSION, FeatureConfig, feature_names
from .features import extract as extract_features

__all__ = ["CostModel", "CostModelError", "XGBRanker", "FeatureConfig", "extract_features",
           "feature_names", "train_from_records", "FEATURE_VERSION"]


def __getattr__(name):
    if name == "XGBRanker":
        from .xgb_ranker import XGBRanker

        return XGBRanker
    if name == "train_from_records":
        from .transfer import train_from_records

        return train_from_records
    raise AttributeError(name)
