"""The machine code (SASS) inside a built CUDA library, read without a GPU: the fatbins
are carved out of the library (`fatbin.fatbins`) and disassembled by `cuobjdump
--dump-sass`, from the CUDA toolkit or the `nvidia-cuda-cuobjdump` package.

`opcode_counts(path)` counts the instructions by opcode (`HMMA`, `LDGSTS` for cp.async,
`LDSM` for ldmatrix, `STL`/`LDL` for spills, ...), which is how a schedule's use of
tensor cores and asynchronous copies is checked on a build host; `mnemonic_counts` keeps
the modifiers, and `count_named` counts what a name with modifiers (`LDG.E.128`: 128-bit
global loads) stands for.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter

from ...errors import InfrastructureError
from . import fatbin

# "/*0040*/   HMMA.16816.F32 R4, R8, R12, R4 ;" -> HMMA.16816.F32 (predicates like @P0
# skipped; modifiers may hold lower case: HGMMA.64x128x16.F32)
_INSTRUCTION = re.compile(
    r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def cuobjdump() -> str:
    """The cuobjdump binary: from the `nvidia-cuda-cuobjdump` package when installed
    (its `bin` folder beside the package), else from PATH."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in sorted(os.listdir(root)):
            path = os.path.join(root, sub, "bin", "cuobjdump")
            if os.access(path, os.X_OK):
                return path
    found = shutil.which("cuobjdump")
    if found is None:
        raise InfrastructureError("cuobjdump not found",
                                  "pip install nvidia-cuda-cuobjdump, or put the CUDA "
                                  "toolkit's bin folder on PATH")
    return found


def available() -> bool:
    """Whether `cuobjdump()` finds the binary (SASS can be read on this machine)."""
    try:
        cuobjdump()
    except InfrastructureError:
        return False
    return True


def dump_sass(path: str) -> str:
    """The SASS text of every fatbin in the library file at `path`."""
    with open(path, "rb") as f:
        blobs = fatbin.fatbins(f.read())
    texts = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, blob in enumerate(blobs):
            fb = os.path.join(tmp, f"{i}.fatbin")
            with open(fb, "wb") as f:
                f.write(blob)
            out = subprocess.run([cuobjdump(), "--dump-sass", fb], capture_output=True,
                                 text=True, timeout=120, check=False)
            if out.returncode != 0:
                raise InfrastructureError("cuobjdump failed: " + out.stderr.strip()[:300])
            texts.append(out.stdout)
    return "\n".join(texts)


def mnemonic_counts(path: str) -> Counter:
    """Instruction count by mnemonic, modifiers included (`LDG.E.128.CONSTANT`), of the
    SASS in the library file at `path`."""
    return Counter(m.group(1) for m in _INSTRUCTION.finditer(dump_sass(path)))


def opcode_counts(path: str) -> Counter:
    """Instruction count by opcode (the part before the first dot: `HMMA.16816.F32` ->
    `HMMA`) of the SASS in the library file at `path`."""
    out = Counter()
    for mnemonic, n in mnemonic_counts(path).items():
        out[mnemonic.split(".")[0]] += n
    return out


def count_named(mnemonics: Counter, name: str) -> int:
    """How many instructions of `mnemonics` (from `mnemonic_counts`) `name` stands for:
    those of its opcode carrying at least its modifiers, in any place. `HMMA` counts every
    HMMA; `LDG.E.128` counts `LDG.E.128` and `LDG.E.LTC128B.128.CONSTANT` (the widths
    and cache hints nvcc writes differ by arch), not `LDG.E.64`."""
    opcode, *mods = name.split(".")
    return sum(n for mnemonic, n in mnemonics.items()
               if mnemonic.split(".")[0] == opcode and set(mods) <= set(mnemonic.split(".")))
