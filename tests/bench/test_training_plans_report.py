"""The bench's reading of the measured choice (autosched.runtime.choose_among): the fastest
compiled candidate within each budget, the partitioner alone among them, the ratio against
torch.compile's best point at equal or lower saved bytes, drift and inversions."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from training_plans_report import (ANCHOR, anchored_error, drifts,  # noqa: E402
                                   inversions, ratio_interval, verdicts)
from training_plans_report import main as report_main  # noqa: E402

from autosched.runtime import MeasuredPlan  # noqa: E402
from autosched.runtime import choose_among as consistent_rows  # noqa: E402


def _row(point, method, saved, time_s, **extra):
    return {"model": "m", "point": point, "method": method, "saved": saved, "time_s": time_s,
            "choice_time_s": time_s, "time_samples_s": [time_s], "grad_rel_err": 0.0,
            **extra}


def _plan(budget, budget_bytes, saved, time_s, **extra):
    return _row(f"plan+compile@{budget}", "plan+compile", saved, time_s, budget=budget,
                budget_bytes=budget_bytes, actions=["keep"], fits=saved <= budget_bytes,
                pred_err=0.0, pred_err_drift_corrected=0.0, **extra)


def test_the_choice_is_the_fastest_fitting_candidate_the_partitioner_alone_included():
    rows = [_row("compile@1", "compile", 100, 1.00, budget=1.0),
            _row("compile@0.8", "compile", 70, 0.98, budget=0.8),
            _row("compile@0.4", "compile", 40, 1.20, budget=0.4),
            _row("compile@0", "compile", 10, 1.40, budget=0.0),
            _plan("100%", 100, 90, 1.02),        # slower than compile@0.8, which fits
            _plan("50%", 50, 35, 1.05)]          # under compile@0.4's bytes, faster
    chosen = {r["budget"]: r for r in consistent_rows(rows)}
    assert chosen["100%"]["chosen"] == "compile@0.8"
    assert chosen["50%"]["chosen"] == "plan+compile@50%"
    ratios = verdicts(rows + list(chosen.values()))["m"][
        "ratio_vs_best_compile_at_equal_or_lower_saved"]
    assert ratios["100%"] == 1.0
    assert ratios["50%"] == 1.05 / 1.40      # its peer: the best point saving <= 35
    intervals = verdicts(rows + list(chosen.values()))["m"]["ratio_interval_90"]
    assert intervals["50%"] == (1.05 / 1.40, 1.05 / 1.40)    # one sample each: no spread


def test_a_candidate_plan_is_chosen_where_it_is_faster_but_gets_no_choice_of_its_own():
    rows = [_row("compile@1", "compile", 100, 1.00, budget=1.0),
            _plan("60%", 60, 60, 1.10),
            _plan("50%", 50, 45, 1.04, candidate=True)]
    chosen = consistent_rows(rows)
    assert [(r["budget"], r["chosen"]) for r in chosen] == [("60%", "plan+compile@50%")]


def test_a_budget_whose_compiled_plan_failed_still_gets_a_compiled_choice():
    eager = _plan("60%", 60, 58, 1.30)
    eager.update(point="plan@60%", method="plan")
    rows = [_row("compile@1", "compile", 100, 1.00, budget=1.0),
            _row("compile@0.4", "compile", 40, 1.20, budget=0.4), eager,
            _plan("50%", 50, 45, 1.04, candidate=True)]
    compiled = [r for r in consistent_rows(rows) if r["method"] == "plan+compile*"]
    assert [(r["budget"], r["chosen"]) for r in compiled] == [("60%", "plan+compile@50%")]


def _anchor(point, anchors, layout, measured, predicted):
    return _row(point, ANCHOR, 0, measured, anchors=anchors, layout=layout,
                pred_time_s=predicted)


def test_each_plan_is_read_against_the_all_kept_model_of_its_own_profile():
    rows = [_row("eager", "eager", 100, 1.3),
            _anchor("plan@keep", "plan", None, 1.2, 1.0),
            _anchor("plan+compile@keep/inductor", "plan+compile", "inductor", 0.5, 0.5),
            _anchor("plan+compile@keep/contiguous", "plan+compile", "contiguous", 0.75, 1.0),
            _row("compile@1", "compile", 100, 0.45, budget=1.0)]
    drift = drifts(rows)
    assert drift == {("plan", None): ("plan@keep", 1.2),
                     ("plan+compile", "inductor"): ("plan+compile@keep/inductor", 1.0),
                     ("plan+compile", "contiguous"): ("plan+compile@keep/contiguous", 0.75)}
    contiguous = _plan("60%", 60, 50, 0.9, layout="contiguous", pred_time_s=1.2)
    assert anchored_error(contiguous, drift) == {
        "drift_anchor": "plan+compile@keep/contiguous",
        "pred_err_drift_corrected": pytest.approx(0.0)}    # 1.2 x 0.75 = 0.9
    eager = _plan("60%", 60, 50, 1.5, pred_time_s=1.0)
    eager.update(method="plan")
    assert anchored_error(eager, drift)["pred_err_drift_corrected"] == pytest.approx(-0.2)


def test_a_plan_whose_anchor_was_not_measured_leaves_the_corrected_bar_unread():
    drift = drifts([])                     # the anchor's timing failed: no row
    row = _plan("60%", 60, 50, 0.9, layout="contiguous", pred_time_s=0.9)
    row.update(anchored_error(row, drift))
    assert row["drift_anchor"] is None and row["pred_err_drift_corrected"] is None
    rows = [_row("compile@1", "compile", 100, 1.0, budget=1.0), row]
    assert verdicts(rows)["m"]["max_abs_pred_err_drift_corrected"] is None
    row.update(pred_err_drift_corrected=-0.05)
    assert verdicts(rows)["m"]["max_abs_pred_err_drift_corrected"] == 0.05


def test_the_ratio_interval_holds_what_the_noise_could_make_and_no_more():
    rng = random.Random(1)
    noisy = [1.0 + rng.uniform(-0.1, 0.1) for _ in range(20)]
    low, high = ratio_interval(noisy, [2.0] * 20)
    assert 0.45 <= low < 0.5 < high <= 0.55               # around 1.0 / 2.0, within the spread
    assert ratio_interval(noisy, [2.0] * 20) == (low, high)   # seeded: the same every run
    assert ratio_interval([3.0] * 5, [2.0] * 7) == (1.5, 1.5)


def test_the_report_reads_a_results_file_and_refuses_what_is_not_one(tmp_path, capsys):
    rows = [_row("compile@1", "compile", 100, 1.00, budget=1.0), _plan("100%", 100, 100, 0.9)]
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"rows": rows + consistent_rows(rows)}))
    assert report_main([str(results)]) == 0
    printed = json.loads(capsys.readouterr().out.split(": ", 1)[1])
    assert printed["m"]["ratio_vs_best_compile_at_equal_or_lower_saved"] == {"100%": 0.9}
    (tmp_path / "bad.json").write_text("[]")
    assert report_main([str(tmp_path / "bad.json")]) == 2
    assert report_main([]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 2     # one line each


def test_inversions_count_larger_budgets_measured_slower():
    mib = 1 << 20
    plans = [MeasuredPlan(100 * mib, 90 * mib, 0.150),     # 100%
             MeasuredPlan(60 * mib, 58 * mib, 0.170),      # 60%: slower than the 40% plan
             MeasuredPlan(40 * mib, 39 * mib, 0.160),      # 40%
             MeasuredPlan(25 * mib, 26 * mib, 0.140)]      # 25%: measured over its budget
    assert inversions(plans) == [(0, 3), (1, 2), (1, 3), (2, 3)]
    assert inversions(plans, tolerance=0.1) == [(1, 3), (2, 3)]
    plans[3] = MeasuredPlan(25 * mib, 24 * mib, 0.200)
    assert inversions(plans) == [(1, 2)]


def test_inversions_beyond_noise_need_separated_samples():
    mib = 1 << 20
    steady = MeasuredPlan(60 * mib, 58 * mib, 0.170, (0.169, 0.170, 0.170, 0.171))
    smaller = MeasuredPlan(40 * mib, 39 * mib, 0.160, (0.159, 0.160, 0.160, 0.161))
    noisy = MeasuredPlan(40 * mib, 39 * mib, 0.160, (0.130, 0.150, 0.170, 0.190))
    assert inversions([steady, smaller], beyond_noise=True) == [(0, 1)]
    # 10 ms slower by the medians, but the smaller plan's spread (half its IQR) is wider
    assert inversions([steady, noisy]) == [(0, 1)]
    assert inversions([steady, noisy], beyond_noise=True) == []
