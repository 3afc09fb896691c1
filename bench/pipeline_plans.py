"""Pipeline plans on CPUs with gloo, side by side with torch's own pipeline schedule.

    python bench/pipeline_plans.py [--models gpt,mlp] [--stages 2,4] [--micro-batches 8]
                                   [--repeats 3] [--out bench/results/pipeline_plans.json]
                                   [--device cpu|cuda]

For each model (the GPT-style example at a bench-sized config; a residual MLP) and stage
count, one profile (one micro-batch, one thread, the thread's CPU clock) is planned:

- the budget B per device: the least fraction of the predicted keep-everything peak at
  which the BPipe plan recomputes nothing (it parks instead) while the plan without
  BPipe must recompute somewhere; where there is none (BPipe has no option with 2
  stages), 85% of that peak;
- runs, one training step each after one warm-up step, one torchrun process per stage on
  gloo: our plan at B, our plan at B without BPipe (`--no-bpipe`), and the peers at the
  same per-stage budget: torch's Schedule1F1B with no checkpointing (the runner with
  every layer "keep" and no transfers is exactly that schedule: the same PipelineStage
  and Schedule1F1B, nothing else), and with uniform checkpointing (every layer
  "recompute"), both on an even split of the layers, and with torch.compile's memory
  budget per stage (`torch_1f1b_compile_budget`: the same even split, every layer kept
  and compiled, each stage's layers under AOTAutograd's partitioner at the largest
  activation_memory_budget fraction whose measured saved bytes, over the micro-batches
  the stage holds under 1F1B, fit B: stage_compile_fractions, a bisection measured in
  this process, a compile per try; the fractions and every try are in the result);
- each run's gradients against the same micro-batches in one process (run.RTOL, ATOL),
  each stage's measured peak of saved-activation bytes against B, BPipe's transfers as
  recorded (bytes, start and end from the step's start);
- step times three ways: predicted (the plan's simulation of the profile), simulated
  from measured (each stage's median forward / backward CPU time of this thread, fed to
  the same schedule.simulate with the plan's transfers and boundary sends; once more
  with each transfer's measured median link time), and the measured wall time, which
  on two shared cores carries the processes' competition;
- the single-device plan (autosched.runtime.plan) at B on one micro-batch, M of them
  accumulated, where it fits: predicted and measured on one thread.

The plans here are 1F1B ones (interleave=()): the comparison is BPipe's against its
peers at one schedule.

--device cuda (the device script, default --stages 2 and out pipeline_plans_cuda.json):
the same plans, profiled on the CPU, run with every stage process on the GPU
(run_pipeline(device="cuda"): with one GPU both stages share it, their sends staged
through host memory over gloo, since NCCL refuses two ranks on one GPU); only ours and
torch_1f1b_keep, each stage's allocator peak (device_peak_bytes, beside the saved-
activation meter) and the gradients against one process on the CPU. With the stages
sharing one GPU this shows correctness and memory only: its times carry the sharing and
the host copies and say nothing of a multi-GPU pipeline's speed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402
from model_library import write_model  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "pipeline_plans.json"
GPT = ({"n_layer": 8, "d_model": 128, "n_head": 4, "seq_len": 64, "vocab": 256},
       {"batch": 8, "seq_len": 64, "vocab": 256})
MLP = '''
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1, self.act, self.fc2 = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.ln(x))))

class ResidualMLP(nn.Module):
    def __init__(self, d=256, depth=8, classes=16):
        super().__init__()
        self.inp = nn.Linear(64, d)
        self.blocks = nn.Sequential(*[Block(d) for _ in range(depth)])
        self.out = nn.Linear(d, classes)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))

def make_model():
    torch.manual_seed(0)
    return ResidualMLP()

def make_inputs():
    return torch.randn(512, 64, generator=torch.Generator().manual_seed(1))

def loss_fn(out):
    return out.pow(2).mean()
'''


def model_file(work: Path, name: str) -> Path:
    if name == "gpt":
        return write_model(work, "gpt", *GPT)
    path = work / "bench_mlp.py"
    path.write_text(MLP)
    return path


def even(layers: int, stages: int) -> list[int]:
    return [round(i * layers / stages) for i in range(stages + 1)]


def peer(doc: dict, action: str) -> dict:
    """torch's own 1F1B on an even split, every layer under `action`, no transfers."""
    layers = doc["layers"]
    return dict(doc, boundaries=even(len(layers), doc["stages"]), transfers=[],
                actions={n: action for n in layers}, predicted={})


def choose_budget(plan_at, stages: int) -> tuple[int, str]:
    """(B, why): see the module docstring."""
    from autosched.runtime import UserError

    keep = plan_at(1 << 40, False)
    peak = max(s["peak_saved_bytes"] for s in keep.predicted["stages"])
    found = None
    for k in range(95, 45, -5):
        budget = int(peak * k / 100)
        try:
            with_bp, without = plan_at(budget, True), plan_at(budget, False)
        except UserError:
            break
        if with_bp.transfers and not recomputes(with_bp) and recomputes(without):
            found = budget, (f"{k}% of the predicted keep-everything peak, the least such "
                             "fraction where BPipe recomputes nothing and the plan "
                             "without it must recompute")
    return found or (int(peak * 0.85), (
        "85% of the predicted keep-everything peak (no budget where only BPipe avoids "
        f"recomputation with {stages} stages)"))


def recomputes(plan) -> bool:
    """Whether some layer of `plan` recomputes (whole, attention, or per op)."""
    return any("recompute" in action for action in plan.actions.values())


def median(xs):
    return statistics.median(xs) if xs else 0.0


def measure(path: Path, doc: dict, work: Path, budget: int, send_s: float,
            compile_budgets=None, device: str = "cpu") -> dict:
    """One run of `doc` (its stages compiled at `compile_budgets`, if given): gradients,
    per-stage bytes and times, the simulated clock."""
    from autosched.runtime.pipeline import (StageCost, Transfer, compare_with_single_process,
                                            run_pipeline, simulate)

    t0 = time.perf_counter()
    result = run_pipeline(str(path), doc, work, warmup=1, threads=1,
                          compile_budgets=compile_budgets, device=device)
    wall = time.perf_counter() - t0
    check = compare_with_single_process(str(path), doc, result)
    planned = doc.get("predicted", {}).get("stages") or []
    stages, costs = [], []
    for i, s in enumerate(result.stages):
        row = {"layers": s["layers"], "actions": sorted(set(s["actions"])),
               "forward_cpu_s": median(s["forward_cpu_s"]),
               "backward_cpu_s": median(s["backward_cpu_s"]),
               "forward_wall_s": median(s["forward_s"]), "backward_wall_s": median(s["backward_s"]),
               "saved_bytes_per_micro_batch": max(s["saved_bytes_per_micro_batch"]),
               "peak_saved_bytes": s["peak_saved_bytes"],
               "within_budget": s["peak_saved_bytes"] <= budget,
               "park_waited_s": s["park_waited_s"],
               "backward_waited_s": sum(s["backward_waited_s"]), "transfers": s["transfers"],
               **{k: s.get(k) for k in ("device", "backend", "staged_through_host",
                                        "device_peak_bytes", "device_base_bytes")}}
        if planned:
            p = planned[i]
            row["predicted"] = {k: p[k] for k in ("forward_s", "backward_s", "peak_saved_bytes",
                                                  "saved_bytes_per_micro_batch")}
        stages.append(row)
        nbytes = planned[i]["saved_bytes_per_micro_batch"] if planned else \
            row["saved_bytes_per_micro_batch"]
        costs.append(StageCost(row["forward_cpu_s"], row["backward_cpu_s"], nbytes,
                               send_s if i + 1 < len(result.stages) else 0.0))
    transfers = [Transfer(t["from"], t["to"], tuple(t["micro_batches"]), t["bytes"],
                          t["seconds"]) for t in doc["transfers"]]
    sim = simulate(costs, doc["micro_batches"], transfers)
    # the same with each transfer's measured link time (median of its parks and fetches)
    taken = {}
    for s in result.stages:
        for t in s["transfers"]:
            if "park" in t or "fetch" in t:
                taken.setdefault(s["stage"], []).append(t["end_s"] - t["start_s"])
    slow = simulate(costs, doc["micro_batches"],
                    [Transfer(t.src, t.dst, t.micro_batches, t.bytes, median(taken[t.src]))
                     for t in transfers])
    return {"boundaries": doc["boundaries"], "transfers": doc["transfers"],
            "grads": {"max_abs": check.max_abs, "max_rel": check.max_rel, "worst": check.worst,
                      "within": check.within, "rtol": check.rtol, "atol": check.atol,
                      "loss_diff": check.loss_diff},
            "predicted_step_s": doc.get("predicted", {}).get("step_s"),
            "simulated_from_measured_step_s": sim.step_s,
            "simulated_with_measured_transfers_step_s": slow.step_s,
            "measured_transfer_s": {str(k): median(v) for k, v in taken.items()},
            "measured_step_s": max(s["step_s"] for s in result.stages),
            "run_wall_s": wall, "all_within_budget": all(r["within_budget"] for r in stages),
            "stages": stages}


def compiled_peer(path: Path, doc: dict, work: Path, budget: int, send_s: float) -> dict:
    """torch's 1F1B on `doc`'s split, each stage compiled at the largest
    activation_memory_budget fraction whose measured saved bytes fit `budget`; where
    even 0 does not fit a stage, no run (fits False, and why)."""
    from autosched.runtime.pipeline import stage_compile_fractions

    t0 = time.perf_counter()
    choices = stage_compile_fractions(str(path), doc, budget, steps=4,
                                      log=lambda line: print(f"    {line}", flush=True))
    search = {"search_s": time.perf_counter() - t0, "steps": 4,
              "stages": [{"fraction": c.fraction, "saved_bytes": c.saved_bytes,
                          "held_micro_batches": c.held_micro_batches,
                          "tried": [list(t) for t in c.tried]} for c in choices]}
    missing = [i for i, c in enumerate(choices) if c.fraction is None]
    if missing:
        return {"fits": False, "fraction_search": search,
                "why": f"stage {missing[0]} saves {choices[missing[0]].saved_bytes} B at "
                       f"fraction 0, over the budget {budget} B"}
    fractions = [c.fraction for c in choices]
    return {"compile_fractions": fractions, "fraction_search": search,
            **measure(path, doc, work, budget, send_s, compile_budgets=fractions)}


def single_device(spec, first, profile, options, budget: int, micro: int) -> dict:
    """The single-device plan at `budget` on one micro-batch, M accumulated."""
    from autosched.runtime import UserError
    from autosched.model import compute_loss
    from autosched.runtime import apply, plan

    try:
        p = plan(spec.model, first, budget, spec.loss_fn, options, profile=profile)
    except UserError as e:
        return {"fits": False, "why": str(e)}
    model = apply(spec.model, p)
    times = []
    for _ in range(2):                       # the first is a warm-up
        t0 = time.thread_time()
        for _ in range(micro):
            compute_loss(model, first, spec.loss_fn).backward()
        times.append(time.thread_time() - t0)
    for q in spec.model.parameters():
        q.grad = None
    return {"fits": True, "actions": sorted(set(p.actions)),
            "predicted_saved_bytes": p.predicted["saved_bytes"],
            "predicted_step_s": micro * p.predicted["step_time_s"],
            "measured_cpu_step_s": times[-1]}


def bench_model(name: str, stages_list, micro: int, repeats: int, work: Path,
                device: str = "cpu") -> dict:
    import torch

    from autosched.model import load_model_file
    from autosched.runtime import PlanOptions, profile_model
    from autosched.runtime.pipeline import plan_pipeline

    path = model_file(work, name)
    spec = load_model_file(str(path))
    first = tuple(x[: x.shape[0] // micro] for x in spec.inputs)
    options = PlanOptions(allow_offload=False, repeats=repeats, clock="thread")
    t0 = time.perf_counter()
    profile = profile_model(spec.model, first, spec.loss_fn, options)
    out = {"model_file": path.name, "profile_s": time.perf_counter() - t0, "runs": {}}
    print(f"{name}: profiled in {out['profile_s']:.0f} s", flush=True)
    for stages in stages_list:
        def plan_at(budget, bpipe):
            return plan_pipeline(spec.model, spec.inputs, stages, micro, budget,
                                 spec.loss_fn, options, profile=profile, bpipe=bpipe,
                                 interleave=())

        budget, why = choose_budget(plan_at, stages)
        print(f"{name} S={stages}: budget {budget / 2**20:.2f} MiB: {why}", flush=True)
        ours, no_bp = plan_at(budget, True), plan_at(budget, False)
        doc = _doc(ours)
        send = max([s["send_s"] for s in doc["predicted"]["stages"]] + [0.0])
        row = {"budget_bytes": budget, "budget_why": why, "plans": {}}
        runs = (("ours", doc), ("ours_no_bpipe", _doc(no_bp)),
                ("torch_1f1b_keep", peer(doc, "keep")),
                ("torch_1f1b_recompute", peer(doc, "recompute")))
        for label, d in (runs[::2] if device == "cuda" else runs):
            row["plans"][label] = measure(path, d, work / f"{name}{stages}_{label}", budget,
                                          send, device=device)
            _print(name, stages, label, row["plans"][label], budget)
        if device == "cuda":
            out["runs"][str(stages)] = row
            continue
        label = "torch_1f1b_compile_budget"
        row["plans"][label] = compiled_peer(path, peer(doc, "keep"), work / f"{name}{stages}_"
                                            f"{label}", budget, send)
        if "stages" in row["plans"][label]:
            _print(name, stages, label, row["plans"][label], budget)
        else:
            print(f"{name} S={stages} {label}: no run, {row['plans'][label]['why']}",
                  flush=True)
        row["single_device"] = single_device(spec, first, profile, options, budget, micro)
        out["runs"][str(stages)] = row
        torch.manual_seed(0)
    return out


def _doc(plan) -> dict:
    import json

    return json.loads(plan.to_json())


def _print(name, stages, label, r, budget):
    peaks = " ".join(f"{s['peak_saved_bytes'] / 2**20:.2f}" for s in r["stages"])
    pred = r["predicted_step_s"]
    moved = sum(t["bytes"] for s in r["stages"] for t in s["transfers"] if "park" in t)
    print(f"{name} S={stages} {label:25s} grads {'ok' if r['grads']['within'] else 'DIFFER'}"
          f" (max rel {r['grads']['max_rel']:.1e})  peaks MiB [{peaks}] <= "
          f"{budget / 2**20:.2f}: {r['all_within_budget']}  parked {moved / 2**20:.2f} MiB  "
          f"step ms: predicted {'-' if pred is None else f'{pred * 1e3:.1f}'}, simulated "
          f"from measured {r['simulated_from_measured_step_s'] * 1e3:.1f} (with measured "
          f"transfers {r['simulated_with_measured_transfers_step_s'] * 1e3:.1f}), measured "
          f"wall {r['measured_step_s'] * 1e3:.1f}", flush=True)
    for i, st in enumerate(r["stages"]):
        if st.get("device_peak_bytes"):
            print(f"    stage {i} on {st['device']} ({st['backend']}): allocator peak "
                  f"{st['device_peak_bytes']} B, of which {st['device_base_bytes']} B "
                  "before the step", flush=True)
        p = st.get("predicted")
        if p:
            print(f"    stage {i}: fwd/bwd ms predicted {p['forward_s'] * 1e3:.2f}/"
                  f"{p['backward_s'] * 1e3:.2f}, measured CPU {st['forward_cpu_s'] * 1e3:.2f}/"
                  f"{st['backward_cpu_s'] * 1e3:.2f}; peak saved {st['peak_saved_bytes']} B "
                  f"(predicted {p['peak_saved_bytes']:.0f}); waited for parks "
                  f"{st['park_waited_s'] * 1e3:.1f} ms, for fetches "
                  f"{st['backward_waited_s'] * 1e3:.1f} ms", flush=True)
        moves = [f"{'park' if 'park' in t else 'fetch'} {t.get('park', t.get('fetch'))} "
                 f"{t['start_s'] * 1e3:.0f}-{t['end_s'] * 1e3:.0f}"
                 for t in st["transfers"] if "park" in t or "fetch" in t]
        if moves:
            print(f"    stage {i} moved {st['transfers'][0]['bytes']} B each (ms from the "
                  f"step's start): {', '.join(moves)}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt,mlp")
    parser.add_argument("--stages", default=None, help="default 2,4 (cuda: 2)")
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help=f"default {OUT} (cuda: "
                        f"{OUT.with_name('pipeline_plans_cuda.json')})")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    cuda = args.device == "cuda"
    args.stages = args.stages or ("2" if cuda else "2,4")
    args.out = args.out or str(OUT.with_name("pipeline_plans_cuda.json") if cuda else OUT)
    stamp = provenance.stamp(seed=0, threads_per_stage=1, warmup_steps=1, device=args.device)
    print(provenance.header(stamp), flush=True)
    import torch

    torch.set_num_threads(1)
    if cuda and not torch.cuda.is_available():
        print("--device cuda: torch sees no GPU here", file=sys.stderr)
        return 2
    stages = [int(s) for s in args.stages.split(",")]
    result = {"micro_batches": args.micro_batches, "device": args.device, "models": {}}
    if cuda:
        result["scope"] = ("stages share the GPUs torch sees (one GPU: both stages on it): "
                           "correctness and memory only, not pipeline speed")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            result["models"][name] = bench_model(name, stages, args.micro_batches,
                                                 args.repeats, Path(tmp), args.device)
    provenance.write_json(args.out, result, stamp)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
