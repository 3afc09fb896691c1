"""SASS of `wgmma` kernels launched in clusters of two for sm_90a: HGMMA, TMA loads
(UTMALDG) with A's boxes multicast (`UTMALDG.MULTICAST`), the consumers' arrivals on
the partner's barriers (`SYNCS.ARRIVE.TRANS64.RED`, the remote form), no local-memory
spills (STL / LDL), and the cluster launch tag in the library. Four fixed cluster-2
kernels built from the template (fp16 persistent 128 x 256 with two consumers, bf16
with one consumer and a K tail, an fp16 batch matmul, persistent, and a bf16 dense +
bias + GELU, 256 x 128) and two sampled cluster-2 candidates through the builder's
path (`space.apply` -> `build_job`), all compiled in one subprocess
(tests/support/sass_tools.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support.hopper_sass import counts, hopper_sass
from support.sass_tools import skip_without_cuobjdump

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"

@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cluster_kernels_compile_to_hgmma_and_tma_without_spills(tmp_path):
    skip_without_cuobjdump()
    fixed = [
        (str(EX / "matmul.py"), None, ["dtype=float16", "M=4096", "N=4096", "K=1024"],
         (128, 256, 64, 4, 2, 8, True, 2)),
        (str(EX / "matmul.py"), None, ["dtype=bfloat16", "M=1000", "N=600", "K=200"],
         (128, 64, 32, 3, 1, 4, False, 2)),
        (str(EX / "batch_matmul.py"), None,
         ["dtype=float16", "B=3", "M=1000", "N=512", "K=200"], (128, 128, 64, 4, 2, 8, True, 2)),
        (str(EX / "mixed_precision.py"), "dense_bias_gelu_mp",
         ["M=2000", "N=4096", "K=1024", "dtype=bfloat16"], (256, 128, 64, 4, 2, 8, False, 2)),
    ]
    sampled = [(str(EX / "matmul.py"), None, ["dtype=float16", "M=4000", "N=3000", "K=1024"],
                2, 7, {"wgmma.cluster": 2})]
    got = hopper_sass(fixed, sampled, tmp_path)
    assert len(got) == 6
    for kernel in got:
        ops = counts(kernel, "HGMMA", "UTMALDG", "STL", "LDL", "UTMALDG.MULTICAST",
                     "SYNCS.ARRIVE.TRANS64.RED")
        assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0, ops
        assert ops["STL"] == ops["LDL"] == 0, ops
        assert kernel["cluster_tag"] is True and ops["UTMALDG.MULTICAST"] > 0, ops
        assert ops["SYNCS.ARRIVE.TRANS64.RED"] > 0, ops
