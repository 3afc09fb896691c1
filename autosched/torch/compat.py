"""Does a kernel library fit this process and machine? Checked before anything is loaded.

A library built for instructions this CPU lacks would die with SIGILL on the first call,
and one built against another TVM runtime may crash while loading; both are turned into a
LibraryError here. Differences that only cost speed (another CPU model of the same
instruction set, a GPU of a newer minor version of the library's architecture) are
logged as a warning; a GPU that cannot run the library's device code is refused.
"""
from __future__ import annotations

import logging
import platform
import re
from dataclasses import dataclass
from importlib import metadata

from .errors import LibraryError
from .manifest import Manifest

log = logging.getLogger("autosched.torch")

_V2 = {"sse4_2", "ssse3", "popcnt", "cx16"}
_V3 = _V2 | {"avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
_ICL = _V4 | {"avx512vbmi", "avx512_vnni"}
# The CPU flags (as /proc/cpuinfo names them) that code generated for an LLVM -mcpu may use.
MCPU_FLAGS = {
    "generic": set(), "x86-64": set(), "x86-64-v2": _V2, "nehalem": _V2, "westmere": _V2,
    "sandybridge": _V2 | {"avx"}, "ivybridge": _V2 | {"avx", "f16c"},
    "x86-64-v3": _V3, "haswell": _V3, "broadwell": _V3, "skylake": _V3, "alderlake": _V3,
    "raptorlake": _V3, "meteorlake": _V3, "znver1": _V3, "znver2": _V3, "znver3": _V3,
    "x86-64-v4": _V4, "skylake-avx512": _V4, "cascadelake": _V4 | {"avx512_vnni"},
    "cooperlake": _V4 | {"avx512_vnni", "avx512_bf16"},
    "icelake-client": _ICL, "icelake-server": _ICL, "tigerlake": _ICL, "rocketlake": _ICL,
    # no AMX: LLVM emits it only for its intrinsics, which no kernel of ours calls, and
    # virtual machines of these CPUs often hide it (an Emerald Rapids VM without amx_tile
    # could load none of its own libraries)
    "sapphirerapids": _ICL | {"avx512_bf16", "avx512_fp16"},
    "emeraldrapids": _ICL | {"avx512_bf16", "avx512_fp16"},
    "graniterapids": _ICL | {"avx512_bf16", "avx512_fp16"},
    "znver4": _ICL | {"avx512_bf16"}, "znver5": _ICL | {"avx512_bf16"},
}


def _major_minor(version: str) -> tuple:
    return tuple(version.split(".")[:2])


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check_versions(manifest: Manifest) -> None:
    """The TVM runtime here must be the release the library was built with (major.minor)."""
    built = manifest.versions
    checks = [("tvm_ffi", "apache-tvm-ffi")]
    if manifest.device_type == "cuda" or _installed("apache-tvm"):
        checks.append(("tvm", "apache-tvm"))
    for key, dist in checks:
        want = built.get(key)
        have = _installed(dist)
        if want is None:
            continue
        if have is None:
            raise LibraryError(f"{manifest.directory}: built with {dist} {want}, "
                               f"which is not installed here")
        if _major_minor(str(want)) != _major_minor(have):
            raise LibraryError(f"{manifest.directory}: built with {dist} {want}, this process "
                               f"has {have}; re-export the library with this version")


def cpu_flags() -> set[str]:
    """The instruction-set flags of this CPU (Linux /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@dataclass(frozen=True)
class HostCPU:
    """The CPU a library is loaded on: its model name and instruction-set flags."""

    model: str
    flags: frozenset

    @staticmethod
    def detect() -> "HostCPU":
        from ..target import cpu_model

        return HostCPU(cpu_model(), frozenset(cpu_flags()))


def _required_flags(target: dict) -> set[str] | None:
    """Flags the target's code may use, or None when the -mcpu is not in our table."""
    mcpu = str(target.get("mcpu", "generic"))
    flags = MCPU_FLAGS.get(mcpu)
    if flags is None:
        return None
    attrs = target.get("mattr") or []
    extra = {a[1:].replace(".", "_").lower() for a in attrs if str(a).startswith("+")}
    return set(flags) | {f for f in extra if f.startswith(("avx", "sse", "amx", "fma", "bmi"))}


def check_cpu(manifest: Manifest, check_hardware: bool = True,
              host: HostCPU | None = None) -> None:
    """The CPU (`host`, default this one) must run every instruction the library may use."""
    built = manifest.hardware
    machine = built.get("machine")
    if machine and machine != platform.machine():
        raise LibraryError(f"{manifest.directory}: built for {machine} CPUs, "
                           f"this machine is {platform.machine()}")
    if not check_hardware:
        return
    host = host or HostCPU.detect()
    mcpu = manifest.target.get("mcpu", "generic")
    same_model = built.get("model") == host.model
    required = _required_flags(manifest.target)
    if required is None:
        if not same_model:
            raise LibraryError(
                f"{manifest.directory}: built for mcpu={mcpu} on {built.get('model')!r}; "
                f"cannot tell whether this CPU ({host.model!r}) runs that code. "
                "Pass check_hardware=False to load it anyway")
        return
    missing = sorted(required - host.flags) if host.flags else []
    if missing:
        raise LibraryError(f"{manifest.directory}: built for mcpu={mcpu}, which needs "
                           f"{', '.join(missing)}; this CPU ({host.model}) lacks them")
    if not same_model:
        log.warning("%s was tuned on %r, running on %r: results are correct, speed may "
                    "differ", manifest.directory, built.get("model"), host.model)


_SM = re.compile(r"^sm_(\d+)([af]?)$")


@dataclass(frozen=True)
class HostGPU:
    """The GPU a library is loaded on: its name and architecture (`sm_90`)."""

    name: str
    arch: str

    @staticmethod
    def detect(manifest: Manifest) -> "HostGPU":
        """GPU 0 as torch sees it; LibraryError when this process has none."""
        import torch

        if not torch.cuda.is_available():
            build = "a CPU-only build of torch" if torch.version.cuda is None else "no visible GPU"
            arch = manifest.target.get("arch") or "cuda"
            raise LibraryError(f"{manifest.directory}: a CUDA library ({arch}) but this "
                               f"process has {build}")
        major, minor = torch.cuda.get_device_capability()
        return HostGPU(torch.cuda.get_device_name(), f"sm_{major}{minor}")


def _capability(arch: str) -> tuple[int, int, str] | None:
    match = _SM.match(arch)
    if match is None:
        return None
    number = int(match.group(1))
    return number // 10, number % 10, match.group(2)


def arch_runs_on(built: str, device: str) -> bool:
    """Whether SASS built for `built` (no PTX, as autosched embeds) runs on a GPU of
    architecture `device`: the same major version and at least the built minor one
    (`sm_80` runs on sm_86); an arch-specific `sm_90a` only on sm_90 itself; a
    family-specific `sm_100f` on every sm_10x from sm_100."""
    b, d = _capability(built), _capability(device)
    if b is None or d is None or b[0] != d[0]:
        return False
    return b[1] == d[1] if b[2] == "a" else d[1] >= b[1]


def check_gpu(manifest: Manifest, check_hardware: bool = True,
              gpu: HostGPU | None = None) -> None:
    """A CUDA library needs a GPU (`gpu`, default GPU 0 via torch) that runs its device
    code: the library holds SASS for one arch only, so any other is refused, whatever
    `check_hardware` says (the kernels could not load)."""
    arch = str(manifest.target.get("arch", ""))
    gpu = gpu or HostGPU.detect(manifest)
    if not arch_runs_on(arch, gpu.arch):
        raise LibraryError(f"{manifest.directory}: built for {arch or 'an unnamed arch'}, "
                           f"which does not run on this GPU ({gpu.name}, {gpu.arch}); "
                           f"export the library for {gpu.arch}")
    if arch != gpu.arch and check_hardware:
        log.warning("%s was built for %s, running on %s", manifest.directory, arch, gpu.arch)


def check_library(manifest: Manifest, check_hardware: bool = True) -> None:
    """All load-time checks: versions, target kind, and the machine."""
    kind = manifest.target.get("kind")
    if kind not in ("llvm", "cuda"):
        raise LibraryError(f"{manifest.directory}: target kind {kind!r} is not supported; "
                           "autosched libraries are built for llvm (CPU) or cuda")
    check_versions(manifest)
    if kind == "llvm":
        check_cpu(manifest, check_hardware)
    else:
        check_gpu(manifest, check_hardware)
