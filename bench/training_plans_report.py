"""The measured rows of bench/training_plans.py read against the issue's bars: the
measured choice per budget (extra rows), the verdicts per model, the text table and the
Pareto plot. Imported by training_plans.py; writes only what it is asked to. Run as
`python bench/training_plans_report.py RESULTS.json ...` it prints the verdicts of
results files as this code reads them."""
from __future__ import annotations

import json
import random
import statistics
import sys

import provenance

from autosched.runtime.measured_choice import (
    MeasuredPlan,
    fastest_within,
    inversions,
    pareto_consistent,
)
from autosched.runtime.units import format_bytes


# the partitioner alone ("compile") is a compiled plan too, with no action of ours: the
# choice is never slower than what torch.compile gives within the budget
COMPILED_CANDIDATES = ("plan+compile", "memeff+partitioner", "plan+kernels",
                       "kernels+partitioner", "compile")
COMPILED_PLANS = ("plan+compile", "plan+kernels")
# the method of the all-kept models built as each profile timed them (eager, or compiled
# under its layout): what that profile's plans are read against for the machine's drift
ANCHOR = "anchor"


def drifts(kept_s: dict, infos: dict, times: dict) -> dict:
    """{(plan method, layout): (anchor point, its measured time over the all-kept step
    its profile predicted)}: how much faster or slower the machine ran since each
    profile was taken (on the shared VM its speed moves by half within minutes).
    kept_s: {(plan method, layout): predicted all-kept step} (eager plans: ("plan",
    None)); infos: {point: info}; times: {point: measured seconds}. Plans are read
    against the all-kept model built as their own profile timed it (the ANCHOR points:
    eager ones against the model with every layer kept, compiled ones against that
    compiled under their layout)."""
    out = {}
    for point, info in infos.items():
        key = (info["anchors"], info["layout"]) if info["method"] == ANCHOR else None
        if key in kept_s and point in times:
            out[key] = (point, times[point] / kept_s[key])
    return out


def anchored_error(row, drift: dict) -> dict:
    """A plan row's prediction error with its profile's drift taken out: its predicted
    time scaled by its anchor's drift, against its measured time (None, and no anchor,
    where its profile's anchor was not measured)."""
    anchor = drift.get((row["method"], row.get("layout")))
    return {"drift_anchor": anchor and anchor[0],
            "pred_err_drift_corrected": anchor and
            (row["pred_time_s"] * anchor[1] - row["time_s"]) / row["time_s"]}


def consistent_rows(rows) -> list[dict]:
    """The measured choice per budget, as extra rows, made on the odd rounds:
    `plan*` the fastest eager plan that fits (pareto_consistent), `plan+compile*` the
    fastest compiled candidate that fits (our compiled plans, those made only as
    candidates among them, memeff+partitioner and the partitioner alone; the row's
    "chosen" names it), per budget of the plan points (not the candidates'), also where
    the compiled plan for that budget could not be made."""
    out = []
    fam = [r for r in rows if r["method"] == "plan"]
    picks = pareto_consistent([MeasuredPlan(r["budget_bytes"], r["saved"], r["choice_time_s"])
                               for r in fam])
    out += [_chosen(fam[i], r, "plan*") for r, i in zip(fam, picks) if i is not None]
    cands = [r for r in rows if r["method"] in COMPILED_CANDIDATES]
    measured = [MeasuredPlan(0, r["saved"], r["choice_time_s"]) for r in cands]
    budgets = {}
    for r in rows:
        if r["method"] in ("plan", "plan+compile") and not r.get("candidate"):
            budgets.setdefault(r["budget"], r)
    for r in budgets.values():
        i = fastest_within(measured, r["budget_bytes"])
        if i is not None:
            out.append(_chosen(cands[i], r, "plan+compile*"))
    return out


def _chosen(pick, target, method) -> dict:
    return {**pick, "point": f"{method}@{target['budget']}", "method": method,
            "budget": target["budget"], "budget_bytes": target["budget_bytes"],
            "chosen": pick["point"], "fits": pick["saved"] <= target["budget_bytes"]}


def verdicts(rows) -> dict:
    """The issue's bars, per model, from the rows."""
    out = {}
    for name in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == name]
        comp = [r for r in mine if r["method"] == "compile"]
        ratios, intervals = {}, {}
        for r in (r for r in mine if r["method"] == "plan+compile*"):
            peers = [c for c in comp if c["saved"] <= r["saved"]]
            peer = min(peers, key=lambda c: c["time_s"]) if peers else None
            ratios[r["budget"]] = r["time_s"] / peer["time_s"] if peer else None
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


SHORT = {"keep": "K", "memeff_ln": "L", "memeff": "M", "recompute_attention": "A",
         "recompute_attention+memeff_ln": "AL", "recompute_attention+memeff": "AM",
         "selective": "S", "selective_dense": "SD", "selective_narrow": "SN",
         "fused_attention": "F", "selective+fused_attention": "SF",
         "selective_dense+fused_attention": "SDF", "selective_narrow+fused_attention": "SNF",
         "recompute": "R", "offload": "O", "offload+memeff_ln": "OL", "offload+memeff": "OM"}


def report(rows) -> None:
    head = ("model", "point", "actions", "saved", "fits", "ms", "pred ms", "err",
            "err vs anchor", "grad err")
    lines = [head]
    for r in rows:
        acts = " ".join(SHORT.get(a, a) for a in r.get("actions", [])) or "-"
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
    print("actions: " + ", ".join(f"{v} {k}" for k, v in SHORT.items()))


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
