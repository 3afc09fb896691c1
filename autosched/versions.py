"""Versions that travel with every record and library, so nothing is applied across them."""
from __future__ import annotations

AUTOSCHED_VERSION = "0.1.0"


def tvm_version() -> str:
    import tvm

    return str(tvm.__version__)


def tvm_ffi_version() -> str:
    import tvm_ffi

    return str(getattr(tvm_ffi, "__version__", "unknown"))


def current_versions(space_version: str) -> dict:
    """The versions a record depends on (compared before anything is applied)."""
    return {"autosched": AUTOSCHED_VERSION, "tvm": tvm_version(), "space": space_version}


def library_versions(space_version: str) -> dict:
    """A kernel library also depends on the FFI runtime that loads it."""
    return dict(current_versions(space_version), tvm_ffi=tvm_ffi_version())
