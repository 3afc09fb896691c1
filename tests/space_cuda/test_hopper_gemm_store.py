"""The TMA-store write-back of the `wgmma` sketch (`hopper_gemm_store.py`, decision
`wgmma.store`), checked on the CPU: every (thread, register pair) of every consumer
warpgroup lands once in the staging area, at the place the TMA unit reads for that
output element through the 128-byte swizzle (defined here independently, on the byte
address), with no shared-memory bank conflicts; the output's tensor-map arguments; the
shared-memory budget with the staging area; where the decision is offered; replay of
records made before it; and the kernel's TIRx holding the stores and barriers."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SM90A = json.dumps({"kind": "cuda", "arch": "sm_90a"})


def _tma_swizzle_128(offset: int) -> int:
    """CU_TENSOR_MAP_SWIZZLE_128B on an offset within a 1024-byte aligned box: address
    bits [4, 7) XORed with bits [7, 10)."""
    return offset ^ (((offset >> 7) & 7) << 4)


@pytest.mark.parametrize("bm, bn, consumers, out_bytes", [
    (128, 256, 2, 2), (256, 128, 2, 4), (128, 64, 1, 4), (64, 192, 1, 2), (128, 128, 2, 4)])
def test_every_register_pair_lands_once_where_tma_reads_it(bm, bn, consumers, out_bytes):
    """Tile (tm, tn) = (1, 2) at a staging base after a ring: each pair's offset is
    its element's place in its box (box_coords + row / column inside the box, swizzled),
    aligned to the pair's width; the pairs tile the staging area exactly; boxes are
    1024-byte aligned and inside the area."""
    from search_space.cuda.hopper_gemm_layout import HopperConfig, fragment_at
    from search_space.cuda.hopper_gemm_store import (
        BOX_ROWS,
        SPAN,
        box_at,
        box_coords,
        box_cols,
        staged_at,
    )

    cfg = HopperConfig(bm, bn, 64, 2, consumers, store="tma")
    base, size = 3 * 4096 * 8, cfg.staging_bytes(out_bytes)
    assert size == bm * bn * out_bytes
    cols, wm, tm, tn = box_cols(out_bytes), bm // consumers, 1, 2
    bytes_seen = []
    for wg in range(consumers):
        for j in range(cfg.m_iters):
            for q in range(bn // cols):
                at = box_at(base, cfg, out_bytes, wg, j, q)
                assert at % 1024 == 0 and base <= at and at + BOX_ROWS * SPAN <= base + size
            for t in range(128):
                for i in range(bn // 8):
                    for h in (0, 2):
                        r, c = fragment_at(t, i, h)
                        off = staged_at(base, cfg, out_bytes, wg, j, r, c)
                        assert off % (2 * out_bytes) == 0
                        row, col = tm * bm + wg * wm + j * 64 + r, tn * bn + c
                        q = c // cols
                        c0, r0 = box_coords(cfg, out_bytes, tm, tn, wg, j, q)
                        assert 0 <= row - r0 < BOX_ROWS and 0 <= col - c0 < cols
                        inside = (row - r0) * SPAN + (col - c0) * out_bytes
                        assert off == box_at(base, cfg, out_bytes, wg, j, q) + \
                            _tma_swizzle_128(inside)
                        bytes_seen += range(off, off + 2 * out_bytes)
    assert sorted(bytes_seen) == list(range(base, base + size))


@pytest.mark.parametrize("out_bytes", [2, 4])
def test_pair_stores_spread_over_every_bank(out_bytes):
    """One store instruction of a warp (fixed warpgroup, m64 block, i, h): 32-bit pairs
    hit each of the 32 banks once (one wavefront); the 64-bit pairs' 256 bytes hit each
    bank exactly twice (two wavefronts, the least 256 bytes take). Without the swizzle
    the rows, 128 bytes apart, would share 4 (or 8) banks eight ways."""
    from search_space.cuda.hopper_gemm_layout import HopperConfig, fragment_at
    from search_space.cuda.hopper_gemm_store import staged_at

    cfg = HopperConfig(128, 128, 64, 2, 2, store="tma")
    for warp in range(4):
        for i in range(16):
            for h in (0, 2):
                banks = []
                for t in range(warp * 32, warp * 32 + 32):
                    off = staged_at(0, cfg, out_bytes, 1, 0, *fragment_at(t, i, h))
                    banks += [(off // 4 + w) % 32 for w in range(out_bytes // 2)]
                assert sorted(banks) == sorted(list(range(32)) * (out_bytes // 2))


def test_output_tensor_maps():
    from search_space.cuda.hopper_gemm_layout import GemmShape
    from search_space.cuda.hopper_gemm_store import c_tma_args

    assert c_tma_args(GemmShape(4000, 3000, 1024, "float16", "float16", True), 2) == \
        [3000, 4000, 6000, 64, 64, 1, 1, 0, 3, 0, 0]
    assert c_tma_args(GemmShape(999, 600, 256, "float16", "float32", False), 4) == \
        [600, 999, 2400, 32, 64, 1, 1, 0, 3, 0, 0]
    assert c_tma_args(GemmShape(1000, 600, 200, "bfloat16", "bfloat16", True, 3), 2) == \
        [600, 1000, 3, 1200, 1200000, 64, 64, 1, 1, 1, 1, 0, 3, 0, 0]


def test_staging_counts_in_the_shared_memory_budget():
    from search_space.cuda.hopper_gemm_layout import (
        GemmShape,
        HopperConfig,
        config_problem,
        plan,
        problem_of,
    )

    tma = HopperConfig(128, 256, 64, 3, 2, store="tma")
    assert tma.smem_bytes(2) == 3 * 49152 + 65536 and HopperConfig(128, 256).smem_bytes(2) \
        == 4 * 49152
    assert config_problem(tma, 2) is None
    assert config_problem(tma, 4) == "278528 bytes of shared memory (at most 231424)"
    assert config_problem(HopperConfig(store="stmatrix")) == \
        "store=stmatrix is not registers or tma"
    odd = GemmShape(1000, 602, 256, "float16", "float32", False)   # 2408-byte rows
    assert problem_of(odd, HopperConfig(store="tma")) == \
        "rows of the output are not 16-byte aligned (TMA stores)"
    assert problem_of(odd, HopperConfig()) is None
    lay = plan(GemmShape(1000, 600, 256, "float16", "float32", True), tma)
    assert (lay.ring, lay.staging, lay.total) == (3 * 49152, 131072, 3 * 49152 + 131072)
    assert plan(odd, HopperConfig(128, 256, 64, 3, 2)).total == 3 * 49152


def _space(args, path="matmul.py"):
    from autosched.target import resolve_target
    from autosched.workload import load_tasks
    from search_space import generate_space

    names = ["dense_bias_gelu_mp"] if path == "mixed_precision.py" else None
    task = load_tasks(str(ROOT / "examples" / path), names=names, arg_items=args)[0]
    return generate_space(task, resolve_target(SM90A)).sketches["wgmma"]


@pytest.mark.parametrize("path, args, offered", [
    ("matmul.py", ["dtype=float16", "M=1000", "N=600", "K=256"], True),
    ("mixed_precision.py", ["M=1000", "N=1004", "K=256"], False),   # 2008-byte fp16 rows
    ("mixed_precision.py", ["M=1000", "N=1000", "K=256"], True),
    ("matmul.py", ["dtype=bfloat16", "M=512", "N=64", "K=128"], True),
])
def test_tma_is_drawn_only_where_it_fits(path, args, offered):
    """300 draws: every one valid for its shape (staging included), "tma" drawn exactly
    where the output's rows are 16-byte aligned."""
    from search_space.cuda.hopper_gemm_layout import problem_of
    from search_space.decisions import Decider

    sketch, rng = _space(args, path), random.Random(5)
    stores = set()
    for _ in range(300):
        cfg = sketch.decide(Decider(rng=rng))
        assert problem_of(sketch.shape, cfg) is None, cfg
        stores.add(cfg.store)
    assert stores == ({"registers", "tma"} if offered else {"registers"})


def test_a_candidate_recorded_without_the_store_decision_replays_from_registers():
    from search_space.decisions import Decider

    old = {"wgmma.consumers": 2, "wgmma.bm": 128, "wgmma.bn": 128, "wgmma.bk": 64,
           "wgmma.stages": 3, "wgmma.raster": 8, "wgmma.persistent": True,
           "wgmma.cluster": 1}
    sketch = _space(["dtype=float16", "M=1000", "N=600", "K=256"])
    decide = Decider(old, strict=True)
    assert sketch.decide(decide).store == "registers" and set(decide.made) == set(old)
    assert sketch.decide(Decider(dict(old, **{"wgmma.store": "tma"}))).store == "tma"


def test_kernel_holds_the_tma_store_sequence():
    """The TIRx of a persistent batched TMA-store kernel (480 tiles on 132 blocks): an
    output tensor map, one TMA store per box (2 warpgroups x 4 spans of 32 fp32
    columns), the proxy fence, the warpgroup's named barrier, the commit, the wait for
    the stores to read the area before the next tile and the last wait."""
    from search_space.cuda.hopper_gemm import hopper_gemm
    from search_space.cuda.hopper_gemm_layout import GemmShape, HopperConfig

    func = hopper_gemm(GemmShape(4000, 600, 256, "float16", "float32", True, 3),
                       HopperConfig(128, 128, 64, 3, 2, 8, True, 1, "tma"))
    text = func.script()
    assert text.count("runtime.cuTensorMapEncodeTiled") == 3
    assert text.count("T.ptx.cp(T.reinterpret(T.handle().ty, T.address_of(c_map))") == 1
    assert "for q in T.unroll(4)" in text
    assert text.count('T.ptx.fence("proxy", "async", "shared::cta", "")') == 2
    assert text.count('T.ptx.bar(T.Cast("uint32", 1 + tid // 128), T.uint32(128), "", '
                      '"sync", "")') == 2
    assert text.count('T.ptx.cp("async", "bulk", "commit_group", "")') == 1
    assert text.count('T.ptx.cp(0, "async", "bulk", "wait_group", "read", "")') == 1
    assert text.count('T.ptx.cp(0, "async", "bulk", "wait_group", "", "")') == 1
