"""Run TVM-generated CUDA kernels on the CPU, for tests on machines without a GPU.

The CUDA source of a built module is compiled with g++ against a small shim: every
CUDA thread of a block is a std::thread, `__syncthreads` is a barrier over the block,
warp shuffles exchange values through a per-warp barrier, `__shared__` arrays are
static (blocks run one after another, so the active block owns them), and float2 /
float4 are aligned structs (a misaligned vector access is caught by UBSan's alignment
check). Kernels run in order with the launch dimensions of the lowered function.

It is slow (one OS thread per CUDA thread): use small shapes. It checks what the
schedule means, not how fast it is: indexing, synchronisation, cross-thread
reduction, vector alignment, predicates.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

import numpy as np

SHIM = r"""
#include <barrier>
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define uint unsigned int
#define uchar unsigned char
#define ushort unsigned short

struct emu_dim3 { unsigned int x = 1, y = 1, z = 1; };
static thread_local emu_dim3 threadIdx, blockIdx;
static emu_dim3 blockDim, gridDim;
static thread_local int emu_tid;

struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

struct EmuWarp {
  explicit EmuWarp(int n) : lanes(n), bar(n) {}
  int lanes;
  std::barrier<> bar;
  unsigned long long slot[32];
};
static std::barrier<>* emu_block_barrier;
static std::vector<std::unique_ptr<EmuWarp>> emu_warps;

inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu_warps[emu_tid / 32]->bar.arrive_and_wait(); }
inline unsigned __activemask() {
  int n = emu_warps[emu_tid / 32]->lanes;
  return n == 32 ? 0xffffffffu : ((1u << n) - 1u);
}
template <class T, class F> inline T emu_exchange(T v, F src_of) {
  static_assert(sizeof(T) <= 8, "shuffle of a wide type");
  EmuWarp& w = *emu_warps[emu_tid / 32];
  int lane = emu_tid % 32;
  std::memcpy(&w.slot[lane], &v, sizeof(T));
  w.bar.arrive_and_wait();
  int src = src_of(lane);
  T r = v;
  if (src >= 0 && src < w.lanes) std::memcpy(&r, &w.slot[src], sizeof(T));
  w.bar.arrive_and_wait();
  return r;
}
template <class T> T __shfl_sync(unsigned, T v, int src, int width = 32) {
  return emu_exchange(v, [&](int l) { return (l / width) * width + src % width; });
}
template <class T> T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
  return emu_exchange(v, [&](int l) { return l % width + (int)d < width ? l + (int)d : l; });
}
template <class T> T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
  return emu_exchange(v, [&](int l) { return l % width >= (int)d ? l - (int)d : l; });
}
template <class T> T __shfl_xor_sync(unsigned, T v, int m, int width = 32) {
  return emu_exchange(v, [&](int l) { return l ^ m; });
}

template <class T> inline T max(T a, T b) { return a > b ? a : b; }
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

template <class K> void emu_launch(emu_dim3 grid, emu_dim3 block, K kernel) {
  int n = block.x * block.y * block.z;
  long blocks = (long)grid.x * grid.y * grid.z;
  gridDim = grid;
  blockDim = block;
  std::barrier<> block_barrier(n);
  emu_block_barrier = &block_barrier;
  emu_warps.clear();
  for (int w = 0; w * 32 < n; ++w)
    emu_warps.push_back(std::make_unique<EmuWarp>(n - w * 32 < 32 ? n - w * 32 : 32));
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      emu_tid = t;
      threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
      for (long b = 0; b < blocks; ++b) {
        blockIdx = {(unsigned)(b % grid.x), (unsigned)((b / grid.x) % grid.y),
                    (unsigned)(b / ((long)grid.x * grid.y))};
        kernel();
        block_barrier.arrive_and_wait();  // the next block reuses the shared arrays
      }
    });
  }
  for (auto& t : threads) t.join();
}

static void* emu_alloc(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  std::memset(p, 0, bytes);
  return p;
}
static void emu_io(const char* path, void* p, size_t bytes, bool read) {
  FILE* f = std::fopen(path, read ? "rb" : "wb");
  if (!f || (read ? std::fread(p, 1, bytes, f) : std::fwrite(p, 1, bytes, f)) != bytes) {
    std::fprintf(stderr, "cannot %s %s\n", read ? "read" : "write", path);
    std::exit(3);
  }
  std::fclose(f);
}
"""

_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\)\s*\{')


def kernel_signatures(src: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(kernel name, [(param type, param name)]) for each kernel defined in `src`, in
    launch order (TVM numbers them main_kernel, main_kernel_1, ...)."""
    out = []
    for m in _KERNEL.finditer(src):
        params = []
        for p in (x.strip() for x in m.group(2).split(",") if x.strip()):
            p = p.replace("__restrict__", " ")
            name = p.split()[-1]
            params.append((" ".join(p.split()[:-1]), name))
        out.append((m.group(1), params))
    key = (lambda k: int(k[0].rsplit("_", 1)[1]) if k[0][-1].isdigit() else 0)
    return sorted(out, key=key)


def _kernel_body(src: str) -> str:
    """The kernels without CUDA's headers; `__shared__` arrays become static (one block
    runs at a time and owns them)."""
    body = src[src.index('extern "C" __global__'):]
    body = re.sub(r"__shared__\s+(alignas\(\d+\))\s+", r"\1 static ", body)
    return body.replace("__shared__ ", "static ")


def _program(src, launches, buffers, intermediate_bytes, outputs, workdir) -> str:
    lines = [SHIM, _kernel_body(src), "int main() {"]
    known = set()
    for name, nbytes in buffers.items():
        lines.append(f"  void* b_{name} = emu_alloc({nbytes});")
        lines.append(f'  emu_io("{workdir}/{name}.bin", b_{name}, {nbytes}, true);')
        known.add(name)
    for (kname, params), dims in zip(*launches):
        args = []
        for ptype, pname in params:
            if not ptype.endswith("*"):
                raise ValueError(f"kernel {kname} takes a scalar {pname}; not emulated")
            # TVM names a kernel's pointer `<data>_ptr`, and `<data>_ptr_1` when the
            # kernel gets the same allocation twice (an in-place update)
            m = re.fullmatch(r"(.*)_ptr(_\d+)?", pname)
            buf = m.group(1) if m else pname
            if buf not in known:   # an intermediate the host allocates between kernels
                lines.append(f"  void* b_{buf} = emu_alloc({intermediate_bytes});")
                known.add(buf)
            args.append(f"({ptype})b_{buf}")
        g, b = dims
        lines.append(f"  emu_launch({{{g[0]}, {g[1]}, {g[2]}}}, {{{b[0]}, {b[1]}, {b[2]}}}, "
                     f"[&] {{ {kname}({', '.join(args)}); }});")
    for name in outputs:
        lines.append(f'  emu_io("{workdir}/{name}.out", b_{name}, {buffers[name]}, false);')
    lines += ["  return 0;", "}"]
    return "\n".join(lines)


def _launch_dims(mod, target):
    from search_space.cuda.limits import kernel_usage
    from search_space.cuda.lowering import lower_for_check
    from search_space.tir import iter_nodes

    func = lower_for_check(mod, target.tvm())
    dims = []
    for use in kernel_usage(func):
        e = use.extents
        dims.append(([e.get(f"blockIdx.{a}", 1) for a in "xyz"],
                     [e.get(f"threadIdx.{a}", 1) for a in "xyz"]))
    from tvm import tirx

    inter = [int(np.prod([int(s) for s in n.buffer.shape])) * 8 for n in iter_nodes(func.body)
             if isinstance(n, tirx.AllocBuffer) and str(n.buffer.scope()) == "global"]
    return dims, max(inter or [64])


def emulate(mod, target, inputs: dict, outputs: dict, timeout: float = 300) -> dict:
    """Run scheduled `mod` (a cuda module) on the CPU. `inputs`: name -> array;
    `outputs`: name -> (shape, dtype). Returns name -> array, or raises RuntimeError
    with the compiler's or the program's message."""
    import tvm

    from autosched.measure.cuda.compiler import cuda_source

    src = cuda_source(tvm.compile(mod, target=target.tvm()))
    dims, inter_bytes = _launch_dims(mod, target)
    return emulate_source(src, dims, inputs, outputs, inter_bytes, timeout)


def emulate_source(src: str, dims: list, inputs: dict, outputs: dict,
                   intermediate_bytes: int = 64, timeout: float = 300) -> dict:
    """Run the kernels of CUDA source `src` in order, kernel i with launch dimensions
    `dims[i]` = ([grid x, y, z], [block x, y, z]); pointers are matched to arrays by
    name (`A_ptr` is array `A`)."""
    kernels = kernel_signatures(src)
    if len(kernels) != len(dims):
        raise RuntimeError(f"{len(kernels)} kernels in the source, {len(dims)} launches")
    with tempfile.TemporaryDirectory(prefix="cuda-emu-") as d:
        buffers = {}
        for name, arr in inputs.items():
            arr = np.ascontiguousarray(arr)
            arr.tofile(os.path.join(d, f"{name}.bin"))
            buffers[name] = arr.nbytes
        for name, (shape, dtype) in outputs.items():
            zeros = np.zeros(shape, dtype)
            zeros.tofile(os.path.join(d, f"{name}.bin"))
            buffers[name] = zeros.nbytes
        prog = _program(src, (kernels, dims), buffers, intermediate_bytes, list(outputs), d)
        with open(os.path.join(d, "main.cpp"), "w") as f:
            f.write(prog)
        exe = os.path.join(d, "main")
        cc = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-w",
                             "-fsanitize=alignment", "-fno-sanitize-recover=alignment",
                             "-o", exe, os.path.join(d, "main.cpp")],
                            capture_output=True, text=True, timeout=timeout)
        if cc.returncode != 0:
            raise RuntimeError("g++: " + "\n".join(cc.stderr.splitlines()[:5]))
        run = subprocess.run([exe], capture_output=True, text=True, timeout=timeout)
        if run.returncode != 0:
            raise RuntimeError(f"emulated kernel failed ({run.returncode}): "
                               + (run.stderr.strip().splitlines() or ["no message"])[0])
        return {name: np.fromfile(os.path.join(d, f"{name}.out"), dtype).reshape(shape)
                for name, (shape, dtype) in outputs.items()}
