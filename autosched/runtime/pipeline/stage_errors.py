"""A stage process's failure as one line, and whose fault it was (worker.py writes them to
stage<r>.error; launch.py picks the line to report)."""
from __future__ import annotations

from ...errors import UserError


def error_kind(e: BaseException) -> str:
    """"user" for bad input, "peer" for a failed transfer (a peer stage vanished or hung:
    its own failure is the one to report), else "stage"."""
    import torch.distributed as dist

    while e.__cause__ is not None:
        e = e.__cause__
    if isinstance(e, UserError):
        return "user"
    if isinstance(e, (dist.DistError, ConnectionError)) or \
            any(w in str(e) for w in ("Connection closed", "Connection reset", "Timed out",
                                      "timed out", "Broken pipe", "gloo", "NCCL")):
        return "peer"
    return "stage"


def one_line(e: BaseException) -> str:
    """The root cause of `e` (torch's pipelining wraps a stage's error) on one line."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return text if isinstance(e, UserError) else f"{type(e).__name__}: {text}"
