"""`torch.compile(model, backend="autosched", options={"library": DIR})`: the backend of
`compile_backend.py` under the name torch looks up.

torch finds named backends outside its own tree through the `torch_dynamo_backends`
entry-point group (`torch._dynamo.backends.registry`); pyproject.toml lists `autosched`
there, pointing at `autosched_backend` below, so `torch._dynamo.list_backends()` names it
once autosched is installed, and nothing is registered by importing anything.

torch calls a named backend with `options` (and `mode`) as keyword arguments on every
graph it compiles, so the options are read there, not at `torch.compile`: a missing or
bad option is raised by the first call of the compiled model (dynamo wraps it in its
`BackendCompilerFailed`, whose `inner_exception` is ours). The options are those of
`autosched.model.backend(DIR, compiler, cudagraphs)`:

    library     (required) the directory `autosched export-model` wrote
    compiler    what compiles the operators left to torch: "auto" (default), "inductor",
                "eager"
    cudagraphs  True to capture and replay the compiled step with torch's CUDA graph
                trees (False by default); torch.compile takes `mode` or `options`, not
                both, so this option is the backend's "reduce-overhead"

All graphs compiled with equal options share one `AutoschedBackend` (one library load,
one list of decisions): `backend_of(options)` returns it, for `explain`. It is dropped by
`torch._dynamo.reset()`, so a library exported again is loaded again after a reset.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError
from ..torch.errors import LibraryError
from .compile_backend import AutoschedBackend

BACKEND_NAME = "autosched"
COMPILERS = ("auto", "inductor", "eager")
OPTIONS = ("library", "compiler", "cudagraphs")
USAGE = ("torch.compile(model, backend='autosched', options={'library': DIR}) with DIR "
         "what `autosched export-model` wrote")


def read_options(options, mode=None) -> tuple[str, str, bool]:
    """(library directory, compiler, cudagraphs) from torch.compile's `options`; a missing
    or bad one is one `UserError` line (a missing library is a `LibraryError`)."""
    if mode == "reduce-overhead":
        raise UserError("the autosched backend takes no mode; for CUDA graphs pass "
                        "options={'library': DIR, 'cudagraphs': True}")
    if mode is not None:
        raise UserError(f"the autosched backend takes no mode (got {mode!r}); use {USAGE}")
    if options is None:
        raise LibraryError(f"the autosched backend needs a library: {USAGE}")
    if not isinstance(options, dict):
        raise UserError(f"the autosched backend's options are a dict, not "
                        f"{type(options).__name__}: {USAGE}")
    unknown = sorted(str(k) for k in options if k not in OPTIONS)
    if unknown:
        raise UserError(f"the autosched backend has no option {', '.join(map(repr, unknown))}; "
                        f"it takes 'library' (required), 'compiler' "
                        f"({', '.join(COMPILERS)}) and 'cudagraphs' (True, False)")
    library = options.get("library")
    if library is None:
        raise LibraryError(f"the autosched backend needs a library: {USAGE}")
    if not isinstance(library, (str, os.PathLike)) or not str(library):
        raise LibraryError(f"the autosched backend's 'library' is a directory path, not "
                           f"{library!r}")
    compiler = options.get("compiler", "auto")
    if compiler not in COMPILERS:
        raise UserError(f"the autosched backend's 'compiler' is one of "
                        f"{', '.join(COMPILERS)}, not {compiler!r}")
    cudagraphs = options.get("cudagraphs", False)
    if not isinstance(cudagraphs, bool):
        raise UserError(f"the autosched backend's 'cudagraphs' is True or False, not "
                        f"{cudagraphs!r}")
    return os.fspath(library), compiler, cudagraphs


class NamedBackend:
    """The callable torch registers as "autosched": one `AutoschedBackend` per library,
    compiler and cudagraphs choice, made on the first graph compiled with them."""

    def __init__(self):
        self.__name__ = BACKEND_NAME  # what dynamo's messages call the backend
        self._backends: dict[tuple[str, str, bool], AutoschedBackend] = {}

    def __call__(self, gm, example_inputs, options=None, mode=None):
        return self.backend_of(options, mode)(gm, example_inputs)

    def backend_of(self, options, mode=None) -> AutoschedBackend:
        """The backend that compiles the graphs of `torch.compile(..., options=options)`."""
        library, compiler, cudagraphs = read_options(options, mode)
        key = (str(Path(library).resolve()), compiler, cudagraphs)
        if key not in self._backends:
            self._backends[key] = AutoschedBackend(library, compiler, cudagraphs)
        return self._backends[key]

    def reset(self) -> None:
        """Forget the backends (torch._dynamo.reset() calls this)."""
        self._backends.clear()


# the entry point `autosched` of the `torch_dynamo_backends` group (pyproject.toml)
autosched_backend = NamedBackend()


def backend_of(options) -> AutoschedBackend:
    """The `AutoschedBackend` behind `torch.compile(model, backend="autosched",
    options=options)`: the same instance, so `explain(backend_of(options))` lists the
    decisions of those compiles."""
    return autosched_backend.backend_of(options)
