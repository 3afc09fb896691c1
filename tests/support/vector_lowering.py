"""Whether an elementwise kernel stays vectorised: the TIR passes up to TVM's
VectorizeLoop, which scalarises a whole loop whose body it cannot widen."""
from __future__ import annotations

import re


def vectorised_text(mod, target) -> str:
    """`mod` lowered through VectorizeLoop for `target` (a TargetSpec), as TVMScript."""
    import tvm
    from tvm import s_tir, tirx

    lower = tvm.transform.Sequential([
        s_tir.transform.LowerInitBlock(), s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.LowerOpaqueBlock(), tirx.transform.FlattenBuffer(),
        tirx.transform.VectorizeLoop()])
    with target.tvm():
        return lower(mod).script()


def has_scalar_loop(text: str) -> bool:
    """A scalarised loop's variable ends in "_s" (`for i_s in range` or `T.grid(4, 16)`)."""
    return bool(re.search(r"\w_s\b", text)) or "T.vectorized" in text
