"""`autosched plan MODEL_FILE --stages S --micro-batches M --memory-budget B [-o plan.json]`.

The pipeline-parallel plan (autosched.runtime.pipeline.plan_pipeline): the model's layers
split into S stages run under 1F1B with M micro-batches (make_inputs() gives the whole
step's batch, split along dimension 0 into M as the pipeline runner splits it), each
layer's action, and BPipe transfers, fastest predicted within B bytes
of saved activations per device (--no-bpipe: without transfers, the plan a pipeline
without activation balancing gets). cli/plan.py hands over here when --stages is given;
the plan options it shares (--layers, --repeats, --threads, --clock) mean the same.
Prints the per-stage table; -o writes the plan document (runtime/pipeline/document.py).
"""
from __future__ import annotations

import argparse
import os

from ..errors import UserError
from .options import write_atomic


def check(args) -> None:
    """Bad input fails here, before the model is profiled."""
    from ..runtime.units import parse_budget

    if args.stages < 1:
        raise UserError(f"--stages must be >= 1, got {args.stages}")
    if args.micro_batches is None or args.micro_batches < 1:
        raise UserError("--stages needs --micro-batches M (M >= 1): the micro-batches "
                        "make_inputs()'s batch is split into")
    if args.micro_batches < args.stages:
        raise UserError(f"--stages {args.stages} --micro-batches {args.micro_batches}: 1F1B "
                        "needs at least as many micro-batches as stages")
    if "," in args.memory_budget:
        raise UserError("a pipeline plan takes one --memory-budget (per device)")
    parse_budget(args.memory_budget, 1)
    if args.compile:
        raise UserError("--compile is not offered for pipeline plans yet: the stages run "
                        "eagerly")
    if args.repeats < 1:
        raise UserError(f"--repeats must be >= 1, got {args.repeats}")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    if args.clock == "thread" and args.threads != 1:
        raise UserError("--clock thread sees only the calling thread: use it with --threads 1")
    if args.output and (os.path.isdir(args.output) or not os.path.isdir(
            os.path.dirname(os.path.abspath(args.output)))):
        raise UserError(f"-o {args.output}: a directory, or its folder does not exist")


def run(args: argparse.Namespace) -> int:
    """Profile, plan, print the table, write -o; returns the exit code (UserError
    propagates to the CLI)."""
    check(args)
    import torch

    from ..model.modelfile import load_model_file
    from ..runtime import PlanOptions
    from ..runtime.pipeline import plan_pipeline

    if args.threads:
        torch.set_num_threads(args.threads)
    spec = load_model_file(args.model_file)
    options = PlanOptions(layers=args.layers, allow_offload=False, repeats=args.repeats,
                          clock=args.clock)
    plan = plan_pipeline(spec.model, spec.inputs, args.stages, args.micro_batches,
                         args.memory_budget, spec.loss_fn, options,
                         bpipe=not args.no_bpipe,
                         interleave=() if args.no_interleave else (2,))
    print(plan.table())
    if args.output:
        write_atomic(args.output, plan.to_json())
        print(f"wrote {args.output}")
    return 0
