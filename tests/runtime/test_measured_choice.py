"""fit_by_measurement: a compiled plan's limit moves by its measured error until the
measured saved bytes use the budget without exceeding it; exact builds and limits."""
from __future__ import annotations

from dataclasses import dataclass

from autosched.runtime.measured_choice import fit_by_measurement


@dataclass(frozen=True)
class Solved:
    actions: tuple
    predicted_bytes: int


class Planner:
    """A solver over fixed plans (the largest predicted bytes within the limit) whose
    compiled form measures `measured[name]` bytes; counts builds and limits solved for."""

    def __init__(self, predicted: dict, measured: dict):
        self.plans = [Solved((name,), b) for name, b in predicted.items()]
        self.measured, self.limits, self.built = measured, [], []

    def solve(self, limit):
        self.limits.append(limit)
        return max((p for p in self.plans if p.predicted_bytes <= limit),
                   key=lambda p: p.predicted_bytes)

    def build(self, plan):
        self.built.append(plan.actions[0])
        return plan.actions[0]

    def measure(self, name):
        return self.measured[name]

    def fit(self, budget, **kw):
        return fit_by_measurement(self.solve, self.build, self.measure, budget, **kw)


def test_an_overcounting_prediction_gives_its_slack_to_a_larger_plan():
    # the compiler saves 10 bytes less than predicted: the 100-byte plan leaves 10 unused
    p = Planner({"big": 110, "mid": 100, "small": 80}, {"big": 100, "mid": 90, "small": 70})
    fit = p.fit(100)
    assert (fit.plan.actions, fit.runnable, fit.saved_bytes, fit.limit_bytes) == \
        (("big",), "big", 100, 110)
    assert p.built == ["mid", "big"] and p.limits == [100, 110]


def test_an_undercounting_prediction_lowers_the_limit_by_the_excess():
    p = Planner({"big": 110, "mid": 100, "small": 80}, {"big": 120, "mid": 105, "small": 85})
    fit = p.fit(100)
    assert (fit.runnable, fit.saved_bytes, fit.limit_bytes) == ("small", 85, 95)
    # raised by the 15 bytes left, but not to 100, where "mid" measured over: "small"
    # again, so the search stops
    assert p.built == ["mid", "small"] and p.limits == [100, 95, 99]


def test_a_raise_that_overshoots_keeps_the_plan_that_fitted():
    p = Planner({"big": 110, "mid": 100, "small": 80}, {"big": 130, "mid": 90, "small": 70})
    fit = p.fit(100)
    assert (fit.runnable, fit.saved_bytes, fit.limit_bytes) == ("mid", 90, 100)
    assert p.built == ["mid", "big"]


def test_the_same_plan_is_built_once():
    p = Planner({"mid": 100, "small": 80}, {"mid": 90, "small": 70})
    fit = p.fit(100)
    assert (fit.runnable, fit.saved_bytes) == ("mid", 90)
    assert p.built == ["mid"] and p.limits == [100, 110]


def test_no_fitting_plan_returns_the_last_over_budget_after_the_attempts():
    p = Planner({"a": 100, "b": 94, "c": 88, "d": 50},
                {"a": 106, "b": 103, "c": 101, "d": 60})
    fit = p.fit(100, attempts=3)
    assert p.built == ["a", "b", "c"] and p.limits == [100, 94, 88]
    assert (fit.runnable, fit.saved_bytes, fit.limit_bytes) == ("c", 101, 88)


def test_plans_that_keep_measuring_over_step_the_limit_down_further_each_time():
    # lowered by each excess alone the limits would be 100, 90, 86: "c", over again;
    # the second excess (4) counts twice, so the third limit is 82 and "d" fits
    p = Planner({"a": 100, "b": 90, "c": 86, "d": 82},
                {"a": 110, "b": 104, "c": 101, "d": 95})
    fit = p.fit(100, attempts=3)
    assert p.limits == [100, 90, 82] and p.built == ["a", "b", "d"]
    assert (fit.runnable, fit.saved_bytes, fit.limit_bytes) == ("d", 95, 82)
