"""Train a small MLP on the CPU with autosched kernels in the forward and backward passes.

The model is linear -> GELU -> linear, trained with SGD on a regression task whose targets
come from a fixed random "teacher" network. The same model is trained twice from the same
initial weights and batches: once with `torch.ops.autosched.linear` / `gelu` (their
gradients run the library's backward kernels), once with eager torch. The script prints both
loss curves, their final relative difference and the step time of each.

Without --library the script tunes the MLP's ten kernels itself (`--trials`, shared by
all of them; the default only measures each kernel's default schedule, enough for the loss
comparison, not for speed) into WORK_DIR/autosched.db and exports them to WORK_DIR/kernels:

    python examples/train_mlp.py --trials 640 --work-dir mlp_work

or tune and export with the CLI and pass the library:

    autosched tune examples/nn_ops.py --target llvm --trials 640 \\
        --workload linear --workload linear_grad_x --workload linear_grad_w \\
        --workload linear_grad_b --workload gelu --workload gelu_grad
    autosched export examples/nn_ops.py --target llvm -o mlp_kernels  (same --workload list)
    python examples/train_mlp.py --library mlp_kernels

A library must hold the shapes of --batch, --d-in, --hidden, --d-out; nn_ops.py's default
variants are this script's defaults.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Shapes:
    batch: int = 128
    d_in: int = 64
    hidden: int = 256
    d_out: int = 16


def init_params(shapes: Shapes, seed: int) -> list[torch.Tensor]:
    """w1, b1, w2, b2 with the usual uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) init."""
    g = torch.Generator().manual_seed(seed)

    def uniform(*size, fan_in):
        bound = fan_in ** -0.5
        return (torch.rand(*size, generator=g) * 2 - 1) * bound

    return [uniform(shapes.hidden, shapes.d_in, fan_in=shapes.d_in),
            uniform(shapes.hidden, fan_in=shapes.d_in),
            uniform(shapes.d_out, shapes.hidden, fan_in=shapes.hidden),
            uniform(shapes.d_out, fan_in=shapes.hidden)]


def make_batches(shapes: Shapes, n_batches: int, seed: int) -> list[tuple]:
    """Inputs and teacher targets: y = tanh(2 x @ T) for a fixed random T."""
    g = torch.Generator().manual_seed(seed + 1)
    teacher = torch.randn(shapes.d_in, shapes.d_out, generator=g) / shapes.d_in ** 0.5
    batches = []
    for _ in range(n_batches):
        x = torch.randn(shapes.batch, shapes.d_in, generator=g)
        batches.append((x, torch.tanh(2 * x @ teacher)))
    return batches


MLP_WORKLOADS = ("linear", "linear_grad_x", "linear_grad_w", "linear_grad_b", "gelu",
                 "gelu_grad")


def kernel_args(shapes: Shapes) -> list[tuple[str, dict]]:
    """(workload, arguments) of every kernel that training the MLP runs."""
    layers = [{"M": shapes.batch, "N": shapes.hidden, "K": shapes.d_in},
              {"M": shapes.batch, "N": shapes.d_out, "K": shapes.hidden}]
    out = [(w, dict(a)) for w in MLP_WORKLOADS[:3] for a in layers]
    out += [("linear_grad_b", {"M": a["M"], "N": a["N"]}) for a in layers]
    out += [(w, {"M": shapes.batch, "N": shapes.hidden}) for w in ("gelu", "gelu_grad")]
    return out


def build_library(shapes: Shapes, work_dir: str, trials: int) -> str:
    """Tune the MLP's kernels (at least each one's default schedule) and export them."""
    from autosched.config import TuneConfig
    from autosched.exporting import export_tasks
    from autosched.tuner import tune_tasks
    from autosched.workload import load_op_file, make_task

    defs = load_op_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), "nn_ops.py"))
    pairs = [(defs[w], dict(defs[w].params, **a)) for w, a in kernel_args(shapes)]
    tasks = [make_task(d, a) for d, a in pairs]
    db = f"sqlite:///{os.path.abspath(work_dir)}/autosched.db"
    config = TuneConfig(target="llvm", trials=max(trials, len(tasks)), db_url=db,
                        work_dir=work_dir)
    tune_tasks(tasks, config)
    library = os.path.join(work_dir, "kernels")
    export_tasks(tasks, "llvm", library, db, [d.meta for d, _ in pairs])
    return library


def autosched_ops():
    return torch.ops.autosched.linear, torch.ops.autosched.gelu


def eager_ops():
    return (torch.nn.functional.linear,
            lambda x: torch.nn.functional.gelu(x, approximate="tanh"))


def train(ops, shapes: Shapes, steps: int, lr: float = 0.05, seed: int = 0):
    """Train from a fixed initialisation; returns (loss per step, median seconds per step)."""
    linear, gelu = ops
    params = [p.requires_grad_() for p in init_params(shapes, seed)]
    opt = torch.optim.SGD(params, lr=lr, momentum=0.9)
    batches = make_batches(shapes, 8, seed)
    losses, times = [], []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        start = time.perf_counter()
        w1, b1, w2, b2 = params
        pred = linear(gelu(linear(x, w1, b1)), w2, b2)
        loss = torch.nn.functional.mse_loss(pred, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    warm = times[min(5, len(times) - 1):]
    return losses, statistics.median(warm)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--library", help="kernel library directory (autosched export); "
                   "without it the kernels are tuned and exported into --work-dir")
    p.add_argument("--trials", type=int, default=0, help="tuning trials without --library")
    p.add_argument("--work-dir", default="mlp_work")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch", type=int, default=Shapes.batch)
    p.add_argument("--d-in", type=int, default=Shapes.d_in)
    p.add_argument("--hidden", type=int, default=Shapes.hidden)
    p.add_argument("--d-out", type=int, default=Shapes.d_out)
    args = p.parse_args(argv)
    import autosched.torch

    shapes = Shapes(args.batch, args.d_in, args.hidden, args.d_out)
    library = args.library or build_library(shapes, args.work_dir, args.trials)
    lib = autosched.torch.load_library(library)
    missing = {"linear", "gelu"} - set(lib.ops)
    if missing:
        print(f"error: {library} lacks workloads {sorted(missing)}", file=sys.stderr)
        return 2
    ours, t_ours = train(autosched_ops(), shapes, args.steps, args.lr)
    eager, t_eager = train(eager_ops(), shapes, args.steps, args.lr)
    print(f"{'step':>6} {'autosched':>12} {'eager torch':>12}")
    for step in sorted({*range(0, args.steps, max(1, args.steps // 10)), args.steps - 1}):
        print(f"{step:>6} {ours[step]:>12.6f} {eager[step]:>12.6f}")
    rel = abs(ours[-1] - eager[-1]) / abs(eager[-1])
    worst = max(abs(a - b) / abs(b) for a, b in zip(ours, eager))
    print(f"final loss relative difference: {rel:.2e} (largest over all steps: {worst:.2e})")
    print(f"step time: autosched {t_ours * 1e3:.3f} ms, eager torch {t_eager * 1e3:.3f} ms "
          f"(autosched/eager = {t_ours / t_eager:.2f}x, {torch.get_num_threads()} torch threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
