"""The measured rows of bench/training_plans.py read against the issue's bars: the drift
each plan's prediction is read with, the verdicts per model, the text table and the
Pareto plot. Imported by training_plans.py; writes only what it is asked to. Run as
`python bench/training_plans_report.py RESULTS.json ...` it prints the verdicts of
results files as this code reads them."""
from __future__ import annotations

import json
import random
import statistics
import sys

import provenance

from autosched.runtime import MeasuredPlan, format_bytes, separated, short_actions

COMPILED_PLANS = ("plan+compile", "plan+kernels")
ANCHOR = "anchor"   # the method of the all-kept points (autosched/runtime/candidates.py)


def drifts(rows) -> dict:
    """{(plan method, layout): (anchor point, its measured time over the all-kept step
    its profile predicted)}: how much faster or slower the machine ran since each
    profile was taken. Plans are read against the all-kept model built as their own
    profile timed it (the ANCHOR rows: eager plans against the model with every layer
    kept, compiled ones against that compiled under their layout; their pred_time_s is
    the profile's all-kept step)."""
    return {(r["anchors"], r["layout"]): (r["point"], r["time_s"] / r["pred_time_s"])
            for r in rows if r["method"] == ANCHOR}


def anchored_error(row, drift: dict) -> dict:
    """A plan row's prediction error with its profile's drift taken out: its predicted
    time scaled by its anchor's drift, against its measured time (None, and no anchor,
    where its profile's anchor was not measured)."""
    anchor = drift.get((row["method"], row.get("layout")))
    return {"drift_anchor": anchor and anchor[0],
            "pred_err_drift_corrected": anchor and
            (row["pred_time_s"] * anchor[1] - row["time_s"]) / row["time_s"]}


def verdicts(rows) -> dict:
    """The issue's bars, per model, from the rows."""
    out = {}
    for name in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == name]
        by_point = {r["point"]: r for r in mine}
        ratios, intervals = {}, {}
        for r in (r for r in mine if r["method"] == "plan+compile*"):   # choose_among's
            peer = by_point.get(r["peer"])
            ratios[r["budget"]] = r["ratio"]
            intervals[r["budget"]] = peer and ratio_interval(r["time_samples_s"],
                                                             peer["time_samples_s"])
        plans = [r for r in mine if r["method"] in ("plan", *COMPILED_PLANS)]
        measured = {m: [MeasuredPlan(r["budget_bytes"], r["saved"], r["time_s"],
                                     tuple(r["time_samples_s"]))
                        for r in mine if r["method"] == m]
                    for m in ("plan", *COMPILED_PLANS, "plan*", "plan+compile*")}
        chosen = [r for r in mine if r["method"] in ("plan*", "plan+compile*")]
        out[name] = {
            "ratio_vs_best_compile_at_equal_or_lower_saved": ratios,
            # how far the machine's noise moves each ratio (ratio_interval)
            "ratio_interval_90": intervals,
            "ratio_le_0.95_count": sum(1 for v in ratios.values() if v is not None and v <= .95),
            "ratio_all_le_1.02": all(v is not None and v <= 1.02 for v in ratios.values()),
            "all_fit": all(r["fits"] for r in plans + chosen),
            "max_abs_pred_err": max(abs(r["pred_err"]) for r in plans),
            "max_abs_pred_err_chosen": max((abs(r["pred_err"]) for r in chosen
                                            if "pred_err" in r), default=None),
            # read against the all-kept model of the plan's own profile, timed in the
            # same rounds (None where a plan's anchor is missing)
            "max_abs_pred_err_drift_corrected": _max_abs(r["pred_err_drift_corrected"]
                                                         for r in plans),
            "inversions": {m: len(inversions(v)) for m, v in measured.items()},
            # where the slower plan's samples separate from the faster one's
            "inversions_beyond_noise": {m: len(inversions(v, beyond_noise=True))
                                        for m, v in measured.items()},
            "max_grad_rel_err": max(r["grad_rel_err"] for r in mine),
        }
    return out


def inversions(plans: list[MeasuredPlan], tolerance: float = 0.0,
               beyond_noise: bool = False) -> list[tuple[int, int]]:
    """(i, j) pairs where plan i, for a larger budget, measures slower than plan j, for a
    smaller one, by more than `tolerance` (a fraction of j's time); beyond_noise: and
    their samples separate (timing.separated: the medians apart by more than both
    spreads), so the order is the plans', not the machine's."""
    return [(i, j) for i, p in enumerate(plans) for j, q in enumerate(plans)
            if q.budget_bytes < p.budget_bytes and p.time_s > q.time_s * (1 + tolerance)
            and (not beyond_noise or separated(p.samples, q.samples))]


def ratio_interval(samples, peer_samples, draws: int = 2000, seed: int = 0) -> tuple:
    """(5th, 95th) percentile of median(samples) / median(peer_samples) over bootstrap
    resamples of each: how much of a ratio the timing noise alone could make (on the
    shared VM two builds of one program have read 8% apart in the same rounds)."""
    rng = random.Random(seed)

    def median_of_resample(xs):
        return statistics.median(rng.choices(xs, k=len(xs)))
    ratios = sorted(median_of_resample(samples) / median_of_resample(peer_samples)
                    for _ in range(draws))
    return ratios[int(0.05 * draws)], ratios[int(0.95 * draws) - 1]


def _max_abs(errors):
    """The largest magnitude of `errors`; None if any is None (a plan not read)."""
    errors = list(errors)
    return None if None in errors else max(map(abs, errors))


def report(rows) -> None:
    head = ("model", "point", "actions", "saved", "fits", "ms", "pred ms", "err",
            "err vs anchor", "grad err")
    lines = [head]
    for r in rows:
        acts = short_actions(r.get("actions"))
        lines.append((r["model"], r["point"] + (f" (= {r['chosen']})" if "chosen" in r else ""),
                      acts, format_bytes(r["saved"]),
                      {True: "yes", False: "NO"}.get(r.get("fits"), "-"),
                      f"{r['time_s'] * 1e3:.1f}",
                      f"{r['pred_time_s'] * 1e3:.1f}" if "pred_time_s" in r else "-",
                      f"{100 * r['pred_err']:+.1f}%" if "pred_err" in r else "-",
                      f"{100 * r['pred_err_drift_corrected']:+.1f}%"
                      if r.get("pred_err_drift_corrected") is not None else "-",
                      f"{r['grad_rel_err']:.1e}"))
    widths = [max(len(str(x[i])) for x in lines) for i in range(len(head))]
    for x in lines:
        print("  ".join(str(c).ljust(w) for c, w in zip(x, widths)))
    print("actions: K keep, L memeff_ln, M memeff, A recompute_attention, S selective, "
          "F fused_attention, R recompute, O offload (and their combinations)")


def plot(rows, path, stamp) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4.5), squeeze=False)
    style = {"eager": ("k", "s"), "compile": ("tab:blue", "o"), "plan": ("tab:orange", "^"),
             "memeff+partitioner": ("tab:green", "v"),
             "kernels+partitioner": ("tab:purple", "P"), "plan+compile*": ("tab:red", "D")}
    for ax, name in zip(axes[0], names):
        for method, (color, marker) in style.items():
            pts = sorted((r["saved"] / 2 ** 20, r["time_s"] * 1e3) for r in rows
                         if r["model"] == name and r["method"] == method)
            if pts:
                ax.plot(*zip(*pts), marker=marker, color=color, label=method,
                        linestyle="-" if len(pts) > 1 else "")
        ax.set_title(name)
        ax.set_xlabel("saved activations (MiB)")
        ax.set_ylabel("step time (ms)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    provenance.write_sidecar(path, stamp)


def main(argv) -> int:
    """Print the verdicts of results files of bench/training_plans.py as this code reads
    them (files written before a verdict existed get it too)."""
    if not argv:
        print("usage: python bench/training_plans_report.py RESULTS.json ...", file=sys.stderr)
        return 2
    for path in argv:
        try:
            with open(path) as f:
                rows = json.load(f)["rows"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"{path}: not a training_plans results file ({e})", file=sys.stderr)
            return 2
        print(f"{path}: {json.dumps(verdicts(rows), indent=1)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
