"""Peers a kernel can be timed beside (`MeasureSettings.beside`) in the tests: torch's
matmul, counting its calls, so a test can tell how the kernel's and the peer's calls
alternated."""
from __future__ import annotations

CALLS = {"peer": 0}


def counting_matmul(workload: str, args: dict):
    """torch's A @ B for the matmul example's task (workload "matmul", M, N, K)."""
    import torch

    assert workload == "matmul" and set(args) >= {"M", "N", "K"}, (workload, args)

    def call(a, b):
        CALLS["peer"] += 1
        return torch.matmul(a, b)

    return call
