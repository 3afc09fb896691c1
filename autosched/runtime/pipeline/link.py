"""The point-to-point link between pipeline stages: its default, and how to measure one.

A message of n bytes takes n / bytes_per_s + latency_s (costs.Link). `measure_link()`
finds both for torch.distributed with gloo between two processes on this host (loopback):
rank 0 sends tensors of several sizes to rank 1, which answers with a one-element tensor;
with each size's fastest round trip of `repeats` (the least disturbed by other work on
the host), the latency is half the smallest size's (a send and its answer) and the
bandwidth the bytes between the smallest and largest sizes over their time difference.
`default_link()` is what plan_pipeline assumes when given none: gloo on loopback, as
`python bench/pipeline_link.py` measures it (its result file records the runs, the
command, commit and versions). Another link (NCCL between GPUs, gloo across hosts) is
another number: measure the link that runs the plan, and pass it.
"""
from __future__ import annotations

import os
import socket
import tempfile

from .costs import Link

# gloo over loopback, two processes on one host: the median of the runs of
# bench/pipeline_link.py, rounded
GLOO_LOOPBACK = Link(bytes_per_s=2.6e9, latency_s=5e-5,
                     source="gloo loopback, 2 processes (python bench/pipeline_link.py)")

SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 22, 1 << 24)


def default_link() -> Link:
    return GLOO_LOOPBACK


def measure_link(backend: str = "gloo", sizes=SIZES, repeats: int = 15) -> Link:
    """Measure the link between two processes on this host (seconds; a few)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times.txt")
        mp.spawn(_worker, args=(backend, _free_port(), tuple(sizes), repeats, out),
                 nprocs=2, join=True)
        with open(out, encoding="utf-8") as f:
            points = [tuple(map(float, line.split())) for line in f if line.strip()]
    (n0, t0), (n1, t1) = min(points), max(points)
    # each timing is a send and a one-element answer: the smallest is two latencies
    return Link((n1 - n0) / (t1 - t0) if t1 > t0 else float("inf"), t0 / 2,
                f"{backend} loopback, 2 processes, measured")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, backend: str, port: int, sizes: tuple, repeats: int, out: str):
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    try:
        ack = torch.zeros(1)
        lines = []
        for n in sizes:
            buf = torch.ones(n // 4)
            times = []
            for _ in range(repeats + 1):             # the first is a warm-up
                if rank == 0:
                    t0 = time.perf_counter()
                    dist.send(buf, 1)
                    dist.recv(ack, 1)
                    times.append(time.perf_counter() - t0)
                else:
                    dist.recv(buf, 0)
                    dist.send(ack, 0)
            if rank == 0:
                lines.append(f"{n} {min(times[1:])}\n")
        if rank == 0:
            with open(out, "w", encoding="utf-8") as f:
                f.writelines(lines)
    finally:
        dist.destroy_process_group()
