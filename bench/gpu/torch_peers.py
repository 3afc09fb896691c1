"""torch's own kernels (cuBLAS / cuDNN) timed the way the runner times ours: CUDA events
on a stream of its own, warm-up, L2 flushed between repeats, median of the repeats."""
from __future__ import annotations

import statistics


def l2_flush_buffer(device):
    """A buffer twice the GPU's L2 size: writing it evicts whatever the kernel left."""
    import torch

    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
    return torch.empty(2 * l2, dtype=torch.uint8, device=device)


def time_cuda(fn, args, repeat: int = 20, warmup: int = 3, flush: bool = True) -> dict:
    """Median seconds of `fn(*args)` over `repeat` launches, each timed with its own pair
    of events on a private stream, the L2 flushed before each."""
    import torch

    device = args[0].device
    stream = torch.cuda.Stream(device)
    scrub = l2_flush_buffer(device) if flush else None
    times = []
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn(*args)
        for _ in range(repeat):
            if scrub is not None:
                scrub.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            fn(*args)
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    return {"median_s": statistics.median(times), "min_s": min(times), "repeat": repeat,
            "warmup": warmup, "l2_flush": flush}


def peer_latency(peer, inputs_np, repeat: int = 20) -> dict:
    """Time torch's kernel for the case on its inputs (numpy arrays, workload order)."""
    import torch

    args = [_to_torch(a).cuda() for a in inputs_np]
    with torch.no_grad():
        return time_cuda(peer, args, repeat=repeat)


def _to_torch(a):
    """A torch tensor of a numpy array; bfloat16 (ml_dtypes, which torch cannot take)
    through its raw 16 bits."""
    import torch

    if str(a.dtype) == "bfloat16":
        return torch.from_numpy(a.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(a)
