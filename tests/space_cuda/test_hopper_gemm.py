"""The `wgmma` sketch (Hopper GEMM on wgmma + TMA, `search_space/cuda/hopper_gemm*.py`):
offered on sm_90a only, for plain 16-bit GEMMs; its decisions always make a valid
kernel; sampled candidates go through the builder's path (`builder.build_job`: JSON
module -> `build_cuda` -> exported library) and their SASS holds HGMMA and TMA loads
(UTMALDG) without local-memory spills.

The compiles run in one subprocess: a process that compiled CUDA has TVM's CUDA runtime
registered for good, which must not leak into other tests."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SM90A = json.dumps({"kind": "cuda", "arch": "sm_90a"})
MATMUL_NT = textwrap.dedent('''
    """C = A @ B^T with B stored [N, K]."""
    from tvm import te

    import autosched


    @autosched.workload
    def matmul_nt(M=1000, N=600, K=200, dtype="bfloat16", out="float32"):
        A = te.placeholder((M, K), name="A", dtype=dtype)
        B = te.placeholder((N, K), name="B", dtype=dtype)
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(
            A[i, k].astype(out) * B[j, k].astype(out), axis=k), name="C")
        return A, B, C
''')


@pytest.fixture(scope="module")
def op_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ops")
    (d / "matmul_nt.py").write_text(MATMUL_NT)
    return {"matmul": str(ROOT / "examples" / "matmul.py"), "matmul_nt": str(d / "matmul_nt.py"),
            "batch": str(ROOT / "examples" / "batch_matmul.py")}


def _space(path: str, args: list[str], target: str):
    from autosched.target import resolve_target
    from autosched.workload import load_tasks
    from search_space import generate_space

    return generate_space(load_tasks(path, arg_items=args)[0], resolve_target(target))


@pytest.mark.parametrize("target", ["cuda", json.dumps({"kind": "cuda", "arch": "sm_80"}),
                                    json.dumps({"kind": "cuda", "arch": "sm_90"})])
def test_absent_without_sm90a(op_files, target):
    space = _space(op_files["matmul"], ["dtype=float16", "M=256", "N=256", "K=64"], target)
    assert "wgmma" not in space.sketches
    assert "tensor_core" in space.sketches


@pytest.mark.parametrize("path, args, offered", [
    ("matmul", ["dtype=float16", "M=256", "N=256", "K=64"], True),
    ("matmul", ["dtype=bfloat16", "M=256", "N=256", "K=64"], True),
    ("matmul_nt", [], True),
    ("matmul", ["dtype=float32", "M=256", "N=256", "K=64"], False),   # not 16-bit
    ("matmul", ["dtype=float16", "M=256", "N=250", "K=64"], False),   # B rows unaligned
    ("matmul_nt", ["K=100"], False),                                  # A rows unaligned
    ("batch", ["dtype=float16"], True),
])
def test_offered_on_sm90a_for_16bit_gemms(op_files, path, args, offered):
    space = _space(op_files[path], args, SM90A)
    assert ("wgmma" in space.sketches) is offered


def test_config_limits():
    from search_space.cuda.hopper_gemm_layout import HopperConfig, config_problem

    assert config_problem(HopperConfig(128, 256, 64, 4, 2)) is None
    assert config_problem(HopperConfig(128, 256, 64, 5, 2)) == \
        "245760 bytes of shared memory (at most 231424)"
    assert config_problem(HopperConfig(256, 256, 64, 2, 2)) == \
        "256 accumulators per thread (at most 128)"
    assert config_problem(HopperConfig(64, 128, 64, 3, 2)) == \
        "BM=64 is not a multiple of 64 per consumer warpgroup"
    assert config_problem(HopperConfig(128, 96, 64, 3, 1)) == \
        "block tile 128x96 outside 64..256 (BN a multiple of 64)"
    assert HopperConfig(128, 256, 64, 4, 2).smem_bytes() == 196608


def test_every_sampled_decision_is_a_valid_kernel(op_files):
    """Decisions alone (no kernel built): 200 draws, each within the budgets, and the
    space samples several distinct configurations."""
    from search_space.cuda.hopper_gemm_layout import HopperConfig, config_problem
    from search_space.decisions import Decider

    space = _space(op_files["matmul"], ["dtype=float16", "M=4000", "N=3000", "K=1024"],
                   SM90A)
    sketch = space.sketches["wgmma"]
    rng, seen = random.Random(0), set()
    for _ in range(200):
        cfg = sketch.decide(Decider(rng=rng))
        assert isinstance(cfg, HopperConfig) and config_problem(cfg, 2) is None, cfg
        seen.add(cfg)
    assert len(seen) > 40
    assert {c.consumers for c in seen} == {1, 2} and {c.bk for c in seen} == {32, 64}
    assert {c.persistent for c in seen} == {False, True}
    assert {c.cluster for c in seen} == {1, 2}   # N = 3000: 24, 16, 12 columns pair (BN > 64)
    assert {c.store for c in seen} == {"registers", "tma"}   # fp16 rows of 6000 bytes



@pytest.mark.parametrize("tiles_m, tiles_n, group", [(32, 24, 8), (7, 5, 4), (3, 10, 8),
                                                      (5, 3, 1), (9, 2, 4)])
def test_every_tile_is_computed_by_one_block(tiles_m, tiles_n, group):
    from search_space.cuda.hopper_gemm_layout import tile_of

    tiles = [tile_of(c, tiles_m, tiles_n, min(group, tiles_m)) for c in range(tiles_m * tiles_n)]
    assert sorted(tiles) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    if group > 1 and tiles_m >= group:   # consecutive blocks walk down a column first
        assert tiles[:2] == [(0, 0), (1, 0)]


@pytest.mark.parametrize("bm, bn, consumers", [(128, 256, 2), (256, 128, 2), (128, 64, 1),
                                               (64, 192, 1)])
def test_every_output_element_is_one_register_of_one_thread(bm, bn, consumers):
    """The write-back's indices (warpgroup, m64 slice, wgmma accumulator layout) cover
    the BM x BN tile exactly once."""
    from search_space.cuda.hopper_gemm_layout import HopperConfig, fragment_at

    cfg = HopperConfig(bm, bn, 64, 2, consumers)
    wm = bm // consumers
    owners = {}
    for wg in range(consumers):
        for j in range(cfg.m_iters):
            for t in range(128):
                for i in range(bn // 8):
                    for h in range(4):
                        r, c = fragment_at(t, i, h)
                        owners.setdefault((wg * wm + j * 64 + r, c), []).append((wg, t))
    assert sorted(owners) == [(r, c) for r in range(bm) for c in range(bn)]
    assert all(len(v) == 1 for v in owners.values())


@pytest.mark.parametrize("tiles, k_tiles, stages, persistent", [
    (768, 16, 4, True), (40, 4, 3, True), (133, 3, 2, True), (264, 5, 6, True),
    (768, 16, 4, False)])
def test_persistent_blocks_cover_every_tile_once_and_carry_the_ring(tiles, k_tiles, stages,
                                                                    persistent):
    """One block per SM (132), block c computing tiles c, c + grid, ...: every tile
    once, each block's valid rounds a prefix, and the chunks it loads numbered 0, 1, ...
    across its tiles, so each slot's uses (and its full / empty mbarrier parities)
    alternate from one tile into the next as within one."""
    from search_space.cuda.hopper_gemm_layout import (
        HopperConfig,
        chunk_of,
        grid_of,
        ring_at,
        tile_at,
    )

    grid = grid_of(tiles, HopperConfig(persistent=persistent))
    assert grid == (min(132, tiles) if persistent else tiles)
    rounds = -(-tiles // grid)
    seen = []
    for cta in range(grid):
        valid = [r for r in range(rounds) if tile_at(cta, r, grid) < tiles]
        assert valid == list(range(len(valid)))
        seen += [tile_at(cta, r, grid) for r in valid]
        chunks = [chunk_of(r, kt, k_tiles) for r in valid for kt in range(k_tiles)]
        assert chunks == list(range(len(chunks)))
        uses = {}
        for g in chunks:
            slot, parity = ring_at(g, stages)
            assert slot == g % stages and parity == uses.get(slot, 0) % 2
            uses[slot] = uses.get(slot, 0) + 1
    assert sorted(seen) == list(range(tiles))


def test_register_pairs_are_adjacent_columns():
    """The write-back stores registers (2h, 2h + 1) of a thread as one word: the same
    row, columns c and c + 1 with c even (so an even row length keeps the word aligned)."""
    from search_space.cuda.hopper_gemm_layout import fragment_at

    for t in range(128):
        for i in range(32):
            for h in (0, 2):
                (r0, c0), (r1, c1) = fragment_at(t, i, h), fragment_at(t, i, h + 1)
                assert (r1, c1) == (r0, c0 + 1) and c0 % 2 == 0


@pytest.mark.parametrize("b_kn", [True, False])
@pytest.mark.parametrize("bm, bn, bk, consumers", [(128, 256, 64, 2), (256, 128, 32, 2),
                                                   (64, 192, 64, 1), (128, 64, 32, 1)])
def test_tma_boxes_and_wgmma_descriptors_agree(b_kn, bm, bn, bk, consumers):
    """What the producer announces is what TMA delivers; every box and every descriptor
    start lies on its swizzle atom (the swizzle is a function of the address); boxes
    are rows of exactly the swizzle span; the K steps of one chunk walk one row
    (K-major) or one box (MN-major); B's descriptor steps one box per 64 columns."""
    from search_space.cuda.hopper_gemm_layout import (
        SWIZZLE_BYTES,
        GemmShape,
        HopperConfig,
        a_rows_at,
        b_at,
        plan,
    )

    cfg = HopperConfig(bm, bn, bk, 3, consumers)
    lay = plan(GemmShape(4000, 3000, 1024, "float16", "float16", b_kn), cfg)
    a, b = lay.a, lay.b
    assert a.boxes * a.box_bytes + b.boxes * b.box_bytes == lay.stage_bytes
    for op in (a, b):
        span = SWIZZLE_BYTES[op.swizzle]
        assert op.box[0] * 2 == span and max(op.box) <= 256
        assert op.sbo * 16 == 8 * span                   # 8 rows of core matrices
        atom = 8 * span
        for s in range(cfg.stages):
            assert all((s * lay.stage_bytes + op.offset + j * op.box_bytes) % atom == 0
                       for j in range(op.boxes))
        assert op.k_step * (bk // 16) == (op.box_bytes if op.mn_major else bk * 2)
    wm = bm // consumers
    assert all(a_rows_at(lay, cfg, s, wg * wm + j * 64, 0) % (8 * SWIZZLE_BYTES[a.swizzle]) == 0
               for s in range(cfg.stages) for wg in range(consumers)
               for j in range(cfg.m_iters))
    assert b_at(lay, 1, 1) == lay.stage_bytes + bm * bk * 2 + b.k_step
    if b_kn:
        assert (b.mn_major, b.boxes, b.ldo * 16) == (1, bn // 64, b.box_bytes)
    else:
        assert (b.mn_major, b.boxes, b.ldo) == (0, 1, 1)


def test_tensor_maps():
    from search_space.cuda.hopper_gemm_layout import GemmShape, HopperConfig, plan

    lay = plan(GemmShape(4000, 3000, 1024, "float16", "float16", True),
               HopperConfig(128, 256, 64, 3, 2))
    assert lay.a.tma_args() == [1024, 4000, 2048, 64, 128, 1, 1, 0, 3, 0, 0]
    assert lay.b.tma_args() == [3000, 1024, 6000, 64, 64, 1, 1, 0, 3, 0, 0]
    lay = plan(GemmShape(1000, 600, 200, "bfloat16", "float32", False),
               HopperConfig(128, 128, 32, 3, 2))
    assert lay.b.tma_args() == [200, 600, 400, 32, 128, 1, 1, 0, 2, 0, 0]
    # batched: a third dimension, one matrix per box
    assert lay.b.tma_args(3) == [200, 600, 3, 400, 240000, 32, 128, 1, 1, 1, 1, 0, 2, 0, 0]

COMPILE = textwrap.dedent("""
    import json, os, random, sys, tempfile
    import tvm
    from autosched.measure.cuda import sass
    from autosched.measure.builder import build_job
    from autosched.target import resolve_target
    from autosched.workload import load_tasks
    from search_space import generate_space

    target = resolve_target(json.dumps({"kind": "cuda", "arch": "sm_90a"}))
    out = []
    for path, args, count in json.loads(sys.argv[1]):
        space = generate_space(load_tasks(path, arg_items=args.split(","))[0], target)
        rng = random.Random(1)
        for _ in range(count):
            cand, mod = space.sample(rng, sketch="wgmma")
            assert space.check(mod) is None
            lib = os.path.join(tempfile.mkdtemp(), "k.so")
            reply = build_job({"mod": tvm.ir.save_json(space.apply(cand)), "out": lib,
                               "target": target.config, "kind": "cuda"})  # the builder's
            assert reply["ok"], reply
            ops = sass.opcode_counts(lib)
            out.append({k: ops.get(k, 0) for k in ("HGMMA", "UTMALDG", "STL", "LDL")})
    print("RESULT", json.dumps(out))
""")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_sampled_candidates_compile_to_hgmma_and_tma(op_files):
    """Sampled candidates of an fp16 GEMM with B [K, N], edge tiles and fp16 output (two),
    a bf16 one with B [N, K], a K tail and fp32 output, and an fp16 batch matmul with
    odd sizes."""
    from autosched.measure.cuda import sass

    if not sass.available():
        pytest.skip("needs cuobjdump")
    problems = [(op_files["matmul"], "dtype=float16,M=4000,N=3000,K=1024", 2),
                (op_files["matmul_nt"], "dtype=bfloat16,M=1000,N=600,K=200", 1),
                (op_files["batch"], "dtype=float16,B=3,M=1000,N=600,K=200", 1)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", COMPILE, json.dumps(problems)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    counts = json.loads(line[len("RESULT "):])
    assert len(counts) == 4
    for ops in counts:
        assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0, ops
        assert ops["STL"] == ops["LDL"] == 0, ops
