"""Memory-access features (cost_model/memory_access.py): vector widths follow the
candidate's vector decisions exactly, and a three-kernel softmax reads its input three
times where the feature vector says so."""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cuda():
    from autosched.target import resolve_target

    return resolve_target(json.dumps({"kind": "cuda", "arch": "sm_80"}))


def test_vector_widths_follow_the_copy_decisions_of_the_tile_sketch():
    from autosched.workload import load_tasks
    from cost_model.ir_walk import walk
    from cost_model.memory_access import vector_bytes
    from search_space import generate_space

    task = next(iter(load_tasks(str(ROOT / "examples" / "matmul.py"))))
    space = generate_space(task, _cuda())
    rng, seen = random.Random(1), 0
    for _ in range(8):
        cand, mod = space.sample(rng, sketch="tile")
        d = dict(cand.decisions)
        widest = 4 * max(d["C.A.vector"], d["C.B.vector"])   # float32 lanes
        got = vector_bytes(walk(mod["main"]))
        expected_global = widest if widest > 4 else 0        # one lane is not a vector
        assert got == {"vec_global_read": expected_global, "vec_global_write": 0,
                       "vec_shared_read": 0, "vec_shared_write": expected_global}, d
        seen += expected_global > 0
    assert seen >= 4


def test_a_softmax_in_three_kernels_reads_its_input_three_times():
    from autosched.workload import load_tasks
    from cost_model.features import extract, feature_names
    from cost_model.ir_walk import walk
    from cost_model.memory_access import global_reads
    from search_space import generate_space

    task = next(iter(load_tasks(str(ROOT / "examples" / "softmax.py"))))
    space = generate_space(task, _cuda())
    cand, mod = space.sample(random.Random(0), sketch="simple")
    reads = global_reads(walk(mod["main"]))
    # row max, row sum and the output each read x; the sum and the output read the max
    assert reads == {"x": 3, "row_max": 3, "row_sum": 2}
    v = dict(zip(feature_names(), extract(task, cand, mod)))
    assert v["mem.global_reads_max"] == math.log2(1 + 3)
    assert v["mem.global_reads_mean"] == math.log2(1 + 8 / 3)
    assert len(v) == len(feature_names())
