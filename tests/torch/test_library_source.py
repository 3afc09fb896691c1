"""A library's kernels can be read from the library itself: export writes each kernel's
scheduled TIR beside it (and a CUDA library's source and SASS), and
`KernelLibrary.source` returns the one kernel asked for."""
from __future__ import annotations

import json
import re

import pytest

import autosched.torch as at
from autosched import exporting as export
from autosched.target import resolve_target
from autosched.torch.errors import LibraryError
from autosched.torch.kernel_text import CUDA_FUNCTION, SASS_FUNCTION, functions_of
from search_space import generate_space

SELECTION = {"gelu": [{"M": 8, "N": 16}], "linear": [{"M": 8, "N": 6, "K": 4},
                                                    {"M": 16, "N": 12, "K": 8}]}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from support.torch_library import make_tasks

    tasks, metas = make_tasks(SELECTION)
    target = resolve_target("llvm")
    choices = []
    for t in tasks:
        cand = generate_space(t, target).default_candidate()
        choices.append(export.KernelChoice(cand.to_json(), None, None))
    out = tmp_path_factory.mktemp("lib") / "lib"
    export.write_library(tasks, choices, target, str(out), metas)
    return out, tasks, choices, target


def test_each_kernel_reads_back_as_the_tir_it_was_built_from(exported):
    import tvm
    import tvm_ffi
    from search_space import Candidate

    out, tasks, choices, target = exported
    lib = at.load_library(out)
    symbols = export.kernel_symbols(tasks)
    manifest = json.loads((out / export.MANIFEST_NAME).read_text())
    assert [k["source"] for k in manifest["kernels"]] == \
        [{"tir": f"source/{s}.py"} for s in symbols]
    assert manifest["source"] == {}   # a CPU library has no CUDA text
    variants = {}
    for task, choice, sym in zip(tasks, choices, symbols):
        index = variants.setdefault(task.workload, 0)
        variants[task.workload] += 1
        text = lib.source(task.workload, variant=index)
        parsed = tvm.script.from_source(text)
        built = generate_space(task, target).apply(Candidate.from_json(choice.candidate))
        assert tvm_ffi.structural_equal(parsed[sym],
                                       built["main"].with_attr("global_symbol", sym),
                                        map_free_vars=True)
    assert variants == {"gelu": 1, "linear": 2}


def test_missing_text_is_one_clear_error(exported):
    out, *_ = exported
    lib = at.load_library(out)
    with pytest.raises(LibraryError, match="llvm library; only CUDA ones have cuda"):
        lib.source("gelu", "cuda")
    with pytest.raises(LibraryError, match="unknown kernel text 'ptx'"):
        lib.source("gelu", "ptx")
    with pytest.raises(LibraryError, match="variant 2 of 2"):
        lib.source("linear", variant=2)
    with pytest.raises(LibraryError, match="no workload 'conv'"):
        lib.source("conv")


def test_a_manifest_naming_a_path_outside_the_library_is_refused(exported, tmp_path):
    import shutil

    out, *_ = exported
    copy = tmp_path / "lib"
    shutil.copytree(out, copy)
    path = copy / export.MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["kernels"][0]["source"] = {"tir": "../../etc/passwd"}
    path.write_text(json.dumps(manifest))
    with pytest.raises(LibraryError, match="must be a path inside the library directory"):
        at.load_library(copy)


CUDA = """#include <cuda_fp16.h>
#define X 1
extern "C" __global__ void __launch_bounds__(128) mm_kernel(float* a) {
  a[0] = 1;
}

extern "C" __global__ void __launch_bounds__(64) mm_kernel_1(float* a) {
  a[1] = 2;
}

extern "C" __global__ void __launch_bounds__(64) gelu_kernel(float* a) {
  a[2] = 3;
}
"""

SASS = """
Fatbin elf code:
================
arch = sm_90a
\tcode for sm_90a
\t\tFunction : gelu_kernel
        /*0000*/  MOV R1, c[0x0][0x28] ;
\t\t..........

\t\tFunction : mm_kernel
        /*0000*/  IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;
\t\t..........
"""


def test_one_kernels_functions_are_cut_from_the_librarys_cuda_and_sass():
    cuda = functions_of(CUDA, CUDA_FUNCTION, "mm_kernel")
    assert cuda.startswith("#include <cuda_fp16.h>\n#define X 1\n")
    assert re.findall(r"void __launch_bounds__\(\d+\) (\w+)", cuda) == ["mm_kernel",
                                                                       "mm_kernel_1"]
    assert "gelu_kernel" not in cuda
    sass = functions_of(SASS, SASS_FUNCTION, "mm_kernel")
    assert "code for sm_90a" in sass and "Function : mm_kernel" in sass
    assert "gelu_kernel" not in sass and "IMAD.MOV.U32" in sass and "MOV R1, c" not in sass
    # no function of that name: the whole text, nothing hidden
    assert functions_of(CUDA, CUDA_FUNCTION, "conv_kernel") == CUDA
