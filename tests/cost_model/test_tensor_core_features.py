"""Tensor-core features (cost_model/tensor_core.py): exact counts for one known
tensor-core candidate, zeros for a schedule without tensor cores."""
from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tensor_core_features_of_a_known_candidate_and_of_a_plain_schedule():
    from autosched.target import resolve_target
    from autosched.workload import load_tasks
    from cost_model.features import extract, feature_names
    from cost_model.tensor_core import NAMES, tensor_core_vector
    from search_space import Candidate, generate_space

    task = next(t for t in load_tasks(str(ROOT / "examples" / "mixed_precision.py"),
                                      arg_items=["M=512", "N=512", "K=512"]))
    target = resolve_target(json.dumps({"kind": "cuda", "arch": "sm_80",
                                        "max_dynamic_shared_memory_per_block": 166912}))
    space = generate_space(task, target)
    cand = Candidate.make("tensor_core", {
        "C.warps_m": 2, "C.warps_n": 4, "C.frags_m": 4, "C.frags_n": 2, "C.k_chunk": 64,
        "C.stages": 3, "C.vector": 8, "C.raster": 2, "C.unroll": 0, "C.frag_buffers": 1,
        "C.out_vector": 4})
    mod = space.apply(cand)
    got = dict(zip(NAMES, (round(2 ** v - 1) if n != "async" else v
                           for n, v in zip(NAMES, tensor_core_vector(mod)))))
    # per warp 4 x 2 fragments, 32 steps of k, two m16n8k16 per fragment pair; 8 warps
    assert got == {"mma_per_thread": 4 * 2 * 32 * 2, "mma_per_block": 512 * 256,
                   "ldmatrix_per_thread": (4 + 2) * 32, "warps": 8, "stages": 3,
                   "async": 1.0, "smem_pipelined": 3 * (128 * 64 + 64 * 128) * 2}
    v = extract(task, cand, mod)
    names = feature_names()
    assert len(v) == len(names)
    assert v[names.index("tc.warps")] == math.log2(9)
    plain, _ = space.sample(__import__("random").Random(0), sketch="tile")
    assert tensor_core_vector(space.apply(plain)) == [0.0] * len(NAMES)
