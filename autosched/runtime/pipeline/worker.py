"""One pipeline stage's process: its part of the model, a 1F1B training step, its results.

Started by launch.py under torchrun (RANK, WORLD_SIZE, MASTER_ADDR/PORT in the
environment); rank r runs stage r. The step is torch.distributed.pipelining's
Schedule1F1B over a PipelineStage (an interleaved plan: ScheduleInterleaved1F1B over
one PipelineStage per chunk r, r + S, ...) on gloo or NCCL (placement.py), so the
schedule, its sends and receives and its gradient accumulation are torch's own; we
contribute the stage's module and meters.

The stage's module is the whole model with its layers (runtime/layers.py: the children
of the block containers) replaced where needed (StageModel below): layers before
the stage are skipped, the last one before it returns the activation received from the
previous stage, and the stage's last layer ends the forward by raising its output, so
everything before the first layer (embeddings) runs on stage 0 and everything after the
last (head, loss) on the last stage. Other stages run the part before the layers without
gradients (its result is discarded, and it saves nothing), so a boundary must sit where
one tensor flows from a layer to the next: checked on the first micro-batch.

The stage's layers run under the plan's actions through apply_plan.apply_actions; the
plan's BPipe transfers through parking.py, around each forward and backward. With a
compile budget (the run's, one fraction per stage: --compile-budgets), the stage's layers
are built for compilation and each runs under torch.compile with AOTAutograd's
partitioner at that activation_memory_budget (compile_layers; compiled_stage.py).
Measured (stage_meter.py): per micro-batch the bytes autograd saves for backward in the
stage's forward (selective checkpoint caches included), the bytes saved and still alive
at any moment (their peak over the step is the stage's activation memory, parked bytes
counted where they are), each op's start, wall and CPU time (this thread's: the compute
alone on a shared machine), and each transfer's bytes, start and end.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import torch
from torch import nn

from ...errors import UserError
from ...model.modelfile import load_model_file
from ..apply_plan import apply_actions
from ..layers import CallCapture, containers_spec, find_layers, tensors_in
from ..memeff import fusable_cores
from ..meter import model_state, storage_key
from ..module_tree import replace_submodule
from ..trace import attention_cores, trace_ops
from .launch import atomic_write, read_plan
from .measured_stage import measured_stage, stage_result
from .placement import DeviceClock, placement, staged_module
from .stage_errors import error_kind, one_line
from .stage_meter import LiveBytes

# Test hook: a stage index; that stage's process exits abruptly (os._exit(9)) at its
# first backward, as a stage killed mid-step would.
KILL_ENV = "AUTOSCHED_PIPELINE_TEST_KILL_STAGE"


class _StageOutput(BaseException):
    """Carries the stage's last layer output out of the model's forward (BaseException:
    a model's own `except Exception` must not swallow it)."""

    def __init__(self, value):
        super().__init__()
        self.value = value


class _Skip(nn.Module):
    """A layer of an earlier stage: passes its first argument through, computes nothing."""

    def forward(self, x, *args, **kwargs):
        return x


class _Inject(nn.Module):
    """The last layer before the stage: returns the activation received for it, and turns
    gradients back on (the part before it ran without them)."""

    def __init__(self):
        super().__init__()
        self.value, self.grad = None, True

    def forward(self, *args, **kwargs):
        torch.set_grad_enabled(self.grad)
        return self.value


class _Cut(nn.Module):
    """The stage's last layer (not on the last stage): runs it and ends the forward."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        raise _StageOutput(self.inner(*args, **kwargs))


class StageModel(nn.Module):
    """The model as stage `stage` of `plan` runs it (parameters shared with `model`).
    Stage 0 takes the model's inputs as arguments; a later stage takes the received
    activation, and the model's inputs as keywords input0, input1, ... The last stage
    returns the loss (model/training_step.compute_loss's: `loss_fn`, then a sum if not
    a scalar), so what the loss saves is metered with the stage, as on one device."""

    def __init__(self, model: nn.Module, plan, stage: int, calls: dict, loss_fn=None,
                 compile_budget: float | None = None):
        super().__init__()
        self.loss_fn = loss_fn
        layers = find_layers(model, None)
        names = [layer.name for layer in layers]
        if names != list(plan.layers):
            i = next((i for i, (a, b) in enumerate(zip(names, plan.layers)) if a != b),
                     min(len(names), len(plan.layers)))
            raise UserError(f"the plan is for {len(plan.layers)} layers, the model has "
                            f"{len(names)}; they differ at position {i} (plan "
                            f"{_at(plan.layers, i)}, model {_at(names, i)})")
        spec = containers_spec(layers)
        lo, hi = plan.boundaries[stage], plan.boundaries[stage + 1]
        actions = [a if lo <= i < hi else "keep" for i, a in enumerate(plan.actions)]
        cores, fused = _attention_parts(layers, actions, calls)
        self.planned = apply_actions(model, actions, spec, cores, fused_attention=fused,
                                     compile=compile_budget is not None)
        if compile_budget is not None:
            compile_layers(self.planned, [layer.name for layer in layers[lo:hi]],
                           compile_budget)
        self.first, self.last = stage == 0, stage == plan.stages - 1
        self.inject = _Inject()
        self.input_keys: set = set()     # storages of the last forward's inputs
        # the model's inputs where the caller gives none (torch's shape inference of a
        # rank's later chunk under interleaving): shapes only, the result is discarded
        self.default_inputs: tuple = ()
        for i, layer in enumerate(layers[:lo]):
            replace_submodule(self.planned, layer.name, self.inject if i == lo - 1 else _Skip())
        if not self.last:
            name = layers[hi - 1].name
            replace_submodule(self.planned, name, _Cut(self.planned.get_submodule(name)))

    def forward(self, *args, **kwargs):
        self.input_keys = {storage_key(t) for t in tensors_in((args, kwargs))}
        if self.first:
            inputs = args
        else:
            self.inject.value = args[0]
            inputs = tuple(kwargs[f"input{i}"] for i in range(len(kwargs))) if kwargs \
                else self.default_inputs
        grad = self.inject.grad = torch.is_grad_enabled()
        torch.set_grad_enabled(self.first and grad)
        try:
            out = self.planned(*inputs)
        except _StageOutput as stop:
            out = stop.value
        finally:
            torch.set_grad_enabled(grad)
            self.inject.value = None
        if self.last:
            out = self.loss_fn(out) if self.loss_fn is not None else out
            if not isinstance(out, torch.Tensor):
                raise UserError(f"the loss must be a tensor, got {type(out).__name__}; "
                                "give a loss_fn that reduces the model output to one")
            return out if out.dim() == 0 else out.sum()
        if not isinstance(out, torch.Tensor):
            raise UserError(f"a stage must end in one tensor; its last layer returned "
                            f"{type(out).__name__}")
        return out


def compile_layers(planned: nn.Module, names, fraction: float) -> None:
    """Each layer `names` of `planned` replaced by torch.compile of it, partitioned at
    activation_memory_budget `fraction` (one backend for all the stage's layers)."""
    from ..compiled_plans import partitioner_backend

    backend = partitioner_backend(float(fraction))
    for name in names:
        replace_submodule(planned, name, torch.compile(planned.get_submodule(name),
                                                       backend=backend))


def _at(names, i) -> str:
    return repr(names[i]) if i < len(names) else "none"


def _attention_parts(layers, actions, calls) -> tuple[list, list]:
    """Per layer, its attention cores and fusable cores where its action needs them."""
    cores, fused = [[] for _ in layers], [{} for _ in layers]
    for i, (layer, action) in enumerate(zip(layers, actions)):
        if "attention" in action:
            call = calls[layer.name]
            cores[i] = attention_cores(layer.module, trace_ops(layer.module, call.args,
                                                               call.kwargs))
            if "fused" in action:
                fused[i] = fusable_cores(layer.module, cores[i], call.args, call.kwargs)
    return cores, fused


def check_boundaries(plan, calls: dict) -> None:
    """Each stage boundary must pass exactly one tensor: the layer after it receives the
    layer before it's output and nothing else."""
    for b in plan.boundaries[1:-1]:
        before, after = calls[plan.layers[b - 1]], calls[plan.layers[b]]
        out = before.output
        got = tensors_in((after.args, after.kwargs))
        if not isinstance(out, torch.Tensor) or len(got) != 1 or \
                storage_key(got[0]) != storage_key(out):
            raise UserError(f"no stage boundary can sit before layer {plan.layers[b]}: it "
                            f"receives {len(got)} tensor(s), not only {plan.layers[b - 1]}'s "
                            "output; move the boundary")


def _loss(output, _target):
    """The schedule's loss function: the last stage already returns the loss."""
    return output


def run_stage(model_file: str, workdir: Path, rank: int, world: int, seed: int,
              comm_timeout_s: float, kill: bool, warmup: int = 0,
              bound_parks: bool = False, compile_budget: float | None = None,
              device: str = "cpu", local_rank: int = 0) -> None:
    """Stage `rank`'s part of one training step, after `warmup` unmeasured ones (their
    gradients cleared); writes stage<rank>.npz and .json. bound_parks: Parking's
    `bound` (a forward waits for the parks in flight). compile_budget: the stage's
    layers compiled at this activation_memory_budget (None: eager). device: "cpu" or
    "cuda" (placement.py: the backend and this rank's device)."""
    import numpy as np
    import torch.distributed as dist
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B,
                                              ScheduleInterleaved1F1B)
    from torch.distributed.pipelining.microbatch import split_args_kwargs_into_chunks

    plan = read_plan(json.loads((workdir / "plan.json").read_text()))
    if world != plan.stages:
        raise UserError(f"the plan has {plan.stages} stages, torchrun started {world}")
    gpus = torch.cuda.device_count() if device == "cuda" else 0
    place = placement(device, local_rank, world, gpus)
    clock = DeviceClock(place)
    dist.init_process_group(place.backend, timeout=timedelta(seconds=comm_timeout_s))
    torch.manual_seed(seed)
    spec = load_model_file(model_file)
    model = spec.model.to(place.compute)
    inputs = tuple(x.to(place.comm) if isinstance(x, torch.Tensor) else x
                   for x in spec.inputs)
    micro, _ = split_args_kwargs_into_chunks(inputs, {}, plan.micro_batches)
    micro = [tuple(x.to(place.compute) if isinstance(x, torch.Tensor) else x for x in m)
             for m in micro]
    with torch.no_grad(), CallCapture(find_layers(model, None)) as capture:
        model(*micro[0])
    calls = capture.single_calls()
    check_boundaries(plan, calls)
    chunks = replace(plan, stages=plan.stages * plan.virtual)    # chunk c: rank c % S
    stages = []
    for c in range(rank, chunks.stages, world):
        stage_model = StageModel(model, chunks, c, calls, spec.loss_fn, compile_budget)
        stage_model.default_inputs = micro[0]
        stages.append(measured_stage(PipelineStage)(
            staged_module(stage_model, place), c, chunks.stages, torch.device(place.comm),
            clock=clock, exclude=model_state(model), kill=kill))
    stage = stages[0]
    schedule = Schedule1F1B(stage, plan.micro_batches, loss_fn=_loss, scale_grads=False) \
        if plan.virtual == 1 else ScheduleInterleaved1F1B(
            stages, plan.micro_batches, loss_fn=_loss, scale_grads=False)
    side = (dist.new_group(backend="gloo", timeout=timedelta(seconds=comm_timeout_s))
            if plan.transfers else None)
    target = torch.zeros(plan.micro_batches, device=place.comm)
    kw = {f"input{i}": x for i, x in enumerate(inputs)}
    for step in range(warmup + 1):
        # warm-up steps: torch's first step also infers shapes and opens the links
        for p in model.parameters():
            p.grad = None
        losses = []
        dist.barrier()
        live = LiveBytes()
        for s in stages:
            s.start_step(plan, rank, side, bound_parks, live)
        if rank == 0:
            schedule.step(*inputs, target=target, losses=losses, return_outputs=False)
        else:
            schedule.step(target=target, losses=losses, return_outputs=False, **kw)
        stage.parking.finish(comm_timeout_s)
        clock.sync()
        step_s = time.perf_counter() - stage.t0
    dist.barrier()
    dist.destroy_process_group()
    grads = {n: p.grad.detach().cpu().numpy() for n, p in model.named_parameters()
             if p.grad is not None}
    with open(workdir / f".stage{rank}.npz.tmp", "wb") as f:
        np.savez(f, **grads)
    os.replace(workdir / f".stage{rank}.npz.tmp", workdir / f"stage{rank}.npz")
    result = stage_result(plan, rank, stages, step_s, losses)
    result.update(compile_budget=compile_budget, device=place.compute,
                  backend=place.backend, staged_through_host=place.staged,
                  device_peak_bytes=clock.peak(), device_base_bytes=stage.base_bytes)
    atomic_write(workdir / f"stage{rank}.json", json.dumps(result).encode())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-file", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--comm-timeout-s", type=float, default=60.0)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--bound-parks", action="store_true")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--compile-budgets", default="",
                   help="comma-separated activation_memory_budget fractions, one per stage")
    a = p.parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    kill = os.environ.get(KILL_ENV) == str(rank)
    workdir = Path(a.workdir)
    torch.set_num_threads(a.threads)
    try:
        budgets = [float(f) for f in a.compile_budgets.split(",")] if a.compile_budgets \
            else None
        run_stage(a.model_file, workdir, rank, world, a.seed, a.comm_timeout_s, kill,
                  a.warmup, a.bound_parks, budgets[rank] if budgets else None, a.device,
                  int(os.environ.get("LOCAL_RANK", rank)))
    except BaseException as e:          # noqa: BLE001 - every failure becomes one line
        line = one_line(e)
        record = {"kind": error_kind(e), "message": line[:300], "time": time.time(),
                  "traceback": traceback.format_exc()[-4000:]}
        atomic_write(workdir / f"stage{rank}.error", json.dumps(record).encode())
        return 2 if isinstance(e, UserError) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
