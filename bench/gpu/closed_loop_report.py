"""The pure parts of the closed-loop run (closed_loop.py): how its time is shared, what a
tuning run's output and records say, and the table and lines it reports; tested without
a GPU (tests/bench/test_closed_loop.py)."""
from __future__ import annotations

import re

CUT = re.compile(r"time budget of [\d.]+ s spent after \d+ of \d+ trials")


def budget_shares(budget_s: float, weights: dict[str, float]) -> dict[str, float]:
    """Seconds per step, `budget_s` split by weight (a step of weight 0 gets nothing)."""
    total = sum(weights.values())
    return {k: budget_s * w / total if total else 0.0 for k, w in weights.items()}


def cut_note(output: str) -> str | None:
    """The line a tuning run prints when its time budget stopped it, if it did."""
    found = CUT.search(output)
    return found.group(0) if found else None


def best_of_records(records) -> dict:
    """Trials, failures by kind and the fastest correct record of one task's records."""
    ok = [r for r in records if r.ok]
    kinds: dict[str, int] = {}
    for r in records:
        if not r.ok:
            kinds[r.result.error_kind] = kinds.get(r.result.error_kind, 0) + 1
    out = {"trials": len(records), "failures": kinds}
    if ok:
        best = min(ok, key=lambda r: r.latency)
        out.update(best_s=best.latency, best_candidate=best.candidate,
                   sketch=best.candidate.get("sketch"))
    return out


def table(steps: dict, cases) -> list[dict]:
    """One row a case: ours, torch's, MetaSchedule's where it ran."""
    import fair_peers

    rows = []
    for case in cases:
        tuned = steps.get(f"tune/{case.name}", {})
        peer = steps.get(f"peer/{case.name}", {}).get("peer")
        ms = steps.get(f"metaschedule/{case.name}", {}).get("result") or {}
        notes = [tuned["cut"]] if tuned.get("cut") else []
        if ms and not ms.get("ok"):
            notes.append(f"MetaSchedule: {ms.get('error')}")
        row = fair_peers.build_row(case, tuned.get("best_s"), peer, ms.get("latency_s"),
                                   notes)
        row.update(trials_measured=tuned.get("trials"), failures=tuned.get("failures"),
                   tune_seconds=(tuned.get("tune") or {}).get("seconds"),
                   metaschedule_trials=ms.get("trials_measured"),
                   metaschedule_wall_s=ms.get("tuning_wall_s"))
        rows.append(row)
    return rows


def summary_lines(rows: list[dict], summary: dict) -> list[str]:
    """What the run prints at its end: a line a case, then the geometric means."""
    def ms(s):
        return "-" if s is None else f"{s * 1e3:.3f} ms"

    def rate(r):
        return "-" if r is None else f"{r:.1f}"

    lines = []
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        line = (f"{r['case']}: {r['trials_measured']} trials in {r['tune_seconds']} s, "
                f"ours {ms(r['ours_s'])} ({rate(r['ours_rate'])} {r['unit']}), torch "
                f"{ms(r['peer_s'])} ({rate(r['peer_rate'])} {r['unit']}), ratio {ratio}")
        if r.get("metaschedule_s") is not None:
            line += f", MetaSchedule {ms(r['metaschedule_s'])}"
        lines.append(line)
    def mean(v):
        return "-" if v is None else f"{v:.3f}"

    lines.append(f"geomean ours/torch {mean(summary['geomean_vs_peer'])} over "
                 f"{summary['rows_vs_peer']} rows; ours/MetaSchedule "
                 f"{mean(summary['geomean_vs_metaschedule'])} over "
                 f"{summary['rows_vs_metaschedule']} rows")
    return lines


