"""The shipped warm start: a model trained by bench/gpu/train_warm_start.py on GPU logs
(here the SYNTHETIC log, into a temporary folder: nothing synthetic is ever shipped)
is loaded by a CUDA run that has no other shapes in its database, says so, and ranks;
without one, nothing changes."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from support.gpu_log import LOG, LoggedCandidates, load_task, log_target

from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.db.jsonl import import_records
from autosched.measure.simulated import SimulatedMeasurer
from autosched.shipped_models import (PACKAGE_DIR, ShippedWarmStart, arch_family,
                                      read_metadata, shipped_path)
from autosched.target import resolve_target
from autosched.tuner import tune_tasks
from autosched.warm_start import WarmStart
from cost_model import XGBRanker

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))

import train_warm_start  # noqa: E402


@pytest.fixture(scope="module")
def tuned():
    return load_task(0)  # matmul_mp 128^3 fp16


@pytest.fixture(scope="module")
def held_out(tmp_path_factory, tuned):
    """A folder with the sm_90 model trained with the tuned task held out (as a
    benchmark of the warm start must train it)."""
    folder = tmp_path_factory.mktemp("held_out")
    assert train_warm_start.main([LOG, "-o", str(folder / "cuda_sm_90.json"),
                                  "--synthetic-ok", "--hold-out", tuned.key[:12]]) == 0
    return folder


def replay(tmp_path, tasks, folder, trials, name="run", db_first=None):
    sim = SimulatedMeasurer.from_log(LOG)
    model = XGBRanker(seed=0)
    url = f"sqlite:///{tmp_path}/{name}.db"
    if db_first:
        with open_database(url) as db:
            import_records(db, db_first)
    config = TuneConfig(target=log_target(), trials=trials, batch_size=8,
                        work_dir=str(tmp_path), db_url=url, shipped_models=str(folder))
    result = tune_tasks(tasks, config, measurer=sim,
                        strategy_factory=lambda: LoggedCandidates(sim, model))
    return result, model, sim


def test_the_model_says_what_it_was_trained_on(held_out, tuned):
    path = str(held_out / "cuda_sm_90.json")
    assert shipped_path(resolve_target(log_target()), str(held_out)) == path
    meta = read_metadata(path)
    assert meta["family"] == "sm_90" and meta["kind"] == "cuda"
    assert meta["records"] == 80
    assert [t["name"] for t in meta["tasks"]] == [
        "matmul_mp(M=256,N=128,K=128,dtype=float16,acc=float32)",
        "matmul(M=128,N=128,K=128,dtype=float32)"]
    assert [t["records"] for t in meta["tasks"]] == [40, 40]
    assert tuned.key not in {t["key"] for t in meta["tasks"]}
    assert meta["hold_out"] == [tuned.key[:12]]
    (log,) = meta["logs"]
    assert log["records"] == 120 and log["synthetic"] is True
    assert log["machines"][0].startswith("NVIDIA H100 80GB HBM3 (synthetic) (")
    assert meta["synthetic"] is True
    assert meta["trained_by"]["command"].startswith("python bench/gpu/train_warm_start.py")


def test_a_cuda_run_with_nothing_in_its_database_starts_from_the_shipped_model(
        tmp_path, held_out, tuned):
    result, model, sim = replay(tmp_path, [tuned], held_out, 8)
    warm = result.warm_start
    assert isinstance(warm, ShippedWarmStart)
    assert warm.describe() == ("cost model warm-started from the shipped sm_90 model: "
                               "80 GPU records of 2 tasks")
    assert result.trials == 8
    assert model.boosts_saved_model  # the run's measurements go on top of it
    space = result.tasks[0].space
    cands = sim.candidates(tuned.key)
    scores = model.predict(tuned, cands, [space.apply(c) for c in cands])
    assert len(cands) == 40 and len(set(np.round(scores, 6))) > 1


def test_without_a_shipped_model_nothing_changes(tmp_path, tuned):
    empty = tmp_path / "none"
    empty.mkdir()
    result, model, _ = replay(tmp_path, [tuned], empty, 0)
    assert result.warm_start is None
    assert not model.trained
    assert shipped_path(resolve_target(log_target()), str(empty)) is None
    assert shipped_path(resolve_target("llvm"), str(empty)) is None


def test_other_shapes_in_the_database_come_before_the_shipped_model(tmp_path, held_out,
                                                                   tuned):
    result, _, _ = replay(tmp_path, [tuned], held_out, 0, db_first=LOG)
    assert isinstance(result.warm_start, WarmStart)
    assert result.warm_start.describe() == (
        "cost model warm-started from 40 records of 1 other shape(s) in the database: "
        "matmul_mp(M=256,N=128,K=128,dtype=float16,acc=float32)")


def test_a_tuned_task_among_the_models_tasks_is_said(tmp_path, tuned):
    assert train_warm_start.main([LOG, "-o", str(tmp_path / "cuda_sm_90.json"),
                                  "--synthetic-ok"]) == 0
    result, _, _ = replay(tmp_path, [tuned], tmp_path, 0)
    assert result.warm_start.describe() == (
        "cost model warm-started from the shipped sm_90 model: 120 GPU records of 3 tasks "
        f"(including {tuned.name}: real measurements of the tuned task)")


def test_a_model_that_no_longer_loads_is_not_used_and_said(tmp_path, held_out, tuned):
    shutil.copy(held_out / "cuda_sm_90.json", tmp_path / "cuda_sm_90.json")
    meta = json.loads((held_out / "cuda_sm_90.meta.json").read_text())
    meta["features"]["version"] = "0"
    (tmp_path / "cuda_sm_90.meta.json").write_text(json.dumps(meta))
    result, model, _ = replay(tmp_path, [tuned], tmp_path, 0)
    assert result.warm_start.describe().startswith(
        "the shipped sm_90 model was not used: ")
    assert "features version '0'" in result.warm_start.describe()
    assert not model.trained


def test_the_training_script_refuses_what_must_not_ship(tmp_path, capsys):
    assert train_warm_start.main([LOG, "-o", str(tmp_path / "m.json")]) == 2
    assert capsys.readouterr().err == (
        f"train_warm_start: {LOG}: synthetic records; a model of them is never shipped "
        "(--synthetic-ok trains one for tests)\n")
    into_package = str(Path(PACKAGE_DIR) / "cuda_sm_90.json")
    assert train_warm_start.main([LOG, "-o", into_package, "--synthetic-ok"]) == 2
    assert "never shipped" in capsys.readouterr().err
    assert not Path(into_package).exists()
    assert train_warm_start.main([LOG, "-o", str(tmp_path / "m.json"), "--synthetic-ok",
                                  "--hold-out", "no_such_workload"]) == 2
    assert "--hold-out no_such_workload: no record" in capsys.readouterr().err
    assert sorted(p.name for p in Path(PACKAGE_DIR).iterdir()) == ["README.md"]


def test_the_family_drops_the_arch_specific_suffix():
    assert [arch_family(a) for a in ("sm_90a", "sm_90", "sm_100f", "sm_80", "gfx90a")] == \
        ["sm_90", "sm_90", "sm_100", "sm_80", None]
