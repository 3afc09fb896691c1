"""Tuned kernel libraries as PyTorch custom ops: the floor under model/ and runtime/.

    import autosched.torch
    library = autosched.torch.load_library("mlp_kernels")      # once
    y = torch.ops.autosched.linear(x, w, b)

Each workload of the library becomes `torch.ops.autosched.<workload>`: it dispatches over
the library's shape variants, has a fake implementation for torch.compile, and, when the op
file paired it with backward workloads, an autograd formula that runs those kernels. The
loaded `KernelLibrary` is what everything above takes to use the kernels in a model:
`autosched.model.backend(library)` (torch.compile), `runtime.library_modules` (module
swap), `runtime.memeff_library_kernels(library)` (memory-efficient GELU). See
docs/torch.md. torch and tvm_ffi are imported when `load_library` or `KernelLibrary` is
first used.

Where things are:

    library.py     load_library(): a library directory -> KernelLibrary of bound ops
    manifest.py    manifest.json read and checked (KernelEntry, Manifest); no torch
    compat.py      does the library fit this process (versions, CPU / GPU, threads)
    loader.py      the compiled module loaded with tvm_ffi and TVM's runtime library
    dispatch.py    one op's shape variants and the choice among them per call
    ops.py         torch.library registration: schema, fake impl, autograd;
                   bound_kernels(workload): the variants an op runs now
    reference.py   the torch reference a `fallback=True` op runs for other shapes
    errors.py      LibraryError and the per-call kernel errors (UserErrors)
"""
from ..lazy import lazy_names
from .errors import KernelArgumentError, KernelDtypeError, LibraryError, MissingBackwardError

__all__ = ["KernelArgumentError", "KernelDtypeError", "KernelLibrary", "LibraryError",
           "MissingBackwardError", "bound_kernels", "load_library"]

# torch is imported on first use of these names, so the errors need no torch.
__getattr__ = lazy_names(__name__, {"KernelLibrary": ".library", "load_library": ".library",
                                     "bound_kernels": ".ops"})
