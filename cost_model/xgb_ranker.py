"""An XGBoost ranker over schedule features, learned online during tuning.

Within one task only the order of candidates matters, so the model is trained with a
pairwise ranking objective grouped by task: latencies of different tasks are never
compared. The relevance label of a correct candidate is best_latency / latency of its
task (in (0, 1]); a failed candidate gets 0, below every success, so the model learns
to avoid what does not build, run or verify.

After every measured batch the model is retrained from all data seen so far. The
retrain grows with the rows: a cold run's few hundred train in well under a second, and a
warm start's up to 2048 other-shape rows make every retrain several times slower (still
under a second on a 2-core CPU). A model loaded from disk (for example one trained on other
tasks' records, see `transfer.py`) stays underneath: local trees are boosted on top of it,
so its knowledge is corrected by, not replaced with, local data. They are boosted gently
(`ON_BASE_ROUNDS` rounds at `ON_BASE_ETA`): with the loaded model's own rounds at the
cold learning rate, a first batch of local measurements overwrites most of what the
transfer taught. Where the other tasks' records themselves are at hand (the automatic
warm start), learning them together with the local ones ranks better than boosting on
top; bench/cost_model_accuracy.py compares the two ("warm start+local" against
"transfer+local").

Persisted as XGBoost's own JSON model plus a JSON sidecar (`<name>.meta.json`) with the
feature configuration: never pickle.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

from .errors import CostModelError
from .features import FeatureConfig, extract, feature_names

MODEL_FORMAT = "autosched-xgb-ranker"
_FORMAT_VERSION = 1
_CACHE_LIMIT = 50_000
ON_BASE_ROUNDS = 40     # local trees on top of a loaded model, and their learning rate
ON_BASE_ETA = 0.03
# A model trained on many tasks' records (`autosched cost-model train`, the automatic
# warm start) overfits them with the online model's deeper trees; fewer, shallower trees
# with more pairs per sample rank held-out shapes better (picked on large held-out matmul
# shapes, checked on small ones: the "transfer" rows of bench/cost_model_accuracy.py). A
# cold model with one task's few rows keeps the online settings: these did not help it
# consistently.
TRANSFER_ROUNDS = 100
TRANSFER_PARAMS = {"max_depth": 4, "lambdarank_num_pair_per_sample": 64}
DEFAULT_PARAMS = {
    "objective": "rank:pairwise",
    "lambdarank_pair_method": "mean",
    "lambdarank_num_pair_per_sample": 16,
    "eta": 0.1,
    "max_depth": 5,
    "min_child_weight": 1.0,
    "subsample": 1.0,
    "colsample_bytree": 1.0,
    "tree_method": "hist",
    "nthread": 1,
}


# Two distributions install the module (installing both breaks it), so autosched depends
# on neither and names the extras that pick one.
MISSING_XGBOOST = ("the XGBoost cost model needs the xgboost module: pip install "
                   "'autosched[xgboost-cpu]' (or 'autosched[xgboost]', with GPU support)")


def sidecar_path(path: str) -> str:
    """`model.json` -> `model.meta.json` (the feature config and training summary)."""
    root, ext = os.path.splitext(path)
    return (root if ext == ".json" else path) + ".meta.json"


def relevance(latencies: np.ndarray) -> np.ndarray:
    """best / latency for successes (in (0, 1]), 0 for failures (latency inf)."""
    ok = np.isfinite(latencies)
    out = np.zeros(len(latencies))
    if ok.any():
        out[ok] = latencies[ok].min() / latencies[ok]
    return out


@dataclass
class _TaskRows:
    features: list = field(default_factory=list)
    latencies: list = field(default_factory=list)
    keys: set = field(default_factory=set)


class XGBRanker:
    """`CostModel` implementation: predict / update / save / load."""

    name = "xgb"

    def __init__(self, features: FeatureConfig | None = None, rounds: int = 80,
                 params: dict | None = None, seed: int = 0):
        if importlib.util.find_spec("xgboost") is None:  # now, not after a measured batch
            raise CostModelError(MISSING_XGBOOST)
        self.config = features or FeatureConfig()
        self.rounds = int(rounds)
        self.params = dict(DEFAULT_PARAMS, seed=int(seed), **(params or {}))
        self._rows: dict[str, _TaskRows] = {}
        self._cache: dict[tuple[str, str], np.ndarray] = {}
        self._base = None       # booster loaded from disk: local trees go on top of it
        self._booster = None
        self.summary: dict = {"tasks": 0, "rows": 0, "failures": 0}

    @property
    def trained(self) -> bool:
        return self._booster is not None

    @property
    def boosted_rounds(self) -> int:
        """Trees in the current model, a loaded base's included (0 while untrained)."""
        return self._booster.num_boosted_rounds() if self._booster is not None else 0

    @property
    def boosts_saved_model(self) -> bool:
        """Whether local trees go on top of a model loaded from disk (`load`)."""
        return self._base is not None

    def training_config(self) -> dict:
        """XGBoost's own record of how the current trees were trained (its JSON config)."""
        if self._booster is None:
            return {}
        return json.loads(self._booster.save_config())

    @property
    def num_features(self) -> int:
        return len(feature_names(self.config))

    def features(self, task, candidates, mods) -> np.ndarray:
        """Feature matrix (one row per candidate), cached by (task key, candidate key)."""
        rows = []
        for cand, mod in zip(candidates, mods):
            key = (task.key, cand.key)
            row = self._cache.get(key)
            if row is None:
                row = np.asarray(extract(task, cand, mod, self.config), dtype=np.float32)
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = row
            rows.append(row)
        return np.stack(rows) if rows else np.zeros((0, self.num_features), np.float32)

    def predict(self, task, candidates, mods) -> np.ndarray:
        """Scores, higher = predicted faster; all zeros while the model knows nothing."""
        feats = self.features(task, candidates, mods)
        return self.predict_features(feats)

    def predict_features(self, feats: np.ndarray) -> np.ndarray:
        if self._booster is None or len(feats) == 0:
            return np.zeros(len(feats))
        import xgboost as xgb

        return self._booster.predict(xgb.DMatrix(feats, feature_names=None))

    def update(self, task, candidates, mods, results) -> None:
        """Add measured candidates (MeasureResult each; failures included) and retrain."""
        feats = self.features(task, candidates, mods)
        rows = self._rows.setdefault(task.key, _TaskRows())
        for cand, row, res in zip(candidates, feats, results):
            if cand.key in rows.keys:  # a re-measurement replaces nothing: keep the first
                continue
            rows.keys.add(cand.key)
            rows.features.append(row)
            rows.latencies.append(res.median if res.ok else math.inf)
        self._retrain()

    def add_group(self, task_key: str, feats: np.ndarray, latencies: np.ndarray) -> None:
        """Training data for one task given as features and latencies (inf = failure)."""
        rows = self._rows.setdefault(task_key, _TaskRows())
        rows.features.extend(list(feats))
        rows.latencies.extend(float(x) for x in latencies)

    def fit(self) -> None:
        """Train on all groups added so far (what `update` does after each batch)."""
        self._retrain()

    def _retrain(self) -> None:
        import xgboost as xgb

        groups = [(np.stack(r.features), relevance(np.asarray(r.latencies, dtype=float)))
                  for r in self._rows.values() if len(r.features) >= 2]
        groups = [(x, y) for x, y in groups if len(np.unique(y)) > 1]  # no pair, no signal
        self.summary = {"tasks": len(groups), "rows": int(sum(len(y) for _, y in groups)),
                        "failures": int(sum((y == 0).sum() for _, y in groups))}
        if not groups:
            self._booster = self._base
            return
        x = np.concatenate([g[0] for g in groups])
        y = np.concatenate([g[1] for g in groups])
        qid = np.concatenate([np.full(len(g[1]), i) for i, g in enumerate(groups)])
        dtrain = xgb.DMatrix(x, label=y, qid=qid)
        if self._base is None:
            self._booster = xgb.train(self.params, dtrain, num_boost_round=self.rounds)
        else:
            self._booster = xgb.train(dict(self.params, eta=ON_BASE_ETA), dtrain,
                                      num_boost_round=ON_BASE_ROUNDS,
                                      xgb_model=self._base.copy())

    def for_transfer(self, rounds: int | None = None) -> "XGBRanker":
        """Switch to the settings for training on many tasks' records
        (`TRANSFER_PARAMS`, `rounds` or `TRANSFER_ROUNDS`). Returns self."""
        self.rounds = int(rounds or TRANSFER_ROUNDS)
        self.params = dict(self.params, **TRANSFER_PARAMS)
        return self

    def save(self, path: str) -> None:
        """Write `path` (XGBoost JSON model) and its sidecar, each atomically."""
        if self._booster is None:
            raise CostModelError("the cost model has no training data yet: nothing to save")
        meta = {"format": MODEL_FORMAT, "format_version": _FORMAT_VERSION,
                "features": self.config.to_json(), "num_features": self.num_features,
                "feature_names": feature_names(self.config), "params": self.params,
                "rounds": self.rounds, "summary": self.summary}
        raw = self._booster.save_raw(raw_format="json")
        _atomic_write(path, bytes(raw))
        _atomic_write(sidecar_path(path), json.dumps(meta, indent=1, sort_keys=True).encode())

    def load(self, path: str) -> "XGBRanker":
        """Replace this model with the one saved at `path`; it becomes the base that
        later updates boost on top of. Returns self."""
        import xgboost as xgb

        meta = _read_sidecar(path)
        try:
            config = FeatureConfig.from_json(meta["features"])
        except (KeyError, TypeError, ValueError) as e:
            raise CostModelError(f"{path}: cost model was saved with other features ({e})") from None
        booster = xgb.Booster()
        try:
            with open(path, "rb") as f:
                booster.load_model(bytearray(f.read()))
        except (OSError, xgb.core.XGBoostError) as e:
            raise CostModelError(f"{path}: not an XGBoost JSON model ({str(e).splitlines()[0]})") from None
        if booster.num_features() != len(feature_names(config)):
            raise CostModelError(f"{path}: model has {booster.num_features()} features, "
                            f"its sidecar describes {len(feature_names(config))}")
        self.config = config
        self.rounds = int(meta.get("rounds", self.rounds))
        self.params = dict(DEFAULT_PARAMS, **meta.get("params", {}))
        self.summary = dict(meta.get("summary", {}))
        self._booster = self._base = booster
        self._rows.clear()
        self._cache.clear()
        return self


def _read_sidecar(path: str) -> dict:
    side = sidecar_path(path)
    try:
        with open(side) as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise CostModelError(f"{path}: sidecar {side} is missing (saved by another tool?)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise CostModelError(f"{side}: unreadable ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
        raise CostModelError(f"{side}: not an autosched cost-model sidecar")
    if int(meta.get("format_version", 0)) > _FORMAT_VERSION:
        raise CostModelError(f"{side}: written by a newer autosched (format "
                        f"{meta.get('format_version')})")
    return meta


def _atomic_write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
