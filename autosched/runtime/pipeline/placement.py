"""Where a pipeline stage runs and how it talks: CPUs with gloo, GPUs with NCCL.

    place = placement("cuda", local_rank=1, world=2, gpus=2)
    place.backend, place.compute, place.comm, place.side      # "nccl", "cuda:1", ...

- device "cpu": every stage computes on the CPU, the schedule's sends and receives and
  BPipe's transfers go over gloo.
- device "cuda" with at least as many GPUs as stage processes on the node: stage r
  computes on cuda:LOCAL_RANK and the schedule's sends and receives are NCCL's, between
  GPU tensors.
- device "cuda" with fewer GPUs (one GPU showing a 2-stage plan): every stage computes on
  cuda:0. NCCL refuses two ranks on one GPU ("Duplicate GPU detected", by design since
  NCCL 2.5), so the schedule's sends and receives go over gloo, staged through host
  memory: the stage's module takes its input on the CPU, copies it to the GPU, and hands
  its output back on the CPU (Staged below; autograd carries the gradients the same way).
  Such a run shows correctness and memory; its times carry the copies and the sharing.

BPipe's transfers (parking.py) always use a side gloo group with host staging: a parked
micro-batch is copied to the host, sent, received into host memory and copied onto the
light stage's device (and back the same way). gloo rather than NCCL because the
transfers run on their own threads, concurrent with the schedule's communication, which
a second NCCL communicator would serialise against the compute stream unless given its
own streams and ordering, and because NCCL cannot serve the shared-GPU case at all. The
cost is a device-host copy each way, which the transfer's measured times include.

Where torch sees no GPU, device "cuda" is refused (check_device) before any process starts.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import UserError

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Placement:
    """One stage process's placement: the default group's backend, the device its layers
    compute on, the device the schedule's sends and receives carry tensors on, and the
    side group's backend (BPipe's transfers)."""

    backend: str
    compute: str
    comm: str
    side: str = "gloo"

    @property
    def staged(self) -> bool:
        """Whether the stage's boundary tensors cross the host (compute != comm)."""
        return self.compute != self.comm

    @property
    def cuda(self) -> bool:
        return self.compute.startswith("cuda")


def placement(device: str, local_rank: int, world: int, gpus: int) -> Placement:
    """Stage process `local_rank` of `world` on this node, given `gpus` visible GPUs."""
    if device not in DEVICES:
        raise UserError(f"device {device!r} is not one of {', '.join(DEVICES)}")
    if device == "cpu":
        return Placement("gloo", "cpu", "cpu")
    if gpus < 1:
        raise UserError("device cuda: torch sees no GPU here (torch.cuda.is_available() "
                        "is False); use device cpu")
    if gpus >= world:
        return Placement("nccl", f"cuda:{local_rank}", f"cuda:{local_rank}")
    return Placement("gloo", "cuda:0", "cpu")


def check_device(device: str) -> int:
    """The number of GPUs torch sees, for `device`; a UserError line (before any process
    starts) for an unknown device, or for "cuda" where torch sees none."""
    if device not in DEVICES:
        raise UserError(f"device {device!r} is not one of {', '.join(DEVICES)}")
    if device == "cpu":
        return 0
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    placement(device, 0, 1, gpus)
    return gpus


def staged_module(inner, place: Placement):
    """`inner` (a stage's module) as the schedule sees it: inputs arrive on `place.comm`
    and are copied to `place.compute`, the output leaves on `place.comm` (autograd copies
    the gradients back the same way); `inner` itself when the two are one device."""
    if not place.staged:
        return inner
    import torch
    from torch import nn

    def move(x, device):
        return x.to(device) if isinstance(x, torch.Tensor) else x

    class Staged(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        @property
        def input_keys(self):
            return inner.input_keys

        def forward(self, *args, **kwargs):
            args = tuple(move(a, place.compute) for a in args)
            kwargs = {k: move(v, place.compute) for k, v in kwargs.items()}
            return move(inner(*args, **kwargs), place.comm)

    return Staged()


class DeviceClock:
    """Synchronises the stage's GPU before a time is read (CUDA work is asynchronous),
    and reads its allocator's peak; on the CPU both are no-ops."""

    def __init__(self, place: Placement):
        self.place = place
        self.device = None
        if place.cuda:
            import torch

            self.device = torch.device(place.compute)
            torch.cuda.set_device(self.device)

    def sync(self) -> None:
        if self.device is not None:
            import torch

            torch.cuda.synchronize(self.device)

    def reset_peak(self) -> int:
        """Start a fresh allocator peak; the bytes allocated now (parameters, gradients,
        the model's inputs)."""
        if self.device is None:
            return 0
        import torch

        self.sync()
        torch.cuda.reset_peak_memory_stats(self.device)
        return int(torch.cuda.memory_allocated(self.device))

    def peak(self) -> int:
        """torch.cuda.max_memory_allocated since reset_peak (0 on the CPU)."""
        if self.device is None:
            return 0
        import torch

        self.sync()
        return int(torch.cuda.max_memory_allocated(self.device))
