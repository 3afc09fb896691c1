"""The TIRx reading holds for any kernel of the wgmma + TMA form, not one template's
text: a hand-written persistent bf16 kernel with warpgroup scope ids (`T.warpgroup_id`,
`T.thread_id_in_wg`), a three-slot ring and a TMA store epilogue is described exactly."""
from __future__ import annotations

TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
TMA_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"
WGMMA = "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"


def hand_kernel():
    """C[512, 256] = A[512, 256] x B[256, 256]^T in 64 x 64 x 64 tiles: 8 CTAs walk 4
    tiles each (row-major); warpgroup 0 loads, warpgroup 1 computes and stores."""
    from tvm.script import tirx as T

    # fmt: off
    @T.prim_func
    def main(a_ptr: T.handle, b_ptr: T.handle, c_ptr: T.handle):
        A = T.match_buffer(a_ptr, (512, 256), "bfloat16", align=16)
        B = T.match_buffer(b_ptr, (256, 256), "bfloat16", align=16)
        C = T.match_buffer(c_ptr, (512, 256), "bfloat16", align=16)
        a_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", a_map, "bfloat16", 2, A.data,
                      256, 512, 512, 64, 64, 1, 1, 0, 3, 0, 0)
        b_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", b_map, "bfloat16", 2, B.data,
                      256, 256, 512, 64, 64, 1, 1, 0, 3, 0, 0)
        c_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", c_map, "bfloat16", 2, C.data,
                      256, 512, 512, 64, 64, 1, 1, 0, 3, 0, 0)
        T.device_entry()
        cta = T.cta_id([8])
        wg = T.warpgroup_id([2])
        lane = T.thread_id_in_wg([128])
        smem = T.alloc_buffer((3 * 16384 + 8192,), "uint8", scope="shared.dyn", align=1024)
        bars = T.alloc_buffer((3,), "uint64", scope="shared", align=8)
        acc = T.alloc_buffer((32,), "float32", scope="local")
        desc_a: T.uint64
        desc_b: T.uint64
        if wg == 0 and lane == 0:
            for s in T.unroll(3):
                T.ptx.mbarrier.init.shared.b64(T.address_of(bars[s]), T.uint32(1))
        for t in T.serial(4):
            if wg == 0:
                if lane == 0:
                    for kt in T.serial(4):
                        T.ptx[TMA_LOAD](T.address_of(smem[kt % 3 * 16384]),
                                        T.address_of(a_map), kt * 64, (cta + t * 8) // 4 * 64,
                                        T.address_of(bars[kt % 3]))
                        T.ptx[TMA_LOAD](T.address_of(smem[kt % 3 * 16384 + 8192]),
                                        T.address_of(b_map), kt * 64, (cta + t * 8) % 4 * 64,
                                        T.address_of(bars[kt % 3]))
            else:
                for kt in T.serial(4):
                    for kk in T.unroll(4):
                        T.cuda.wgmma.encode_matrix_descriptor(
                            T.address_of(desc_a),
                            T.address_of(smem[kt % 3 * 16384 + kk * 32]), 1, 64, 3)
                        T.cuda.wgmma.encode_matrix_descriptor(
                            T.address_of(desc_b),
                            T.address_of(smem[kt % 3 * 16384 + 8192 + kk * 32]), 1, 64, 3)
                        T.ptx[WGMMA](*[acc[i] for i in range(32)], desc_a, desc_b,
                                     T.bool(True), 1, 1, 0, 0)
                if lane == 0:
                    T.ptx[TMA_STORE](T.address_of(c_map), (cta + t * 8) % 4 * 64,
                                     (cta + t * 8) // 4 * 64, T.address_of(smem[49152]))
    # fmt: on
    return main


def test_a_hand_written_persistent_kernel_is_read_from_its_instructions():
    from cost_model.tirx_kernel import summary
    from cost_model.tirx_read import read_tirx

    got = summary(read_tirx(hand_kernel()), 132)
    # 4 tiles per CTA (the loop around the main loop), CTAs 0 and 1 load different B
    # tiles (raster 1: row-major), 3 CTAs per SM by shared memory (57368 + 1024 bytes)
    assert got == {
        "threads": 256, "warpgroups": 2, "producers": 1, "consumers": 1, "stages": 3,
        "wgmma_per_kstep": 4, "wgmma_per_tile": 16, "wgmma_n": 64, "k_steps": 4,
        "tma_loads_per_kstep": 2, "tma_bytes_per_stage": 2 * 64 * 64 * 2, "tma_stores": 4,
        "stmatrix": 0, "smem_bytes": 57344 + 3 * 8, "mbarriers": 3, "setmaxnreg": 0.0,
        "consumer_regs": 0, "producer_regs": 0, "raster": 1, "block_m": 64, "block_n": 64,
        "block_k": 64, "tiles": 32, "ctas_per_sm": 3, "waves": 32 / 396,
        "wave_efficiency": 32 / 396, "writeback_bytes": 16}


def test_roles_follow_the_conditions_on_the_thread_index():
    """Each call is reached by the warpgroups whose threads can take its branches: the
    elected thread's loads by warpgroup 0 only, the wgmma by warpgroup 1 only, the
    barrier set-up (`wg == 0 and lane == 0`) by warpgroup 0; the memory group of the
    vector from the same reading."""
    from cost_model.ir_walk import walk
    from cost_model.tirx_kernel import memory_slots, summary
    from cost_model.tirx_read import read_tirx

    func = hand_kernel()
    k = read_tirx(func)
    reach = {c.name: sorted(c.warpgroups) for c in k.calls}
    assert reach["ptx.cp_async_bulk_tensor_g2s_cluster"] == [0]
    assert reach["ptx.wgmma_bf16_ss"] == [1]
    assert reach["ptx.cp_async_bulk_tensor_s2g"] == [1]
    assert reach["ptx.mbarrier_init"] == [0]
    assert (k.grid, k.threads, sorted(k.allocs)) == (8, 256, [
        ("acc", "local", 128), ("bars", "shared", 24), ("desc_a", "local", 8),
        ("desc_b", "local", 8), ("smem", "shared.dyn", 57344)])
    # TMA in and out as 16-byte accesses; A and B read once each, C (stored) not read
    mem = memory_slots(k, summary(k), walk(func))
    assert [round(2 ** x - 1, 6) for x in mem] == [16, 16, 0, 16, 1, 1]
