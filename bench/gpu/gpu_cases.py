"""The cases of the closed-loop GPU run (bench/gpu/closed_loop.py): what autosched tunes
with `autosched tune --target cuda` on the device, and the torch kernel that computes
exactly the same thing from the same inputs, so the ratio between them means something.

A case names an example op file, a workload in it and its shape arguments; it also
spells out, in plain Python, the workload's argument specs (name, shape, dtype, inputs
first, in the workload's order) and its work (FLOPs for a contraction, bytes moved for a
memory-bound operator: every input read once and every output written once). These are
checked against `autosched.workload.load_tasks` by tests/bench/test_fair_peers.py, and
they let the device script make a peer's inputs with torch alone.

What each workload computes, and its peer (see examples/matmul.py, mixed_precision.py):

- `matmul_mp` / `batch_matmul_mp`: 16-bit inputs, fp32 products accumulated in fp32, fp32
  output. The peer is one cuBLAS call with an fp32 output: `torch.mm(a, b,
  out_dtype=torch.float32)` (`torch.bmm` likewise; both since torch 2.8, CUDA only, so
  torch 2.11 on the device has them). `(a @ b).float()` would be two kernels and an fp16
  rounding of the result; it is used only where `out_dtype` is refused, and the row says so.
- `matmul` fp32: fp32 in, out and accumulation; the peer runs with TF32 off.
- `conv2d_nhwc_mp`: NHWC data, OHWI weights, fp16 in, fp32 accumulation and output. cuDNN
  has no fp32 output for fp16 inputs: the peer is the channels-last fp16 convolution (fp32
  accumulation inside cuDNN) writing fp16, half the output bytes of ours; the note says so.
- `softmax`, `layer_norm` fp32: torch.softmax and F.layer_norm (biased variance, eps
  1e-5, as the workload).

MetaSchedule is suggested on the fp32 GEMM and softmax, where its space is the one it
is strong in: its tensor-core candidates of `matmul_mp` do not build in TVM 0.27 (see
MS_TENSOR_CORE_NOTE), so on the 16-bit cases it would be SIMT only (`metaschedule_note`).

Trials and time shares are a suggestion for a run with about 8 minutes of device time in
all (`SUGGESTED_TOTAL_S`); `suggested_split()` lays it out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

MP = "examples/mixed_precision.py"
SOFTMAX = "examples/softmax.py"
MATMUL = "examples/matmul.py"
CONTRACTION, MEMORY = "contraction", "memory"
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
# about 8 minutes of device time for the whole run: tuning, peers, peak and MetaSchedule
SUGGESTED_TOTAL_S = 480.0
FP32_OUT_NOTE = ("one cuBLAS call, 16-bit inputs, fp32 accumulation and fp32 output "
                 "(out_dtype=torch.float32), as ours")
FALLBACK_NOTE = ("torch here refuses out_dtype: (a @ b).float(), two kernels and an fp16 "
                 "rounding of the result; the peer's time includes the cast")


@dataclass(frozen=True)
class Spec:
    """One kernel argument: name, shape, dtype (as the workload's TensorSpec)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ITEMSIZE[self.dtype]


@dataclass(frozen=True)
class GpuCase:
    """A case of the closed-loop run; see the module docstring.

    `peer` names the torch expression of `PEERS`; `peer_note` says why it is exactly our
    computation (or where it is not). `tf32` False: fp32 matmul / conv peers run with
    TF32 off. `trials` and `budget_s` (device seconds for our tuning of it) are a
    suggestion; `metaschedule` marks the cases suggested for MetaSchedule at the same
    trial count, `metaschedule_s` its suggested share; `notes` go into the case's row."""

    name: str
    op_file: str
    workload: str
    args: dict
    inputs: tuple[Spec, ...]
    outputs: tuple[Spec, ...]
    kind: str
    flops: float
    peer: str
    peer_note: str
    trials: int
    budget_s: float
    metaschedule: bool = False
    metaschedule_s: float = 0.0
    tf32: bool = False
    notes: tuple[str, ...] = ()

    def arg_items(self) -> list[str]:
        """The `--arg K=V` items (and `load_tasks`' arg_items) of the case."""
        return [f"{k}={v}" for k, v in self.args.items()]

    @property
    def bytes_moved(self) -> int:
        """Every input read once plus every output written once."""
        return sum(s.nbytes for s in self.inputs + self.outputs)

    @property
    def unit(self) -> str:
        """The rate the case is reported in: TFLOP/s or GB/s."""
        return "TFLOP/s" if self.kind == CONTRACTION else "GB/s"

    def work(self) -> float:
        """What the rate divides by seconds: TFLOP (contractions) or GB (memory-bound)."""
        return self.flops / 1e12 if self.kind == CONTRACTION else self.bytes_moved / 1e9


# Seen here (2026-12-06, TVM 0.27, sm_90a, nvcc): MetaSchedule's tensor-core candidates
# of matmul_mp fail to build, through build_cuda and a plain tvm.compile alike ("Check
# failed: source_buffer->dtype.WithLanes(1) == scalar_dtype (T.float16 vs. T.float32):
# tvm_access_ptr element type must match the source buffer"); its SIMT ones build.
MS_TENSOR_CORE_NOTE = ("MetaSchedule's tensor-core candidates of this workload do not "
                       "build in TVM 0.27 (tvm_access_ptr dtype check): MetaSchedule "
                       "here is SIMT only")


def _gemm(name, M, N, K, dtype, trials, budget_s):
    return GpuCase(name, MP, "matmul_mp", {"M": M, "N": N, "K": K, "dtype": dtype},
                   (Spec("A", (M, K), dtype), Spec("B", (K, N), dtype)),
                   (Spec("C", (M, N), "float32"),), CONTRACTION, 2.0 * M * N * K,
                   "mm_fp32_out", FP32_OUT_NOTE, trials, budget_s)


def _conv(N, H, W, C, F, R, S):
    OH, OW = H + 2 - R + 1, W + 2 - S + 1
    return GpuCase(
        "tc_conv2d_nhwc_fp16_resnet50_3x3_64", MP, "conv2d_nhwc_mp",
        {"N": N, "H": H, "W": W, "C": C, "F": F},
        (Spec("data", (N, H, W, C), "float16"), Spec("weight", (F, R, S, C), "float16")),
        (Spec("conv", (N, OH, OW, F), "float32"),), CONTRACTION,
        2.0 * N * OH * OW * F * R * S * C, "conv2d_nhwc_fp16",
        "cuDNN channels-last fp16 convolution (fp32 accumulation): cuDNN has no fp32 "
        "output for fp16 inputs, so it writes fp16, half our output bytes; no cast added",
        64, 30.0)


CASES: tuple[GpuCase, ...] = (
    _gemm("tc_matmul_fp16_4096", 4096, 4096, 4096, "float16", 100, 45.0),
    _gemm("tc_matmul_bf16_4096", 4096, 4096, 4096, "bfloat16", 100, 40.0),
    _gemm("tc_matmul_fp16_8192", 8192, 8192, 8192, "float16", 100, 30.0),
    _gemm("tc_matmul_bf16_8192", 8192, 8192, 8192, "bfloat16", 100, 30.0),
    _gemm("tc_matmul_fp16_4000x3000x1024", 4000, 3000, 1024, "float16", 100, 40.0),
    GpuCase("matmul_fp32_4096", MATMUL, "matmul",
            {"M": 4096, "N": 4096, "K": 4096, "dtype": "float32"},
            (Spec("A", (4096, 4096), "float32"), Spec("B", (4096, 4096), "float32")),
            (Spec("C", (4096, 4096), "float32"),), CONTRACTION, 2.0 * 4096 ** 3,
            "mm", "cuBLAS SGEMM with TF32 off (strict fp32, as ours)", 100, 55.0,
            True, 60.0),
    GpuCase("tc_batch_matmul_fp16_32x1024x1024x128", MP, "batch_matmul_mp",
            {"B": 32, "M": 1024, "N": 1024, "K": 128},
            (Spec("A", (32, 1024, 128), "float16"), Spec("B", (32, 128, 1024), "float16")),
            (Spec("C", (32, 1024, 1024), "float32"),), CONTRACTION,
            2.0 * 32 * 1024 * 1024 * 128, "bmm_fp32_out",
            FP32_OUT_NOTE.replace("cuBLAS call", "batched cuBLAS call"), 64, 35.0),
    GpuCase("layer_norm_8192x1024", SOFTMAX, "layer_norm", {"M": 8192, "N": 1024},
            (Spec("x", (8192, 1024), "float32"), Spec("gamma", (1024,), "float32"),
             Spec("beta", (1024,), "float32")),
            (Spec("layer_norm", (8192, 1024), "float32"),), MEMORY, 0.0, "layer_norm",
            "F.layer_norm over the last axis, fp32, biased variance, eps 1e-5, as ours",
            32, 20.0),
    GpuCase("softmax_4096", SOFTMAX, "softmax", {"M": 4096, "N": 4096},
            (Spec("x", (4096, 4096), "float32"),),
            (Spec("softmax", (4096, 4096), "float32"),), MEMORY, 0.0, "softmax",
            "torch.softmax over the last axis, fp32, as ours", 32, 20.0, True, 25.0),
    _conv(8, 56, 56, 64, 64, 3, 3),
)
# peers (10 cases, events + do_bench) and device_peak(): a suggested share
PEERS_AND_PEAK_S = 30.0


def rehearsal_cases():
    """Small CPU cases with the same steps as the GPU ones (fp32: CPU torch peers)."""
    n = 128
    return (
        GpuCase("rehearse_matmul_fp32_128", MATMUL, "matmul",
                {"M": n, "N": n, "K": n, "dtype": "float32"},
                (Spec("A", (n, n), "float32"), Spec("B", (n, n), "float32")),
                (Spec("C", (n, n), "float32"),), CONTRACTION, 2.0 * n ** 3, "mm",
                "torch.mm, fp32", 8, 30.0, True, 40.0),
        GpuCase("rehearse_softmax_256", SOFTMAX, "softmax", {"M": 256, "N": 256},
                (Spec("x", (256, 256), "float32"),), (Spec("softmax", (256, 256), "float32"),),
                MEMORY, 0.0, "softmax", "torch.softmax, fp32", 6, 30.0),
    )


def metaschedule_note(c: GpuCase) -> str:
    """What a MetaSchedule result of the case can and cannot hold: SIMT only for the
    16-bit tensor-core workloads (fp16: its tensor-core candidates do not build here;
    bf16: TVM 0.27 has no bf16 mma intrinsic); "" otherwise."""
    if c.workload not in ("matmul_mp", "batch_matmul_mp", "conv2d_nhwc_mp"):
        return ""
    if c.inputs[0].dtype == "bfloat16":
        return "MetaSchedule has no bf16 tensor-core intrinsic in TVM 0.27: SIMT only"
    return MS_TENSOR_CORE_NOTE if c.workload == "matmul_mp" else (
        "MetaSchedule's tensor-core candidates of matmul_mp do not build in TVM 0.27; "
        "not checked for this workload")


def case(name: str) -> GpuCase:
    """The case called `name`; KeyError naming the known ones otherwise."""
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"unknown case {name!r}; known: {', '.join(c.name for c in CASES)}")


def suggested_split(cases=CASES) -> dict:
    """The suggested trials and device seconds per case (ours, MetaSchedule), the peers'
    and peak's share, and the total against SUGGESTED_TOTAL_S. A suggestion only: a
    trial's cost on the device (nvcc builds on its cores, runs) is not measured here."""
    rows = [{"case": c.name, "trials": c.trials, "ours_s": c.budget_s,
             "metaschedule_trials": c.trials if c.metaschedule else 0,
             "metaschedule_s": c.metaschedule_s} for c in cases]
    total = sum(r["ours_s"] + r["metaschedule_s"] for r in rows) + PEERS_AND_PEAK_S
    return {"rows": rows, "peers_and_peak_s": PEERS_AND_PEAK_S, "total_s": total,
            "limit_s": SUGGESTED_TOTAL_S, "suggestion": True}


# ---- the torch peers (torch imported inside: this module loads without it) ----------

def _mm(a, b):
    import torch

    return torch.mm(a, b)


def _mm_fp32_out(a, b):
    import torch

    return torch.mm(a, b, out_dtype=torch.float32)


def _bmm_fp32_out(a, b):
    import torch

    return torch.bmm(a, b, out_dtype=torch.float32)


def _cast_after(a, b):
    return (a @ b).float()


def _softmax(x):
    import torch

    return torch.softmax(x, dim=-1)


def _layer_norm(x, gamma, beta):
    import torch.nn.functional as F

    return F.layer_norm(x, x.shape[-1:], gamma, beta, 1e-5)


def _conv2d_nhwc_fp16(data, weight):
    """NHWC data and OHWI weights seen as NCHW / OIHW channels-last views (no copy):
    cuDNN's NHWC kernels; the result viewed back as NHWC."""
    import torch.nn.functional as F

    y = F.conv2d(data.permute(0, 3, 1, 2), weight.permute(0, 3, 1, 2), padding=1)
    return y.permute(0, 2, 3, 1)


PEERS = {"mm": _mm, "mm_fp32_out": _mm_fp32_out, "bmm_fp32_out": _bmm_fp32_out,
         "softmax": _softmax, "layer_norm": _layer_norm, "conv2d_nhwc_fp16": _conv2d_nhwc_fp16}
# the peers that need torch's out_dtype, and what runs where torch refuses it
NEEDS_OUT_DTYPE = {"mm_fp32_out": _cast_after, "bmm_fp32_out": _cast_after}


def resolve_peer(c: GpuCase, device) -> tuple:
    """(callable, note) of the case's peer on `device`: for the out_dtype peers, a tiny
    call on the device first; where torch refuses out_dtype there, the two-kernel
    fallback with FALLBACK_NOTE."""
    fn = PEERS[c.peer]
    if c.peer not in NEEDS_OUT_DTYPE:
        return fn, c.peer_note
    import torch

    dtype = getattr(torch, c.inputs[0].dtype)
    shape = (2, 16, 16) if len(c.inputs[0].shape) == 3 else (16, 16)
    probe = torch.ones(shape, dtype=dtype, device=device)
    try:
        out = fn(probe, probe)
        if out.dtype != torch.float32:
            raise TypeError(f"out_dtype gave {out.dtype}")
    except (TypeError, RuntimeError, NotImplementedError) as e:
        return NEEDS_OUT_DTYPE[c.peer], f"{FALLBACK_NOTE} ({str(e).splitlines()[0][:120]})"
    return fn, c.peer_note
