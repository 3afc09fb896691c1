"""What travels to the GPU machine: the runtime-only TVM package, the Python 3.12 tvm-ffi
wheel and the bundles built here, in one ignored folder (`bench/gpu/carry/`).

The device machine has Python 3.12, torch and the CUDA toolkit, and no TVM. The whole
TVM wheel (96 MiB) does not fit what one call carries (64 MiB); what a bundle measurement
needs does: TVM's runtime libraries (libtvm_runtime.so, libtvm_runtime_cuda.so) under a
`tvm/` folder whose `__init__.py` refuses import (so the kernel loader finds the
libraries the way it finds an installed TVM, and nothing can use a compiler that is not
there) with the release's metadata beside it, and `apache-tvm-ffi` for cp312, unpacked
on the device.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CARRY = Path(__file__).resolve().parent / "carry"
LIMIT_BYTES = 64 * 1024 * 1024
TVM_FFI = "apache-tvm-ffi==0.1.14.post1"
RUNTIME_LIBS = ("libtvm_runtime.so", "libtvm_runtime_cuda.so")
REFUSE_IMPORT = ('"""TVM runtime libraries only: the compiler is not installed here."""\n'
                 'raise ImportError("this is the runtime-only TVM package (kernel loading);"\n'
                 '                  " the TVM compiler is not installed")\n')


def pack_runtime(carry: Path = CARRY) -> Path:
    """carry/runtime/tvm/{__init__.py, lib/...}: TVM's runtime libraries from the
    installed wheel (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("apache-tvm is not installed here")
    src = Path(list(spec.submodule_search_locations)[0]) / "lib"
    dst = carry / "runtime" / "tvm"
    (dst / "lib").mkdir(parents=True, exist_ok=True)
    (dst / "__init__.py").write_text(REFUSE_IMPORT)
    for name in RUNTIME_LIBS:
        shutil.copy2(src / name, dst / "lib" / name)
    _write_dist_info(dst.parent)
    return dst.parent


def _write_dist_info(site: Path) -> None:
    """Name the release the libraries come from, as an installed distribution does, so
    a kernel library's version check (autosched.torch.compat) can compare it."""
    from importlib import metadata

    version = metadata.version("apache-tvm")
    info = site / f"apache_tvm-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: apache-tvm\nVersion: {version}\n"
        "Summary: TVM's runtime libraries only (libtvm_runtime, libtvm_runtime_cuda)\n")


def fetch_tvm_ffi_wheel(carry: Path = CARRY) -> Path:
    """The cp312 wheel of the pinned tvm-ffi (the cp311 one does not import on 3.12)."""
    out = carry / "wheels"
    found = sorted(out.glob("apache_tvm_ffi-*-cp312-*.whl")) if out.is_dir() else []
    if found:
        return found[0]
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", TVM_FFI, "--no-deps",
                    "--only-binary=:all:", "--python-version", "3.12",
                    "--platform", "manylinux_2_28_x86_64", "-d", str(out)], check=True)
    return sorted(out.glob("apache_tvm_ffi-*-cp312-*.whl"))[0]


def carried_bytes(carry: Path = CARRY) -> int:
    """Bytes under `carry` (what the device call ships besides the tracked tree)."""
    return sum(f.stat().st_size for f in carry.rglob("*") if f.is_file())


def describe(carry: Path = CARRY) -> str:
    size = carried_bytes(carry)
    parts = []
    for child in sorted(carry.iterdir()) if carry.is_dir() else []:
        n = sum(f.stat().st_size for f in child.rglob("*") if f.is_file()) \
            if child.is_dir() else child.stat().st_size
        parts.append(f"{child.name} {n / 2**20:.1f} MiB")
    verdict = "fits" if size <= LIMIT_BYTES else "DOES NOT FIT"
    return (f"carried: {size / 2**20:.1f} MiB of {LIMIT_BYTES / 2**20:.0f} MiB ({verdict}): "
            + ", ".join(parts))


def unpack_on_device(carry: Path = CARRY) -> dict:
    """On the GPU machine: unzip the tvm-ffi wheel into carry/site and return the
    environment (PYTHONPATH, LD_LIBRARY_PATH) under which autosched's runtime-only
    paths find tvm_ffi and TVM's runtime libraries."""
    import zipfile

    site = carry / "site"
    if not (site / "tvm_ffi").is_dir():
        with zipfile.ZipFile(sorted((carry / "wheels").glob("*.whl"))[0]) as z:
            z.extractall(site)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(root), str(site), str(carry / "runtime"), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
    cudart = _cudart_dirs()
    env["LD_LIBRARY_PATH"] = os.pathsep.join(cudart + [env.get("LD_LIBRARY_PATH", "")])
    return env


def cudart_dirs() -> list[str]:
    """Folders holding libcudart.so.13 (public: stage.py builds its LD_LIBRARY_PATH
    from them)."""
    return _cudart_dirs()


def _cudart_dirs() -> list[str]:
    """Folders holding libcudart.so.13 (the CUDA toolkit's, or the one pip's torch brings)."""
    found = []
    for root in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"):
        if os.path.exists(os.path.join(root, "libcudart.so.13")):
            found.append(root)
    for path in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib"):
            d = os.path.join(path, sub)
            if os.path.exists(os.path.join(d, "libcudart.so.13")):
                found.append(d)
    return found
