"""A first bundle round of an fp16 GEMM for sm_90a spends most of its libraries on tensor
cores: `autosched tune --runner bundle:DIR` builds the round (nvcc, no GPU needed) and
the SASS of each library is read for tensor-core instructions: HMMA (mma.sync, the
`tensor_core` sketch) or HGMMA (wgmma, the Hopper `wgmma` sketch). The round's proposals
come from an untrained model, so it is the sketches' priors (the CUDA rules favour the
tensor-core sketches of a 16-bit GEMM) that decide what the round holds."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.sass_tools import skip_without_cuobjdump

ROOT = Path(__file__).resolve().parents[2]
MP = str(ROOT / "examples" / "mixed_precision.py")
TRIALS = 8


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_most_libraries_of_a_first_fp16_round_hold_hmma(tmp_path):
    from autosched.measure.cuda import sass
    from autosched.measure.bundle.format import MANIFEST, read_json

    skip_without_cuobjdump()
    bundle = tmp_path / "b"
    proc = subprocess.run(
        [sys.executable, "-m", "autosched", "tune", MP, "--workload", "matmul_mp",
         "--arg", "M=512", "--arg", "N=512", "--arg", "K=512",
         "--target", json.dumps({"kind": "cuda", "arch": "sm_90a"}),
         "--trials", str(TRIALS), "--seed", "0", "--runner", f"bundle:{bundle}",
         "--work-dir", str(tmp_path / "w"), "--db", f"sqlite:///{tmp_path}/t.db"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    entries = read_json(str(bundle / MANIFEST))["candidates"]
    assert len(entries) == TRIALS
    assert entries[0]["candidate"]["sketch"] == "default"   # the floor, measured first
    built = [e for e in entries if e["lib"]]
    counts = {e["id"]: sass.opcode_counts(str(bundle / e["lib"])) for e in built}
    hmma = {i: c["HMMA"] + c["HGMMA"] for i, c in counts.items()}
    # tensor cores exactly where a tensor-core sketch scheduled the GEMM, and of its kind
    for e in built:
        sketch, c = e["candidate"]["sketch"], counts[e["id"]]
        assert (c["HMMA"] > 0, c["HGMMA"] > 0) == (sketch == "tensor_core",
                                                   sketch == "wgmma"), e
    with_hmma = sum(1 for n in hmma.values() if n > 0)
    # every candidate built; all but the default and two SIMT candidates hold HMMA or
    # HGMMA (the two tensor-core sketches share the round; without the priors, seed 0
    # gave 2 of 6 built)
    assert (len(built), with_hmma) == (TRIALS, TRIALS - 3)
    assert 2 * with_hmma >= len(built)
    assert {"simple", "tile"} & {e["candidate"]["sketch"] for e in built}
