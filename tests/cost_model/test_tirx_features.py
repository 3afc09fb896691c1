"""Features of TIRx kernels (cost_model/tirx_read.py, tirx_kernel.py): exact numbers for
two fixed wgmma candidates of a 1024^3 fp16 GEMM, read from the kernels themselves; the
tensor-core, memory and allocation groups filled in mma.sync units; one vector length
for mma.sync and wgmma candidates; the ranker trains and predicts on a mix."""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
H100_SMS = 132
WIDE = {"wgmma.consumers": 2, "wgmma.bm": 128, "wgmma.bn": 256, "wgmma.bk": 64,
        "wgmma.stages": 4, "wgmma.raster": 8, "wgmma.persistent": False}
SMALL = {"wgmma.consumers": 1, "wgmma.bm": 64, "wgmma.bn": 128, "wgmma.bk": 64,
         "wgmma.stages": 2, "wgmma.raster": 4, "wgmma.persistent": False}


@pytest.fixture(scope="module")
def gemm():
    """The task and sm_90a space of C[1024, 1024] = A @ B in fp16 (B stored [K, N])."""
    from autosched.target import resolve_target
    from autosched.workload import load_tasks
    from search_space import generate_space

    task = load_tasks(str(ROOT / "examples" / "matmul.py"),
                      arg_items=["dtype=float16", "M=1024", "N=1024", "K=1024"])[0]
    space = generate_space(task, resolve_target(json.dumps({"kind": "cuda",
                                                            "arch": "sm_90a"})))
    return task, space


def _kernel(space, decisions):
    from search_space import Candidate

    cand = Candidate.make("wgmma", decisions)
    return cand, space.apply(cand)


def test_two_wgmma_candidates_read_from_their_kernels(gemm):
    from cost_model.tirx_kernel import summary
    from cost_model.tirx_read import read_tirx

    _, space = gemm
    got = summary(read_tirx(_kernel(space, WIDE)[1]["main"]), H100_SMS)
    # 2 consumer warpgroups + 1 producer; per K step of 64: 4 k16 steps x 1 m64 slice per
    # consumer; one box of A and 4 of B (B[K, N] is loaded in 64-column boxes); a
    # 48 KiB stage x 4 plus 8 barriers; 8 x 4 tiles, one CTA per SM by shared memory
    assert got == {
        "threads": 384, "warpgroups": 3, "producers": 1, "consumers": 2, "stages": 4,
        "wgmma_per_kstep": 8, "wgmma_per_tile": 128, "wgmma_n": 256, "k_steps": 16,
        "tma_loads_per_kstep": 5, "tma_bytes_per_stage": (128 + 256) * 64 * 2,
        "tma_stores": 0, "stmatrix": 0, "smem_bytes": 4 * 49152 + 8 * 8, "mbarriers": 8,
        "setmaxnreg": 1.0, "consumer_regs": 232, "producer_regs": 40, "raster": 8,
        "block_m": 128, "block_n": 256, "block_k": 64, "tiles": 32, "ctas_per_sm": 1,
        "waves": 32 / 132, "wave_efficiency": 32 / 132, "writeback_bytes": 4}
    got = summary(read_tirx(_kernel(space, SMALL)[1]["main"]), H100_SMS)
    # one consumer (no setmaxnreg: 256 threads may hold 255 registers each); 16 x 8
    # tiles walked in groups of 4 tile rows; 4 CTAs per SM fit 48 KiB of shared memory
    assert got == {
        "threads": 256, "warpgroups": 2, "producers": 1, "consumers": 1, "stages": 2,
        "wgmma_per_kstep": 4, "wgmma_per_tile": 64, "wgmma_n": 128, "k_steps": 16,
        "tma_loads_per_kstep": 3, "tma_bytes_per_stage": (64 + 128) * 64 * 2,
        "tma_stores": 0, "stmatrix": 0, "smem_bytes": 2 * 24576 + 4 * 8, "mbarriers": 4,
        "setmaxnreg": 0.0, "consumer_regs": 0, "producer_regs": 0, "raster": 4,
        "block_m": 64, "block_n": 128, "block_k": 64, "tiles": 128, "ctas_per_sm": 4,
        "waves": 128 / 528, "wave_efficiency": 128 / 528, "writeback_bytes": 4}
    # without the target's SM count there are no waves
    got = summary(read_tirx(_kernel(space, SMALL)[1]["main"]))
    assert (got["tiles"], got["ctas_per_sm"], got["waves"], got["wave_efficiency"]) == \
        (128, 0, 0, 0)


def test_the_shared_groups_hold_mma_sync_units(gemm):
    """The wide candidate in the vector: one wgmma m64n256k16 is 32 m16n8k16 per warp,
    64 of them per consumer thread; 256 consumer threads; shared and local memory as
    allocated; TMA as 16-byte accesses, the write-back one pair (4 bytes) per store."""
    from cost_model.features import FeatureConfig, extract, feature_names

    task, space = gemm
    cand, mod = _kernel(space, WIDE)
    cfg = FeatureConfig(target_kind="cuda", sm_count=H100_SMS)
    v = dict(zip(feature_names(cfg), extract(task, cand, mod, cfg)))

    def raw(name):
        return round(2 ** v[name] - 1, 6)

    assert {n: raw(f"tc.{n}") for n in ("mma_per_thread", "mma_per_block",
                                        "ldmatrix_per_thread", "warps", "stages",
                                        "smem_pipelined")} == {
        "mma_per_thread": 64 * 32, "mma_per_block": 64 * 32 * 256, "ldmatrix_per_thread": 0,
        "warps": 12, "stages": 4, "smem_pipelined": 4 * 49152}
    assert v["tc.async"] == 1.0
    # the same work as an mma.sync tile: m16n8k16 instructions x 32 lanes x 4096 flops
    assert raw("tc.mma_per_block") / 32 * 2 * 16 * 8 * 16 == 2 * 128 * 256 * 1024
    assert (raw("prog.alloc_shared"), raw("prog.alloc_local")) == (196672, 128 * 4 + 2 * 8)
    assert {n: raw(f"mem.{n}") for n in ("vec_global_read", "vec_global_write",
                                         "vec_shared_read", "vec_shared_write",
                                         "global_reads_max", "global_reads_mean")} == {
        "vec_global_read": 16, "vec_global_write": 4, "vec_shared_read": 0,
        "vec_shared_write": 16, "global_reads_max": 1, "global_reads_mean": 1}
    assert (raw("tirx.block_m"), raw("tirx.block_n"), raw("tirx.block_k")) == (128, 256, 64)
    assert v["tirx.setmaxnreg"] == 1.0 and v["tirx.wave_efficiency"] == 32 / 132


def test_mma_sync_and_wgmma_vectors_have_one_length(gemm):
    from cost_model.features import extract, feature_names
    from cost_model.tirx_kernel import NAMES
    from cost_model.tirx_read import read_tirx

    task, space = gemm
    cand, mod = space.sample(random.Random(0), sketch="tensor_core")
    assert read_tirx(mod["main"]) is None and read_tirx(task.func) is None
    names = feature_names()
    plain = extract(task, cand, mod)
    wgmma = extract(task, *_kernel(space, SMALL))
    assert len(plain) == len(wgmma) == len(names)
    assert [plain[names.index(f"tirx.{n}")] for n in NAMES] == [0.0] * len(NAMES)
    assert plain[names.index("tc.mma_per_thread")] > 0
    assert plain[names.index("tc.ldmatrix_per_thread")] > 0
    assert wgmma[names.index("tirx.wgmma_per_tile")] == math.log2(65)


def test_the_ranker_trains_and_predicts_on_a_mix(gemm):
    """Six mma.sync and six wgmma candidates, the wgmma ones measured faster: the model
    trained on them scores every wgmma candidate above every mma.sync one."""
    from cost_model.xgb_ranker import XGBRanker

    task, space = gemm
    rng = random.Random(3)
    pairs = [space.sample(rng, sketch=s) for s in ["tensor_core"] * 6 + ["wgmma"] * 6]
    cands, mods = [c for c, _ in pairs], [m for _, m in pairs]
    model = XGBRanker(rounds=20, seed=0)
    feats = model.features(task, cands, mods)
    assert feats.shape == (12, model.num_features) and np.isfinite(feats).all()
    model.add_group(task.key, feats, np.array([2.0 + i / 10 for i in range(6)] +
                                              [1.0 + i / 10 for i in range(6)]))
    model.fit()
    scores = model.predict(task, cands, mods)
    assert model.trained and scores.shape == (12,) and np.isfinite(scores).all()
    assert scores[6:].min() > scores[:6].max()


def test_a_persistent_kernel_counts_the_tiles_its_guard_admits():
    """4096 x 4096 in 128 x 256 tiles: 512 tiles, on 132 persistent CTAs that loop 4 times
    (528 turns, 16 of them past the last tile) or on 512 CTAs: the same tiles and waves."""
    from autosched.target import resolve_target
    from autosched.workload import load_tasks
    from cost_model.tirx_kernel import summary
    from cost_model.tirx_read import read_tirx
    from search_space import generate_space

    task = load_tasks(str(ROOT / "examples" / "matmul.py"),
                      arg_items=["dtype=float16", "M=4096", "N=4096", "K=64"])[0]
    space = generate_space(task, resolve_target(json.dumps({"kind": "cuda",
                                                            "arch": "sm_90a"})))
    for persistent, grid in ((True, 132), (False, 512)):
        decisions = dict(WIDE, **{"wgmma.persistent": persistent})
        kernel = read_tirx(_kernel(space, decisions)[1]["main"])
        got = summary(kernel, H100_SMS)
        assert kernel.grid == grid
        assert (got["tiles"], got["k_steps"], got["wgmma_per_tile"], got["raster"]) == \
            (512, 1, 8, 8)
        assert (got["waves"], got["wave_efficiency"]) == (512 / 132, 512 / (4 * 132))


def test_the_sm_count_travels_with_the_feature_config():
    from cost_model.features import FEATURE_VERSION, FeatureConfig

    cfg = FeatureConfig(target_kind="cuda", sm_count=H100_SMS)
    assert FEATURE_VERSION == "6" and cfg.to_json()["sm_count"] == H100_SMS
    assert FeatureConfig.from_json(cfg.to_json()) == cfg
    old = dict(cfg.to_json(), version="5")
    with pytest.raises(ValueError, match="features version '5', this build has '6'"):
        FeatureConfig.from_json(old)
    del old["sm_count"]
    assert FeatureConfig.from_json(dict(old, version="6")).sm_count == 0
