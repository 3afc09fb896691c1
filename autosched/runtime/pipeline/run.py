"""`run_pipeline()`: one training step of a pipeline plan on torch.distributed, measured;
`compare_with_single_process()`: its gradients against the same step in one process.

    result = run_pipeline("examples/gpt.py", plan_doc, "work/")
    check = compare_with_single_process("examples/gpt.py", plan_doc, result)
    check.within, check.max_abs, check.max_rel

The plan's per-layer actions and BPipe transfers run in the stages (worker.py,
parking.py); each stage reports its saved-activation bytes, times and transfers.

The step's loss is the sum of the micro-batch losses (torch's Schedule1F1B with
scale_grads=False), each micro-batch's loss reduced as a single-device step reduces it
(model/training_step.compute_loss); the single-process step runs the same micro-batches,
split by torch's own splitter, one after another, accumulating gradients, on the same
number of threads, so the two differ only where the same fp32 arithmetic may round
differently (a reduction's order). The default tolerance, rtol 1e-4 and atol 1e-5,
is fp32 rounding over a few layers of reductions with room to spare, and far below what
a missing micro-batch, a dropped gradient or a wrong boundary would give (order 1
relative).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import UserError
from .launch import launch, read_plan

RTOL, ATOL = 1e-4, 1e-5


@dataclass(frozen=True)
class PipelineResult:
    """What one pipeline step measured. stages: each stage's measurements (worker.py's
    stage<r>.json: saved bytes per micro-batch, peak saved bytes alive, forward and
    backward times, losses on the last stage); grads: every parameter's gradient by
    qualified name, summed over the stages that hold it (a weight shared across stages
    gets every stage's part)."""

    stages: list
    grads: dict
    workdir: str

    @property
    def losses(self) -> list:
        return self.stages[-1]["losses"]

    @property
    def peak_saved_bytes(self) -> list:
        return [s["peak_saved_bytes"] for s in self.stages]


@dataclass(frozen=True)
class GradComparison:
    """Pipeline gradients against single-process ones: the largest absolute difference,
    the largest relative one (per parameter, max |difference| / max |reference|), the
    parameter where the relative one is, and whether every element is within
    |p - r| <= atol + rtol |r|."""

    max_abs: float
    max_rel: float
    worst: str
    within: bool
    rtol: float
    atol: float
    loss_diff: float


def run_pipeline(model_file: str, plan_doc: dict, workdir, *, seed: int = 0,
                 threads: int = 1, limit_s: float = 300.0, comm_timeout_s: float = 60.0,
                 warmup: int = 0, bound_parks: bool = True,
                 extra_env: dict | None = None, compile_budgets=None,
                 device: str = "cpu") -> PipelineResult:
    """Run one training step of `plan_doc` (a pipeline plan document, as a dict) on the
    model of `model_file`, one process per stage (launch.py), and collect what each
    stage measured. A failing or killed stage raises launch.StageFailure with one line
    naming it; a plan that does not fit the model raises UserError. warmup: unmeasured
    steps first (launch.launch), for step times; the gradients are the measured step's.
    bound_parks: a stage's forward waits for the BPipe parks the plan has ended by its
    start (parking.py), so the measured memory holds the plan's even on a link slower
    than planned (the default); False lets slow parks overlap later forwards.
    compile_budgets: per stage, the activation_memory_budget fraction its layers run
    compiled at (torch.compile's partitioner; compiled_stage.stage_compile_fractions
    chooses them for a budget); None: eager. device: "cpu" (gloo) or "cuda" (NCCL where
    every stage has its own GPU, else all on cuda:0 with gloo through host memory:
    placement.py); each stage then also reports device_peak_bytes, its allocator's
    peak over the step (torch.cuda.max_memory_allocated), beside the saved-activation
    meter, and its times are taken after synchronising its GPU. "cuda" where torch
    sees no GPU is a UserError before any process starts."""
    import numpy as np

    stages = launch(model_file, plan_doc, workdir, seed=seed, threads=threads,
                    limit_s=limit_s, comm_timeout_s=comm_timeout_s, warmup=warmup,
                    bound_parks=bound_parks, extra_env=extra_env,
                    compile_budgets=compile_budgets, device=device)
    grads: dict = {}
    for stage in range(len(stages)):
        with np.load(Path(workdir) / f"stage{stage}.npz", allow_pickle=False) as f:
            for name in f.files:
                grads[name] = grads[name] + f[name] if name in grads else f[name]
    return PipelineResult(stages, grads, str(workdir))


def single_process_step(model_file: str, micro_batches: int, *, seed: int = 0,
                        threads: int = 1):
    """The reference: ({parameter name: gradient}, [micro-batch losses]) of one step in
    this process, the micro-batches in order, gradients accumulated (torch's threads are
    set to `threads` for the step and restored)."""
    import torch
    from torch.distributed.pipelining.microbatch import split_args_kwargs_into_chunks

    from ...model.modelfile import load_model_file
    from ...model.training_step import compute_loss

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        spec = load_model_file(model_file)
        chunks, _ = split_args_kwargs_into_chunks(spec.inputs, {}, micro_batches)
        losses = []
        for inputs in chunks:
            loss = compute_loss(spec.model, inputs, spec.loss_fn)
            loss.backward()
            losses.append(float(loss.detach()))
    finally:
        torch.set_num_threads(before)
    grads = {n: p.grad.detach().numpy() for n, p in spec.model.named_parameters()
             if p.grad is not None}
    return grads, losses


def compare_with_single_process(model_file: str, plan_doc: dict, result: PipelineResult,
                                *, seed: int = 0, threads: int = 1, rtol: float = RTOL,
                                atol: float = ATOL) -> GradComparison:
    """`result`'s gradients and losses against the same step of the same model, inputs and
    seed in one process. A parameter with a gradient on one side only is a UserError
    naming it (the stages lost or invented a gradient)."""
    import numpy as np

    plan = read_plan(plan_doc)
    ref, ref_losses = single_process_step(model_file, plan.micro_batches, seed=seed,
                                          threads=threads)
    if set(ref) != set(result.grads):
        odd = sorted(set(ref) ^ set(result.grads))
        raise UserError(f"parameter {odd[0]} has a gradient in only one of the pipeline "
                        "and the single-process step")
    max_abs, max_rel, worst, within = 0.0, 0.0, "", True
    for name, r in ref.items():
        p = result.grads[name]
        diff = float(np.max(np.abs(p - r))) if r.size else 0.0
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
        within = within and bool(np.all(np.abs(p - r) <= atol + rtol * np.abs(r)))
        max_abs = max(max_abs, diff)
        if rel >= max_rel:
            max_rel, worst = rel, name
    loss_diff = max((abs(a - b) for a, b in zip(result.losses, ref_losses)), default=0.0)
    if len(result.losses) != len(ref_losses):
        loss_diff = float("inf")
    return GradComparison(max_abs, max_rel, worst, within, rtol, atol, loss_diff)
