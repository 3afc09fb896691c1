"""Skips for tests that read SASS without a GPU: nvcc compiles, cuobjdump disassembles
(the pip package nvidia-cuda-cuobjdump, found by autosched.measure.cuda.sass)."""
from __future__ import annotations

import pytest


def skip_without_cuobjdump() -> None:
    """Skip the calling test where cuobjdump cannot be found."""
    from autosched.measure.cuda import sass

    if not sass.available():
        pytest.skip("needs cuobjdump (pip install nvidia-cuda-cuobjdump)")
