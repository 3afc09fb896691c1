"""The device check's parts that decide what a GPU call returns: which steps run, and a
step stopped at its share keeping what it wrote."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))

import device_check  # noqa: E402
from bounded import run_bounded  # noqa: E402
from cases import CASES  # noqa: E402


def test_steps_default_to_all_benches_first_and_unknown_names_are_refused():
    names = device_check.chosen_steps(None, CASES)
    assert names[0] == "training_plans"
    assert set(names) == {c.name for c in CASES} | set(device_check.BENCH_STEPS)
    picked = device_check.chosen_steps(f"runtime_plans,{CASES[1].name},training_plans", CASES)
    assert picked == ["training_plans", CASES[1].name, "runtime_plans"]
    with pytest.raises(ValueError, match="unknown \\['bogus'\\]"):
        device_check.chosen_steps("training_plans,bogus", CASES)


def test_a_step_stopped_at_its_limit_keeps_what_it_printed(tmp_path):
    log = tmp_path / "step.log"
    cmd = [sys.executable, "-c",
           "import time; print('first model done', flush=True); time.sleep(60)"]
    row = run_bounded(cmd, timeout=3, log=log)
    assert row["rc"] is None and row["seconds"] < 30
    assert "first model done" in log.read_text() and "first model done" in row["output_tail"]
    done = run_bounded([sys.executable, "-c", "raise SystemExit(4)"], 30)
    assert done["rc"] == 4 and not done["killed_at_limit"] and row["killed_at_limit"]


def test_every_step_rewrites_the_stamped_report_and_a_failing_step_costs_only_itself(
        tmp_path):
    import json

    report = {"provenance": device_check.provenance.stamp(seed=0, argv=["bench/gpu/x.py"]),
              "out_dir": str(tmp_path)}
    device_check.step(report, "broken", lambda: 1 / 0)
    device_check.step(report, "fine", lambda: {"passed": True})
    data = json.loads((tmp_path / "device_check.json").read_text())
    assert list(data)[0] == "provenance" and data["provenance"]["seed"] == 0
    assert data["results"]["broken"]["error"].startswith("ZeroDivisionError")
    assert data["results"]["fine"]["passed"] is True
