"""Database benchmark: commits per second and best-record query latency, for SQLite and
PostgreSQL, at 10,000 and 100,000 records.

    PYTHONPATH=. python bench/db.py [--sizes 10000 100000] [--backends sqlite postgres]

The peer, measured side by side on the same table, is the bare driver (sqlite3 /
psycopg) running the same INSERT or SELECT with nothing around it: the ratio is what
autosched's layer costs (validation, JSON, retries, building Record objects). PostgreSQL
runs on a throwaway local server (tests/support/pgserver.py) with fsync on, SQLite in WAL
mode with synchronous=FULL: every commit is durable in both.
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
sys.path.insert(0, str(ROOT / "tests"))  # support.records, support.pgserver
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402
from support.records import make_rec  # noqa: E402

from autosched.db import open_database  # noqa: E402
from autosched.db import rows  # noqa: E402

TASKS = [f"op{i}" for i in range(50)]
SCOPES = [(t, g, h) for t in TASKS for g, h in (("llvm-a", "hw1"), ("llvm-b", "hw2"))]


def _record(n: int, rng: random.Random):
    task, target, hw = SCOPES[n % len(SCOPES)]
    error = "build_error" if rng.random() < 0.1 else None
    return make_rec(task, n, rng.uniform(1e-4, 1e-1), target=target, hw=hw, error=error)


def fill(db, n: int, rng: random.Random) -> float:
    """Insert n records in batches of 1000; returns records per second."""
    start = time.perf_counter()
    for lo in range(0, n, 1000):
        db.add_records([_record(i, rng) for i in range(lo, min(n, lo + 1000))])
    return n / (time.perf_counter() - start)


def _raw(url: str):
    """A bare driver connection on the same database, and its placeholder."""
    if url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(url[len("sqlite:///"):], isolation_level=None)
        conn.execute("PRAGMA synchronous = FULL")
        return conn, "?"
    import psycopg

    return psycopg.connect(url, autocommit=True), "%s"


def commits(db, url: str, start: int, count: int, rng: random.Random) -> tuple[float, float]:
    """Single-record transactions per second: through autosched, and bare driver.
    The two alternate in blocks of 25 so that both see the same machine load."""
    conn, ph = _raw(url)
    sql = rows.INSERT_RECORD.replace("?", ph)
    ours_s = peer_s = 0.0
    for lo in range(0, count, 25):
        recs = [_record(start + 2 * i, rng) for i in range(lo, min(count, lo + 25))]
        params = [rows.record_row(_record(start + 2 * i + 1, rng), time.time())
                  for i in range(lo, min(count, lo + 25))]
        t0 = time.perf_counter()
        for r in recs:
            db.add_records([r])
        ours_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        for p in params:
            if ph == "?":
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(sql, p).fetchall()
                conn.execute("COMMIT")
            else:
                with conn.transaction():
                    conn.execute(sql, p).fetchall()
        peer_s += time.perf_counter() - t0
    conn.close()
    return count / ours_s, count / peer_s


def _ms(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t0) * 1e3


def queries(db, url: str, count: int, rng: random.Random) -> dict:
    """Median milliseconds per query; autosched's best() and the bare driver's SELECT
    alternate query by query so that both see the same machine load."""
    from support.records import hardware_key, target_key, task_key, versions

    conn, ph = _raw(url)
    sql = (f"SELECT {rows.RECORD_COLUMNS} FROM {rows.RECORD_FROM} WHERE r.task_key = ? "
           "AND r.target_key = ? AND r.hardware_key = ? AND r.tvm_version = ? AND "
           "r.space_version = ? AND r.error_kind IS NULL ORDER BY r.latency, r.id LIMIT 1"
           ).replace("?", ph)

    def peer(t, g, h, v):
        conn.execute(sql, (t, g, h, v["tvm"], v["space"])).fetchall()

    times: dict[str, list[float]] = {"best": [], "best_peer": [], "top32": [], "measured": []}
    for _ in range(count):
        t, g, h = rng.choice(SCOPES)
        args = (task_key(t), target_key(g), hardware_key(h), versions())
        times["best"].append(_ms(db.best, *args))
        times["best_peer"].append(_ms(peer, *args))
        times["top32"].append(_ms(db.top_k, *args, 32))
        times["measured"].append(_ms(db.measured_keys, *args))
    conn.close()
    # The median, and the 10th percentile: on a shared machine the server process is
    # often descheduled, which makes single round trips bimodal (0.2 ms or 3+ ms).
    out = {k: statistics.median(v) for k, v in times.items()}
    out.update({f"{k}_p10": statistics.quantiles(v, n=10)[0] for k, v in times.items()})
    return out


def run_one(url: str, size: int, n_commits: int, n_queries: int) -> dict:
    rng = random.Random(size)
    with open_database(url) as db:
        fill_rate = fill(db, size, rng)
        ours, peer = commits(db, url, size, n_commits, rng)
        q = queries(db, url, n_queries, rng)
        total = db.count()
    return {"records": total, "fill": fill_rate, "commits": ours, "commits_peer": peer, **q}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--backends", nargs="+", default=["sqlite", "postgres"])
    p.add_argument("--commits", type=int, default=300)
    p.add_argument("--queries", type=int, default=300)
    args = p.parse_args()
    # each table's records are drawn from random.Random(its size)
    print(provenance.header(provenance.stamp(seed=list(args.sizes))), flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if "postgres" in args.backends:
            from support.pgserver import PgServer

            server = PgServer(fsync=True).start()
        try:
            for backend in args.backends:
                for size in args.sizes:
                    if backend == "sqlite":
                        url = f"sqlite:///{tmp}/bench-{size}.db"
                    else:
                        url = server.url(dbname=server.create_database())
                    r = run_one(url, size, args.commits, args.queries)
                    results.append((backend, size, r))
                    print(f"{backend} {size}: {r}", file=sys.stderr, flush=True)
        finally:
            if server:
                server.stop()
    print("| backend | records | fill (rec/s, batches of 1000) | commits/s (1 record each) "
          "| bare driver commits/s | ratio | best ms median (p10) | bare driver best ms "
          "median (p10) | top_k(32) ms median (p10) | measured_keys ms median (p10) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for backend, size, r in results:
        def q(k):
            return f"{r[k]:.3f} ({r[k + '_p10']:.3f})"

        print(f"| {backend} | {r['records']} | {r['fill']:.0f} | {r['commits']:.0f} | "
              f"{r['commits_peer']:.0f} | {r['commits'] / r['commits_peer']:.2f} | "
              f"{q('best')} | {q('best_peer')} | {q('top32')} | {q('measured')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
