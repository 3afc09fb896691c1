"""Keep plan choices consistent with what they measure: no plan slower than a smaller one.

A plan solved for a budget is chosen from predictions; predictions err. When plans for
several budgets have been applied and measured, a plan for a larger budget that measures
slower than a plan for a smaller budget is an error of the predictor, and the remedy is
plain: the smaller plan also fits the larger budget, so it is the better choice there.

    picks = pareto_consistent([MeasuredPlan(budget, saved, time), ...])

returns, for each entry, the index of the plan to use at its budget: the measured-fastest
among the plans whose measured saved bytes fit that budget. The chosen times then never
rise as the budget grows. `fit_by_measurement` checks an applied plan's measured bytes
against its budget and solves again below it where they exceed it. (No torch here: the
measurements come from the caller.)
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MeasuredPlan:
    budget_bytes: int
    saved_bytes: int          # measured saved-activation bytes of the applied plan
    time_s: float             # measured step time of the applied plan


def pareto_consistent(plans: list[MeasuredPlan]) -> list[int | None]:
    """Per plan, the index of the measured-fastest plan that fits its budget (None where
    no measured plan fits, e.g. the plan for it measured over its budget)."""
    return [fastest_within(plans, p.budget_bytes) for p in plans]


def inversions(plans: list[MeasuredPlan], tolerance: float = 0.0) -> list[tuple[int, int]]:
    """(i, j) pairs where plan i, for a larger budget, measures slower than plan j, for a
    smaller one, by more than `tolerance` (a fraction of j's time)."""
    return [(i, j) for i, p in enumerate(plans) for j, q in enumerate(plans)
            if q.budget_bytes < p.budget_bytes and p.time_s > q.time_s * (1 + tolerance)]


def fit_by_measurement(make, measure, budget_bytes: int, attempts: int = 3):
    """A plan whose *measured* saved bytes fit `budget_bytes`, and those bytes.

    make(limit_bytes) -> (plan, runnable) solves and applies a plan for a limit;
    measure(runnable) -> saved bytes measures it. Where a compiler saves a little more
    than the profile said (a partitioner's own choices), the limit is lowered by the
    measured excess and the plan made again, at most `attempts` times. Returns (plan,
    runnable, saved bytes, limit used); saved may still exceed the budget after the
    last attempt, which the caller reports.
    """
    limit = int(budget_bytes)
    for _ in range(attempts):
        plan, run = make(limit)
        saved = measure(run)
        if saved <= budget_bytes:
            break
        limit -= saved - budget_bytes
    return plan, run, saved, limit


def fastest_within(plans: list[MeasuredPlan], budget_bytes: int) -> int | None:
    """Index of the measured-fastest plan whose measured saved bytes fit `budget_bytes`
    (whatever budget it was made for), or None."""
    fitting = [i for i, p in enumerate(plans) if p.saved_bytes <= budget_bytes]
    return min(fitting, key=lambda i: (plans[i].time_s, plans[i].saved_bytes)) \
        if fitting else None
