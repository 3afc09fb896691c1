"""The long fault soak: tuners sharing one working directory on one SQLite file and one
PostgreSQL database, with tuners SIGKILLed, the server restarted and the work dir's
filesystem filled once while they run; reruns until every task has its trials; then the
figures (tests/support/soak.py says what each means).

    sudo python bench/fault_soak.py [--tuners 4] [--trials 16] [--kills 6] [--seed 0]
                                    [--out bench/results/fault_soak.json]

Needs root (a tmpfs is mounted over the work dir's logs/) and the PostgreSQL server
binaries. Exit 1 when a figure is not what a sound database gives: records missing or
twice, a failure recorded that a healthy machine does not reproduce (poisoned), a failed
integrity check, a task that does not export, a tuner that died other than by the soak.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # support.soak, support.pgserver
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402
from support.pgserver import PgServer  # noqa: E402
from support.soak import Job, Soak, small_filesystem  # noqa: E402


def shapes(n: int, rng: random.Random) -> list[tuple[str, ...]]:
    """`n` distinct small matmul shapes."""
    sizes = [16, 24, 32, 40, 48]
    out: list[tuple[str, ...]] = []
    while len(out) < n:
        m, k, nn = (rng.choice(sizes) for _ in range(3))
        shape = (f"M={m}", f"N={nn}", f"K={k}")
        if shape not in out:
            out.append(shape)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuners", type=int, default=4, help="tuners per database")
    ap.add_argument("--trials", type=int, default=16, help="records each task must reach")
    ap.add_argument("--kills", type=int, default=6, help="tuners SIGKILLed during the soak")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench/results/fault_soak.json")
    args = ap.parse_args()
    stamp = provenance.stamp(seed=args.seed)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="autosched-soak-") as tmp, \
            PgServer(fsync=True) as pg:
        work = Path(tmp)
        urls = (f"sqlite:///{work}/shared.db", pg.url(dbname=pg.create_database()))
        jobs = [Job(url, shape, args.trials) for url in urls
                for shape in shapes(args.tuners, rng)]
        with small_filesystem(work / "team" / "logs", megabytes=96) as logs:
            soak = Soak(jobs, work / "team", rng, kills=args.kills, pg=pg, fill_dir=logs)
            soak.run(limit_s=3600)
            figures = soak.verify(work / "exports")
    result = figures.to_json()
    provenance.write_json(args.out, {"settings": vars(args), "figures": result}, stamp)
    for name in ("tuners", "runs", "kills", "restarts", "fills", "stopped", "expected",
                 "found", "duplicates", "poisoned", "exported"):
        print(f"{name:10s} {result[name]}")
    print(f"failures   {result['failures'] or 'none'}")
    print(f"integrity  {result['integrity']}")
    print(f"wrote {args.out}")
    sound = (not figures.bad_exits and figures.found == figures.expected
             and figures.duplicates == 0 and figures.poisoned == 0
             and set(figures.integrity.values()) == {"ok"}
             and figures.exported == len(jobs))
    return 0 if sound else 1


if __name__ == "__main__":
    sys.exit(main())
