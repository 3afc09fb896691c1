"""SASS of `wgmma` kernels writing back through TMA stores (`wgmma.store` = "tma") for
sm_90a: HGMMA, TMA loads (UTMALDG) and TMA stores (UTMASTG), the staging writes as
shared-memory stores of a pair each (32-bit `STS` for 16-bit outputs, `STS.64` for
fp32), no global stores (STG) and no local-memory spills (STL / LDL). Five fixed
candidates built from the template (fp16 out with edge tiles; fp32 out, persistent
with more tiles than SMs; bf16 dense + bias + GELU with ragged edges; an fp16 batch
matmul, persistent, in clusters of two; a bf16 cluster-2 GEMM with one consumer) and
two sampled "tma" candidates through the builder's path (`space.apply` -> `build_job`),
all compiled in one subprocess (tests/support/sass_tools.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support.hopper_sass import counts, hopper_sass, mnemonics_of
from support.sass_tools import skip_without_cuobjdump

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"

@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_tma_store_kernels_compile_to_utmastg_without_spills(tmp_path):
    skip_without_cuobjdump()
    mp = str(EX / "mixed_precision.py")
    fixed = [
        (str(EX / "matmul.py"), None, ["dtype=float16", "M=1000", "N=600", "K=256"],
         (128, 128, 64, 4, 2, 8, False, 1, "tma")),
        (mp, "matmul_mp", ["M=4096", "N=4096", "K=1024", "dtype=float16"],
         (128, 128, 64, 4, 2, 8, True, 1, "tma")),
        (mp, "dense_bias_gelu_mp", ["M=2000", "N=1000", "K=1024", "dtype=bfloat16"],
         (128, 128, 64, 4, 2, 8, False, 1, "tma")),
        (str(EX / "batch_matmul.py"), None,
         ["dtype=float16", "B=3", "M=1000", "N=512", "K=200"],
         (128, 128, 64, 3, 2, 8, True, 2, "tma")),
        (str(EX / "matmul.py"), None, ["dtype=bfloat16", "M=1000", "N=504", "K=200"],
         (128, 64, 32, 4, 1, 4, False, 2, "tma")),
    ]
    sampled = [(mp, "dense_bias_gelu_mp", ["M=1000", "N=600", "K=256", "dtype=float16"], 2,
                11, {"wgmma.store": "tma"})]
    got = hopper_sass(fixed, sampled, tmp_path)
    assert len(got) == 7
    for kernel in got:
        ops = counts(kernel, "HGMMA", "UTMALDG", "UTMASTG", "STG", "STL", "LDL")
        assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0 and ops["UTMASTG"] > 0, ops
        assert ops["STG"] == ops["STL"] == ops["LDL"] == 0, ops
    assert [mnemonics_of(k, "STS") for k in got] == [["STS"], ["STS.64"], ["STS"], ["STS"],
                                                     ["STS"], ["STS"], ["STS"]]
