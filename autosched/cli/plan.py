"""`autosched plan MODEL_FILE --memory-budget 40%[,25%] [--compile] [--device cuda] [-o FILE]`.

The model file defines make_model() and make_inputs() (and optionally loss_fn(output));
see autosched/model/modelfile.py. By default the command makes the measured choice
(autosched.runtime.choose): our plans for each budget, and with --compile the compiled
plans and torch.compile's partitioner points, are built and timed side by side, and per
budget the fastest that fits as measured is chosen; it prints the choice as a table and
writes it as JSON with -o (with the plan documents of the chosen plans, for apply() or
compile_planned()). --solver-only prints the solver's plan alone (profile and
solve, no candidates measured: fast) and writes the plan file with -o. With --device cuda
the model and its inputs are moved to the GPU first: offloading to pinned host memory is
offered (copies on side streams, the prefetch started a layer ahead), steps are timed in
wall time (the CPU clocks do not see the GPU's work), and the measured memory of each
chosen point is torch.cuda.max_memory_allocated over one step. torch is imported only
when the command runs.
"""
from __future__ import annotations

import argparse
import os

from ..errors import UserError
from .options import write_atomic

DEVICES = ("cpu", "cuda")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `plan` command to the main CLI's subparsers."""
    p = subparsers.add_parser("plan", help="choose per-layer keep/recompute/offload under a "
                              "memory budget")
    p.add_argument("model_file", help="Python file defining make_model() and make_inputs()")
    p.add_argument("--memory-budget", required=True, metavar="SIZE[,SIZE...]",
                   help="saved-activation budget: 2GiB, 512MiB, 1.5GB, bytes, or 60%% "
                        "(of the activation memory without checkpointing); the measured "
                        "choice takes several, comma-separated")
    p.add_argument("-o", "--output", metavar="FILE.json",
                   help="write the choice (with --solver-only: the plan) here")
    p.add_argument("--solver-only", action="store_true",
                   help="the solver's plan alone, from predictions (fast): no candidates "
                        "built and measured")
    p.add_argument("--rounds", type=int, default=40,
                   help="measured choice: interleaved timing rounds (chosen on the odd "
                        "ones, reported on the even ones)")
    p.add_argument("--layers", metavar="ATTR[,ATTR...]",
                   help="modules whose children are the layers, comma-separated in the "
                        "order they run (default: the outermost ModuleList/Sequential "
                        "containers whose children each run once a step)")
    p.add_argument("--allow-offload", choices=("auto", "yes", "no"), default="auto",
                   help="offer offloading to host memory (auto: on CUDA only)")
    p.add_argument("--time-limit", type=float, default=10.0, help="solver seconds")
    p.add_argument("--gap", type=float, default=1e-3, help="solver relative MIP gap")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per layer and action")
    p.add_argument("--threads", type=int, help="torch CPU threads while profiling")
    p.add_argument("--clock", choices=("wall", "cpu", "thread"), default="wall",
                   help="time measurements in wall time, process CPU time or the calling "
                        "thread's CPU time (with --threads 1)")
    p.add_argument("--compile", action="store_true",
                   help="measured choice: also the compiled candidates (our plans compiled, "
                        "torch.compile at partitioner budgets; minutes of compiling); with "
                        "--solver-only: cost the actions compiled (the plan is for "
                        "autosched.runtime.compiled_plans.compile_planned(model, plan), "
                        "which compiles under the layout the profile measured best)")
    p.add_argument("--model-library", metavar="DIR",
                   help="with --compile: a library of `autosched export-model --train`; the "
                        "plan is costed (and meant to be compiled) with "
                        "autosched.model.backend(DIR), the operators on its tuned kernels")
    p.add_argument("--memeff-library", metavar="DIR",
                   help="exported library of autosched/runtime/memeff/workloads.py: the "
                        "memory-efficient GELU runs (and is measured with) its fused kernel")
    p.add_argument("--stages", type=int, metavar="S",
                   help="a pipeline-parallel plan of S stages under 1F1B (per-device "
                        "budget; BPipe transfers where they pay)")
    p.add_argument("--micro-batches", type=int, metavar="M",
                   help="with --stages: micro-batches make_inputs()'s batch is split into")
    p.add_argument("--no-bpipe", action="store_true", help="with --stages: no BPipe transfers")
    p.add_argument("--no-interleave", action="store_true",
                   help="with --stages: 1F1B only (by default interleaved 1F1B with two "
                        "virtual stages per device is chosen where it is predicted faster)")
    p.add_argument("--device", choices=DEVICES, default="cpu",
                   help="where the model trains: cuda moves the model and its inputs to the "
                        "GPU (needs --clock wall; offload to pinned host memory offered)")
    return p


def check_device(args) -> None:
    """Flags that need another flag, and what --device cuda needs, before any import of
    torch (the GPU itself is checked in run, where torch is imported)."""
    if args.stages is None:
        given = [f for f, v in (("--micro-batches", args.micro_batches is not None),
                                ("--no-bpipe", args.no_bpipe),
                                ("--no-interleave", args.no_interleave)) if v]
        if given:
            raise UserError(f"{' and '.join(given)} only apply to a pipeline plan: add "
                            "--stages S")
    if args.device == "cuda":
        if args.stages is not None:
            raise UserError("--device cuda: pipeline plans (--stages) are profiled on the "
                            "CPU for now; leave --device out")
        if args.clock != "wall":
            raise UserError(f"--device cuda --clock {args.clock}: a CPU clock does not see "
                            "the GPU's work; use --clock wall")


def _check(args) -> None:
    from ..runtime.units import parse_budget

    for budget in _budgets(args):          # fail on a malformed budget before profiling
        parse_budget(budget, 1)
    if args.solver_only and len(_budgets(args)) != 1:
        raise UserError("--solver-only makes one plan: give one --memory-budget")
    if not args.solver_only and args.rounds < 2:
        raise UserError(f"--rounds must be >= 2 (choose on odd, report even), got "
                        f"{args.rounds}")
    if args.time_limit <= 0:
        raise UserError(f"--time-limit must be > 0, got {args.time_limit}")
    if not 0 <= args.gap < 1:
        raise UserError(f"--gap must be in [0, 1), got {args.gap}")
    if args.repeats < 1:
        raise UserError(f"--repeats must be >= 1, got {args.repeats}")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    if args.clock == "thread" and args.threads != 1:
        raise UserError("--clock thread sees only the calling thread: use it with --threads 1")
    if args.memeff_library and not os.path.isfile(
            os.path.join(args.memeff_library, "manifest.json")):
        raise UserError(f"--memeff-library {args.memeff_library}: no manifest.json there "
                        "(make one with `autosched export`)")
    if args.model_library and not args.compile:
        raise UserError("--model-library: the kernels serve compiled plans; add --compile")
    if args.model_library and not os.path.isfile(
            os.path.join(args.model_library, "model_ops.json")):
        raise UserError(f"--model-library {args.model_library}: no model_ops.json there "
                        "(make one with `autosched export-model --train`)")
    if args.output and os.path.isdir(args.output):
        raise UserError(f"-o {args.output}: is a directory")
    if args.output and not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        raise UserError(f"-o {args.output}: folder "
                        f"{os.path.dirname(os.path.abspath(args.output))} does not exist")


def _budgets(args) -> list[str]:
    return [b.strip() for b in args.memory_budget.split(",")]


def run(args: argparse.Namespace) -> int:
    """Profile, then choose by measurement (or plan alone), print; returns the exit code
    (UserError propagates to the CLI)."""
    check_device(args)
    if args.stages is not None:
        from .pipeline_plan import run as run_pipeline
        return run_pipeline(args)
    _check(args)
    import torch

    from ..model.modelfile import load_model_file
    from ..runtime import ChoiceOptions, PlanOptions, choose, plan

    if args.threads:
        torch.set_num_threads(args.threads)
        # the library's kernels get as many threads as torch (their pool starts on first use)
        os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    device = _device(torch, args.device)
    spec = load_model_file(args.model_file)
    model = spec.model.to(device)
    inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in spec.inputs)
    kernels = _memeff_kernels(args.memeff_library) if args.memeff_library else None
    offload = {"auto": None, "yes": True, "no": False}[args.allow_offload]
    options = PlanOptions(layers=args.layers, allow_offload=offload,
                          time_limit_s=args.time_limit, mip_gap=args.gap,
                          repeats=args.repeats, clock=args.clock, kernels=kernels)
    if args.solver_only:
        result = plan(model, inputs, args.memory_budget, spec.loss_fn,
                      options.replace(compile=args.compile,
                                      backend=_backend(args.model_library)))
    else:
        result = choose(model, inputs, _budgets(args), spec.loss_fn, ChoiceOptions(
            plan=options, compile=args.compile, rounds=args.rounds,
            kernels_backend=_backend(args.model_library) if args.model_library else None))
    print(result.table())
    if device.type == "cuda" and not args.solver_only:
        print(peak_memory_lines(result))
    if args.output:
        write_atomic(args.output, result.to_json())
        print(f"wrote {args.output}")
    return 0


def _device(torch, name: str):
    """torch.device(name); --device cuda where torch sees no GPU is bad input."""
    if name == "cuda" and not torch.cuda.is_available():
        built = (f"built with CUDA {torch.version.cuda}" if torch.version.cuda
                 else "a CPU-only build")
        raise UserError(f"--device cuda: torch {torch.__version__} ({built}) sees no CUDA "
                        "GPU here; use --device cpu")
    return torch.device(name)


def peak_memory_lines(choice) -> str:
    """Per budget, the chosen point's measured peak: torch.cuda.max_memory_allocated over
    one step (parameters, gradients and what the step allocates), as choose() measured it."""
    from ..runtime.units import format_bytes

    peaks = {r["point"]: r.get("peak_allocated") for r in choice.points}
    lines = ["measured memory (torch.cuda.max_memory_allocated over one step):"]
    for spec in choice.budgets:
        answer = choice.answer(spec)
        peak = peaks.get(answer["chosen"]) if answer else None
        lines.append(f"  {spec}: " + ("nothing measured fits" if answer is None else
                                      f"{answer['chosen']} peaks at "
                                      + ("-" if peak is None else format_bytes(peak))))
    return "\n".join(lines)


def _backend(model_library: str | None):
    """inductor, or autosched's backend over an export-model library."""
    if model_library is None:
        return "inductor"
    from ..model import backend
    from ..torch.errors import LibraryError

    try:
        return backend(model_library)
    except LibraryError as e:
        raise UserError(f"--model-library {model_library}: {e}") from None


def _memeff_kernels(directory: str) -> dict:
    from ..runtime.memeff.library import GELU_WORKLOAD, memeff_library_kernels
    from ..torch import LibraryError, load_library

    try:
        kernels = memeff_library_kernels(load_library(directory))
    except LibraryError as e:
        raise UserError(f"--memeff-library {directory}: {e}") from None
    if not kernels:
        raise UserError(f"--memeff-library {directory}: the library has no {GELU_WORKLOAD} "
                        "kernels")
    return kernels
