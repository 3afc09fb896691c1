"""SIMD lanes of a dtype on an llvm target: the vector width the CPU rules tile for."""
from __future__ import annotations

from functools import lru_cache

# Vector register width by -mcpu for x86. TVM's LLVM query reports the width of
# the machine it runs on for every x86 -mcpu, so a cross target needs the table.
_X86_BITS = {
    **dict.fromkeys(("skylake-avx512", "cascadelake", "cooperlake", "cannonlake",
                     "icelake-client", "icelake-server", "tigerlake", "rocketlake",
                     "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d",
                     "znver4", "znver5", "knl", "knm", "x86-64-v4"), 512),
    **dict.fromkeys(("haswell", "broadwell", "skylake", "alderlake", "raptorlake",
                     "meteorlake", "arrowlake", "lunarlake", "gracemont", "znver1", "znver2",
                     "znver3", "x86-64-v3", "core-avx2", "sandybridge", "ivybridge",
                     "corei7-avx", "core-avx-i", "bdver1", "bdver2", "bdver3", "bdver4",
                     "btver2"), 256),
    **dict.fromkeys(("x86-64", "x86-64-v2", "core2", "nehalem", "westmere", "corei7",
                     "penryn", "silvermont", "goldmont", "btver1"), 128),
}


def _bits_from_mattr(mattr) -> int | None:
    feats = {f.strip() for f in (mattr.split(",") if isinstance(mattr, str) else mattr or ())}
    if "+avx512f" in feats:
        return 512
    if feats & {"+avx", "+avx2"}:
        return 256
    return None


@lru_cache(maxsize=16)
def _vector_bits(target_key: str) -> int:
    import json

    config = json.loads(target_key)
    bits = _bits_from_mattr(config.get("mattr")) or _X86_BITS.get(str(config.get("mcpu", "")))
    if bits:
        return bits
    import tvm
    from tvm.target import codegen

    try:
        bits = int(codegen.llvm_get_vector_width(tvm.target.Target(config)))
    except Exception:  # an LLVM without this query: assume 128-bit SIMD
        bits = 128
    return bits if bits > 0 else 128


def vector_registers(target) -> int:
    """Architectural vector registers of `target`: 32 with AVX-512 (and on AArch64),
    16 with AVX / AVX2 and SSE."""
    import json

    config = json.loads(target.key)
    arm = "aarch64" in str(config.get("mtriple", "")) or "arm" in str(config.get("mcpu", ""))
    return 32 if arm or _vector_bits(target.key) >= 512 else 16


def vector_lanes(target, dtype: str = "float32") -> int:
    """SIMD lanes of `dtype` on `target` (a TargetSpec): 16 fp32 lanes on AVX-512."""
    import tvm

    width = tvm.DataType(dtype).bits
    return max(1, _vector_bits(target.key) // max(8, width))
