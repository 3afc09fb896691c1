"""Tuned kernel libraries as PyTorch custom ops.

    import autosched.torch
    lib = autosched.torch.load_library("mlp_kernels")
    y = torch.ops.autosched.linear(x, w, b)

Each workload of the library becomes `torch.ops.autosched.<workload>`: it dispatches over
the library's shape variants, has a fake implementation for torch.compile, and, when the op
file paired it with backward workloads, an autograd formula that runs those kernels.
`backend(DIR)` is a torch.compile backend that runs a model's operators on the kernels of
a library made by `autosched export-model` where they beat torch; it is also the
backend named "autosched" (`torch.compile(model, backend="autosched", options={"library":
DIR})`, see `named_backend`). See docs/torch.md.
"""
from .backend import AutoschedBackend, backend, explain
from .errors import (
    KernelArgumentError,
    KernelDtypeError,
    LibraryError,
    MissingBackwardError,
)
from .library import KernelLibrary, load_library
from .named_backend import backend_of

__all__ = ["AutoschedBackend", "KernelArgumentError", "KernelDtypeError", "KernelLibrary",
           "LibraryError", "MissingBackwardError", "backend", "backend_of", "explain",
           "load_library"]
