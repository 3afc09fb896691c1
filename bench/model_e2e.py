"""End to end: the GPT and ResNet examples on autosched's backend against torch, one run.

    flock /tmp/autosched-bench.lock python bench/model_e2e.py [--trials 24] [--rounds 15]
          [--models gpt,resnet] [--modes inference,train] [--tvm-trials 0]
          [-o bench/results/model_e2e.json]

For each model (bench-sized configs below), in this order, in one process:

1. `autosched tune-model` for inference and for a training step (`--trials` each, one
   budget over all tasks, torch timed once per task as its baseline), then
   `autosched export-model` both ways: only kernels that beat torch's baseline, as
   called through their torch op, go into the library, and of those only the groups
   the whole compiled step keeps (export's step check, stored under `step_check`);
2. inference latency (eval, no_grad) and training step time (forward, loss, backward) of
   torch eager, torch.compile(inductor) and torch.compile(autosched backend), rounds
   interleaving the three (the machine is shared), median per call; outputs and gradients
   are compared with eager;
3. with `--tvm-trials N > 0`, inference through TVM's own flow: torch.export ->
   from_exported_program -> relax static_shape_tuning (MetaSchedule, N trials) ->
   the Relax VM, where the model imports (else the reason is recorded).

The per-operator decisions (op, shape, count, torch ms, autosched ms, chosen) of every
export are printed and stored.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import model_library
import provenance
import torch

CONFIGS = {
    "gpt": ({"n_layer": 2, "d_model": 128, "n_head": 4, "seq_len": 64, "vocab": 256},
            {"batch": 4, "seq_len": 64, "vocab": 256}),
    "resnet": ({"width": 16, "stages": 2, "blocks": 1, "classes": 10},
               {"batch": 8, "image": 32}),
}


def tune_and_export(path: Path, work: Path, trials: int, db: str, modes) -> dict:
    return {train: model_library.tune_and_export(path, work, trials, db, train)
            for train in modes}


def step_check(library: Path) -> dict | None:
    """What export-model's whole-step check measured and undid (model_ops.json)."""
    return json.loads((library / "model_ops.json").read_text()).get("step_check")


def _step(model, inputs, loss_fn, train: bool):
    from autosched.model import compute_loss

    if train:
        model.zero_grad(set_to_none=True)
        loss = compute_loss(model, inputs, loss_fn)
        loss.backward()
        return loss.detach()
    with torch.no_grad():
        return model(*inputs)


def variants(spec, library: Path, train: bool) -> dict:
    import autosched.model

    base = spec.model.train(train)
    out = {"eager": (base, None)}
    out["inductor"] = (torch.compile(copy.deepcopy(base), backend="inductor", dynamic=False),
                       None)
    backend = autosched.model.backend(library)
    out["autosched"] = (torch.compile(copy.deepcopy(base), backend=backend, dynamic=False),
                        backend)
    return out


def _grads(model):
    inner = getattr(model, "_orig_mod", model)
    return [p.grad for p in inner.parameters()]


def measure(spec, library: Path, train: bool, rounds: int, calls: int) -> dict:
    torch.compiler.reset()
    runs = variants(spec, library, train)
    reference = _step(runs["eager"][0], spec.inputs, spec.loss_fn, train)
    ref_grads = _grads(runs["eager"][0]) if train else None
    result = {}
    for name, (model, _) in runs.items():
        out = _step(model, spec.inputs, spec.loss_fn, train)  # compiles
        err = float((out - reference).abs().max())
        if train:
            err = max([err] + [float((g - r).abs().max())
                               for g, r in zip(_grads(model), ref_grads)])
        result[name] = {"max_abs_diff_vs_eager": err, "times_s": []}
    for _ in range(rounds):
        for name, (model, _) in runs.items():
            start = time.perf_counter()
            for _ in range(calls):
                _step(model, spec.inputs, spec.loss_fn, train)
            result[name]["times_s"].append((time.perf_counter() - start) / calls)
    for r in result.values():
        r["median_s"] = statistics.median(r["times_s"])
    backend = runs["autosched"][1]
    result["autosched"]["ops_on_kernels"] = sum(d.chosen == "autosched"
                                                for d in backend.decisions)
    result["autosched"]["ops_matched"] = sum(bool(d.workload) for d in backend.decisions)
    return result


def tvm_inference(spec, trials: int, work: Path, rounds: int, calls: int) -> dict:
    """TVM's own flow, inference only; a model that does not import says why."""
    try:
        import tvm
        from tvm import relax
        from tvm.relax.frontend.torch import from_exported_program

        from autosched import resolve_target

        model = spec.model.eval()
        with torch.no_grad():
            ep = torch.export.export(model, tuple(spec.inputs))
            mod = from_exported_program(ep)
        target = resolve_target("llvm").tvm()
        start = time.perf_counter()
        with target:
            mod = relax.get_pipeline("static_shape_tuning", total_trials=trials, target=target,
                                     work_dir=str(work / "ms"))(mod)
        tune_s = time.perf_counter() - start
        vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
        args = [tvm.runtime.tensor(t.numpy()) for t in spec.inputs]
        vm["main"](*args)
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                vm["main"](*args)
            times.append((time.perf_counter() - t0) / calls)
        return {"median_s": statistics.median(times), "tune_s": tune_s, "trials": trials}
    except Exception as e:  # noqa: BLE001 (a peer that cannot take the model: recorded)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return {"skipped": f"{type(e).__name__}: {first[:300]}"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt,resnet")
    p.add_argument("--trials", type=int, default=24, help="tune-model budget per model and mode")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--tvm-trials", type=int, default=0)
    p.add_argument("--modes", default="inference,train",
                   help="inference and/or train (the training step), comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", default=str(ROOT / "bench/results/model_e2e.json"))
    args = p.parse_args()
    modes = [{"inference": False, "train": True}[m] for m in args.modes.split(",")]
    stamp = provenance.stamp(seed=args.seed)
    print(provenance.header(stamp))
    from autosched.model import load_model_file, read_choices

    rows = {}
    with tempfile.TemporaryDirectory(prefix="model_e2e-") as tmp:
        work = Path(tmp)
        for name in args.models.split(","):
            path = model_library.write_model(work, name, *CONFIGS[name])
            db = f"sqlite:///{work}/{name}.db"
            libs = tune_and_export(path, work / name, args.trials, db, modes)
            spec = load_model_file(str(path))
            row = {"config": CONFIGS[name], "trials_per_mode": args.trials}
            for train in modes:
                mode = "train_step" if train else "inference"
                row[mode] = measure(spec, libs[train], train, args.rounds, args.calls)
                row[mode]["ops"] = [c.to_json() for c in read_choices(libs[train])]
                row[mode]["step_check"] = step_check(libs[train])
            if args.tvm_trials and False in modes:
                row["inference"]["tvm_relax_metaschedule"] = tvm_inference(
                    load_model_file(str(path)), args.tvm_trials, work / name, args.rounds,
                    args.calls)
            rows[name] = row
            for mode in (m for m in ("inference", "train_step") if m in row):
                r = row[mode]
                eager = r["eager"]["median_s"]
                print(f"{name} {mode}: " + ", ".join(
                    f"{k} {v['median_s'] * 1e3:.3f} ms ({eager / v['median_s']:.2f}x eager)"
                    for k, v in r.items() if isinstance(v, dict) and "median_s" in v))
    provenance.write_json(args.output, {"models": rows}, stamp)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
