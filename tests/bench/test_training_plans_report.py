"""The bench's measured choice: the fastest compiled candidate within each budget, the
partitioner alone among them, and the ratio against torch.compile's best point at equal
or lower saved bytes."""
from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from training_plans_report import consistent_rows, verdicts  # noqa: E402


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
