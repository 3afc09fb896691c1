"""A Hopper (sm_90a) GEMM kernel on `wgmma` fed by TMA, written in TVM's TIRx.

C[M, N] = A[M, K] x B[K, N] (or x B[N, K]^T), for each of `batch` matrices when batched
(C[b] = A[b] x B[b], the batch a third TMA dimension and a factor of the grid), A and B
in fp16 or bf16, accumulated in fp32 registers, written as fp32, fp16 or bf16 (C, or
an elementwise epilogue of C). One thread block computes a BM x BN tile of C at a
time (tiles are walked in groups of `raster` tile rows, so neighbouring blocks share A
and B panels in L2): one block per tile, or, when `persistent`, one block per SM, block
c computing tiles c, c + grid, ... with its ring of shared slots and their mbarrier
phases running on from one tile into the next (`chunk_of`, `ring_at`), so the producer
loads the next tile while the consumers write the last one back. With `cluster` = 2 the
blocks launch in clusters of two (`T.cta_id_in_cluster`: TVM sets the launch's cluster
dimension), the partners computing adjacent tile columns of one tile row (the same A
panel; `unit_at`, `tile_of_unit`), offered where the tile columns pair up. Each
block's producer loads half of each A chunk (`a_share_at`) and TMA multicasts it into
both blocks' slots (`.multicast::cluster`, CTA mask 0b11), each block's "full" barrier
still expecting the whole chunk's bytes; a slot's "empty" barrier collects the consumer
warps of both blocks (`empty_arrivals`: each warp arrives on both, the partner's
mapped with `mapa`), so neither producer refills a slot its partner still reads; the
blocks meet at a cluster barrier after the barriers' initialisation and before either
exits (a partner may still arrive on the other's barriers):

- warp specialisation: `consumers` (1 or 2) consumer warpgroups and one producer
  warpgroup (the last 128 threads); with two consumers the producer lowers its register
  budget (`setmaxnreg.dec`) so the consumers can raise theirs (`setmaxnreg.inc`) above
  the 168 a 384-thread launch leaves each thread (with one consumer, 256 threads, every
  thread may already hold 255 and ptxas ignores setmaxnreg);
- one producer thread issues TMA loads (`cp.async.bulk.tensor`) of each BM x BK chunk of
  A and BK x BN chunk of B into a ring of `stages` shared buffers, swizzled by the TMA
  unit as wgmma reads them (128-byte swizzle; 64-byte for K-major tiles with BK = 32).
  Each slot has a "full" mbarrier (the producer arrives with the byte count the TMA
  completes) and an "empty" one (each consumer warp arrives once its wgmmas that read
  the slot are done: one wgmma group stays in flight, so a slot is released one chunk
  later, a tile's last one after its final wait when another tile follows);
- consumer warpgroup w computes rows [w * BM / consumers, ...) of the tile with
  `wgmma.mma_async.m64n{BN}k16` (shared-memory descriptors for A and B; B K-major for
  B[N, K], MN-major for B[K, N]), one per 64 rows and 16-wide K step;
- write-back: each thread stores its accumulators straight from registers to the
  output with bounds predicates, each through the task's epilogue when it has one
  (`hopper_gemm_epilogue.py`: bias, activation, casts, a residual... composed into one
  expression, its operands read from global memory, C never stored); a thread's
  registers hold pairs of adjacent columns, stored as one 32-bit word (16-bit outputs)
  or 64-bit word (fp32) where the row length is even (`pairs_fit`); or, with `store` =
  "tma", the pairs go to a swizzled staging area in shared memory and the TMA unit
  stores the tile from there (`hopper_gemm_store.py`: boxes, barriers, the output's
  tensor map; edge tiles clipped by TMA, the epilogue's operand indices clamped).

Addresses, boxes, descriptors, the tile walk and the accumulator layout come from
`hopper_gemm_layout.py` (plain Python, checked on the CPU).

Odd sizes: TMA fills a box's out-of-bounds elements with zeros (so the K tail adds
nothing and edge tiles compute on zeros), and the predicated stores drop what lies
outside C. TMA needs every global row to start 16-byte aligned, so the row length of A
and B (K, and N or K) must be a multiple of 8 elements (`tma_compatible`).

The kernel is TIRx, compiled with `tvm.compile(..., tir_pipeline="tirx")`; the function
carries `PIPELINE_ATTR` = "tirx" so the CUDA builder knows (`measure/cuda/compiler.py`).
"""
from __future__ import annotations

from .common import PIPELINE_ATTR

from .hopper_gemm_epilogue import PACKED, Epilogue, identity, pair_value, pairs_fit
from .hopper_gemm_layout import (
    INPUTS,
    SMS,
    WG,
    GemmShape,
    HopperConfig,
    a_rows_at,
    a_share_at,
    b_at,
    chunk_of,
    empty_arrivals,
    fragment_at,
    grid_of,
    plan,
    problem_of,
    ring_at,
    tile_of_unit,
    unit_at,
)
from .hopper_gemm_store import (
    box_at,
    box_coords,
    box_cols,
    c_tma_args,
    named_barrier,
    staged_at,
)

PRODUCER_REGS, CONSUMER_REGS = 40, 232   # setmaxnreg: 128 x (40 + 2 x 232) <= 65536
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
MULTICAST = ".multicast::cluster"   # TMA_LOAD's form writing each block of a CTA mask
TMA_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"


def _ceil(a: int, b: int) -> int:
    return (a + b - 1) // b


def hopper_gemm(shape: GemmShape, cfg: HopperConfig, epilogue: Epilogue | None = None,
                params: list | None = None, sms: int = SMS):
    """The TIRx PrimFunc of the kernel (see the module docstring), writing
    `epilogue`'s value of each element of C to the output (C itself when None), with
    parameters (A, B, C) or as `params` orders them (`_in_task_order`); ValueError when
    `cfg` or `shape` cannot be built."""
    import tvm
    from tvm.script import tirx as T

    problem = problem_of(shape, cfg)
    if problem is not None:
        raise ValueError(problem)
    M, N, K = shape.m, shape.n, shape.k
    BM, BN, BK, S, NC = cfg.bm, cfg.bn, cfg.bk, cfg.stages, cfg.consumers
    in_dt, out_dt, ab = shape.in_dtype, shape.out_dtype, INPUTS[shape.in_dtype]
    tiles_m, tiles_n, KT = _ceil(M, BM), _ceil(N, BN), _ceil(K, BK)
    G = min(cfg.raster, tiles_m)
    MI, ACC = cfg.m_iters, BN // 2
    WM = BM // NC                                   # rows per consumer warpgroup
    lay = plan(shape, cfg)
    pa, pb = lay.a, lay.b
    BATCH, TILES = shape.batch, tiles_m * tiles_n
    lead = (BATCH,) if BATCH > 1 else ()           # a batch is a third TMA dimension
    rank = len(lead) + 2
    a_args, b_args = pa.tma_args(BATCH), pb.tma_args(BATCH)
    tma_load = TMA_LOAD.replace("2d", f"{rank}d")
    CL = cfg.cluster
    MASK = (1 << CL) - 1                   # multicast to every block of the cluster

    def at(bb, *coords):
        """TMA coordinates, innermost first, with the batch last when batched."""
        return [*coords, bb] if lead else list(coords)
    wgmma = f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.{ab}.{ab}"
    stage_bytes, smem_total, b_boxes = lay.stage_bytes, lay.total, pb.boxes
    value = (epilogue or identity(out_dt)).value
    out_bits = tvm.DataType(out_dt).bits
    PAIRS = pairs_fit(N, out_dt)
    TOTAL = TILES * BATCH
    GRID = grid_of(TOTAL, cfg, sms)
    ROUNDS = _ceil(TOTAL, GRID)           # tiles a block computes, at most
    UNITS, TOTAL_UNITS = TILES // CL, TOTAL // CL   # of CL tiles, one per block of a cluster
    TMA_ST, OB = cfg.store == "tma", out_bits // 8   # TMA stores (`hopper_gemm_store.py`)
    STG, SPANS = lay.ring, BN // box_cols(OB)        # the staging area after the ring
    c_args, tma_store = c_tma_args(shape, OB), TMA_STORE.replace("2d", f"{rank}d")

    def wg_sync(wg):
        """The named barrier of consumer warpgroup `wg`'s threads."""
        bar, count = named_barrier(wg)
        T.evaluate(T.ptx["bar.sync"](tvm.tirx.Cast("uint32", bar), T.uint32(count)))

    def edge(x, last, ragged):
        """An operand index kept inside the output where tiles overhang it (TMA clips
        the stores there; the epilogue must not read past its operands)."""
        return T.min(x, last) if ragged and epilogue is not None and epilogue.operands \
            else x

    def accs(acc, j):
        return [acc[j * ACC + i] for i in range(ACC)]

    def release(bars, slot, peer_bar):
        """One consumer warp's arrival on the "empty" barrier of `slot`: its block's,
        or with clusters every block's (mapped into each through `mapa`)."""
        if CL == 1:
            T.evaluate(T.ptx.mbarrier.arrive.shared.b64(T.address_of(bars[slot]),
                                                        T.uint32(1)))
        else:
            for p in range(CL):
                T.evaluate(T.ptx.mapa.shared__cluster.u32(
                    peer_bar[0], T.cuda.cvta_generic_to_shared(T.address_of(bars[slot])),
                    T.uint32(p)))
                T.evaluate(T.ptx.mbarrier.arrive.shared__cluster.b64(peer_bar[0]))

    # fmt: off
    @T.prim_func(check_well_formed=False)   # checked once its operands are parameters
    def main(a_ptr: T.handle, b_ptr: T.handle, c_ptr: T.handle):
        A = T.match_buffer(a_ptr, (*lead, M, K), in_dt, align=16)
        B = T.match_buffer(b_ptr, (*lead, *pb.tensor), in_dt, align=16)
        C = T.match_buffer(c_ptr, (*lead, M, N), out_dt, align=16)
        a_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", a_map, in_dt, rank, A.data, *a_args)
        b_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", b_map, in_dt, rank, B.data, *b_args)
        if TMA_ST:
            c_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
            T.call_packed("runtime.cuTensorMapEncodeTiled", c_map, out_dt, rank, C.data,
                          *c_args)

        T.device_entry()
        cta = T.cta_id([GRID])
        if CL > 1:   # a cluster launch: blocks 2c and 2c + 1 form cluster c
            cl_rank = T.cta_id_in_cluster([CL])
        else:
            cl_rank = T.meta_var(0)
        tid = T.thread_id([WG * (NC + 1)])
        smem = T.alloc_buffer((smem_total,), "uint8", scope="shared.dyn", align=1024)
        bars = T.alloc_buffer((2 * S,), "uint64", scope="shared", align=8)
        acc = T.alloc_buffer((MI * ACC,), "float32", scope="local")
        if CL > 1:   # a barrier's address in a partner's shared memory
            peer_bar = T.alloc_buffer((1,), "uint32", scope="local")
        else:
            peer_bar = T.meta_var(None)
        desc_a: T.uint64
        desc_b: T.uint64

        wg = T.meta_var(tid // WG)
        c_flat = T.decl_buffer((BATCH * M * N,), out_dt, data=C.data)
        c_pairs = T.decl_buffer((BATCH * M * N // 2,), PACKED[out_bits], data=C.data)
        staged = T.decl_buffer((smem_total // (2 * OB),), PACKED[out_bits], data=smem.data,
                               scope="shared.dyn")

        if tid == 0:
            for s in T.unroll(S):
                T.ptx.mbarrier.init.shared.b64(T.address_of(bars[s]), T.uint32(1))
                T.ptx.mbarrier.init.shared.b64(T.address_of(bars[S + s]),
                                               T.uint32(empty_arrivals(cfg)))
        T.ptx.fence.proxy.async_.shared__cta()
        if CL > 1:   # partners' barriers initialised before any multicast or arrival
            T.ptx.fence.mbarrier_init.release.cluster()
            T.cuda.cluster_sync()
        else:
            T.cuda.cta_sync()

        if wg == NC:
            if NC > 1:
                T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
            if tid % WG == 0:
                for rt in T.serial(ROUNDS):
                    unit = T.meta_var(unit_at(cta, rt, GRID, CL))
                    bb = T.meta_var(unit // UNITS)
                    tm, tn = T.meta_var(tile_of_unit(unit % UNITS, cl_rank, tiles_m, tiles_n,
                                                     G, CL, T.min))
                    if unit < TOTAL_UNITS:
                        for kt in T.serial(KT):
                            s, ph = T.meta_var(ring_at(chunk_of(rt, kt, KT), S))
                            if chunk_of(rt, kt, KT) >= S:   # slot's previous chunk released
                                T.cuda.mbarrier_wait(T.address_of(bars[S + s]), 1 - ph)
                            T.ptx.mbarrier.arrive.expect_tx.shared.b64(
                                T.address_of(bars[s]), T.uint32(stage_bytes))
                            if CL > 1:   # this block's box of A, to both blocks
                                at_, row = T.meta_var(a_share_at(lay, s, cl_rank))
                                T.ptx[tma_load + MULTICAST](
                                    T.address_of(smem[at_]), T.address_of(a_map),
                                    *at(bb, kt * BK, tm * BM + row), T.address_of(bars[s]),
                                    T.uint16(MASK))
                            else:
                                T.ptx[tma_load](T.address_of(smem[s * stage_bytes]),
                                                T.address_of(a_map),
                                                *at(bb, kt * BK, tm * BM),
                                                T.address_of(bars[s]))
                            for j in T.unroll(b_boxes):
                                if pb.mn_major == 1:   # box j: columns [64 j, 64 j + 64)
                                    T.ptx[tma_load](
                                        T.address_of(smem[b_at(lay, s, 0) + j * pb.box_bytes]),
                                        T.address_of(b_map),
                                        *at(bb, tn * BN + j * pb.box[0], kt * BK),
                                        T.address_of(bars[s]))
                                else:
                                    T.ptx[tma_load](T.address_of(smem[b_at(lay, s, 0)]),
                                                    T.address_of(b_map),
                                                    *at(bb, kt * BK, tn * BN),
                                                    T.address_of(bars[s]))
        else:
            if NC > 1:
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](CONSUMER_REGS)
            for rt in T.serial(ROUNDS):
                unit = T.meta_var(unit_at(cta, rt, GRID, CL))
                bb = T.meta_var(unit // UNITS)
                tm, tn = T.meta_var(tile_of_unit(unit % UNITS, cl_rank, tiles_m, tiles_n, G,
                                                 CL, T.min))
                if unit < TOTAL_UNITS:
                    for i in T.serial(MI * ACC):
                        acc[i] = T.float32(0)
                    for kt in T.serial(KT):
                        s, ph = T.meta_var(ring_at(chunk_of(rt, kt, KT), S))
                        T.cuda.mbarrier_wait(T.address_of(bars[s]), ph)
                        T.ptx.wgmma.fence.sync.aligned()
                        for kk in T.unroll(BK // 16):
                            T.cuda.wgmma.encode_matrix_descriptor(
                                T.address_of(desc_b), T.address_of(smem[b_at(lay, s, kk)]),
                                pb.ldo, pb.sbo, pb.swizzle)
                            for j in T.unroll(MI):
                                T.cuda.wgmma.encode_matrix_descriptor(
                                    T.address_of(desc_a), T.address_of(
                                        smem[a_rows_at(lay, cfg, s, wg * WM + j * 64, kk)]),
                                    pa.ldo, pa.sbo, pa.swizzle)
                                T.ptx[wgmma](*accs(acc, j), desc_a, desc_b, T.bool(True), 1,
                                             1, 0, pb.mn_major)
                        T.ptx.wgmma.commit_group.sync.aligned()
                        # one group stays in flight: the previous chunk's is done, its
                        # slot free
                        T.ptx.wgmma.wait_group.sync.aligned(1)
                        if kt > 0 and tid % 32 == 0:
                            release(bars, S + (chunk_of(rt, kt, KT) + S - 1) % S, peer_bar)
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    if ROUNDS > 1 and tid % 32 == 0:   # the tile's last slot, for the next
                        release(bars, S + chunk_of(rt, KT - 1, KT) % S, peer_bar)
                    if TMA_ST:   # pairs to the staging boxes, then TMA stores
                        if ROUNDS > 1:   # the previous tile's stores have read the area
                            if tid % WG == 0:
                                T.ptx["cp.async.bulk.wait_group.read"](0)
                            wg_sync(wg)
                        for j in T.unroll(MI):
                            for i in T.unroll(ACC // 4):
                                for h in T.unroll(2):
                                    r, c = T.meta_var(fragment_at(tid % WG, i, 2 * h))
                                    row = T.meta_var(edge(tm * BM + wg * WM + j * 64 + r,
                                                          M - 1, M % BM))
                                    col = T.meta_var(edge(tn * BN + c, N - 2, N % BN))
                                    staged[staged_at(STG, cfg, OB, wg, j, r, c) // (2 * OB)] = \
                                        pair_value(
                                            value(acc[j * ACC + i * 4 + 2 * h], bb, row, col),
                                            value(acc[j * ACC + i * 4 + 2 * h + 1], bb, row,
                                                  col + 1), out_bits)
                        T.ptx.fence.proxy.async_.shared__cta()
                        wg_sync(wg)
                        if tid % WG == 0:
                            for j in T.unroll(MI):
                                for q in T.unroll(SPANS):
                                    T.ptx[tma_store](
                                        T.address_of(c_map),
                                        *at(bb, *box_coords(cfg, OB, tm, tn, wg, j, q)),
                                        T.address_of(smem[box_at(STG, cfg, OB, wg, j, q)]))
                            T.ptx["cp.async.bulk.commit_group"]()
                    else:
                        # write-back from the wgmma accumulator layout, the epilogue applied
                        # to each accumulator; a thread's registers h, h + 1 are adjacent
                        # columns: one store of both where rows keep pairs aligned
                        for j in T.unroll(MI):
                            for i in T.unroll(ACC // 4):
                                if PAIRS:
                                    for h in T.unroll(2):
                                        r, c = T.meta_var(fragment_at(tid % WG, i, 2 * h))
                                        row = T.meta_var(tm * BM + wg * WM + j * 64 + r)
                                        col = T.meta_var(tn * BN + c)
                                        if row < M and col < N:   # N even: col + 1 < N too
                                            c_pairs[((bb * M + row) * N + col) // 2] = pair_value(
                                                value(acc[j * ACC + i * 4 + 2 * h], bb, row, col),
                                                value(acc[j * ACC + i * 4 + 2 * h + 1], bb, row,
                                                      col + 1), out_bits)
                                else:
                                    for h in T.unroll(4):
                                        r, c = T.meta_var(fragment_at(tid % WG, i, h))
                                        row = T.meta_var(tm * BM + wg * WM + j * 64 + r)
                                        col = T.meta_var(tn * BN + c)
                                        if row < M and col < N:
                                            c_flat[(bb * M + row) * N + col] = value(
                                                acc[j * ACC + i * 4 + h], bb, row, col)
            if TMA_ST and tid % WG == 0:   # the last stores done before the block exits
                T.ptx["cp.async.bulk.wait_group"](0)
        if CL > 1:   # no block leaves while a partner may still arrive on its barriers
            T.cuda.cluster_sync()
    # fmt: on

    if epilogue is not None and epilogue.operands:
        main = _declare(main, zip(epilogue.flat_views(), epilogue.operands))
    func = _in_task_order(main, params)
    tvm.tirx.analysis.verify_well_formed(func)
    return func.with_attr(PIPELINE_ATTR, "tirx")


def _declare(main, views):
    """`main` with the (buffer, over the data of) pairs `views` declared at the start
    of its device code, after its own declarations (the epilogue reads its operands
    through them)."""
    from tvm import tirx

    host = list(main.body.seq)
    at = next(i for i, st in enumerate(host) if isinstance(st, tirx.AttrStmt)
              and st.attr_key == "tirx.device_entry")
    dev = host[at]
    seq = list(dev.body.seq)
    last = max(i for i, st in enumerate(seq) if isinstance(st, tirx.DeclBuffer))
    seq[last + 1:last + 1] = [tirx.DeclBuffer(v, data=p.data) for v, p in views]
    host[at] = tirx.AttrStmt(dev.node, dev.attr_key, dev.value, tirx.SeqStmt(seq))
    return main.with_body(tirx.SeqStmt(host))


def _in_task_order(main, params):
    """`main` with the task's parameters in the task's order: `params` lists, per
    parameter, "A", "B", "C" (the kernel's own) or the task's buffer of an epilogue
    operand; None keeps (A, B, C)."""
    if params is None:
        return main
    from tvm import tirx

    own = dict(zip("ABC", main.params))
    ordered = [own[p] if isinstance(p, str) else p for p in params]
    return tirx.PrimFunc(ordered, main.body, main.ret_type, main.attrs)
