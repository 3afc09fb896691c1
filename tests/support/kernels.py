"""Hand-written kernels with a matmul task's signature, shared by the measurement and
RPC tests: correct schedules, and deliberately broken kernels (wrong answers, hangs,
crashes, compile errors) that measurement must classify."""
from __future__ import annotations


def vectorized_matmul(task, width: int = 8):
    from tvm import s_tir

    sch = s_tir.Schedule(task.mod)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    jo, ji = sch.split(j, [None, width])
    sch.reorder(i, jo, k, ji)
    sch.vectorize(ji)
    sch.parallel(i)
    return sch.mod


def rfactor_matmul(task):
    from tvm import s_tir

    sch = s_tir.Schedule(task.mod)
    _, _, k = sch.get_loops(sch.get_sblock("C"))
    _, ki = sch.split(k, [None, 4])
    sch.rfactor(ki, 0)  # a different summation order: within tolerance, not bit-equal
    return sch.mod


def broken_kernels(n: int) -> dict:
    """Kernels with the n^3 fp32 matmul signature (A, B -> C) that are wrong, hang, crash
    or do not compile: each is a fault the measurement must classify."""
    N = n
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def plus_one(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                 C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i, j in T.grid(N, N):
            C[i, j] = T.float32(1)  # computes A @ B + 1
            for k in range(N):
                C[i, j] = C[i, j] + A[i, k] * B[k, j]

    @T.prim_func
    def zeros(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
              C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i, j in T.grid(N, N):
            C[i, j] = T.float32(0)

    @T.prim_func
    def half_written(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                     C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i, j in T.grid(N // 2, N):  # forgets the lower half of C
            C[i, j] = T.float32(0)
            for k in range(N):
                C[i, j] = C[i, j] + A[i, k] * B[k, j]

    @T.prim_func
    def clobbers_input(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                       C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i, j in T.grid(N, N):
            C[i, j] = T.float32(0)
            for k in range(N):
                C[i, j] = C[i, j] + A[i, k] * B[k, j]
        for i in range(N):
            B[i, i] = T.float32(7)  # scratch space in an input: wrong in real use

    @T.prim_func
    def hang(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
             C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        n: T.int32 = 0
        while n >= 0:  # n stays in [0, 7): never terminates
            n = (n + 1) % 7
            C[0, 0] = T.Cast("float32", n)

    @T.prim_func
    def wild_store(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                   C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        far = T.decl_buffer((T.int64(1099511627776),), "float32", data=C.data)
        for i in range(N):  # 4 TiB past C: unmapped, no bounds checks -> SIGSEGV
            far[T.int64(1099511627776) - T.int64(1024) * T.int64(i) - T.int64(1)] = A[0, i]

    @T.prim_func
    def raise_segv(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                   C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        T.evaluate(T.call_extern("int32", "raise", 11))  # libc raise(SIGSEGV)

    @T.prim_func
    def missing_symbol(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                       C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        T.evaluate(T.call_extern("int32", "autosched_test_no_such_symbol", 1))

    @T.prim_func
    def gpu_threads_on_cpu(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                           C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i in T.thread_binding(N, thread="threadIdx.x"):  # llvm cannot compile this
            for j in range(N):
                C[i, j] = A[i, j]

    funcs = dict(plus_one=plus_one, zeros=zeros, half_written=half_written,
                 clobbers_input=clobbers_input, hang=hang, wild_store=wild_store,
                 raise_segv=raise_segv, missing_symbol=missing_symbol,
                 compile_error=gpu_threads_on_cpu)
    return {name: tvm.IRModule({"main": f}) for name, f in funcs.items()}


def built_libraries(folder, task, mods: dict) -> dict:
    """{name: path of the llvm library of each module in `mods`, "reference": the task's
    reference directory}, all under `folder`: what a run request names."""
    import tvm

    from autosched.measure.reference.store import ensure_reference

    paths = {}
    for name, mod in mods.items():
        paths[name] = str(folder / f"{name}.so")
        tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})).export_library(paths[name])
    paths["reference"] = ensure_reference(task, str(folder / "work")).directory
    return paths
