"""SASS of the wgmma sketch's fused kernels (dense + bias + GELU and other epilogues) for
sm_90a: HGMMA, TMA loads (UTMALDG), no local-memory spills (STL / LDL), and the
write-back's column pairs as one store each (32-bit `STG.E` for 16-bit outputs, 64-bit
`STG.E.64` for fp32), no 16-bit stores.

Two fixed candidates (the largest accumulator tiles: 128 x 256 and 256 x 128 with two
consumer warpgroups, fp16 persistent and bf16) are built from the kernel template; sampled ones go
through the builder's path like every candidate (`space.apply` -> `build_job`). The
compiles run in one subprocess (tests/support/sass_tools.py)."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from support.hopper_sass import counts, hopper_sass, mnemonics_of
from support.sass_tools import skip_without_cuobjdump

ROOT = Path(__file__).resolve().parents[2]
MP = str(ROOT / "examples" / "mixed_precision.py")
RESIDUAL = textwrap.dedent('''
    from tvm import te

    import autosched


    @autosched.workload
    def residual(M=999, N=600, K=256):
        R = te.placeholder((M, N), name="R", dtype="float32")
        A = te.placeholder((M, K), name="A", dtype="float16")
        B = te.placeholder((N, K), name="B", dtype="float16")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(
            A[i, k].astype("float32") * B[j, k].astype("float32"), axis=k), name="C")
        y = te.compute((M, N), lambda i, j: te.max(C[i, j] + R[i, j], 0.0), name="y")
        return R, A, B, y
''')

@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_fused_epilogue_kernels_compile_to_hgmma_tma_and_paired_stores(tmp_path):
    """Fixed: dense + bias + GELU fp16 (128 x 256, persistent: 256 tiles on 132
    blocks) and bf16 (256 x 128), both with two consumers; sampled: two of dense + bias
    + GELU fp16 with edge tiles, and one of a residual add + ReLU with fp32 output and
    the residual the first parameter."""
    skip_without_cuobjdump()
    residual = tmp_path / "residual.py"
    residual.write_text(RESIDUAL)
    gelu, big = "dense_bias_gelu_mp", ["M=2000", "N=4096", "K=1024"]
    fixed = [(MP, gelu, [*big, "dtype=float16"], (128, 256, 64, 4, 2, 8, True)),
             (MP, gelu, [*big, "dtype=bfloat16"], (256, 128, 64, 4, 2, 8, False))]
    sampled = [(MP, gelu, ["M=1000", "N=600", "K=256", "dtype=float16"], 2, 3, {}),
               (str(residual), "residual", [], 1, 3, {})]
    got = hopper_sass(fixed, sampled, tmp_path)
    assert len(got) == 5
    for kernel in got:
        ops = counts(kernel, "HGMMA", "UTMALDG", "STL", "LDL")
        assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0, ops
        assert ops["STL"] == ops["LDL"] == 0, ops
    assert [mnemonics_of(k, "STG") for k in got] == [["STG.E"]] * 4 + [["STG.E.64"]]
