"""Choose one action per layer: a MILP (scipy.optimize.milp, HiGHS).

Variables: x[i,a] in {0,1} (layer i runs action a); z[s] in [0,1] (shared storage s is kept
on the device); y[c] in [0,1] (the plan pays once cost c, once_costs.py; 1 wherever an x
it bounds is); with a copy engine, e_f[i], e_b[i] >= 0 (exposed transfer seconds).

    minimise   sum x[i,a] * credited(i,a) + sum y[c] * once(c) + sum (e_f[i] + e_b[i])
                                                                        (+ transfers, no engine)
    subject to sum_a x[i,a] = 1                                         for every layer i
               y[c] >= sum_{a in c} x[i,a]                              for every layer i
               z[s] >= sum_{a saves s} x[i,a]                           for every saver i of s
               z[s] >= x[i,sel] + x[i,full] - x[i-1,sel]     (instead, for s an input of
                            i, where a checkpointed layer after a selective one joins it;
                            x[.,sel]: the sum over the selective actions, actions.py)
               e_f[i] >= d2h(i) - forward(i+1),  e_b[i] >= h2d(i) - backward(i+1)
               rest + sum x[i,a] * own_bytes(i,a) + sum z[s] * bytes(s) <= budget

credited(i,a) is the layer's compute time under a, except that an action is credited with
a gain over keeping the layer only where the profile separates the two (their medians
apart by more than both spreads, timing.separated): within the noise it counts as keeping
and a hair more, so a plan transforms a layer only on evidence (a gain within the noise
would otherwise turn a plan at a full budget into one that measures slower than keeping).

Times are in milliseconds and bytes in MiB inside the solver (well-scaled coefficients);
the result is re-evaluated exactly with prediction.predict. A budget no assignment meets
raises UserError naming the smallest feasible budget (the optimum of the same MILP with
memory as the objective).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from .actions import base_action, is_selective
from .prediction import compute_times, joins_after_selective, predict, transfer_time
from .units import format_bytes

MIB = float(1 << 20)
MS = 1e3


@dataclass(frozen=True)
class Solution:
    assignment: list
    status: str          # "optimal", "time limit (feasible)", ...
    message: str
    objective: float     # predicted step time in seconds, as the solver saw it
    gap: float | None
    solve_time_s: float


# what an action within the noise of keeping costs over keeping: more than the memory
# tie-break (solve) can give back for any realistic size, less than any timing matters
UNPROVEN_S = 1e-5


def credited_time(layer, name: str) -> float:
    """Seconds the solver counts for `layer` under `name` (module docstring: no gain over
    keeping that the profile does not separate from noise)."""
    t = sum(compute_times(layer, name))
    keep = layer.options.get("keep")          # a profile restricted to some actions may lack it
    if keep is None or t >= keep.time_s:
        return t
    noise = layer.options[base_action(name)].spread_s + keep.spread_s
    return t if keep.time_s - t > noise else keep.time_s + UNPROVEN_S


class _Model:
    """Variable layout and constraint rows of the planning MILP."""

    def __init__(self, profile):
        self.p = profile
        self.x = []                       # (layer index, action name) per x column
        for layer in profile.layers:
            for name in layer.options:
                self.x.append((layer.index, name))
        shared = sorted({s for layer in profile.layers for c in layer.options.values()
                         for s in c.shared} - set(profile.rest_shared))
        self.z = {s: len(self.x) + k for k, s in enumerate(shared)}
        self.y = [len(self.x) + len(self.z) + k for k in range(len(profile.once_costs))]
        n_layers = len(profile.layers)
        self.overlap = profile.bandwidth.overlap
        base = len(self.x) + len(self.z) + len(self.y)
        self.ef = [base + i for i in range(n_layers)] if self.overlap else []
        self.eb = [base + n_layers + i for i in range(n_layers)] if self.overlap else []
        self.n = base + (2 * n_layers if self.overlap else 0)

    def cols_of(self, i):
        return [(k, name) for k, (li, name) in enumerate(self.x) if li == i]

    def time_objective(self) -> np.ndarray:
        c = np.zeros(self.n)
        for k, (i, name) in enumerate(self.x):
            layer = self.p.layers[i]
            c[k] = credited_time(layer, name) * MS
            if not self.overlap:
                c[k] += sum(transfer_time(self.p, layer, name)) * MS
        for col, once in zip(self.y, self.p.once_costs):
            c[col] = once.time_s * MS
        for col in self.ef + self.eb:
            c[col] = 1.0
        return c

    def memory_row(self) -> tuple[np.ndarray, float]:
        row = np.zeros(self.n)
        for k, (i, name) in enumerate(self.x):
            row[k] = self.p.layers[i].options[name].internal_bytes / MIB
        for s, col in self.z.items():
            row[col] = self.p.shared_bytes[s] / MIB
        fixed = self.p.rest_bytes + sum(self.p.shared_bytes[s] for s in self.p.rest_shared)
        return row, fixed / MIB

    def rows(self):
        """(row, lower, upper) of every constraint but the memory budget."""
        out = []
        for layer in self.p.layers:
            row = np.zeros(self.n)
            for k, _ in self.cols_of(layer.index):
                row[k] = 1.0
            out.append((row, 1.0, 1.0))
        # per layer, the columns of its predecessor's selective actions (joins)
        selective_before = [[]] + [[k for k, n in self.cols_of(layer.index) if is_selective(n)]
                                   for layer in self.p.layers[:-1]]
        for s, zc in self.z.items():
            for layer, before in zip(self.p.layers, selective_before):
                savers = {name: k for k, name in self.cols_of(layer.index)
                          if s in layer.options[name].shared}
                joinable = ([k for name, k in savers.items() if joins_after_selective(name)]
                            if self.p.joins_selective and before
                            and layer.follows_previous and s in layer.input_shared else [])
                plain = [k for k in savers.values() if k not in joinable]
                if plain:
                    out.append(self._at_least(zc, plain))
                if joinable:      # kept unless the layer before is selective
                    out.append(self._at_least(zc, joinable, before))
        for col, once in zip(self.y, self.p.once_costs):
            for layer in self.p.layers:
                paying = [k for k, name in self.cols_of(layer.index)
                          if base_action(name) in once.actions]
                if paying:
                    out.append(self._at_least(col, paying))
        if self.overlap:
            out += self._overlap_rows()
        return out

    def _at_least(self, col, cols, minus_cols=()):
        """z or y >= sum of x[cols] - sum of x[minus_cols]."""
        row = np.zeros(self.n)
        row[col] = 1.0
        row[cols] = -1.0
        row[list(minus_cols)] = 1.0
        return row, 0.0, np.inf

    def _overlap_rows(self):
        out, layers = [], self.p.layers
        for i, layer in enumerate(layers):
            for e_cols, which in ((self.ef, 0), (self.eb, 1)):
                row = np.zeros(self.n)
                row[e_cols[i]] = 1.0
                for k, name in self.cols_of(i):
                    row[k] = -transfer_time(self.p, layer, name)[which] * MS
                if i + 1 < len(layers):
                    for k, name in self.cols_of(i + 1):
                        row[k] = compute_times(layers[i + 1], name)[which] * MS
                out.append((row, 0.0, np.inf))
        return out

    def bounds(self):
        from scipy.optimize import Bounds

        ub = np.ones(self.n)
        ub[len(self.x) + len(self.z) + len(self.y):] = np.inf
        return Bounds(np.zeros(self.n), ub)

    def integrality(self) -> np.ndarray:
        out = np.zeros(self.n)
        out[:len(self.x)] = 1
        return out

    def assignment(self, values) -> list:
        chosen = {}
        for k, (i, name) in enumerate(self.x):
            if values[k] > 0.5:
                chosen[i] = name
        return [chosen[layer.index] for layer in self.p.layers]


_STATUS = {0: "optimal", 1: "time limit (feasible)", 2: "infeasible", 3: "unbounded",
           4: "solver error"}


def _solve(model, c, extra_rows, time_limit_s, mip_gap):
    from scipy.optimize import LinearConstraint, milp

    rows = model.rows() + extra_rows
    a = np.vstack([r for r, _, _ in rows])
    constraint = LinearConstraint(a, [lo for _, lo, _ in rows], [hi for _, _, hi in rows])
    return milp(c, integrality=model.integrality(), bounds=model.bounds(),
                constraints=constraint,
                options={"time_limit": time_limit_s, "mip_rel_gap": mip_gap, "disp": False})


def smallest_feasible_bytes(profile, time_limit_s: float = 10.0) -> int:
    """The least saved-activation memory any assignment reaches (the MILP on memory)."""
    model = _Model(profile)
    row, fixed = model.memory_row()
    res = _solve(model, row, [], time_limit_s, 0.0)
    if res.x is None:
        raise RuntimeError(f"memory minimisation failed: {res.message}")
    return predict(profile, model.assignment(res.x)).saved_bytes


def solve(profile, budget_bytes: int, time_limit_s: float = 10.0, mip_gap: float = 1e-3
          ) -> Solution:
    """The fastest predicted assignment whose saved-activation memory fits `budget_bytes`."""
    model = _Model(profile)
    row, fixed = model.memory_row()
    c = model.time_objective() + row * 1e-6        # ties: prefer the smaller memory
    t0 = time.perf_counter()
    limit = budget_bytes
    for _ in range(3):
        # The solver's tolerances are in MiB; an answer over the exact budget by a few
        # bytes is solved again with the budget lowered by the excess.
        res = _solve(model, c, [(row, -np.inf, limit / MIB - fixed)], time_limit_s, mip_gap)
        if res.x is None:
            break
        excess = predict(profile, model.assignment(res.x)).saved_bytes - budget_bytes
        if excess <= 0:
            break
        limit -= excess + 1
    elapsed = time.perf_counter() - t0
    if res.x is None or excess > 0:
        least = smallest_feasible_bytes(profile, time_limit_s)
        if least > budget_bytes:
            raise UserError(
                f"memory budget {format_bytes(budget_bytes)} is infeasible: the smallest "
                f"feasible budget for this model is {format_bytes(least)} "
                f"({100 * least / max(1, profile.keep_saved_bytes):.1f}% of its "
                "activation memory without checkpointing)")
        raise UserError(f"no plan found within the {time_limit_s:g} s solver time limit "
                        f"({res.message}); raise the time limit")
    gap = res.get("mip_gap")            # scipy's OptimizeResult is a dict
    return Solution(model.assignment(res.x), _STATUS.get(res.status, str(res.status)),
                    str(res.message), (profile.rest_time_s + float(res.fun) / MS),
                    None if gap is None else float(gap), elapsed)
