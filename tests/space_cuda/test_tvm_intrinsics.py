"""TVM's own tensor intrinsics (what MetaSchedule's tensor-core rules name) import in a
process where autosched registered the fragment store layout first: TVM's module
registers the same name and refuses one that is there, so ours gives way."""
from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import sys
    import tvm_ffi
    from search_space.cuda.mma_intrin import STORE_LAYOUT, fragment_slot, register_store_layout
    from search_space import import_tvm_intrinsics

    if sys.argv[1] == "compile":  # what build_cuda holds around tvm.compile
        from search_space.cuda.mma_intrin import store_layout
        with store_layout():
            with store_layout():
                inside = tvm_ffi.get_global_func(STORE_LAYOUT, allow_missing=True)
        after = tvm_ffi.get_global_func(STORE_LAYOUT, allow_missing=True)
        import tvm.s_tir.tensor_intrin  # noqa: F401
        with store_layout():   # TVM's is there now: kept, not removed
            pass
        kept = tvm_ffi.get_global_func(STORE_LAYOUT, allow_missing=True)
        print("COMPILE", inside is not None, after is None, kept is not None)
        raise SystemExit(0)
    register_store_layout()
    if sys.argv[1] == "plain":
        try:
            import tvm.s_tir.tensor_intrin  # noqa: F401
        except Exception as e:
            print("REFUSED", "already registered" in str(e))
        raise SystemExit(0)
    import_tvm_intrinsics()
    import_tvm_intrinsics()  # idempotent
    layout = tvm_ffi.get_global_func(STORE_LAYOUT)
    same = all([int(v) for v in layout([i, j])] == list(fragment_slot(i, j))
               for i in range(16) for j in range(16))
    print("IMPORTED", "tvm.s_tir.tensor_intrin.cuda" in sys.modules, same)
""")


def _probe(mode: str) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_tvm_intrinsics_import_after_ours_and_keep_the_same_layout():
    assert _probe("plain") == "REFUSED True"   # what a bare import does after ours
    assert _probe("ours-first") == "IMPORTED True True"


def test_a_compile_holds_our_layout_only_while_it_runs():
    assert _probe("compile") == "COMPILE True True True"
