"""Whole-model variants of a model being profiled: the model under a list of actions, one
per layer (compiled with the profile's backend, if any, under a layout), and one step of
it timed. The in-context costs (context_costs.py) are measured on them."""
from __future__ import annotations

from .apply_plan import apply_actions
from .compiled_plans import INDUCTOR_LAYOUT, compile_planned
from .training_step import measure_step, training_step


class ModelVariants:
    """Whole-model variants for in-context timing: `build(actions, layout)` runs the
    model under those actions (compiled with the backend, if any, and compiled now, not
    while timed); `measure(run)` times one step."""

    def __init__(self, model, inputs, loss_fn, containers, kernels, backend, repeats, clock):
        self.model, self.inputs, self.loss_fn = model, inputs, loss_fn
        self.containers, self.kernels, self.backend = containers, kernels, backend
        self.repeats, self.clock = repeats, clock
        self.attention_cores = None

    def build(self, actions, layout=INDUCTOR_LAYOUT):
        if self.backend is None:
            return apply_actions(self.model, actions, self.containers, self.attention_cores,
                                 self.kernels)
        run = compile_planned(self.model, actions, self.kernels, backend=self.backend,
                              layers=self.containers, attention_cores=self.attention_cores,
                              layout=layout)
        training_step(run, self.inputs, self.loss_fn)
        return run

    def measure(self, run):
        return measure_step(run, self.inputs, self.loss_fn, repeats=1, warmup=0,
                            clock=self.clock).step_time_s
