"""A library kernel as text: its scheduled TIR, and for a CUDA library its CUDA source and
SASS, read from the files export wrote beside the library (`exporting._write_sources`).

The TIR file is the kernel's own. The CUDA source and the SASS are the library's; the
part of one kernel is its functions (`<symbol>_kernel...`: TVM names the device functions
of a kernel after its symbol) with the source's preamble, so a reader sees one kernel the
way `autosched db show` shows a record's. Nothing here imports torch or tvm.
"""
from __future__ import annotations

import re

from .errors import LibraryError
from .manifest import KernelEntry, Manifest

KINDS = ("tir", "cuda", "sass")

# where a device function starts: in the CUDA source, and in cuobjdump's SASS listing
CUDA_FUNCTION = re.compile(r'^extern "C" __global__\b[^\n]*?\b(?!__launch_bounds__)(\w+)\(',
                            re.MULTILINE)
SASS_FUNCTION = re.compile(r"^\s*Function : (\w+)\s*$", re.MULTILINE)


def kernel_text(manifest: Manifest, entry: KernelEntry, kind: str = "tir") -> str:
    """The text of `entry`'s kernel of the given kind (one of KINDS). LibraryError for an
    unknown kind, a kind this library lacks (CUDA text of a CPU library, SASS where
    cuobjdump was missing at export, any text of a library exported before it was
    written) or a file that is gone."""
    if kind not in KINDS:
        raise LibraryError(f"unknown kernel text {kind!r} (one of {', '.join(KINDS)})")
    rel = (entry.source if kind == "tir" else manifest.source).get(kind)
    if rel is None:
        raise LibraryError(f"{manifest.directory}: the library holds no {kind} text for "
                           f"{entry.workload} ({_why_missing(manifest, kind)})")
    path = manifest.directory / rel
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise LibraryError(f"{path}: unreadable ({e.strerror or e})") from None
    if kind == "tir":
        return text
    pattern = CUDA_FUNCTION if kind == "cuda" else SASS_FUNCTION
    return functions_of(text, pattern, entry.symbol + "_kernel")


def functions_of(text: str, pattern: re.Pattern, prefix: str) -> str:
    """`text` less the functions (sections starting where `pattern` matches, its group
    the function's name) whose name does not start with `prefix`; what precedes the first
    function stays. The whole text when no function matches (nothing is hidden)."""
    starts = list(pattern.finditer(text))
    keep = [m for m in starts if m.group(1).startswith(prefix)]
    if not keep:
        return text
    ends = [m.start() for m in starts[1:]] + [len(text)]
    head = text[:starts[0].start()] if starts else ""
    return head + "".join(text[m.start():end] for m, end in zip(starts, ends)
                          if m.group(1).startswith(prefix))


def _why_missing(manifest: Manifest, kind: str) -> str:
    if kind != "tir" and manifest.target.get("kind") != "cuda":
        return f"it is a {manifest.target.get('kind')} library; only CUDA ones have {kind}"
    if kind == "sass" and "cuda" in manifest.source:
        return "cuobjdump was not installed where it was exported"
    return "it was exported before libraries kept their kernels as text; export it again"
