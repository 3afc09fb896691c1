"""The XGBoost ranker: ranking quality, failures, online updates, JSON persistence."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autosched.components import make_cost_model
from autosched.errors import UserError
from cost_model import CostModelError
from cost_model.features import FEATURE_VERSION
from cost_model.xgb_ranker import ON_BASE_ETA, ON_BASE_ROUNDS, XGBRanker, relevance, sidecar_path


def pairwise_accuracy(scores, latencies) -> float:
    """Share of pairs with different latency that the scores order correctly (higher
    score = faster); failures (inf) count as slower than every success."""
    good = total = 0
    for a in range(len(latencies)):
        for b in range(a + 1, len(latencies)):
            if latencies[a] == latencies[b]:
                continue
            total += 1
            fast, slow = (a, b) if latencies[a] < latencies[b] else (b, a)
            good += scores[fast] > scores[slow]
    return good / total


def synthetic_group(rng, n, scale):
    """Features in [0,1]^6; latency a known function of them; x4 > 0.85 fails."""
    x = rng.random((n, 6)).astype(np.float32)
    lat = scale * np.exp(1.5 * x[:, 0] - x[:, 1] + 0.8 * x[:, 2] * x[:, 3])
    lat[x[:, 4] > 0.85] = math.inf
    return x, lat


def test_relevance_puts_failures_below_every_success():
    y = relevance(np.array([2.0, math.inf, 1.0, 4.0]))
    assert y.tolist() == [0.5, 0.0, 1.0, 0.25]
    assert relevance(np.array([math.inf, math.inf])).tolist() == [0.0, 0.0]


def test_ranker_orders_a_known_function_on_held_out_data():
    rng = np.random.default_rng(0)
    model = XGBRanker(rounds=100)
    held_out = []
    for t, scale in enumerate((1e-3, 5e-2, 2.0)):  # tasks of very different latency
        x, lat = synthetic_group(rng, 240, scale)
        model.add_group(f"task{t}", x[:160], lat[:160])
        held_out.append((x[160:], lat[160:]))
    model.fit()
    assert model.trained and model.summary["tasks"] == 3 and model.summary["failures"] > 0
    for x, lat in held_out:
        scores = model.predict_features(x)
        ok = np.isfinite(lat)
        assert pairwise_accuracy(scores[ok], lat[ok]) > 0.9
        worst_success = np.sort(scores[ok])[: max(1, ok.sum() // 10)].max()
        # failures score below successes: all of them below the slowest tenth's top
        assert (scores[~ok] < worst_success).mean() >= 0.9
        assert pairwise_accuracy(scores, lat) > 0.9


def test_untrained_model_scores_zero_and_refuses_to_save(tmp_path, measured, matmul_space):
    cands, mods, _ = measured
    model = XGBRanker()
    assert model.predict(matmul_space.task, cands[:4], mods[:4]).tolist() == [0.0] * 4
    with pytest.raises(CostModelError, match="no training data"):
        model.save(str(tmp_path / "m.json"))


def test_online_updates_learn_the_synthetic_landscape(measured, matmul_space):
    cands, mods, results = measured
    task = matmul_space.task
    model = make_cost_model("xgb")
    for lo in range(0, 64, 16):
        model.update(task, cands[lo:lo + 16], mods[lo:lo + 16], results[lo:lo + 16])
        assert model.trained
    assert model.summary["rows"] == 64
    lat = np.array([r.median for r in results[64:]])
    scores = model.predict(task, cands[64:], mods[64:])
    assert pairwise_accuracy(scores, lat) > 0.7  # chance is 0.5


def _trained(measured, matmul_space, n=48, **options):
    cands, mods, results = measured
    model = XGBRanker(rounds=20, **options)
    model.update(matmul_space.task, cands[:n], mods[:n], results[:n])
    return model


def test_save_load_round_trip_gives_identical_predictions(tmp_path, measured, matmul_space):
    cands, mods, _ = measured
    model = _trained(measured, matmul_space)
    path = str(tmp_path / "model.json")
    model.save(path)
    loaded = XGBRanker().load(path)
    before = model.predict(matmul_space.task, cands[48:], mods[48:])
    after = loaded.predict(matmul_space.task, cands[48:], mods[48:])
    assert np.array_equal(before, after)
    for file in (path, sidecar_path(path)):
        raw = open(file, "rb").read()
        assert not raw.startswith(b"\x80") and b"pickle" not in raw
        json.loads(raw)  # plain JSON, nothing else
    assert "learner" in json.loads(open(path, "rb").read())
    meta = json.load(open(sidecar_path(path)))
    assert meta["num_features"] == model.num_features
    assert meta["features"]["version"] == FEATURE_VERSION and meta["summary"]["rows"] == 48


def test_updates_after_load_boost_on_top_of_the_loaded_model(tmp_path, measured, matmul_space):
    cands, mods, results = measured
    path = str(tmp_path / "base.json")
    _trained(measured, matmul_space).save(path)
    model = XGBRanker(rounds=7).load(path)
    base_rounds = model.boosted_rounds
    model.update(matmul_space.task, cands[48:64], mods[48:64], results[48:64])
    assert model.boosted_rounds == base_rounds + ON_BASE_ROUNDS
    config = model.training_config()
    assert float(config["learner"]["gradient_booster"]["tree_train_param"]["eta"]) == \
        pytest.approx(ON_BASE_ETA)  # local trees correct the base gently
    model.update(matmul_space.task, cands[64:80], mods[64:80], results[64:80])
    assert model.boosted_rounds == base_rounds + ON_BASE_ROUNDS  # not stacked


def test_load_rejects_bad_files_with_one_line(tmp_path, measured, matmul_space):
    path = str(tmp_path / "model.json")
    with pytest.raises(CostModelError, match="sidecar .* is missing"):
        open(path, "w").write("{}")
        XGBRanker().load(path)
    _trained(measured, matmul_space).save(path)
    meta = json.load(open(sidecar_path(path)))
    meta["features"]["version"] = "0"
    json.dump(meta, open(sidecar_path(path), "w"))
    with pytest.raises(CostModelError, match="other features"):
        XGBRanker().load(path)
    meta["features"]["version"] = FEATURE_VERSION
    json.dump(meta, open(sidecar_path(path), "w"))
    open(path, "w").write("not json")
    with pytest.raises(CostModelError, match="not an XGBoost JSON model"):
        XGBRanker().load(path)
    with pytest.raises(UserError, match="unknown cost model"):
        make_cost_model("mlp")
