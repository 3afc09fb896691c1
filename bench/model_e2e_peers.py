"""The peers of bench/model_e2e.py and how they are timed: torch eager, inductor,
inductor max-autotune and autosched's backend (also over no kernel: what the kernels
alone change), on CUDA each also with CUDA graphs; and the bucketed capture against
recompiling per shape.

A peer that cannot be built or run here (a keyword the installed autosched refuses, a
compile that fails) is one row saying so; the others are still measured. Timing: rounds
interleave the peers (every peer once a round, in turn, so load from outside reaches
each alike), each round `calls` steps between two synchronisations of the device (on
CUDA, `torch.cuda.synchronize`, so the GPU's queued work is inside the interval).
"""
from __future__ import annotations

import copy
import statistics
import tempfile
import time

import torch

import autosched.model

# peer -> (torch.compile mode or None for eager/autosched, CUDA graphs?)
PEERS = {
    "eager": (None, False),
    "inductor": ("default", False),
    "inductor+cudagraphs": ("reduce-overhead", True),
    "max-autotune": ("max-autotune-no-cudagraphs", False),
    "max-autotune+cudagraphs": ("max-autotune", True),
    "autosched": (None, False),
    "autosched+cudagraphs": (None, True),
    # the autosched backend over no kernel: its graphs (dynamo, AOTAutograd, the min-cut
    # split, inductor) with every operator left to torch; autosched against it is what
    # the kernels alone change
    "autosched-no-kernels": (None, False),
    "autosched-no-kernels+cudagraphs": (None, True),
}
BASE_PEERS = ("eager", "inductor", "max-autotune", "autosched", "autosched-no-kernels")


def peer_names(base: list[str], device: str) -> list[str]:
    """The peers to run: each named one, and on CUDA its CUDA-graph twin (eager has none)."""
    unknown = sorted(set(base) - set(BASE_PEERS))
    if unknown:
        raise SystemExit(f"model_e2e: unknown peer(s) {unknown}; known: {list(BASE_PEERS)}")
    out = []
    for name in base:
        out.append(name)
        if device == "cuda" and name != "eager":
            out.append(f"{name}+cudagraphs")
    return out


def allow_recompiles() -> None:
    """Every peer compiles the same model classes' code again (one cache entry each):
    more than dynamo's default limit of entries per code object."""
    torch._dynamo.config.recompile_limit = max(64, torch._dynamo.config.recompile_limit)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def build(name: str, base, library, make_backend=None,
          empty_library: str | None = None) -> tuple[object, object]:
    """(the runnable, autosched's backend object or None) of one peer; raises what
    stops the peer (the row then says so). make_backend: what makes our backend of a
    library (default autosched.model.backend); empty_library: a folder holding no
    kernel, the no-kernel peers' library."""
    make_backend = make_backend or autosched.model.backend
    mode, graphs = PEERS[name]
    if name == "eager":
        return base, None
    if name.startswith("autosched-no-kernels"):
        library = empty_library
    if name.startswith("autosched"):
        if library is None:
            raise RuntimeError("no library: tune-model / export-model did not finish")
        if graphs:
            try:
                backend = make_backend(library, cudagraphs=True)
            except TypeError as e:
                raise NotAvailable(f"autosched.model.backend(DIR, cudagraphs=True): {e}") \
                    from None
        else:
            backend = make_backend(library)
        return torch.compile(copy.deepcopy(base), backend=backend, dynamic=False), backend
    return torch.compile(copy.deepcopy(base), backend="inductor", mode=mode,
                         dynamic=False), None


class NotAvailable(Exception):
    """The installed autosched does not offer this peer."""


def step(model, inputs, loss_fn, train: bool, graphs: bool):
    from autosched.model import compute_loss

    if graphs:       # a new step for cudagraph trees: the last step's outputs may go
        torch.compiler.cudagraph_mark_step_begin()
    if train:
        model.zero_grad(set_to_none=True)
        loss = compute_loss(model, inputs, loss_fn)
        loss.backward()
        return loss.detach().clone()
    with torch.no_grad():
        return model(*inputs).clone()


def grads(model):
    inner = getattr(model, "_orig_mod", model)
    return [p.grad for p in inner.parameters()]


def _diff(a, b) -> float:
    return float((a.float() - b.float()).abs().max())


def measure(base, inputs, loss_fn, library, train: bool, names: list[str], rounds: int,
            calls: int, device: str, on_row=lambda result: None,
            make_backend=None) -> dict:
    """Per peer: max |difference| against eager (output; with train the gradients too),
    the time of its first call (compiling), and the times of `rounds` interleaved rounds
    with their median; or the reason it has no row. on_row(result) after each peer's
    first call (the caller writes what it has); make_backend as for build()."""
    with tempfile.TemporaryDirectory(prefix="autosched-no-kernels-") as empty:
        return _measure(base, inputs, loss_fn, library, train, names, rounds, calls, device,
                        on_row, make_backend, empty)


def _measure(base, inputs, loss_fn, library, train, names, rounds, calls, device, on_row,
             make_backend, empty: str) -> dict:
    torch.compiler.reset()
    allow_recompiles()
    base = base.train(train)
    reference = step(base, inputs, loss_fn, train, False)
    ref_grads = [g.clone() for g in grads(base)] if train else None
    runs, result = {}, {}
    for name in names:
        graphs = PEERS[name][1]
        try:
            model, backend = build(name, base, library, make_backend, empty)
            sync(device)
            start = time.perf_counter()
            out = step(model, inputs, loss_fn, train, graphs)
            step(model, inputs, loss_fn, train, graphs)       # cudagraphs record here
            sync(device)
        except NotAvailable as e:
            result[name] = {"not_available": str(e)}
        except Exception as e:  # noqa: BLE001 (a peer that fails is its row)
            first = (str(e).strip().splitlines() or [""])[0]
            result[name] = {"error": f"{type(e).__name__}: {first[:300]}"}
        else:
            err = _diff(out, reference)
            if train:
                err = max([err] + [_diff(g, r) for g, r in zip(grads(model), ref_grads)
                                   if g is not None])
            result[name] = {"max_abs_diff_vs_eager": err, "times_s": [],
                            "first_calls_s": time.perf_counter() - start}
            runs[name] = (model, backend, graphs)
        on_row(result)
    for _ in range(rounds):
        for name, (model, _, graphs) in runs.items():
            sync(device)
            start = time.perf_counter()
            for _ in range(calls):
                step(model, inputs, loss_fn, train, graphs)
            sync(device)
            result[name]["times_s"].append((time.perf_counter() - start) / calls)
    for name, (_, backend, _) in runs.items():
        result[name]["median_s"] = statistics.median(result[name]["times_s"])
        if backend is not None:
            result[name]["ops_on_kernels"] = sum(d.chosen == "autosched"
                                                 for d in backend.decisions)
            result[name]["ops_matched"] = sum(bool(d.workload) for d in backend.decisions)
    return result


def bucket_lengths(seq_len: int) -> tuple[list[int], list[int]]:
    """(bucket sizes, the three sequence lengths run): buckets at a quarter, half and all
    of the model's length, each length a quarter short of its bucket (padding is real)."""
    sizes = sorted({max(1, seq_len // 4), max(1, seq_len // 2), seq_len})
    return sizes, [max(1, b - b // 4) for b in sizes]


def buckets(model, vocab: int, batch: int, seq_len: int, device: str, rounds: int,
            calls: int) -> dict:
    """Inference at three sequence lengths: eager; torch.compile(dynamic=False), which
    compiles once per length; autosched.model.bucketed(fn, sizes, dim=1) of the eager
    model and of its inductor compile (a static graph per bucket), one capture per
    bucket, padded and the padding cut from the result. Per way and length: the
    first call's time (compiling or capturing), the median of the rounds, and the
    largest difference to eager."""
    sizes, lengths = bucket_lengths(seq_len)
    allow_recompiles()
    g = torch.Generator().manual_seed(0)
    tokens = {n: torch.randint(0, vocab, (batch, n), generator=g).to(device) for n in lengths}
    model = model.eval()
    ways = {"eager": model,
            "recompile_per_shape": torch.compile(copy.deepcopy(model), dynamic=False)}
    out = {"sizes": sizes, "lengths": lengths, "ways": {}}
    make = getattr(autosched.model, "bucketed", None)
    # the eager model captured per bucket, and inductor's static graph of each bucket
    for way, fn in (("bucketed", model),
                    ("bucketed_inductor", torch.compile(copy.deepcopy(model), dynamic=False))):
        if make is None:
            out["ways"][way] = {"not_available": "autosched.model has no bucketed"}
            continue
        try:
            ways[way] = make(fn, sizes=sizes, dim=1)
        except Exception as e:  # noqa: BLE001 (refused here: the row says why)
            out["ways"][way] = {"not_available": f"{type(e).__name__}: {e}"[:300]}
    with torch.no_grad():
        reference = {n: model(t) for n, t in tokens.items()}
        for name, fn in ways.items():
            row = {}
            try:
                for n, t in tokens.items():
                    sync(device)
                    start = time.perf_counter()
                    got = fn(t)
                    sync(device)
                    row[n] = {"first_call_s": time.perf_counter() - start,
                              "max_abs_diff_vs_eager": _diff(got, reference[n])
                              if got.shape == reference[n].shape else f"shape {tuple(got.shape)}",
                              "times_s": []}
                for _ in range(rounds):
                    for n, t in tokens.items():
                        sync(device)
                        start = time.perf_counter()
                        for _ in range(calls):
                            fn(t)
                        sync(device)
                        row[n]["times_s"].append((time.perf_counter() - start) / calls)
                for r in row.values():
                    r["median_s"] = statistics.median(r["times_s"])
            except Exception as e:  # noqa: BLE001 (a way that fails is its row)
                row = {"error": f"{type(e).__name__}: {e}"[:300]}
            out["ways"][name] = {str(n): r for n, r in row.items()} if "error" not in row \
                else row
    return out
