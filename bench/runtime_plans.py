"""Plans against hand-written checkpointing strategies, side by side, one run.

    PYTHONPATH=. python bench/runtime_plans.py [--layers 6 --width 256 --seq 128 --batch 8]
                                               [--memeff-library logs/memeff_lib]
                                               [--device cuda --clock wall]

For the GPT example (fp32, one thread) at budgets of 100/60/40/25% of its activation
memory without checkpointing, every strategy is applied and measured in the same run:

* uniform           whole-layer checkpointing of the fewest evenly spaced layers that fit
* megatron          attention-core recomputation in every layer (Megatron-LM selective)
* megatron+uniform  attention core everywhere plus the fewest whole layers that fit
* plan              the MILP plan over on-device actions (keep, memeff_ln, memeff,
                    recompute_attention(+memeff_ln / +memeff), selective, recompute)
* plan+offload      the MILP plan with offload allowed. On the CPU host and device memory
                    are the same RAM: offload here stands in for a device with separate
                    host memory (the copies are real, the memory they free is not). With
                    `--device cuda` the offload is real: pinned host memory, copies on
                    their own stream
* reference         no checkpointing, measured in every group: its error column shows how
                    far the machine drifted from the profile (other processes' load)

With `--memeff-library DIR` the memory-efficient GELU runs the fused autosched kernel
(autosched/runtime/memeff/workloads.py) in the plans; when DIR has no library yet, the
GELU shape of this model is tuned (`--memeff-trials`) and exported there first. TVM's
thread pool gets the same thread count as torch.

Measured: saved-activation bytes (saved-tensor hooks) and the median step time over
rounds that interleave the strategies (the machine is shared and noisy); predicted:
the cost model's bytes and time. Gradients are compared with eager torch.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import gpt  # noqa: E402
import provenance  # noqa: E402
from baselines import all_baselines  # noqa: E402

from autosched.model import parameter_grads  # noqa: E402
from autosched.runtime import (PlanOptions, UserError, apply, apply_actions,  # noqa: E402
                               format_bytes, grad_error, measure_points,
                               memeff_library_kernels, plan, predict, profile_model,
                               short_actions)
from autosched.torch import load_library  # noqa: E402

BUDGETS = ("100%", "60%", "40%", "25%")
MEMEFF_OP_FILE = ROOT / "autosched" / "runtime" / "memeff" / "workloads.py"


def grads_of(model, inputs, original=None):
    """Gradients of the original's parameters (a planned model shares them)."""
    return parameter_grads(model, inputs, gpt.loss_fn, original)


def exact(ref, got) -> bool:
    try:
        for n, r in ref.items():
            torch.testing.assert_close(got[n], r)
        return True
    except AssertionError:
        return False


def ensure_memeff_library(directory: str, rows: int, width: int, trials: int) -> dict:
    """The fused GELU kernels of `directory`, tuned and exported there when missing."""
    from autosched.cli import main as autosched_main

    if not (Path(directory) / "manifest.json").exists():
        shape = ["--arg", f"M={rows}", "--arg", f"N={width}"]
        db = ["--db", f"sqlite:///{Path(directory).resolve()}.db"]
        op_file = str(MEMEFF_OP_FILE)
        if autosched_main(["tune", op_file, "--trials", str(trials), *shape, *db]) or \
                autosched_main(["export", op_file, "-o", directory, *shape, *db]):
            raise SystemExit("could not build the memory-efficient GELU library")
    return memeff_library_kernels(load_library(directory))


def candidates(model, inputs, profile, budget_spec, kernels):
    """(name, actions or None, note, plan or None) for every strategy at this budget."""
    budget = int(profile.keep_saved_bytes * float(budget_spec.rstrip("%")) / 100)
    out = [("reference", ["keep"] * len(profile.layers), "no checkpointing (drift check)",
            None)]
    out += [(b.name, b.actions, b.note, None) for b in all_baselines(profile, budget)]
    for name, offload in (("plan", False), ("plan+offload", True)):
        try:
            p = plan(model, inputs, budget_spec, gpt.loss_fn,
                     PlanOptions(kernels=kernels, allow_offload=offload), profile=profile)
        except UserError as e:
            out.append((name, None, str(e), None))
            continue
        out.append((name, p.actions, p.solver["status"], p))
    return budget, out


def build(model, profile, actions, p, kernels):
    if p is not None:
        return apply(model, p, kernels)
    cores = [layer.attention_cores for layer in profile.layers]
    return apply_actions(model, actions, profile.containers, cores)


def measure_all(models, inputs, rounds, steps, clock):
    """Interleaved rounds (autosched.runtime.measure_points): each strategy `steps` steps
    a round; (saved bytes, median step time over all rounds) per strategy."""
    points = {k: (m, {}) for k, m in models.items()}
    saved, odd, even = measure_points(points, inputs, gpt.loss_fn, rounds, steps, clock)
    return {k: (saved[k], statistics.median(odd[k] + even[k])) for k in models}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3, help="profile runs per layer and action")
    ap.add_argument("--rounds", type=int, default=3, help="at least 2")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--clock", default="cpu", choices=("cpu", "thread", "wall"),
                    help="cpu: process CPU time, robust on a shared machine (default)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--memeff-library", metavar="DIR",
                    help="fused memory-efficient GELU kernels (built here when missing)")
    ap.add_argument("--memeff-trials", type=int, default=32)
    ap.add_argument("--device", default="cpu",
                    help="cpu, or cuda: the model on the GPU, offload to pinned host memory "
                         "(use --clock wall there)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU here")
    if device.type == "cuda" and args.clock != "wall":
        raise SystemExit("--device cuda: a CPU clock does not see GPU time; use --clock wall")
    # the model and its inputs are made with gpt.make_model / make_inputs' seed 0
    stamp = provenance.stamp(seed=0, argv=None if argv is None else [__file__, *argv])
    print(provenance.header(stamp), flush=True)
    torch.set_num_threads(args.threads)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    kernels = {}
    if args.memeff_library:
        kernels = ensure_memeff_library(args.memeff_library, args.batch * args.seq,
                                        4 * args.width, args.memeff_trials)
        print(f"memory-efficient GELU kernel: {kernels['gelu'].id}")
    model = gpt.make_model(args.layers, args.width, args.heads, args.seq).to(device)
    inputs = tuple(x.to(device) for x in gpt.make_inputs(args.batch, args.seq))
    t0 = time.perf_counter()
    profile = profile_model(model, inputs, gpt.loss_fn, PlanOptions(
        allow_offload=True, repeats=args.repeats, clock=args.clock, kernels=kernels))
    print(f"device: {device}; clock: {args.clock}; threads: {args.threads}")
    print(f"profiled in {time.perf_counter() - t0:.0f} s; no checkpointing: "
          f"{format_bytes(profile.keep_saved_bytes)}, {profile.keep_step_time_s * 1e3:.0f} ms; "
          f"bandwidth {profile.bandwidth.d2h_bytes_per_s / 1e9:.1f} GB/s "
          f"({profile.bandwidth.source})")
    ref = grads_of(model, inputs)
    rows = []
    for spec in BUDGETS:
        budget, cands = candidates(model, inputs, profile, spec, kernels)
        models = {name: build(model, profile, acts, p, kernels) for name, acts, _, p in cands
                  if acts is not None}
        measured = measure_all(models, inputs, args.rounds, args.steps, args.clock)
        for name, acts, note, _ in cands:
            row = {"budget": spec, "budget_bytes": budget, "method": name, "note": note,
                   "actions": acts}
            if acts is not None:
                pred = predict(profile, acts)
                g = grads_of(models[name], inputs, model)
                row.update(saved=measured[name][0], time_s=measured[name][1],
                           pred_saved=pred.saved_bytes, pred_time_s=pred.step_time_s,
                           fits=measured[name][0] <= budget, grad_exact=exact(ref, g),
                           grad_rel_err=grad_error(ref, g))
            rows.append(row)
    report(rows)
    if args.json:
        provenance.write_json(args.json, {"rows": rows}, stamp)
    return 0


def report(rows) -> None:
    head = ("budget", "method", "actions", "saved", "fits", "pred saved", "ms", "pred ms",
            "err", "grads", "vs best baseline")
    lines = [head]
    for spec in BUDGETS:
        group = [r for r in rows if r["budget"] == spec]
        base = [r["time_s"] for r in group
                if r["method"] in ("uniform", "megatron", "megatron+uniform")
                and r.get("fits")]
        best = min(base) if base else None
        for r in group:
            if r["actions"] is None:
                lines.append((spec, r["method"], "-", "-", "-", "-", "-", "-", "-", "-",
                              r["note"]))
                continue
            err = (r["pred_time_s"] - r["time_s"]) / r["time_s"]
            grads = "exact" if r["grad_exact"] else f"rel {r['grad_rel_err']:.1e}"
            if not r["fits"] or r["method"] in ("uniform", "megatron", "megatron+uniform",
                                                "reference"):
                speed = ""
            else:
                speed = (f"{best / r['time_s']:.2f}x ({100 * (best - r['time_s']) / best:+.1f}%)"
                         if best else "no baseline fits")
            lines.append((f"{spec} = {format_bytes(r['budget_bytes'])}", r["method"],
                          short_actions(r["actions"]), format_bytes(r["saved"]),
                          "yes" if r["fits"] else "NO", format_bytes(r["pred_saved"]), f"{r['time_s'] * 1e3:.0f}",
                          f"{r['pred_time_s'] * 1e3:.0f}", f"{100 * err:+.1f}%", grads, speed))
    widths = [max(len(str(r[i])) for r in lines) for i in range(len(head))]
    for r in lines:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    print("actions: K keep, L memeff_ln, M memeff, A recompute_attention, AL A+L, AM A+M, "
          "S selective, R recompute, O offload, OL O+L, OM O+M")


if __name__ == "__main__":
    sys.exit(main())
