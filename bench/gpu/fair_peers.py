"""torch's kernel for exactly our computation, timed fairly, and the rows that put it
beside ours and MetaSchedule's.

Timing (`time_events`): CUDA events around each call on one private stream, the L2
flushed before every timed call by writing a buffer twice the L2's size, warm-up calls
first, the median of the repeats: how autosched's runner times our kernels
(autosched/measure/cuda/timing.py). `time_do_bench` times the same callable on the same
tensors with `triton.testing.do_bench` (its own cache flush, median) as a cross-check:
the two `agree` when within AGREE_TOL; otherwise the row says by how much and why the
methods can differ.

Rates: TFLOP/s for contractions, GB/s for memory-bound operators (inputs read once plus
outputs written once, `gpu_cases.GpuCase.bytes_moved`). `device_peak()` measures, in the
same run, a large bf16 GEMM's TFLOP/s and a device-to-device copy's GB/s (read plus
write), the ceilings the rates are read against.

Everything that needs CUDA imports torch (and triton) inside the function; the pure parts
(rates, agreement, rows, ratios, geometric means) take recorded numbers and are tested
without a GPU.
"""
from __future__ import annotations

import contextlib
import math

from gpu_cases import GpuCase, metaschedule_note, resolve_peer
from torch_peers import time_cuda

AGREE_TOL = 0.05
PEAK_GEMM_N = 8192
COPY_BYTES = 1 << 30


# ---- pure parts ---------------------------------------------------------------------

def rate(c: GpuCase, seconds: float | None) -> float | None:
    """The case's rate at `seconds` per call, in `c.unit` (TFLOP/s or GB/s); None for a
    missing or non-positive time."""
    if seconds is None or not seconds > 0 or not math.isfinite(seconds):
        return None
    return c.work() / seconds


def agreement(events_s: float, do_bench_s: float | None, tol: float = AGREE_TOL) -> dict:
    """Whether the two methods' medians agree: |do_bench - events| / events <= tol.
    Otherwise `why` says by how much, which is faster, and the method differences that
    can explain it (launch overhead on short kernels, the flush buffer's size)."""
    if do_bench_s is None:
        return {"agree": False, "rel_diff": None, "why": "do_bench not run (no triton)"}
    rel = (do_bench_s - events_s) / events_s
    if abs(rel) <= tol:
        return {"agree": True, "rel_diff": rel, "why": ""}
    faster = "do_bench" if rel < 0 else "events"
    why = (f"do_bench {do_bench_s * 1e3:.4f} ms vs events {events_s * 1e3:.4f} ms "
           f"({rel:+.1%}, {faster} faster): ")
    if min(events_s, do_bench_s) < 20e-6:
        why += "a kernel this short is within launch overhead and event resolution; "
    why += ("do_bench clears its own cache buffer (not twice the L2) and times on the "
            "current stream; events here flush 2x L2 on a private stream")
    return {"agree": False, "rel_diff": rel, "why": why}


def ratio(ours_s: float | None, other_s: float | None) -> float | None:
    """Latency ours / other: below 1 ours is faster. None when either is missing."""
    if ours_s is None or other_s is None or not (ours_s > 0 and other_s > 0):
        return None
    if not (math.isfinite(ours_s) and math.isfinite(other_s)):
        return None
    return ours_s / other_s


def build_row(c: GpuCase, ours_s: float | None, peer: dict | None,
              metaschedule_s: float | None = None, notes=()) -> dict:
    """One row of the run: the case, our latency (median s) and rate, the peer's (from
    `measure_peer`: events median, do_bench median, agreement), the ratio ours / peer,
    MetaSchedule's latency and ours / MetaSchedule where given, and the notes: the
    peer's, the case's, what MetaSchedule's result can hold (`metaschedule_note`),
    `notes`, and the timing methods' disagreement."""
    peer = peer or {}
    peer_s = peer.get("latency_s")
    ms_note = metaschedule_note(c) if metaschedule_s is not None else ""
    all_notes = [n for n in [peer.get("note"), *c.notes, ms_note, *notes] if n]
    if peer and not peer.get("agree", True):
        all_notes.append("timing methods disagree: " + peer.get("why", ""))
    return {"case": c.name, "kind": c.kind, "unit": c.unit, "trials": c.trials,
            "ours_s": ours_s, "ours_rate": rate(c, ours_s),
            "peer_s": peer_s, "peer_rate": rate(c, peer_s),
            "peer_do_bench_s": peer.get("do_bench_s"), "peer_agree": peer.get("agree"),
            "ratio": ratio(ours_s, peer_s),
            "metaschedule_s": metaschedule_s,
            "metaschedule_rate": rate(c, metaschedule_s),
            "ratio_vs_metaschedule": ratio(ours_s, metaschedule_s),
            "tf32": peer.get("tf32", c.tf32), "notes": all_notes}


def geomean(values) -> float | None:
    """Geometric mean of the positive, finite values; None when there are none."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def summary(rows: list[dict]) -> dict:
    """Geometric means of ours / peer and ours / MetaSchedule over the rows that have
    them, with how many rows each covers (below 1: ours faster)."""
    vs_peer = [r["ratio"] for r in rows if r.get("ratio") is not None]
    vs_ms = [r["ratio_vs_metaschedule"] for r in rows
             if r.get("ratio_vs_metaschedule") is not None]
    return {"geomean_vs_peer": geomean(vs_peer), "rows_vs_peer": len(vs_peer),
            "geomean_vs_metaschedule": geomean(vs_ms), "rows_vs_metaschedule": len(vs_ms)}


def peak_from_times(gemm_n: int, gemm_s: float, copy_bytes: int, copy_s: float) -> dict:
    """The peak rates of `device_peak` from its two timings: 2 n^3 FLOPs of the GEMM,
    and read + write of the copied bytes."""
    return {"bf16_gemm_tflops": 2.0 * gemm_n ** 3 / gemm_s / 1e12, "gemm_n": gemm_n,
            "gemm_s": gemm_s, "copy_gb_s": 2.0 * copy_bytes / copy_s / 1e9,
            "copy_bytes": copy_bytes, "copy_s": copy_s}


def of_peak(row: dict, peak: dict) -> float | None:
    """Our rate as a fraction of the device's measured peak for the row's unit."""
    key = "bf16_gemm_tflops" if row["unit"] == "TFLOP/s" else "copy_gb_s"
    if row.get("ours_rate") is None or not peak.get(key):
        return None
    return row["ours_rate"] / peak[key]


# ---- CUDA parts (torch inside) ------------------------------------------------------

@contextlib.contextmanager
def precision_flags(tf32: bool = False):
    """TF32 for fp32 matmuls and convolutions on or off (off by default: strict fp32,
    as our kernels), no reduced-precision reductions in 16-bit GEMMs (ours accumulate
    in fp32), and cuDNN's benchmark mode on (torch's best convolution algorithm, picked
    during the warm-up, as we tune ours); the previous settings restored afterwards."""
    import torch

    m, d = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (m.allow_tf32, d.allow_tf32, m.allow_fp16_reduced_precision_reduction,
             m.allow_bf16_reduced_precision_reduction, d.benchmark)
    m.allow_tf32 = d.allow_tf32 = tf32
    m.allow_fp16_reduced_precision_reduction = False
    m.allow_bf16_reduced_precision_reduction = False
    d.benchmark = True
    try:
        yield
    finally:
        (m.allow_tf32, d.allow_tf32, m.allow_fp16_reduced_precision_reduction,
         m.allow_bf16_reduced_precision_reduction, d.benchmark) = saved


def make_inputs(c: GpuCase, device="cuda", seed: int = 0) -> list:
    """The case's inputs (workload order, shapes and dtypes of its specs) as torch
    tensors on `device`, drawn from a standard normal with a seeded generator."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(s.shape, generator=gen, device=device, dtype=torch.float32)
            .to(getattr(torch, s.dtype)) for s in c.inputs]


def time_events(fn, args, repeat: int = 30, warmup: int = 5, flush: bool = True) -> dict:
    """Median seconds of `fn(*args)`: each call between its own pair of CUDA events on
    one private stream, the L2 flushed (a 2x-L2 buffer written) before each
    (`torch_peers.time_cuda`, the older device check's timing), without autograd."""
    import torch

    with torch.no_grad():
        return time_cuda(fn, args, repeat=repeat, warmup=warmup, flush=flush)


def time_do_bench(fn, args) -> float | None:
    """Median seconds of `fn(*args)` by `triton.testing.do_bench`; None without triton."""
    try:
        from triton.testing import do_bench
    except ImportError:
        return None
    import torch

    with torch.no_grad():
        try:
            ms = do_bench(lambda: fn(*args), return_mode="median")
        except TypeError:  # an older triton: quantiles instead of return_mode
            ms = do_bench(lambda: fn(*args), quantiles=[0.5])
    if isinstance(ms, (list, tuple)):
        ms = ms[0]
    return float(ms) / 1e3


def measure_peer(c: GpuCase, device="cuda", seed: int = 0, repeat: int = 30) -> dict:
    """The case's torch peer on seeded inputs: events median (`latency_s`), do_bench
    median, their agreement, the peer's note (its fallback where torch lacks
    out_dtype), the precision flags it ran under, and the rate."""
    import torch

    with precision_flags(c.tf32):
        args = make_inputs(c, device, seed)
        fn, note = resolve_peer(c, device)
        events = time_events(fn, args, repeat=repeat)
        bench_s = time_do_bench(fn, args)
        flags = {"matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                 "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                 "cudnn_benchmark": torch.backends.cudnn.benchmark}
    out = {"latency_s": events["median_s"], "min_s": events["min_s"],
           "repeat": repeat, "do_bench_s": bench_s, "note": note, "tf32": c.tf32,
           "flags": flags, "rate": rate(c, events["median_s"]), "unit": c.unit}
    out.update(agreement(events["median_s"], bench_s))
    del args
    torch.cuda.empty_cache()
    return out


def cpu_peer(case) -> dict:
    """The rehearsal's peer: the same torch callable on the CPU, median wall time."""
    import statistics
    import time

    import torch

    args = make_inputs(case, "cpu")
    fn, note = resolve_peer(case, "cpu")
    times = []
    with torch.no_grad():
        for i in range(13):
            t0 = time.perf_counter()
            fn(*args)
            if i >= 3:
                times.append(time.perf_counter() - t0)
    return {"latency_s": statistics.median(times), "note": note, "agree": True,
            "method": "CPU wall clock (rehearsal)"}


def device_peak(device="cuda", gemm_n: int = PEAK_GEMM_N, copy_bytes: int = COPY_BYTES,
                repeat: int = 20) -> dict:
    """The device's ceilings measured in this run: a bf16 `gemm_n`^3 GEMM's TFLOP/s and
    a device-to-device copy's GB/s (read + write of `copy_bytes`), both timed like the
    peers (`time_events`), with the GPU's name."""
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn((gemm_n, gemm_n), generator=gen, device=device).to(torch.bfloat16)
    b = torch.randn((gemm_n, gemm_n), generator=gen, device=device).to(torch.bfloat16)
    gemm = time_events(torch.mm, [a, b], repeat=repeat)
    del a, b
    src = torch.empty(copy_bytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    copy = time_events(lambda s, d: d.copy_(s), [src, dst], repeat=repeat)
    del src, dst
    torch.cuda.empty_cache()
    out = peak_from_times(gemm_n, gemm["median_s"], copy_bytes, copy["median_s"])
    out["device"] = torch.cuda.get_device_name(device)
    return out
