"""The measured choice (autosched.runtime.choose): its deciding step on injected
measurements, the same as the bench's logic it replaced, and a small run end to end."""
from __future__ import annotations

import json
import random
import statistics

import pytest

import autosched.runtime as rt
from autosched.runtime.measured_choice import MeasuredPlan, fastest_within, pareto_consistent

COMPILED = ("plan+compile", "memeff+partitioner", "plan+kernels", "kernels+partitioner",
            "compile")


def old_bench_choice(rows):
    """bench/training_plans_report.consistent_rows as it was before the choice moved into
    the product, with the ratio its verdicts computed: the oracle."""
    def chosen(pick, target, method):
        return {**pick, "point": f"{method}@{target['budget']}", "method": method,
                "budget": target["budget"], "budget_bytes": target["budget_bytes"],
                "chosen": pick["point"], "fits": pick["saved"] <= target["budget_bytes"]}
    out = []
    fam = [r for r in rows if r["method"] == "plan"]
    picks = pareto_consistent([MeasuredPlan(r["budget_bytes"], r["saved"], r["choice_time_s"])
                               for r in fam])
    out += [chosen(fam[i], r, "plan*") for r, i in zip(fam, picks) if i is not None]
    cands = [r for r in rows if r["method"] in COMPILED]
    measured = [MeasuredPlan(0, r["saved"], r["choice_time_s"]) for r in cands]
    budgets = {}
    for r in rows:
        if r["method"] in ("plan", "plan+compile") and not r.get("candidate"):
            budgets.setdefault(r["budget"], r)
    for r in budgets.values():
        i = fastest_within(measured, r["budget_bytes"])
        if i is not None:
            out.append(chosen(cands[i], r, "plan+compile*"))
    comp = [r for r in rows if r["method"] == "compile"]
    for r in out:
        if r["method"] == "plan+compile*":
            peers = [c for c in comp if c["saved"] <= r["saved"]]
            peer = min(peers, key=lambda c: c["time_s"]) if peers else None
            r["ratio"] = r["time_s"] / peer["time_s"] if peer else None
    return out


def _random_rows(rng):
    rows = [{"point": "eager", "method": "eager", "saved": 100}]
    rows += [{"point": f"compile@{b:g}", "method": "compile", "budget": b,
              "saved": int(100 * b) + rng.randint(0, 20)} for b in (1.0, 0.6, 0.3, 0.0)]
    for method in ("plan", "plan+compile", "memeff+partitioner"):
        for spec in ("100%", "60%", "40%", "25%"):
            if rng.random() < 0.2:
                continue                      # a point that failed
            pct = int(spec[:-1])
            rows.append({"point": f"{method}@{spec}", "method": method, "budget": spec,
                         "budget_bytes": pct, "saved": pct + rng.randint(-15, 5)})
    rows.append({"point": "plan+compile@50%", "method": "plan+compile", "budget": "50%",
                 "budget_bytes": 50, "saved": 45, "candidate": True})
    for r in rows:
        r["choice_time_s"], r["time_s"] = rng.uniform(1, 2), rng.uniform(1, 2)
    return rows


def test_the_product_chooses_as_the_bench_did_on_the_same_measurements():
    rng = random.Random(4)
    checked = 0
    for _ in range(200):
        rows = _random_rows(rng)
        new, old = rt.choose_among(rows), old_bench_choice(rows)
        assert [{k: v for k, v in r.items() if k != "peer" and
                 (k != "ratio" or r["method"] == "plan+compile*")} for r in new] == old
        checked += len(old)
    assert checked > 1000


def test_the_choice_reads_odd_rounds_and_reports_the_ratio_on_even_ones():
    rows = [{"point": "eager", "method": "eager", "saved": 100, "choice_time_s": 1.0,
             "time_s": 2.0},
            {"point": "plan@100%", "method": "plan", "budget": "100%", "budget_bytes": 100,
             "saved": 100, "choice_time_s": 0.9, "time_s": 2.2},
            {"point": "plan@50%", "method": "plan", "budget": "50%", "budget_bytes": 50,
             "saved": 40, "choice_time_s": 0.8, "time_s": 3.0}]
    chosen = {r["budget"]: r for r in rt.choose_among(rows)}
    # the 50% plan is faster on the rounds chosen on, and fits 100% too
    assert chosen["100%"]["chosen"] == chosen["50%"]["chosen"] == "plan@50%"
    assert chosen["100%"]["peer"] is None            # eager saves more than 40 bytes
    rows[2]["saved"] = 100
    chosen = {r["budget"]: r for r in rt.choose_among(rows)}
    assert list(chosen) == ["100%"] and chosen["100%"]["chosen"] == "plan@50%"
    assert chosen["100%"]["peer"] == "eager" and chosen["100%"]["ratio"] == 3.0 / 2.0


def test_choose_on_a_tiny_model_fits_each_budget_from_recorded_samples(mlp, bw_path):
    model = mlp.make_model(n_layer=2, width=16, hidden=32)
    inputs = mlp.make_inputs(batch=8, width=16)
    options = rt.ChoiceOptions(plan=rt.PlanOptions(repeats=1, bandwidth_path=bw_path,
                                                   actions=("keep", "recompute")), rounds=4)
    result = rt.choose(model, inputs, ["100%", "40%"], mlp.loss_fn, options)
    points = {r["point"]: r for r in result.points}
    assert set(points) == {"eager", "plan@100%", "plan@40%", "plan@keep"}
    assert result.budgets == {b: int(result.reference_saved_bytes * p)
                              for b, p in (("100%", 1.0), ("40%", 0.4))}
    for spec, budget in result.budgets.items():
        answer = result.answer(spec)
        pick = points[answer["chosen"]]
        assert answer["method"] == "plan*" and answer["saved"] == pick["saved"] <= budget
        fitting = [r for r in result.points if r["method"] == "plan" and r["saved"] <= budget]
        assert pick["choice_time_s"] == min(r["choice_time_s"] for r in fitting)
    for r in result.points:            # two odd rounds chosen on, two even ones reported
        assert len(r["choice_samples_s"]) == len(r["time_samples_s"]) == 2
        assert r["time_s"] == statistics.median(r["time_samples_s"])
        assert r["grad_rel_err"] < 1e-6
    kept = result.answer("100%")       # every layer kept saves what eager saves
    assert points[kept["chosen"]]["actions"] == ["keep", "keep"]
    assert kept["peer"] == "eager"
    assert kept["ratio"] == statistics.median(kept["time_samples_s"]) / \
        statistics.median(points["eager"]["time_samples_s"])
    document = json.loads(result.to_json())
    chosen = result.answer("40%")["chosen"]
    assert document["answers"]["40%"]["chosen"] == chosen
    plan = rt.Plan.from_json(json.dumps(document["plans"][chosen]))   # apply()-able
    assert plan.actions == points[chosen]["actions"]
    assert "plan@40%" in result.table() or "plan@100%" in result.table()


def test_bad_options_fail_before_anything_is_measured():
    with pytest.raises(ValueError, match="rounds must be >= 2"):
        rt.ChoiceOptions(rounds=1)
    with pytest.raises(ValueError, match="set compile"):
        rt.ChoiceOptions(kernels_backend="inductor")
    with pytest.raises(rt.UserError, match="'half' is not understood"):
        rt.choose(None, (), ["40%", "half"])
