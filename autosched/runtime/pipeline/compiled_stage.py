"""Pipeline stages compiled with torch.compile at a memory-budget fraction per stage:
the peer a user would run instead of our plan (torch's 1F1B, each stage's layers under
AOTAutograd's partitioner at torch._functorch.config.activation_memory_budget).

    fractions = stage_compile_fractions("gpt.py", plan_doc, budget_bytes)
    run_pipeline("gpt.py", plan_doc, "work/", compile_budgets=[f.fraction for f in fractions])

The runner's side (worker.compile_layers, launch.check_fractions) lives with the runner;
this module chooses the fractions.

How a stage runs compiled (worker.StageModel with compile_budget, worker.compile_layers):
the stage's layers are built for compilation (apply_actions(..., compile=True)) and each
is wrapped in torch.compile with one partitioner backend per stage
(compiled_plans.partitioner_backend at the stage's fraction). The layers are compiled one
by one, not the stage as one graph: a stage's module ends by raising its last layer's
output and skips the layers of other stages, control flow a single graph cannot hold;
the partitioner's budget is a fraction of each graph's own range (what it saves between
its least and its most), so one fraction over a stage's layers is the stage's fraction.
What lies outside the layers (embeddings, head, loss) runs eager, as in the other runs.

Measured the same way: AOTAutograd's compiled function saves its tensors with
ctx.save_for_backward, which calls the saved-tensor hooks, so worker.py's StageMeter
counts a compiled graph's saved tensors as it counts eager ones (the test checks the
meter's bytes against the saved tensors of the graph's backward node).

How the fraction is chosen (stage_compile_fractions): per stage, in this one process, the
stage compiled at a fraction runs the forwards of the micro-batches it holds at once
under 1F1B (min(S - s, M) for stage s: its warm-up forwards, before its first backward)
under one meter; their saved storages together are the stage's peak of saved bytes. The
fraction is the largest whose measured bytes fit the per-device budget, found by
bisection on [0, 1] (choose_fraction): 1 if it fits, none if 0 does not, else `steps`
halvings keeping a fraction that measured within. The partitioner's bytes need not fall
monotonically with the fraction, so the answer is the largest found, and always one
measured to fit.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import UserError


@dataclass(frozen=True)
class FractionChoice:
    """A stage's fraction and what it measured: its held micro-batches' saved bytes
    together; tried: (fraction, bytes) in the order measured."""

    fraction: float | None       # None: no fraction fits (0 measured over)
    saved_bytes: int
    held_micro_batches: int
    tried: tuple


def choose_fraction(measure, limit_bytes: int, steps: int = 5) -> tuple:
    """(fraction, bytes): the largest fraction in [0, 1] found whose `measure(fraction)`
    (saved bytes) is at most `limit_bytes`; 1 if 1 fits, (None, bytes at 0) if 0 does
    not, else bisection: `steps` halvings of the interval between a fitting fraction and
    one over, so the answer is a multiple of 2**-steps. Also returns the tries made."""
    tried = []

    def at(f):
        b = int(measure(f))
        tried.append((f, b))
        return b

    top = at(1.0)
    if top <= limit_bytes:
        return 1.0, top, tuple(tried)
    low_bytes = at(0.0)
    if low_bytes > limit_bytes:
        return None, low_bytes, tuple(tried)
    lo, hi = 0.0, 1.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        b = at(mid)
        if b <= limit_bytes:
            lo, low_bytes = mid, b
        else:
            hi = mid
    return lo, low_bytes, tuple(tried)


def stage_compile_fractions(model_file: str, plan_doc: dict, budget_bytes: int, *,
                            steps: int = 5, seed: int = 0, threads: int = 1,
                            log=None) -> list[FractionChoice]:
    """Per stage of `plan_doc` (its boundaries and actions), the largest fraction whose
    compiled stage's saved bytes, over the micro-batches it holds under 1F1B, fit
    `budget_bytes` (see the module docstring). Runs in this process, one stage after
    another; torch's compiled variants are dropped after each try."""
    import torch
    from torch.distributed.pipelining.microbatch import split_args_kwargs_into_chunks

    from ...model.modelfile import load_model_file
    from ..compiled_plans import forget_compiled_variants
    from ..layers import CallCapture, find_layers
    from ..meter import SavedTensorMeter, model_state
    from .launch import read_plan
    from .worker import StageModel, check_boundaries

    plan = read_plan(plan_doc)
    if plan.virtual > 1:
        raise UserError("compile budgets are chosen for 1F1B plans; this plan is "
                        "interleaved")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        spec = load_model_file(model_file)
        model = spec.model
        micro, _ = split_args_kwargs_into_chunks(spec.inputs, {}, plan.micro_batches)
        calls = []
        for m in micro:
            with torch.no_grad(), CallCapture(find_layers(model, None)) as capture:
                model(*m)
            calls.append(capture.single_calls())
        check_boundaries(plan, calls[0])
        out = []
        for s in range(plan.stages):
            held = min(plan.stages - s, plan.micro_batches)

            def measure(fraction, s=s, held=held):
                stage = StageModel(model, plan, s, calls[0], spec.loss_fn,
                                   compile_budget=fraction)
                try:
                    with SavedTensorMeter(model_state(model)) as meter:
                        results = [_stage_forward(stage, plan, s, micro[j], calls[j])
                                   for j in range(held)]
                    del results
                    meter.release()
                    return meter.device_bytes
                finally:
                    forget_compiled_variants()

            fraction, nbytes, tried = choose_fraction(measure, budget_bytes, steps)
            out.append(FractionChoice(fraction, nbytes, held, tried))
            if log:
                log(f"stage {s}: fraction {fraction} saves {nbytes} B over {held} "
                    f"micro-batches (tried {tried})")
        return out
    finally:
        torch.set_num_threads(before)


def _stage_forward(stage, plan, s: int, inputs, calls):
    """Stage `s`'s forward of one micro-batch, as the worker's PipelineStage calls it:
    stage 0 the model's inputs; a later stage the activation its predecessor sends (a
    fresh leaf that needs its gradient) and the inputs as keywords."""
    if s == 0:
        return stage(*inputs)
    act = calls[plan.layers[plan.boundaries[s] - 1]].output
    kw = {f"input{i}": x for i, x in enumerate(inputs)}
    return stage(act.detach().clone().requires_grad_(True), **kw)
