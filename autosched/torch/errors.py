"""Errors raised by the torch integration.

They are `UserError`s (the CLI reports them on one line) and, for calls with the wrong
tensors, also the built-in exception that PyTorch users expect: a wrong shape or device is a
`ValueError`, a wrong dtype a `TypeError`.
"""
from ..errors import UserError


class LibraryError(UserError):
    """A kernel library that cannot be loaded here: missing files, a malformed manifest,
    another format, TVM runtime, target or machine."""


class KernelArgumentError(UserError, ValueError):
    """Tensors whose shapes or device match no kernel of the op."""


class KernelDtypeError(UserError, TypeError):
    """Tensors whose shapes match a kernel of the op but whose dtypes do not."""


class MissingBackwardError(UserError, RuntimeError):
    """A gradient was needed that no kernel of the library computes."""
