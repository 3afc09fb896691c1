"""bench/sketch_sass_dry_run.py: its case table names real workloads, sketches and archs;
a case's row (rates, SASS minima, block tiles) follows from its candidates' outcomes; SASS
names with modifiers count what they say; and one small case runs end to end with nvcc."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from search_space import Candidate

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import sketch_sass_dry_run as dr  # noqa: E402


def test_the_case_table_is_well_formed():
    """Workloads and argument names exist, each arch has a shared-memory limit, the
    Hopper cases are sm_90a alone and the others sm_80 and sm_90a (the issue's bars),
    and every sketch name is one the CUDA space offers for some case's task."""
    from autosched import load_op_file
    from search_space import generate_space

    offered = set()
    for name, case in dr.CASES.items():
        defs = load_op_file(os.path.join(dr.EXAMPLES, case.op_file))
        params = defs[case.workload].params
        assert {a.split("=")[0] for a in case.args} <= set(params), name
        assert set(case.archs) <= set(dr.DYNAMIC_SHARED), name
        want = ("sm_90a",) if case.sketch == "wgmma" else ("sm_80", "sm_90a")
        assert case.archs == want, name
        assert set(case.forbid) == {"STL", "LDL"}, name
        offered |= set(generate_space(dr.case_task(case), dr.target_for(case.archs[0])).sketches)
    assert {c.sketch for c in dr.CASES.values()} <= offered
    assert {"wgmma", "tensor_core", "simt_gemm", "rows_onchip"} <= {
        c.sketch for c in dr.CASES.values()}
    # the Hopper bar's shapes are there, in both 16-bit types
    hopper = {(c.workload, c.args) for c in dr.CASES.values() if c.sketch == "wgmma"}
    for dtype in ((), ("dtype=bfloat16",)):
        assert ("matmul_mp", ("M=4000", "N=3000", "K=1024", *dtype)) in hopper
        assert ("matmul_mp", ("M=8192", "N=8192", "K=8192", *dtype)) in hopper


def _counts(**arch_counts):
    return {arch: dict(c) for arch, c in arch_counts.items()}


def test_a_row_follows_from_the_candidates_outcomes():
    case = dr.CASES["mma_matmul_fp16_odd"]
    def mma(wm, fm, wn, fn):
        return Candidate.make("tensor_core", {"C.warps_m": wm, "C.frags_m": fm,
                                              "C.warps_n": wn, "C.frags_n": fn})
    good = {"HMMA": 8, "LDGSTS": 18, "STL": 0, "LDL": 0, "LDSM": 4, "STG.E.128": 0}
    candidates = [
        (mma(4, 4, 2, 4), "", _counts(sm_80=good, sm_90a={**good, "HMMA": 16})),   # 256x128
        (mma(2, 4, 2, 4), "", _counts(sm_80={**good, "STL": 3}, sm_90a=good)),    # spills
        (mma(1, 1, 1, 1), "", _counts(sm_80=good, sm_90a={**good, "LDGSTS": 0})),
        (mma(4, 4, 4, 4), "tensor_core: too much shared memory", {}),            # 256x256
    ]
    report = SimpleNamespace(candidates=candidates, generated=4, compiled=3,
                             messages=Counter({"tensor_core: too much shared memory": 1}),
                             seconds=1.25, task=SimpleNamespace(name="t"))
    row = dr.row_of("mma_matmul_fp16_odd", case, report, 4)
    assert (row["sampled"], row["compiled"], row["passed"]) == (4, 3, 1)
    assert (row["compile_rate"], row["rate"]) == (0.75, 0.25)
    assert row["sass_failures"] == {"sm_80: STL x3": 1, "sm_90a: no LDGSTS": 1}
    assert row["min"]["sm_80"]["HMMA"] == 8 and row["min"]["sm_90a"]["HMMA"] == 8
    assert row["min"]["sm_90a"]["LDGSTS"] == 0 and row["min"]["sm_80"]["STL"] == 0
    assert row["tiles"] == {"256x128": [1, 1], "128x128": [1, 0], "16x16": [1, 0],
                            "256x256": [1, 0]}
    assert row["above_128x128"] == [2, 1]
    assert [(c["problem"], c["tiles"]) for c in row["candidates"]] == [
        ("", ["256x128"]), ("sm_80: STL x3", ["128x128"]), ("sm_90a: no LDGSTS", ["16x16"]),
        ("tensor_core: too much shared memory", ["256x256"])]
    assert json.loads(row["candidates"][0]["candidate"])["decisions"]["C.warps_m"] == 4
    short = dr.row_of("mma_matmul_fp16_odd", case, report, 5)
    assert (short["rate"], short["failures"]) == (0.2, {
        "tensor_core: too much shared memory": 1,
        "tensor_core: 4 distinct candidates sampled, not 5": 1})
    assert not dr.meets_bar([row])
    assert dr.meets_bar([{**row, "compile_rate": 0.9, "rate": 0.9}])
    assert not dr.meets_bar([{**row, "compile_rate": 0.9, "rate": 0.9,
                              "above_128x128": [2, 0]}])


def test_a_case_samples_its_sketch_alone_even_where_the_sketch_fails():
    """A sketch that never schedules the task gives no samples: the draw does not fall
    back on the space's other sketches (whose SASS would be read as the case's)."""
    from autosched import dry_run_task, load_tasks, resolve_target
    from search_space import InvalidCandidate, SearchSpace
    from search_space.sketch import Sketch
    from support.tiny_space import SHAPE, TinyRules

    class Refusing(Sketch):
        name = "refusing"

        def apply(self, sch, decide):
            decide.choice("x", (1, 2))
            raise InvalidCandidate("refused")

    class Rules(TinyRules):
        def sketches(self, task, target):
            return [*super().sketches(task, target), Refusing()]

    (task,) = load_tasks(os.path.join(dr.EXAMPLES, "matmul.py"), ["matmul"],
                         [f"{k}={v}" for k, v in SHAPE.items()])
    report = dry_run_task(task, resolve_target("llvm"), 3, 0, sketch="refusing",
                          space_factory=lambda t, tg: SearchSpace(t, tg, Rules()))
    assert (report.generated, report.compiled, report.candidates) == (0, 0, [])


def test_block_tiles_of_each_gemm_sketch():
    assert dr.BLOCK_TILES["wgmma"]({"wgmma.bm": 128, "wgmma.bn": 192}) == [(128, 192)]
    assert dr.BLOCK_TILES["simt_gemm"]({"C.block_m": 128, "C.block_n": 64,
                                        "C.block_k": 8}) == [(128, 64)]
    assert dr.BLOCK_TILES["tensor_core"]({"C.warps_m": 2, "C.frags_m": 4, "C.warps_n": 4,
                                          "C.frags_n": 2, "C.k_chunk": 32}) == [(128, 128)]


def test_sass_names_with_modifiers_count_the_instructions_carrying_them():
    from autosched.measure.cuda.sass import count_named

    found = Counter({"LDG.E.128.CONSTANT": 3, "LDG.E.LTC128B.128": 2, "LDG.E.64": 5,
                     "LDG.E": 7, "HMMA.16816.F32": 4, "HGMMA.64x128x16.F32": 2,
                     "LDGSTS.E.BYPASS.LTC128B.128": 6})
    assert count_named(found, "LDG.E.128") == 5
    assert count_named(found, "LDG") == 17
    assert count_named(found, "LDG.E.64") == 5
    assert count_named(found, "HMMA") == 4 and count_named(found, "HGMMA") == 2
    assert count_named(found, "LDGSTS") == 6 and count_named(found, "STL") == 0


def test_no_case_left_is_bad_input():
    with pytest.raises(SystemExit) as e:
        dr.main(["--cases", "no_such_case"])
    assert e.value.code == 2
    assert dr.main(["--cases", "simt_matmul_odd", "--sketches", "wgmma"]) == 2
    assert dr.main(["--cases", "simt_matmul_odd", "--per-op", "0"]) == 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_small_case_runs_with_two_samples(tmp_path):
    """Two SIMT fp32 GEMM candidates compile for sm_80 and sm_90a and their SASS is read
    (128-bit global loads counted through the name with modifiers). In a subprocess: a
    process that compiled CUDA keeps TVM's CUDA runtime registered."""
    from support.sass_tools import skip_without_cuobjdump

    skip_without_cuobjdump()
    out = tmp_path / "dry_run.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "sketch_sass_dry_run.py"),
                          "--per-op", "2", "--cases", "simt_matmul_odd", "--json", str(out)],
                         env=env, capture_output=True, text=True, timeout=600, cwd=ROOT,
                         check=False)
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["provenance"]["seed"] == 0 and data["per_op"] == 2
    (row,) = data["rows"]
    assert (row["case"], row["sketch"], row["sampled"], row["compiled"]) == (
        "simt_matmul_odd", "simt_gemm", 2, 2)
    for arch in ("sm_80", "sm_90a"):
        assert set(row["min"][arch]) == {"FFMA", "LDG.E.128", "STL", "LDL", "LDS.128",
                                         "STG.E.128"}
        assert row["min"][arch]["FFMA"] > 0 and row["min"][arch]["LDG.E.128"] > 0
    assert sum(s for s, _ in row["tiles"].values()) == 2
    assert run.returncode == (0 if row["rate"] == 1.0 else 1)
