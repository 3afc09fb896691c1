"""A training step measured: its time on a chosen clock and the activation bytes it
saves for backward (the step itself is model/training_step.py).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..errors import UserError
from ..model.training_step import compute_loss, training_step, zero_grads
from .meter import SavedTensorMeter, model_state

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time, "thread": time.thread_time}


def clock_fn(clock: str):
    """'wall' (elapsed time), 'cpu' (this process's CPU time: on a shared machine it leaves
    out the time other processes hold the cores; equal to wall time for a single-threaded
    CPU step on an idle machine, meaningless for GPU work) or 'thread' (the calling thread's
    CPU time: also leaves out the process's other threads, such as a test suite's leftover
    pools or a server's poller; complete only when torch runs on one thread, since CPU
    forward and backward then run on the caller)."""
    if clock not in CLOCKS:
        raise UserError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}")
    if clock == "thread" and torch.get_num_threads() != 1:
        raise UserError(f"the 'thread' clock sees only the calling thread; torch runs on "
                        f"{torch.get_num_threads()} (use one: torch.set_num_threads(1), "
                        "--threads 1)")
    return CLOCKS[clock]


@dataclass(frozen=True)
class StepMeasurement:
    saved_bytes: int          # activation bytes on the device at the end of forward
    host_bytes: int           # activation bytes offloaded to host memory
    step_time_s: float        # median wall time of forward + backward
    times_s: tuple


def measure_step(model, inputs, loss_fn=None, repeats: int = 5, warmup: int = 1,
                 clock: str = "wall") -> StepMeasurement:
    """Saved-activation bytes (one metered step) and the median time of `repeats` steps."""
    now = clock_fn(clock)

    with SavedTensorMeter(model_state(model)) as meter:
        loss = compute_loss(model, inputs, loss_fn)
    loss.backward()
    del loss
    meter.release()
    for _ in range(warmup):
        training_step(model, inputs, loss_fn)
    times = []
    for _ in range(repeats):
        zero_grads(model)
        t0 = now()
        training_step(model, inputs, loss_fn)
        _sync(inputs)
        times.append(now() - t0)
    zero_grads(model)
    return StepMeasurement(meter.device_bytes, meter.host_bytes, statistics.median(times),
                           tuple(times))


def _sync(inputs) -> None:
    if torch.cuda.is_available() and any(isinstance(x, torch.Tensor) and x.is_cuda
                                         for x in inputs):
        torch.cuda.synchronize()
