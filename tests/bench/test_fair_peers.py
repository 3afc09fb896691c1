"""The closed-loop run's cases and peers (bench/gpu/gpu_cases.py, fair_peers.py): the
cases' specs and work are the workloads' own, each torch peer computes what our
workload computes (checked on the CPU at a small shape against TVM's build of the
workload), and rates, agreement, rows, ratios and geometric means come out exactly from
recorded device timings. The CUDA-only timing runs behind the `gpu` marker."""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import fair_peers as fp  # noqa: E402
import gpu_cases as gc  # noqa: E402

# fake device timings (seconds), as a device script would record them
RECORDED = json.loads("""{
  "peak": {"gemm_n": 8192, "gemm_s": 0.00125, "copy_bytes": 1073741824, "copy_s": 0.0005},
  "rows": {
    "tc_matmul_fp16_4096": {"ours_s": 0.00025, "peer_s": 0.0002, "do_bench_s": 0.000204,
                            "ms_s": 0.0005},
    "matmul_fp32_4096": {"ours_s": 0.003, "peer_s": 0.0025, "do_bench_s": 0.0028,
                         "ms_s": 0.00375},
    "softmax_4096": {"ours_s": 0.000064, "peer_s": 0.000064, "do_bench_s": 0.0000635},
    "layer_norm_8192x1024": {"ours_s": 0.000032, "peer_s": 0.000016, "do_bench_s": 0.000016}
  }
}""")


def _row(name):
    rec = RECORDED["rows"][name]
    c = gc.case(name)
    peer = {"latency_s": rec["peer_s"], "do_bench_s": rec["do_bench_s"], "note": c.peer_note,
            "tf32": c.tf32, **fp.agreement(rec["peer_s"], rec["do_bench_s"])}
    return fp.build_row(c, rec["ours_s"], peer, rec.get("ms_s"))


def test_cases_match_the_workloads_specs_and_flops():
    from autosched.workload import load_tasks

    for c in gc.CASES:
        task = load_tasks(str(ROOT / c.op_file), [c.workload], c.arg_items())[0]
        assert [(s.name, s.shape, s.dtype) for s in c.inputs] == \
            [(s.name, s.shape, s.dtype) for s in task.inputs], c.name
        assert [(s.name, s.shape, s.dtype) for s in c.outputs] == \
            [(s.name, s.shape, s.dtype) for s in task.outputs], c.name
        if c.kind == gc.CONTRACTION:
            assert c.flops == task.flops, c.name


def test_the_cases_cover_the_brief_and_fit_the_suggested_time():
    names = {c.name for c in gc.CASES}
    assert {"tc_matmul_fp16_4096", "tc_matmul_bf16_4096", "tc_matmul_fp16_8192",
            "tc_matmul_bf16_8192", "tc_matmul_fp16_4000x3000x1024",
            "matmul_fp32_4096", "tc_batch_matmul_fp16_32x1024x1024x128",
            "layer_norm_8192x1024", "softmax_4096",
            "tc_conv2d_nhwc_fp16_resnet50_3x3_64"} == names
    assert all(c.trials >= 100 for c in gc.CASES if c.workload in ("matmul", "matmul_mp"))
    assert sum(c.metaschedule for c in gc.CASES) >= 2
    split = gc.suggested_split()
    assert split["suggestion"] and split["total_s"] <= split["limit_s"] == 480.0
    assert split["total_s"] == sum(c.budget_s + c.metaschedule_s for c in gc.CASES) + 30.0
    assert gc.case("softmax_4096").bytes_moved == 2 * 4096 * 4096 * 4
    assert gc.case("layer_norm_8192x1024").bytes_moved == 2 * 8192 * 1024 * 4 + 2 * 1024 * 4
    with pytest.raises(KeyError, match="known: tc_matmul_fp16_4096"):
        gc.case("nope")


def test_rates_are_tflops_for_contractions_and_gbs_for_memory_bound_ops():
    gemm, sm = gc.case("tc_matmul_fp16_4096"), gc.case("softmax_4096")
    assert (gemm.unit, sm.unit) == ("TFLOP/s", "GB/s")
    assert fp.rate(gemm, 0.00025) == pytest.approx(2 * 4096 ** 3 / 0.00025 / 1e12, rel=1e-12)
    assert fp.rate(gemm, 0.00025) == pytest.approx(549.755813888, rel=1e-12)
    assert fp.rate(sm, 0.000064) == pytest.approx(134217728 / 0.000064 / 1e9, rel=1e-12)
    assert fp.rate(sm, 0.000064) == pytest.approx(2097.152, rel=1e-12)
    assert fp.rate(sm, None) is None and fp.rate(sm, 0.0) is None
    assert fp.rate(sm, math.inf) is None


def test_agreement_within_five_percent_and_why_otherwise():
    assert fp.agreement(0.0002, 0.000204) == {"agree": True,
                                              "rel_diff": pytest.approx(0.02), "why": ""}
    assert fp.agreement(1.0, 1.049)["agree"] and not fp.agreement(1.0, 1.051)["agree"]
    assert not fp.agreement(1.0, 0.949)["agree"]
    off = fp.agreement(0.0025, 0.0028)
    assert not off["agree"] and off["rel_diff"] == pytest.approx(0.12)
    assert "+12.0%, events faster" in off["why"] and "2x L2" in off["why"]
    assert "launch overhead" not in off["why"]
    short = fp.agreement(1.0e-5, 0.8e-5)
    assert "-20.0%, do_bench faster" in short["why"] and "launch overhead" in short["why"]
    assert fp.agreement(1.0, None) == {"agree": False, "rel_diff": None,
                                       "why": "do_bench not run (no triton)"}


def test_rows_carry_rates_ratios_and_notes():
    row = _row("tc_matmul_fp16_4096")
    assert row["case"] == "tc_matmul_fp16_4096" and row["unit"] == "TFLOP/s"
    assert row["ours_rate"] == pytest.approx(549.755813888, rel=1e-12)
    assert row["peer_rate"] == pytest.approx(687.19476736, rel=1e-12)
    assert row["ratio"] == pytest.approx(1.25, rel=1e-12)
    assert row["metaschedule_s"] == 0.0005
    assert row["ratio_vs_metaschedule"] == pytest.approx(0.5, rel=1e-12)
    assert row["peer_agree"] is True
    assert row["notes"] == [gc.FP32_OUT_NOTE, gc.MS_TENSOR_CORE_NOTE]
    without_ms = fp.build_row(gc.case("tc_matmul_fp16_4096"), 0.00025, None)
    assert without_ms["notes"] == [] and without_ms["ratio_vs_metaschedule"] is None
    assert "bf16" in gc.metaschedule_note(gc.case("tc_matmul_bf16_4096"))
    fp32 = _row("matmul_fp32_4096")
    assert fp32["peer_agree"] is False and fp32["tf32"] is False
    assert fp32["notes"][0] == gc.case("matmul_fp32_4096").peer_note
    assert fp32["notes"][1].startswith("timing methods disagree: do_bench 2.8000 ms")
    ln = _row("layer_norm_8192x1024")
    assert ln["ratio"] == pytest.approx(2.0) and ln["metaschedule_s"] is None
    assert ln["ratio_vs_metaschedule"] is None and ln["metaschedule_rate"] is None
    bare = fp.build_row(gc.case("softmax_4096"), None, None, notes=["ours failed"])
    assert bare["ratio"] is None and bare["peer_s"] is None and bare["notes"] == ["ours failed"]


def test_geometric_means_over_the_rows_that_have_them():
    rows = [_row(n) for n in RECORDED["rows"]]
    s = fp.summary(rows)
    # ours / peer: 1.25, 1.2, 1.0, 2.0; ours / MetaSchedule: 0.5, 0.8
    assert s["rows_vs_peer"] == 4 and s["rows_vs_metaschedule"] == 2
    assert s["geomean_vs_peer"] == pytest.approx(3.0 ** 0.25, rel=1e-12)
    assert s["geomean_vs_metaschedule"] == pytest.approx(math.sqrt(0.4), rel=1e-12)
    assert fp.geomean([]) is None and fp.geomean([None, 0.0, math.inf]) is None
    assert fp.ratio(1.0, None) is None and fp.ratio(math.inf, 1.0) is None


def test_peak_rates_from_recorded_timings_and_fractions_of_it():
    p = RECORDED["peak"]
    peak = fp.peak_from_times(p["gemm_n"], p["gemm_s"], p["copy_bytes"], p["copy_s"])
    assert peak["bf16_gemm_tflops"] == pytest.approx(2 * 8192 ** 3 / 0.00125 / 1e12, rel=1e-12)
    assert peak["copy_gb_s"] == pytest.approx(4294.967296, rel=1e-12)
    gemm, sm = _row("tc_matmul_fp16_4096"), _row("softmax_4096")
    assert fp.of_peak(gemm, peak) == pytest.approx(0.625, rel=1e-12)
    assert fp.of_peak(sm, peak) == pytest.approx(2097.152 / 4294.967296, rel=1e-12)


def _small(name, **args):
    """A small instance of a case's workload: (task, TVM's output of its plain build)."""
    import tvm

    from autosched.target import resolve_target
    from autosched.workload import load_tasks

    c = gc.case(name)
    task = load_tasks(str(ROOT / c.op_file), [c.workload],
                      [f"{k}={v}" for k, v in {**c.args, **args}.items()])[0]
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(s.shape).astype(s.dtype) for s in task.inputs]
    rt = tvm.compile(task.mod, target=resolve_target("llvm").tvm()).jit()
    dev = tvm.cpu()
    bufs = [tvm.runtime.tensor(a, dev) for a in ins]
    out = task.outputs[0]
    bufs.append(tvm.runtime.tensor(np.zeros(out.shape, out.dtype), dev))
    rt["main"](*bufs)
    return c, ins, bufs[-1].numpy()


@pytest.mark.parametrize("name,args,rtol", [
    ("softmax_4096", {"M": 8, "N": 32}, 1e-5),
    ("layer_norm_8192x1024", {"M": 8, "N": 32}, 1e-4),
    ("matmul_fp32_4096", {"M": 8, "N": 16, "K": 12}, 1e-5),
    ("tc_matmul_fp16_4000x3000x1024", {"M": 16, "N": 8, "K": 32}, 2e-3),
    ("tc_batch_matmul_fp16_32x1024x1024x128", {"B": 2, "M": 8, "N": 16, "K": 16}, 2e-3),
    ("tc_conv2d_nhwc_fp16_resnet50_3x3_64", {"N": 1, "H": 6, "W": 5, "C": 8, "F": 4}, 2e-3),
])
def test_each_peer_computes_what_the_workload_computes(name, args, rtol):
    import torch

    c, ins, want = _small(name, **args)
    fn, note = gc.resolve_peer(c, "cpu")
    with torch.no_grad():
        got = fn(*[torch.from_numpy(a) for a in ins])
    assert tuple(got.shape) == want.shape
    if c.peer in gc.NEEDS_OUT_DTYPE:   # CPU torch has no out_dtype: the noted fallback
        assert note.startswith(gc.FALLBACK_NOTE) and got.dtype == torch.float32
    else:
        assert note == c.peer_note
    np.testing.assert_allclose(got.float().numpy(), want, rtol=rtol, atol=rtol)


def test_inputs_follow_the_case_specs_and_the_seed():
    import torch

    c = gc.case("layer_norm_8192x1024")
    small = dataclasses.replace(c, inputs=(gc.Spec("x", (4, 8), "float32"),
                                           gc.Spec("g", (8,), "bfloat16")))
    a, b = fp.make_inputs(small, "cpu", seed=3), fp.make_inputs(small, "cpu", seed=3)
    assert [(tuple(t.shape), t.dtype) for t in a] == [((4, 8), torch.float32),
                                                      ((8,), torch.bfloat16)]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], fp.make_inputs(small, "cpu", seed=4)[0])


def test_precision_flags_turn_tf32_off_and_restore_the_settings():
    import torch

    m, d = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (m.allow_tf32, d.allow_tf32, m.allow_fp16_reduced_precision_reduction,
             d.benchmark)
    m.allow_tf32 = d.allow_tf32 = True
    d.benchmark = False
    try:
        with fp.precision_flags():
            assert (m.allow_tf32, d.allow_tf32, d.benchmark) == (False, False, True)
            assert m.allow_fp16_reduced_precision_reduction is False
        assert (m.allow_tf32, d.allow_tf32, d.benchmark) == (True, True, False)
        with fp.precision_flags(tf32=True):
            assert (m.allow_tf32, d.allow_tf32) == (True, True)
    finally:
        (m.allow_tf32, d.allow_tf32, m.allow_fp16_reduced_precision_reduction,
         d.benchmark) = saved


def _cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs an NVIDIA GPU")
def test_peer_and_peak_on_the_device():
    import torch

    c = gc.case("tc_matmul_fp16_4000x3000x1024")
    before = torch.backends.cuda.matmul.allow_tf32
    peer = fp.measure_peer(c, repeat=5)
    assert peer["latency_s"] > 0 and peer["rate"] > 0 and peer["note"] == c.peer_note
    assert peer["flags"] == {"matmul_allow_tf32": False, "cudnn_allow_tf32": False,
                             "cudnn_benchmark": True}
    assert torch.backends.cuda.matmul.allow_tf32 == before
    peak = fp.device_peak(gemm_n=2048, copy_bytes=1 << 26, repeat=3)
    assert peak["bf16_gemm_tflops"] > 1 and peak["copy_gb_s"] > 10
