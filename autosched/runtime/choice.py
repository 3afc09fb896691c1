"""`choose(model, inputs, "40%")`: the fastest way to train within a memory budget, by
measurement.

A plan is solved from predictions, and predictions err; torch.compile's own partitioner
is another way to save memory. So the choice is made by running the candidates
(candidates.py: our plans eager and compiled, each fitted to its budget by measurement,
torch.compile at partitioner budgets, memory-efficient forms under the partitioner),
measuring each one's saved bytes and its step time in interleaved rounds
(measured_points.py), and taking, per budget, the fastest candidate whose measured bytes
fit it, on the odd rounds; the even rounds, held out, report its time and its ratio to
the fastest unplanned peer (torch.compile at a partitioner budget, or the eager model)
that saves no more.

    result = choose(model, inputs, ["60%", "40%"], loss_fn, ChoiceOptions(compile=True))
    result.answer("40%")["chosen"], result.to_json(), print(result.table())

`choose_among(rows)` is the deciding step alone, on measured rows: testable apart from
the clock.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from .options import PlanOptions
from .units import parse_budget

COMPILE_BUDGETS = (1.0, 0.8, 0.6, 0.4, 0.25, 0.1, 0.0)
# compiled plans made only as candidates: a plan for a smaller budget that runs faster
# is the better choice at a larger one too
CANDIDATE_BUDGETS = ("80%", "50%", "33%", "20%")
HYBRID_BUDGETS = (1.0, 0.8, 0.6, 0.4, 0.25, 0.1)
# the partitioner alone ("compile") is a compiled candidate too, with no action of ours:
# the choice is never slower than what torch.compile gives within the budget
COMPILED_CANDIDATES = ("plan+compile", "memeff+partitioner", "plan+kernels",
                       "kernels+partitioner", "compile")
# per family of choices, the unplanned points its held-out ratio is read against
PEERS = {"plan*": ("eager",), "plan+compile*": ("compile",)}


@dataclass(frozen=True)
class ChoiceOptions:
    """plan: how plans are profiled and solved (its compile and backend are set per
    candidate). compile: also the torch.compile candidates (minutes of compiling);
    without it the choice is among our eager plans. kernels_backend: a torch.compile
    backend of tuned kernels (autosched's model backend over an `export-model --train`
    library): plans and the partitioner on it become candidates too. rounds: interleaved
    timing rounds (odd: chosen on, even: reported); steps: steps per candidate a round.
    compile_budgets / hybrid_budgets: the partitioner's activation_memory_budget values
    tried alone / under the memory-efficient forms; candidate_budgets: compiled plans
    made only as candidates. check_grads: each candidate's gradients against eager's
    (grad_rel_err). log: called with progress lines (None: silent)."""
    plan: PlanOptions = PlanOptions()
    compile: bool = False
    kernels_backend: object = None
    rounds: int = 40
    steps: int = 1
    compile_budgets: tuple = COMPILE_BUDGETS
    candidate_budgets: tuple = CANDIDATE_BUDGETS
    hybrid_budgets: tuple = HYBRID_BUDGETS
    check_grads: bool = True
    log: object = None

    def __post_init__(self):
        if self.rounds < 2:
            raise ValueError(f"rounds must be >= 2 (choose on odd, report even), got "
                             f"{self.rounds}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.kernels_backend is not None and not self.compile:
            raise ValueError("kernels_backend: tuned kernels serve compiled candidates; "
                             "set compile")
        for b in self.candidate_budgets:
            parse_budget(b, 1)
        if self.log is None:
            object.__setattr__(self, "log", lambda line: None)


@dataclass
class Choice:
    """What choose() measured and chose. budgets: {spec: bytes}; points: one row per
    candidate (point, method, info, saved, time_s and time_samples_s from the held-out
    rounds, choice_time_s and choice_samples_s from the rounds chosen on, grad_rel_err,
    for plans fits and pred_err); chosen: per budget and family the chosen row
    (choose_among); plans: {point: the Plan it runs} (apply() an eager one,
    compile_planned() a compiled one; the chosen ones are written out); modules: {point:
    the runnable}, not written out; profiles: (eager, compiled per layout, tuned per
    layout), not written out."""
    budgets: dict
    reference_saved_bytes: int
    points: list
    chosen: list
    plans: dict = dataclasses.field(default_factory=dict, repr=False)
    modules: dict = dataclasses.field(default_factory=dict, repr=False)
    profiles: tuple = dataclasses.field(default=(), repr=False)

    def answer(self, budget: str) -> dict | None:
        """The choice at `budget`: of its families' picks, the fastest on the rounds
        chosen on (None where nothing measured fits)."""
        picks = [r for r in self.chosen if r["budget"] == budget]
        return min(picks, key=lambda r: r["choice_time_s"]) if picks else None

    def to_json(self) -> str:
        from .choice_report import choice_json

        return choice_json(self)

    def table(self) -> str:
        from .choice_report import choice_table

        return choice_table(self)


def choose(model, example_inputs, memory_budgets, loss_fn=None,
           options: ChoiceOptions | None = None, **knobs) -> Choice:
    """Build, measure and choose (see the module docstring). memory_budgets: one budget
    or a list (as for plan(): bytes, "2GiB", "40%" of the eager model's saved
    activations); options: a ChoiceOptions, its fields also as keywords (`knobs`).
    A budget no candidate fits has no answer."""
    import torch

    from ..model.training_step import parameter_grads
    from .candidates import build_candidates
    from .measured_points import grad_error, measure_points, peak_allocated

    options = dataclasses.replace(options or ChoiceOptions(), **knobs)
    budgets = [str(b) for b in (memory_budgets if isinstance(memory_budgets, (list, tuple))
                                else [memory_budgets])]
    for b in budgets:
        parse_budget(b, 1)                       # malformed budgets fail before profiling
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) \
        else (example_inputs,)
    # every compiled candidate is its own module tree: one compile of each forward apiece
    with torch._dynamo.config.patch(recompile_limit=max(
            64, torch._dynamo.config.recompile_limit)):
        profiles = _profiles(model, inputs, loss_fn, options)
        points = build_candidates(model, inputs, loss_fn, budgets, profiles, options)
        saved, chosen_on, reported = measure_points(
            points, inputs, loss_fn, options.rounds, options.steps, options.plan.clock,
            failed=points.failed)
        ref = parameter_grads(model, inputs, loss_fn) if options.check_grads else None
        cuda = next(model.parameters()).is_cuda
        rows = []
        for k, (m, info) in points.items():
            row = {"point": k, **info, "saved": saved[k],
                   "time_s": statistics.median(reported[k]), "time_samples_s": reported[k],
                   "choice_time_s": statistics.median(chosen_on[k]),
                   "choice_samples_s": chosen_on[k]}
            if ref is not None:
                row["grad_rel_err"] = grad_error(ref, parameter_grads(m, inputs, loss_fn,
                                                                      model))
            if cuda:
                row["peak_allocated"] = peak_allocated(m, inputs, loss_fn)
            if "budget_bytes" in info:
                row["fits"] = saved[k] <= info["budget_bytes"]
                row["pred_err"] = (row["pred_time_s"] - row["time_s"]) / row["time_s"]
            rows.append(row)
    keep = profiles[0].keep_saved_bytes
    return Choice({b: parse_budget(b, keep) for b in budgets}, keep, rows, choose_among(rows),
                  {k: p for k, p in points.plans.items() if k in saved},
                  {k: m for k, (m, _) in points.items()}, profiles)


def _profiles(model, inputs, loss_fn, options: ChoiceOptions) -> tuple:
    """(eager profile, compiled profiles per layout worth trying or [], the same on the
    tuned kernels or [])."""
    from .compiled_plans import layouts_worth_trying
    from .model_profile import profile_model

    plan = options.plan
    if plan.allow_offload is None:
        p = next(model.parameters(), None)
        plan = plan.replace(allow_offload=p is not None and p.is_cuda)
    eager = profile_model(model, inputs, loss_fn, plan.replace(compile=False))

    def compiled(backend):
        return [profile_model(model, inputs, loss_fn,
                              plan.replace(compile=True, backend=backend), layout=layout)
                for layout in layouts_worth_trying(model, inputs, backend)]
    return (eager, compiled("inductor") if options.compile else [],
            compiled(options.kernels_backend) if options.kernels_backend is not None else [])


def choose_among(rows: list[dict]) -> list[dict]:
    """The measured choice, on measured rows (each: point, method, saved, choice_time_s,
    time_s; plans also budget, budget_bytes, and `candidate` where made only as a
    candidate). Per budget of the plan rows (not the candidates'), per family: "plan*"
    the fastest eager plan whose saved bytes fit (measured_choice.pareto_consistent),
    "plan+compile*" the fastest compiled candidate that fits, also where the compiled plan
    for that budget could not be made. Each chosen row is its pick's row, renamed, with
    "chosen" (the pick's point), "fits", and "peer" / "ratio": the fastest unplanned point
    of the family's peers that saves no more, and the pick's held-out time over it (None
    where none does)."""
    from .measured_choice import MeasuredPlan, fastest_within, pareto_consistent

    out = []
    fam = [r for r in rows if r["method"] == "plan"]
    picks = pareto_consistent([MeasuredPlan(r["budget_bytes"], r["saved"], r["choice_time_s"])
                               for r in fam])
    out += [_chosen(fam[i], r, "plan*", rows) for r, i in zip(fam, picks) if i is not None]
    cands = [r for r in rows if r["method"] in COMPILED_CANDIDATES]
    measured = [MeasuredPlan(0, r["saved"], r["choice_time_s"]) for r in cands]
    budgets = {}
    for r in rows:
        if r["method"] in ("plan", "plan+compile") and not r.get("candidate"):
            budgets.setdefault(r["budget"], r)
    for r in budgets.values():
        i = fastest_within(measured, r["budget_bytes"])
        if i is not None:
            out.append(_chosen(cands[i], r, "plan+compile*", rows))
    return out


def _chosen(pick, target, method, rows) -> dict:
    peers = [r for r in rows if r["method"] in PEERS[method]
             and r["saved"] <= pick["saved"]]
    peer = min(peers, key=lambda r: r["time_s"]) if peers else None
    return {**pick, "point": f"{method}@{target['budget']}", "method": method,
            "budget": target["budget"], "budget_bytes": target["budget_bytes"],
            "chosen": pick["point"], "fits": pick["saved"] <= target["budget_bytes"],
            "peer": peer and peer["point"],
            "ratio": peer and pick["time_s"] / peer["time_s"]}
