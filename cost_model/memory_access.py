"""Memory-access features of a whole program: how wide its vector accesses are and how
often it reads each input, over every store (copies into shared memory included), where
the store slots of `features.py` see only the two stores with the most work.

On a GPU a memory-bound kernel's speed is mostly these two things: 128-bit accesses
(float4, 8 x half) move four times the bytes per instruction of scalar ones, and a row
reduction that reads its row once (one pass, the row kept on chip) moves a third of the
bytes of one that reads it for the mean, the variance and the output. Neither shows in
the heaviest stores' loop nests: the vector copies are separate stores, and the rereads
are spread over several.

Per program (log2(1 + x) of):
- vec_{global,shared}_{read,write}: the widest contiguous vector access, in bytes, of
  that scope and direction (a vectorized loop whose access has stride 1 along it moves
  extent x element bytes per instruction; 0 when no access of that kind is vectorized);
- global_reads_max: the most stores that read one global buffer (1 for a one-pass
  kernel; 3 for a layer norm that reads its row for the mean, the variance and the
  output); global_reads_mean: the mean over the global buffers read.
"""
from __future__ import annotations

import math

from .footprint import flat_stride
from .ir_walk import Program

NAMES = ("vec_global_read", "vec_global_write", "vec_shared_read", "vec_shared_write",
         "global_reads_max", "global_reads_mean")


def _lg(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0))


def _scope(scope: str) -> str | None:
    for kind in ("global", "shared"):
        if scope.startswith(kind):
            return kind
    return None


def vector_bytes(program: Program) -> dict[str, int]:
    """The widest contiguous vector access of each (scope, direction), in bytes."""
    widest = {n: 0 for n in NAMES[:4]}
    for st in program.stores:
        vec = [lp for lp in st.loops if lp.kind == "vectorized"]
        if not vec:
            continue
        lanes = math.prod(lp.extent for lp in vec)
        for acc in st.accesses:
            scope = _scope(acc.buffer.scope)
            if scope is None or flat_stride(acc, vec[-1].id) != 1:
                continue
            key = f"vec_{scope}_{'write' if acc.write else 'read'}"
            widest[key] = max(widest[key], lanes * acc.buffer.bytes_per_elem)
    return widest


def global_reads(program: Program) -> dict[str, int]:
    """Per global buffer read, how many stores read it."""
    readers: dict[str, int] = {}
    for st in program.stores:
        for name in {a.buffer.name for a in st.accesses
                     if not a.write and a.buffer.scope.startswith("global")}:
            readers[name] = readers.get(name, 0) + 1
    return readers


def memory_access_vector(program: Program) -> list[float]:
    """The features named by `NAMES`."""
    widest = vector_bytes(program)
    reads = list(global_reads(program).values())
    return [_lg(widest[n]) for n in NAMES[:4]] + \
        [_lg(max(reads, default=0)), _lg(sum(reads) / len(reads) if reads else 0)]
