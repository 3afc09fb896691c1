"""RPC runner benchmark: what measuring through TVM's tracker and servers costs per
candidate, and whether its timings agree with the local runner's.

    PYTHONPATH=. python bench/rpc.py [--candidates 16] [--servers 2] [--arg M=128 ...]

The peer, run side by side on the same built libraries, is the local runner (one
isolated worker on this machine). Both runners are warmed up first (worker start-up is
not counted). Reported: wall seconds per candidate for the local runner, the RPC runner
with one session and with one session per server, and the median over candidates of
the RPC/local latency ratio (one session, so kernels are timed one at a time as locally;
1.0 means the same timings). Servers run on this machine over loopback: on a machine
with few cores, concurrent sessions share the cores and their timings with them.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # support.rpcfarm
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402
from support.rpcfarm import Farm  # noqa: E402

from autosched.measure import (LocalBuilder, LocalRunner, MeasureInput,  # noqa: E402
                               MeasureSettings, RPCRunner, parse_rpc_address)


def _inputs(args, target):
    from search_space import InvalidCandidate, generate_space

    from autosched import load_tasks

    task = load_tasks(str(ROOT / "examples" / "matmul.py"), arg_items=args.arg)[0]
    space, rng, out = generate_space(task, target), random.Random(args.seed), []
    while len(out) < args.candidates:
        try:
            cand, mod = space.sample(rng)
        except InvalidCandidate:
            continue
        out.append(MeasureInput(task, target, cand, mod))
    return out


def _timed(runner, inputs, artifacts):
    runner.run(inputs[:1], artifacts[:1])  # warm up: workers started, reference loaded
    start = time.perf_counter()
    results = runner.run(inputs, artifacts)
    return results, (time.perf_counter() - start) / len(inputs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--candidates", type=int, default=16)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--arg", action="append", default=None, help="matmul parameter K=V")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    args.arg = args.arg or ["M=128", "N=128", "K=128"]
    print(provenance.header(provenance.stamp(seed=args.seed)), flush=True)
    from autosched import resolve_target

    target = resolve_target("llvm")
    settings = MeasureSettings(number=5, repeat=5, min_repeat_ms=20, run_timeout=30)
    work = tempfile.mkdtemp(prefix="bench-rpc-")
    farm = Farm(f"{work}/farm")
    builder = LocalBuilder(settings, work)
    runners = []
    try:
        farm.add_servers("bench", args.servers)
        inputs = _inputs(args, target)
        artifacts = builder.build(inputs)
        ok = [i for i, a in enumerate(artifacts) if a.ok]
        inputs, artifacts = [inputs[i] for i in ok], [artifacts[i] for i in ok]
        local = LocalRunner(settings, work)
        one = RPCRunner(settings, work, parse_rpc_address(f"{farm.address}/bench?sessions=1",
                                                          {}))
        many = RPCRunner(settings, work, parse_rpc_address(f"{farm.address}/bench", {}))
        runners = [local, one, many]
        base, t_local = _timed(local, inputs, artifacts)
        remote, t_one = _timed(one, inputs, artifacts)
        _, t_many = _timed(many, inputs, artifacts)
        pairs = [(r.median, b.median) for r, b in zip(remote, base) if r.ok and b.ok]
        ratio = statistics.median(r / b for r, b in pairs)
        print(f"matmul {' '.join(args.arg)}, {len(inputs)} candidates, "
              f"{args.servers} servers on loopback")
        print(f"  local runner            {t_local:.3f} s/candidate")
        print(f"  rpc, 1 session          {t_one:.3f} s/candidate "
              f"({t_one / t_local:.2f}x local)")
        print(f"  rpc, {many.concurrency} sessions         {t_many:.3f} s/candidate "
              f"({t_many / t_local:.2f}x local)")
        print(f"  latency rpc/local, median over {len(pairs)} candidates: {ratio:.3f}")
    finally:
        for r in runners:
            r.close()
        builder.close()
        farm.stop()


if __name__ == "__main__":
    main()
