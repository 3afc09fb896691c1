"""Versions that travel with every record and library, so nothing is applied across them."""
from __future__ import annotations

AUTOSCHED_VERSION = "0.1.0"


def tvm_version() -> str:
    import tvm

    return str(tvm.__version__)


def current_versions(space_version: str) -> dict:
    """The versions a record or library depends on (compared before anything is applied)."""
    return {"autosched": AUTOSCHED_VERSION, "tvm": tvm_version(), "space": space_version}
