"""Clusters of two thread blocks in the `wgmma` sketch (`hopper_gemm_layout.unit_at`,
`tile_of_unit`, `grid_of`): every tile computed once, partners on adjacent tile columns
of one tile row (sharing the A panel) in every round, persistent or not; the decision
offered only where the tile columns pair up; A's chunk split into one multicast box per
block; the kernel declares the cluster (TVM's launch carries its dimension)."""
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


def _walk(tiles_m, tiles_n, batch, group, persistent, cluster, sms=132):
    """{cta: [(round, batch, tile row, tile column)]} of the kernel's tile walk."""
    from search_space.cuda.hopper_gemm_layout import (
        HopperConfig,
        grid_of,
        tile_of_unit,
        unit_at,
    )

    cfg = HopperConfig(persistent=persistent, cluster=cluster)
    total = tiles_m * tiles_n * batch
    grid = grid_of(total, cfg, sms)
    units = tiles_m * tiles_n // cluster
    rounds = -(-total // grid)
    walk = {}
    for cta in range(grid):
        walk[cta] = []
        for r in range(rounds):
            u = unit_at(cta, r, grid, cluster)
            if u < batch * units:
                tm, tn = tile_of_unit(u % units, cta % cluster, tiles_m, tiles_n,
                                      min(group, tiles_m), cluster)
                walk[cta].append((r, u // units, tm, tn))
    return grid, rounds, walk


@pytest.mark.parametrize("tiles_m, tiles_n, batch, group", [
    (32, 24, 1, 8), (7, 6, 1, 4), (3, 10, 1, 8), (5, 2, 3, 1), (9, 4, 2, 4), (1, 2, 1, 8),
    (33, 12, 1, 8)])
@pytest.mark.parametrize("persistent", [False, True])
def test_clusters_cover_every_tile_once_with_partners_adjacent(tiles_m, tiles_n, batch,
                                                               group, persistent):
    """Grids of whole clusters (even; persistent: at most 132 blocks); each tile once;
    in every round the two blocks of a cluster compute columns 2u and 2u + 1 of one
    tile row of one matrix, or both compute nothing; each block's valid rounds are a
    prefix (so its ring of slots runs on as without clusters)."""
    grid, rounds, walk = _walk(tiles_m, tiles_n, batch, group, persistent, 2)
    total = tiles_m * tiles_n * batch
    assert grid % 2 == 0 and grid == (min(132, total) if persistent else total)
    seen = sorted((b, tm, tn) for tiles in walk.values() for _, b, tm, tn in tiles)
    assert seen == [(b, m, n) for b in range(batch) for m in range(tiles_m)
                    for n in range(tiles_n)]
    for cta in range(0, grid, 2):
        left, right = walk[cta], walk[cta + 1]
        assert [r for r, *_ in left] == [r for r, *_ in right] == list(range(len(left)))
        for (_, b0, m0, n0), (_, b1, m1, n1) in zip(left, right):
            assert (b1, m1, n1) == (b0, m0, n0 + 1) and n0 % 2 == 0
    assert max(len(t) for t in walk.values()) == rounds


def test_cluster_of_one_walks_as_before():
    """With cluster = 1 the walk is `tile_at` / `tile_of` unchanged."""
    from search_space.cuda.hopper_gemm_layout import tile_at, tile_of

    grid, _, walk = _walk(7, 5, 2, 4, True, 1)
    for cta, tiles in walk.items():
        for r, b, tm, tn in tiles:
            t = tile_at(cta, r, grid)
            assert (b, tm, tn) == (t // 35, *tile_of(t % 35, 7, 5, 4))


def test_raster_groups_keep_clusters_down_a_column_of_units():
    """Consecutive clusters walk down a raster group's rows of one unit column: blocks
    0..3 compute (0, 0), (0, 1), (1, 0), (1, 1)."""
    _, _, walk = _walk(16, 8, 1, 8, False, 2)
    assert [walk[c][0][2:] for c in range(6)] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0),
                                                  (2, 1)]


def test_cluster_limits():
    from search_space.cuda.hopper_gemm_layout import (
        GemmShape,
        HopperConfig,
        config_problem,
        problem_of,
    )

    assert config_problem(HopperConfig(cluster=3)) == "cluster=3 is not 1 or 2"
    cfg = HopperConfig(128, 128, 64, 4, 2, 8, False, 2)
    assert problem_of(GemmShape(1000, 520, 256, "float16", "float16", True), cfg) == \
        "5 tile columns do not pair into clusters of 2"
    assert problem_of(GemmShape(1000, 512, 256, "float16", "float16", True), cfg) is None
    with pytest.raises(ValueError, match="5 tile columns"):
        from search_space.cuda.hopper_gemm import hopper_gemm

        hopper_gemm(GemmShape(1000, 520, 256, "float16", "float16", True), cfg)


@pytest.mark.parametrize("b_kn", [True, False])
@pytest.mark.parametrize("bm, bn, bk, consumers", [(128, 256, 64, 2), (256, 128, 32, 2),
                                                   (64, 192, 64, 1), (64, 64, 32, 1),
                                                   (128, 64, 32, 1)])
def test_multicast_boxes_partition_the_a_chunk(b_kn, bm, bn, bk, consumers):
    """With clusters of two, A's chunk travels as two boxes of BM / 2 rows, box r loaded
    by the block of rank r at rows [r BM / 2, (r + 1) BM / 2) of the tile, landing
    where the whole-tile layout puts those rows (the wgmma descriptors stay as without
    clusters) and on a swizzle atom; the boxes' bytes and B's are the whole stage, the
    bytes each block's "full" barrier expects; its "empty" barrier collects every
    consumer warp of both blocks."""
    from search_space.cuda.hopper_gemm_layout import (
        SWIZZLE_BYTES,
        GemmShape,
        HopperConfig,
        a_rows_at,
        a_share_at,
        empty_arrivals,
        plan,
    )

    shape = GemmShape(4000, 3000, 1024, "float16", "float16", b_kn)
    cfg = HopperConfig(bm, bn, bk, 3, consumers, cluster=2)
    one = plan(shape, HopperConfig(bm, bn, bk, 3, consumers))
    lay = plan(shape, cfg)
    a = lay.a
    assert (a.boxes, a.box, a.box_bytes) == (2, (bk, bm // 2), bm // 2 * bk * 2)
    assert (lay.b, lay.stage_bytes, a.offset) == (one.b, one.stage_bytes, one.a.offset)
    assert (a.swizzle, a.ldo, a.sbo, a.k_step) == (one.a.swizzle, one.a.ldo, one.a.sbo,
                                                   one.a.k_step)
    atom = 8 * SWIZZLE_BYTES[a.swizzle]
    for stage in range(cfg.stages):
        spans = []
        for rank in range(2):
            at, row = a_share_at(lay, stage, rank)
            assert at == a_rows_at(lay, cfg, stage, row, 0) and at % atom == 0
            assert row == rank * bm // 2
            spans.append((at, at + a.box_bytes))
        base = stage * lay.stage_bytes + a.offset
        assert spans == [(base, base + a.box_bytes), (base + a.box_bytes, base + bm * bk * 2)]
    assert a.boxes * a.box_bytes + lay.b.boxes * lay.b.box_bytes == lay.stage_bytes
    assert a.tma_args()[3:5] == [bk, bm // 2] and one.a.tma_args()[3:5] == [bk, bm]
    assert (empty_arrivals(cfg), empty_arrivals(HopperConfig(consumers=consumers))) == \
        (8 * consumers, 4 * consumers)


def _sketch(n):
    from autosched.target import resolve_target
    from autosched.workload import load_tasks
    from search_space import generate_space

    task = load_tasks(str(ROOT / "examples" / "matmul.py"),
                      arg_items=["dtype=float16", "M=512", f"N={n}", "K=128"])[0]
    return generate_space(task, resolve_target(SM90A)).sketches["wgmma"]


@pytest.mark.parametrize("n, pairs", [(192, {64: False, 128: True, 192: False, 256: False}),
                                      (1088, {64: False, 128: False, 192: True, 256: False})])
def test_cluster_of_two_is_drawn_only_where_tile_columns_pair(n, pairs):
    """N = 192: 3, 2, 1, 1 tile columns for BN = 64, 128, 192, 256; N = 1088: 17, 9,
    6, 5. 300 draws: cluster 2 exactly with the BNs that pair."""
    from search_space.cuda.hopper_gemm_layout import problem_of
    from search_space.decisions import Decider

    sketch, rng = _sketch(n), random.Random(5)
    drawn = {}
    for _ in range(300):
        cfg = sketch.decide(Decider(rng=rng))
        assert problem_of(sketch.shape, cfg) is None
        drawn.setdefault(cfg.bn, set()).add(cfg.cluster)
    assert {bn: 2 in cl for bn, cl in drawn.items()} == \
        {bn: ok for bn, ok in pairs.items() if bn in drawn}
    assert all(1 in cl for cl in drawn.values())
    assert any(2 in cl for cl in drawn.values())


def test_a_candidate_recorded_without_the_cluster_decision_replays_with_one():
    """Strict replay of the decisions a record made before clusters existed: cluster 1,
    and no decision the record lacks is made."""
    from search_space.decisions import Decider

    old = {"wgmma.consumers": 2, "wgmma.bm": 128, "wgmma.bn": 128, "wgmma.bk": 64,
           "wgmma.stages": 4, "wgmma.raster": 8, "wgmma.persistent": True}
    decide = Decider(old, strict=True)
    cfg = _sketch(1024).decide(decide)
    assert (cfg.cluster, cfg.bn, cfg.persistent) == (1, 128, True)
    assert set(decide.made) == set(old)
    assert _sketch(1024).decide(Decider(dict(old, **{"wgmma.cluster": 2}))).cluster == 2


LAUNCH = textwrap.dedent("""
    import re, sys, tvm
    from search_space.cuda.hopper_gemm import hopper_gemm
    from search_space.cuda.hopper_gemm_layout import GemmShape, HopperConfig

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    for cluster in (1, 2):
        func = hopper_gemm(GemmShape(1000, 600, 256, "float16", "float16", True),
                           HopperConfig(128, 64, 64, 4, 2, 8, True, cluster))
        mod = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline="tirx")
        src = mod.mod.imports[0].inspect_source()
        lib = sys.argv[1] + f"/k{cluster}.so"
        mod.export_library(lib)
        tags = sorted(set(re.findall(rb"clusterCtaIdx\\.[xyz]", open(lib, "rb").read())))
        print("RESULT", cluster, "%cluster_ctarank" in src, [t.decode() for t in tags])
""")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cluster_kernel_carries_its_launch_dimension(tmp_path):
    """The cluster-2 kernel reads its rank in the cluster and its library carries the
    `clusterCtaIdx.x` launch tag (TVM's launch sets the cluster dimension from it); the
    cluster-1 kernel neither."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", LAUNCH, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines == ["RESULT 1 False []", "RESULT 2 True ['clusterCtaIdx.x']"]
