"""`autosched report`: the per-task table and one tuning-curve PNG per task, on both backends."""
from __future__ import annotations

import math

import pytest

from support.records import make_rec, task_json

from autosched.cli import main
from autosched.cli.report import summarize

FLOPS = 2 * 64 * 32 * 16


def _fill(db):
    db.register_task(task_json("mm", FLOPS))
    db.register_task(task_json("conv", 4e6))
    db.add_records([make_rec("mm", 0, 3e-3), make_rec("mm", 1, error="build_error"),
                    make_rec("mm", 2, 1e-3), make_rec("mm", 3, 2e-3),
                    make_rec("mm", 4, error="wrong_answer"),
                    make_rec("conv", 0, 5e-5),
                    make_rec("mm", 0, 4e-3, target="llvm-b", hw="hw2")])


def test_summaries_follow_measurement_order_per_task_target_and_machine(db):
    _fill(db)
    by = {(s.name.split("(")[0], s.target): s for s in summarize(db)}
    assert set(by) == {("mm", "llvm skylake-avx512"), ("conv", "llvm skylake-avx512"),
                       ("mm", "llvm znver3")}
    mm = by[("mm", "llvm skylake-avx512")]
    assert mm.latencies[:4] == [3e-3, math.inf, 1e-3, 2e-3] and len(mm.latencies) == 5
    assert mm.best == 1e-3
    assert dict(mm.failures) == {"build_error": 1, "wrong_answer": 1}
    want = [FLOPS / lat / 1e9 for lat in (3e-3, 3e-3, 1e-3, 1e-3, 1e-3)]
    assert mm.curve() == pytest.approx(want, rel=1e-12)
    assert by[("mm", "llvm znver3")].latencies == [4e-3]


def test_report_prints_the_table_and_writes_one_png_per_task(db, db_url, tmp_path, capsys):
    _fill(db)
    out = tmp_path / "report"
    assert main(["report", "--db", db_url, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0].split("(")[0] + " " + line.split()[2]: line
            for line in text.splitlines() if line.startswith(("mm(", "conv("))}
    assert set(rows) == {"mm skylake-avx512", "conv skylake-avx512", "mm znver3"}
    mm = rows["mm skylake-avx512"].split()
    assert "1.000" in mm and f"{FLOPS / 1e-3 / 1e9:.1f}" in mm and "5" in mm
    assert "build_error=1," in mm and "wrong_answer=1" in mm
    assert "50.0" in rows["conv skylake-avx512"].split()  # 5 us: reported in microseconds
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 3
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert all(" " not in p.name and ":" not in p.name for p in pngs)


def test_report_of_an_empty_database_says_so(db, db_url, tmp_path, capsys):
    assert main(["report", "--db", db_url, "--no-plots"]) == 0
    assert capsys.readouterr().out.strip() == "no records"
