"""End to end: the GPT and ResNet examples on autosched's backend against torch, one run.

    flock /tmp/autosched-bench.lock python bench/model_e2e.py [--trials 24] [--rounds 15]
          [--models gpt,resnet] [--modes inference,train] [--tvm-trials 0]
          [--device cpu|cuda] [--dtype fp32|bf16|fp16] [--size bench|tiny|gpu]
          [--peers eager,inductor,max-autotune,autosched] [--no-buckets]
          [-o bench/results/model_e2e.json]

For each model (configs below: `bench` for the CPU, `gpu` GPU-sized, `tiny` for a
rehearsal), in this order, in one process:

1. `autosched tune-model` for inference and for a training step (`--trials` each, one
   budget over all tasks, torch timed once per task as its baseline; `--target cuda`
   with the local runner on `--device cuda`), then `autosched export-model` both ways:
   only kernels that beat torch's baseline, as called through their torch op, go into
   the library, and of those only the groups the whole compiled step keeps (export's
   step check, stored under `step_check`). The model file casts the model and its
   floating inputs to `--dtype` (`model.to(dtype)`);
2. inference latency (eval, no_grad) and training step time (forward, loss, backward) of
   the peers (model_e2e_peers.py): torch eager, inductor, inductor max-autotune and
   torch.compile(autosched backend), on CUDA each also with CUDA graphs (torch's
   "reduce-overhead" / "max-autotune" modes; `autosched.model.backend(DIR,
   cudagraphs=True)`), rounds interleaving the peers, the device synchronised around
   each timed interval, median per call; outputs and gradients compared with eager;
3. the GPT at three sequence lengths (inference): autosched.model.bucketed's capture per
   bucket (of the eager model, and of its inductor compile) against torch.compile
   recompiling per shape and against eager;
4. with `--tvm-trials N > 0` (CPU), inference through TVM's own flow: torch.export ->
   from_exported_program -> relax static_shape_tuning (MetaSchedule, N trials) ->
   the Relax VM, where the model imports (else the reason is recorded).

The per-operator decisions (op, shape, count, torch ms, autosched ms, chosen) of every
export are printed and stored. The output JSON is rewritten after every peer's first
call and every mode, so a run stopped at a time limit keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import model_e2e_peers as peers
import model_library
import provenance
import torch
from support.mixed_model_files import MIXED

SIZES = {
    "bench": {
        "gpt": ({"n_layer": 2, "d_model": 128, "n_head": 4, "seq_len": 64, "vocab": 256},
                {"batch": 4, "seq_len": 64, "vocab": 256}),
        "resnet": ({"width": 16, "stages": 2, "blocks": 1, "classes": 10},
                   {"batch": 8, "image": 32})},
    "gpu": {
        "gpt": ({"n_layer": 4, "d_model": 1024, "n_head": 16, "seq_len": 512, "vocab": 8192},
                {"batch": 8, "seq_len": 512, "vocab": 8192}),
        "resnet": ({"width": 64, "stages": 3, "blocks": 1, "classes": 100},
                   {"batch": 32, "image": 64})},
    "tiny": {
        "gpt": ({"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 16, "vocab": 64},
                {"batch": 2, "seq_len": 16, "vocab": 64}),
        "resnet": ({"width": 4, "stages": 2, "blocks": 1, "classes": 5},
                   {"batch": 2, "image": 8})},
}
CONFIGS = SIZES["bench"]
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def write_model(work: Path, name: str, size: str, dtype: str) -> Path:
    """The bench's model file: examples/<name>.py at the size, cast to dtype."""
    path = model_library.write_model(work, name, *SIZES[size][name])
    if dtype != "fp32":
        path.write_text(path.read_text() + MIXED.format(dtype=DTYPES[dtype], autocast=False))
    return path


def tune_and_export(path: Path, work: Path, trials: int, db: str, train: bool,
                    target: str | None) -> tuple[Path | None, str | None]:
    """(the library, None), or (None, why not): a failing tune-model or export-model
    leaves autosched's peers out, torch's are still measured."""
    try:
        return model_library.tune_and_export(path, work, trials, db, train, target), None
    except SystemExit as e:
        return None, str(e)[-2000:]


def step_check(library: Path) -> dict | None:
    """What export-model's whole-step check measured and undid (model_ops.json)."""
    return json.loads((library / "model_ops.json").read_text()).get("step_check")


def op_table(name: str, mode: str, choices: list) -> str:
    """The per-operator decisions (`read_choices`): op, shape, count, torch ms,
    autosched ms, chosen."""
    def ms(s):
        return "-" if s is None else f"{s * 1e3:.4f}"
    lines = [f"{name} {mode}: op | shape | count | torch ms | autosched ms | chosen "
             "((call): all outputs of the aten call, torch's one call)"]
    for c in choices:
        shape = ",".join(f"{k}={v}" for k, v in c.params.items())
        lines.append(f"  {c.workload} | {shape} | {c.count} | {ms(c.torch_cost_s)} | "
                     f"{ms(c.kernel_cost_s)} | {c.chosen}{' (call)' if c.joint else ''}")
    return "\n".join(lines)


def to_device(spec, device: str):
    """The model file's model and inputs on the device."""
    return spec.model.to(device), tuple(
        x.to(device) if isinstance(x, torch.Tensor) else x for x in spec.inputs)


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


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt,resnet")
    p.add_argument("--trials", type=int, default=24, help="tune-model budget per model and mode")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--tvm-trials", type=int, default=0)
    p.add_argument("--modes", default="inference,train",
                   help="inference and/or train (the training step), comma-separated")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                   help="the model and its floating inputs cast to it (model.to(dtype))")
    p.add_argument("--size", choices=sorted(SIZES), default="bench")
    p.add_argument("--peers", default=",".join(peers.BASE_PEERS),
                   help="of eager, inductor, max-autotune, autosched (on CUDA each with "
                        "its CUDA-graph twin)")
    p.add_argument("--no-buckets", action="store_true",
                   help="leave out the GPT's bucketed-capture comparison")
    p.add_argument("--db", help="the tuning database of every model (default: one a model "
                                "in the work folder)")
    p.add_argument("--work-dir", help="model files, logs and libraries (default: a "
                                      "temporary folder)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", default=str(ROOT / "bench/results/model_e2e.json"))
    args = p.parse_args(argv)
    bad = [m for m in args.models.split(",") if m not in SIZES[args.size]]
    if bad:
        p.error(f"unknown model(s) {bad}; known: {sorted(SIZES[args.size])}")
    if set(args.modes.split(",")) - {"inference", "train"}:
        p.error(f"--modes {args.modes}: inference and/or train")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA GPU here")
    if args.tvm_trials and args.device != "cpu":
        p.error("--tvm-trials: TVM's own flow is measured on the CPU only")
    args.peer_list = peers.peer_names(args.peers.split(","), args.device)
    return args


def main(argv=None) -> int:
    args = parse(argv)
    modes = [{"inference": False, "train": True}[m] for m in args.modes.split(",")]
    target = "cuda" if args.device == "cuda" else None
    stamp = provenance.stamp(seed=args.seed, argv=argv, device=args.device,
                             dtype=args.dtype, size=args.size, peers=args.peer_list)
    print(provenance.header(stamp), flush=True)
    from autosched.model import load_model_file, read_choices

    rows = {}

    def write():
        provenance.write_json(args.output, {"models": rows}, stamp)
    with tempfile.TemporaryDirectory(prefix="model_e2e-") as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in args.models.split(","):
            path = write_model(work, name, args.size, args.dtype)
            db = args.db or f"sqlite:///{work}/{name}.db"
            row = rows[name] = {"config": SIZES[args.size][name], "dtype": args.dtype,
                                "device": args.device, "trials_per_mode": args.trials}
            write()                                   # a run stopped while tuning says so
            for train in modes:
                mode = "train_step" if train else "inference"
                start = time.perf_counter()
                lib, why = tune_and_export(path, work / name, args.trials, db, train, target)
                r = row[mode] = {"tune_export_s": time.perf_counter() - start}
                if lib is None:
                    r["library_error"] = why
                else:
                    choices = read_choices(lib)
                    r["ops"] = [c.to_json() for c in choices]
                    r["step_check"] = step_check(lib)
                    print(op_table(name, mode, choices), flush=True)
                write()
                spec = load_model_file(str(path))
                model, inputs = to_device(spec, args.device)
                r["peers"] = peers.measure(model, inputs, spec.loss_fn, lib, train,
                                           args.peer_list, args.rounds, args.calls,
                                           args.device, on_row=lambda _: write())
                write()
                summary(name, mode, r["peers"])
            if name == "gpt" and not args.no_buckets:
                cfg = SIZES[args.size]["gpt"]
                model, _ = to_device(load_model_file(str(path)), args.device)
                row["buckets"] = peers.buckets(model, cfg[0]["vocab"], cfg[1]["batch"],
                                               cfg[0]["seq_len"], args.device, args.rounds,
                                               args.calls)
                write()
            if args.tvm_trials and False in modes:
                row["inference"]["tvm_relax_metaschedule"] = tvm_inference(
                    load_model_file(str(path)), args.tvm_trials, work / name, args.rounds,
                    args.calls)
                write()
    print(f"wrote {args.output}")
    return 0


def summary(name: str, mode: str, result: dict) -> None:
    eager = result.get("eager", {}).get("median_s")
    parts = []
    for k, v in result.items():
        if "median_s" in v:
            ratio = f" ({eager / v['median_s']:.2f}x eager)" if eager else ""
            parts.append(f"{k} {v['median_s'] * 1e3:.3f} ms{ratio}")
        else:
            parts.append(f"{k} {v.get('not_available') or v.get('error')}")
    print(f"{name} {mode}: " + "; ".join(parts), flush=True)
    ours = result.get("autosched", {}).get("median_s")
    for peer in ("inductor", "autosched-no-kernels"):
        theirs = result.get(peer, {}).get("median_s")
        if ours and theirs:
            print(f"{name} {mode}: autosched at {ours / theirs:.3f}x {peer}'s step time",
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
