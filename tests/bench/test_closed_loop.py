"""The closed-loop GPU run's own logic (bench/gpu/closed_loop_report.py), from recorded
steps: its time shares, the line a tuning run prints when its time budget stops it, a
case's best and failures from its records, and the table and lines it reports."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support.records import make_rec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import closed_loop_report as rep  # noqa: E402
import gpu_cases as gc  # noqa: E402


def test_budget_shares_split_by_weight():
    shares = rep.budget_shares(300.0, {"a": 1.0, "b": 2.0, "c": 0.0})
    assert shares == {"a": 100.0, "b": 200.0, "c": 0.0}
    assert rep.budget_shares(10.0, {}) == {}


def test_cut_note_reads_the_tuners_own_line():
    out = ("[####] 24/64 trials\nautosched: time budget of 25 s spent after 24 of 64 "
           "trials; the records so far are saved, rerun to continue\n")
    assert rep.cut_note(out) == "time budget of 25 s spent after 24 of 64 trials"
    assert rep.cut_note("task  best\nmatmul 1.0 ms\n") is None


def test_best_of_records_counts_failures_and_takes_the_fastest_correct():
    records = [make_rec(cand=0, latency=3e-3), make_rec(cand=1, latency=1e-3),
               make_rec(cand=2, error="wrong_answer"), make_rec(cand=3, error="run_error"),
               make_rec(cand=4, error="run_error"), make_rec(cand=5, latency=2e-3)]
    best = rep.best_of_records(records)
    assert best["trials"] == 6
    assert best["failures"] == {"wrong_answer": 1, "run_error": 2}
    assert best["best_s"] == pytest.approx(1e-3)
    assert best["best_candidate"]["decisions"]["i"] == [4, 8, 1]
    assert best["sketch"] == "tile"
    none_ok = rep.best_of_records([make_rec(cand=0, error="build_error")])
    assert none_ok == {"trials": 1, "failures": {"build_error": 1}}


def test_table_and_lines_from_recorded_steps():
    fp16, softmax = gc.case("tc_matmul_fp16_4096"), gc.case("softmax_4096")
    steps = {
        f"tune/{fp16.name}": {"best_s": 2.5e-4, "trials": 100, "failures": {},
                              "cut": None, "tune": {"seconds": 61.0}},
        f"peer/{fp16.name}": {"peer": {"latency_s": 2.0e-4, "do_bench_s": 2.02e-4,
                                       "agree": True, "note": "out_dtype"}},
        f"tune/{softmax.name}": {"best_s": 6.0e-5, "trials": 20, "failures": {"run_error": 1},
                                 "cut": "time budget of 20 s spent after 20 of 32 trials",
                                 "tune": {"seconds": 21.0}},
        f"peer/{softmax.name}": {"peer": {"latency_s": 5.0e-5, "agree": True}},
        f"metaschedule/{softmax.name}": {"result": {"ok": True, "latency_s": 1.2e-4,
                                                    "trials_measured": 32,
                                                    "tuning_wall_s": 40.0}},
    }
    rows = rep.table(steps, [fp16, softmax])
    assert [r["case"] for r in rows] == [fp16.name, softmax.name]
    assert rows[0]["ratio"] == pytest.approx(1.25)
    assert rows[0]["ours_rate"] == pytest.approx(2 * 4096 ** 3 / 2.5e-4 / 1e12)
    assert rows[0]["metaschedule_s"] is None and rows[0]["trials_measured"] == 100
    assert rows[1]["ratio_vs_metaschedule"] == pytest.approx(0.5)
    assert rows[1]["metaschedule_trials"] == 32 and rows[1]["tune_seconds"] == 21.0
    # a case its time budget cut says so in its row
    assert "time budget of 20 s spent after 20 of 32 trials" in rows[1]["notes"]
    lines = rep.summary_lines(rows, {"geomean_vs_peer": 1.118, "rows_vs_peer": 2,
                                     "geomean_vs_metaschedule": 0.5,
                                     "rows_vs_metaschedule": 1})
    assert lines[0].startswith(f"{fp16.name}: 100 trials in 61.0 s, ours 0.250 ms (549.8 "
                               "TFLOP/s), torch 0.200 ms (687.2 TFLOP/s), ratio 1.25")
    assert lines[1].endswith("ratio 1.20, MetaSchedule 0.120 ms")
    assert lines[2] == ("geomean ours/torch 1.118 over 2 rows; ours/MetaSchedule 0.500 over "
                        "1 rows")


def test_a_failed_metaschedule_run_is_a_note_not_a_latency():
    mm = gc.case("matmul_fp32_4096")
    steps = {f"tune/{mm.name}": {"best_s": 3e-3, "trials": 50, "cut": None,
                                 "tune": {"seconds": 55.0}},
             f"metaschedule/{mm.name}": {"result": {"ok": False,
                                                    "error": "stopped at its time share"}}}
    (row,) = rep.table(steps, [mm])
    assert row["metaschedule_s"] is None and row["ratio_vs_metaschedule"] is None
    assert "MetaSchedule: stopped at its time share" in row["notes"]
    assert row["peer_s"] is None and row["ratio"] is None
