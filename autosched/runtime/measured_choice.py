"""Keep plan choices consistent with what they measure: no plan slower than a smaller one.

A plan solved for a budget is chosen from predictions; predictions err. When plans for
several budgets have been applied and measured, a plan for a larger budget that measures
slower than a plan for a smaller budget is an error of the predictor, and the remedy is
plain: the smaller plan also fits the larger budget, so it is the better choice there.

    picks = pareto_consistent([MeasuredPlan(budget, saved, time), ...])

returns, for each entry, the index of the plan to use at its budget: the measured-fastest
among the plans whose measured saved bytes fit that budget. The chosen times then never
rise as the budget grows. `fit_by_measurement` checks an applied plan's measured bytes
against its budget and solves again with the limit moved by the measured error: below it
where they exceed it, above it where the plan leaves part of the budget unused. (No torch
here: the measurements come from the caller.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class MeasuredPlan:
    budget_bytes: int
    saved_bytes: int          # measured saved-activation bytes of the applied plan
    time_s: float             # measured step time of the applied plan
    samples: tuple = ()       # the step times time_s is the median of, where kept


def pareto_consistent(plans: list[MeasuredPlan]) -> list[int | None]:
    """Per plan, the index of the measured-fastest plan that fits its budget (None where
    no measured plan fits, e.g. the plan for it measured over its budget)."""
    return [fastest_within(plans, p.budget_bytes) for p in plans]


class Fit(NamedTuple):
    plan: object              # what solve() returned
    runnable: object          # what build() made of it
    saved_bytes: int          # its measured saved-activation bytes
    limit_bytes: int          # the limit it was solved for


def fit_by_measurement(solve, build, measure, budget_bytes: int, attempts: int = 3,
                       key=lambda plan: tuple(plan.actions)) -> Fit:
    """A plan whose *measured* saved bytes fit `budget_bytes`, using what of the budget
    the measurement shows is left.

    solve(limit_bytes) -> plan solves for a limit; build(plan) -> runnable applies (and
    compiles) it; measure(runnable) -> saved bytes. A compiler saves a little more or less
    than the per-layer profile predicts (the partitioner keeps a tensor the profile did not
    see, or drops one a layer alone had to keep), so each attempt moves the limit by the
    measured error: down by the excess where the plan measured over the budget, up by the
    slack where it measured under it (a plan for the higher limit may use the memory the
    prediction overcounted), never to a limit whose plan measured over. Where plans keep
    measuring over, each steps further: the second by twice its excess, the third by four
    times (a compiled plan's excess need not shrink as its limit does, so lowering by
    each excess alone may never fit). A plan already
    built (same `key`) is not built again: the search stops there, as it does after
    `attempts` builds or where a raised limit's plan does not fit. Returns the fitting
    plan solved for the highest limit, else the last one built (over its budget: the
    caller reports it).
    """
    limit, best, last, seen = int(budget_bytes), None, None, set()
    ceiling, overs = None, 0               # the lowest limit whose plan measured over
    for _ in range(attempts):
        plan = solve(limit)
        if key(plan) in seen:
            break
        seen.add(key(plan))
        run = build(plan)
        last = Fit(plan, run, measure(run), limit)
        if last.saved_bytes > budget_bytes:
            if best is not None:           # the raised limit overshot: keep what fitted
                break
            ceiling = limit
            limit -= (last.saved_bytes - budget_bytes) * 2 ** overs
            overs += 1
            continue
        best = last
        limit += budget_bytes - last.saved_bytes
        if ceiling is not None:
            limit = min(limit, ceiling - 1)
        if limit <= last.limit_bytes:
            break
    return best or last


def fastest_within(plans: list[MeasuredPlan], budget_bytes: int) -> int | None:
    """Index of the measured-fastest plan whose measured saved bytes fit `budget_bytes`
    (whatever budget it was made for), or None."""
    fitting = [i for i, p in enumerate(plans) if p.saved_bytes <= budget_bytes]
    return min(fitting, key=lambda i: (plans[i].time_s, plans[i].saved_bytes)) \
        if fitting else None
