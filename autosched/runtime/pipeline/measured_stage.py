"""A pipeline stage that measures itself, and its measurements as worker.py writes them.

measured_stage(PipelineStage) meters and times each micro-batch's forward and backward
(stage_meter.py) and carries out the stage's parking (parking.py) around them. A rank
of an interleaved plan runs several such stages (its chunks) sharing one LiveBytes, so
its peak is the rank's activation memory whichever chunks are in flight.
"""
from __future__ import annotations

import os
import time

import torch

from ..layers import tensors_in
from ..meter import storage_key
from .parking import Parking
from .stage_meter import LiveBytes, StageMeter


def measured_stage(base):
    """A `base` (PipelineStage) subclass that meters and times each micro-batch's compute
    and carries out the stage's parking (parking.py) around it."""

    class MeasuredStage(base):
        def __init__(self, *args, exclude=(), kill=False, clock=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.exclude, self.kill, self.clock = exclude, kill, clock

        def start_step(self, plan, rank: int, side_group, bound: bool,
                       live: LiveBytes | None = None) -> None:
            """Fresh meters and transfers for the step about to run (`live`: a count
            shared with the rank's other stages)."""
            self.live = live if live is not None else LiveBytes()
            self.saved, self.fwd, self.bwd, self.waited = [], [], [], []
            self.base_bytes = self.clock.reset_peak()
            self.t0 = time.perf_counter()
            self.parking = Parking(plan, rank, side_group, self.live, self.t0, bound,
                                   self.clock)

        def _times(self, t0, c0):
            self.clock.sync()
            return (t0 - self.t0, time.perf_counter() - t0, time.thread_time() - c0,
                    self.live.alive)

        def forward_one_chunk(self, fwd_chunk_id, *args, **kwargs):
            self.parking.op_start(("F", fwd_chunk_id))
            self.clock.sync()
            t0, c0 = time.perf_counter(), time.thread_time()
            with StageMeter(self.exclude, self.live) as meter:
                out = super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)
            meter.release()
            self.live.end_forward((self.stage_index, fwd_chunk_id))
            self.fwd.append(self._times(t0, c0))
            self.saved.append(meter.device_bytes)
            keep = {storage_key(t) for t in tensors_in(out)} | self.submod.input_keys
            self.parking.park(fwd_chunk_id, meter.held, keep)
            meter.held.clear()
            return out

        def backward_one_chunk(self, bwd_chunk_id, *args, **kwargs):
            if self.kill:
                os._exit(9)
            self.parking.op_start(("B", bwd_chunk_id))
            self.waited.append(self.parking.before_backward(bwd_chunk_id))
            self.clock.sync()
            t0, c0 = time.perf_counter(), time.thread_time()
            out = super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)
            self.live.end_backward((self.stage_index, bwd_chunk_id))
            self.bwd.append(self._times(t0, c0))
            return out

    return MeasuredStage


def stage_result(plan, rank: int, stages: list, step_s: float, losses) -> dict:
    """Rank `rank`'s measurements (times in seconds; "*_start_s" from the step's start,
    "*_cpu_s" this thread's CPU time: the compute alone on a shared machine). `stages`:
    its MeasuredStage objects (several under interleaving): per micro-batch lists are
    then sums over its chunks (starts: the earliest), per-chunk lists under "chunks"."""
    b = plan.boundaries
    spans = [range(b[s.stage_index], b[s.stage_index + 1]) for s in stages]
    first = stages[0]
    out = {"stage": rank, "layers": [plan.layers[i] for r in spans for i in r],
           "actions": [plan.actions[i] for r in spans for i in r],
           "micro_batches": plan.micro_batches,
           "saved_bytes_per_micro_batch": _per_mb([s.saved for s in stages], sum),
           "peak_saved_bytes": first.live.peak,
           "step_s": step_s, "losses": [float(x) for x in losses],
           "backward_waited_s": first.waited, "transfers": first.parking.records,
           "park_waited_s": first.parking.park_waited,
           "threads": torch.get_num_threads()}
    for kind, times in (("forward", [s.fwd for s in stages]),
                        ("backward", [s.bwd for s in stages])):
        for i, key in enumerate(("start_s", "s", "cpu_s")):
            out[f"{kind}_{key}"] = _per_mb([[t[i] for t in ts] for ts in times],
                                           min if i == 0 else sum)
        out[f"after_{kind}_alive_bytes"] = [t[3] for t in times[0]] if len(stages) == 1 \
            else []
    if len(stages) > 1:
        out["chunks"] = [{"chunk": s.stage_index, "saved_bytes_per_micro_batch": s.saved,
                          **{f"{k}_{q}": [t[i] for t in ts]
                             for k, ts in (("forward", s.fwd), ("backward", s.bwd))
                             for i, q in ((0, "start_s"), (1, "s"), (2, "cpu_s"))}}
                         for s in stages]
    return out


def _per_mb(lists: list, combine) -> list:
    """Per micro-batch (list position), `combine` over the lists."""
    return list(lists[0]) if len(lists) == 1 else [combine(v) for v in zip(*lists)]
