"""`plan_pipeline(model, example_inputs, stages, micro_batches, budget)`: the entry point.

Profiles the model as the single-device planner does (model_profile.profile_model, on
one micro-batch of `example_inputs`), turns the profile into per-layer, per-action costs
(costs.py), splits what runs outside the layers between the first stage (before them)
and the last (after them), and plans (planner.py). torch is imported when it runs.

A layer's bytes under an action are its own saved bytes plus every boundary storage it
saves (a storage two neighbouring layers both save is charged to both: an upper bound,
where the single-device predictor counts it once).
"""
from __future__ import annotations

import statistics

from ..actions import ACTIONS
from ..options import PlanOptions, plan_options
from ..prediction import compute_times
from ..units import parse_budget
from .costs import Cost, LayerCosts, Link, ModelCosts
from .document import PipelinePlan
from .link import default_link
from .planner import plan_from_costs


def plan_pipeline(model, example_inputs, stages: int, micro_batches: int, budget,
                  loss_fn=None, options: PlanOptions | None = None, *, profile=None,
                  link: Link | None = None, bpipe: bool = True, interleave: tuple = (2,),
                  **knobs) -> PipelinePlan:
    """The fastest predicted 1F1B (or interleaved 1F1B) plan of `model` in `stages`
    stages and `micro_batches` micro-batches within `budget` saved-activation bytes per
    device.

    example_inputs: one step's batch, split along dimension 0 into `micro_batches` as
    torch.distributed.pipelining splits it (and the pipeline runner does); the costs are
    those of the first, largest, micro-batch. budget: bytes, or "2GiB", "512MiB", "60%"
    (of the activation memory one micro-batch saves without checkpointing). options / knobs: the
    single-device planner's PlanOptions (layers, actions, repeats, clock, ...). profile:
    a ModelProfile to reuse instead of measuring. link: the point-to-point link between
    stages (default: link.default_link()). bpipe=False: no activation balancing.
    interleave: virtual stages per device to consider for interleaved 1F1B (planner.py);
    () for 1F1B only.
    """
    from ..layers import find_layers, layers_fingerprint

    options = plan_options(options, knobs)
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) \
        else (example_inputs,)
    if not isinstance(budget, (int, float)):
        parse_budget(budget, 1)              # malformed strings fail before profiling
    inputs = first_micro_batch(inputs, micro_batches)
    if profile is None:
        from ..model_profile import profile_model

        profile = profile_model(model, inputs, loss_fn, options)
    budget_bytes = parse_budget(budget, profile.keep_saved_bytes)
    layers = find_layers(model, profile.containers)
    first, last = _rest_split(model, inputs, loss_fn, layers, profile,
                              clock=options.clock)
    costs = costs_of_profile(profile, first, last)
    info = {"class": type(model).__name__, "fingerprint": layers_fingerprint(layers),
            "containers": profile.containers, "device": profile.device,
            "budget_spec": str(budget), "rest": {"first": vars(first), "last": vars(last)},
            "keep_saved_bytes": profile.keep_saved_bytes,
            "keep_step_time_s": profile.keep_step_time_s}
    return plan_from_costs(costs, stages, micro_batches, budget_bytes,
                           link or default_link(), bpipe=bpipe, info=info,
                           interleave=tuple(interleave))


def first_micro_batch(inputs: tuple, micro_batches: int) -> tuple:
    """The first of `micro_batches` chunks of a step's inputs (tensors split along
    dimension 0, as torch.distributed.pipelining does); a batch too small to give that
    many is a UserError."""
    from torch.distributed.pipelining.microbatch import split_args_kwargs_into_chunks

    from ...errors import UserError

    if micro_batches < 1:
        raise UserError(f"micro-batches must be >= 1, got {micro_batches}")
    chunks, _ = split_args_kwargs_into_chunks(inputs, {}, micro_batches)
    if len(chunks) != micro_batches:
        raise UserError(f"the inputs split into {len(chunks)} micro-batches, not "
                        f"{micro_batches}: give a batch of at least {micro_batches} rows")
    return tuple(chunks[0])


def costs_of_profile(profile, first: Cost, last: Cost) -> ModelCosts:
    """Per layer and action: (forward, backward, bytes) of one micro-batch; the bytes a
    stage starting at the layer receives (its inputs' boundary storages)."""
    layers = []
    for layer in profile.layers:
        actions = {}
        for name, c in layer.options.items():
            if ACTIONS[name].offload:
                continue                      # a stage's memory is its device's: no host
            f, b = compute_times(layer, name)
            actions[name] = Cost(f, b, c.internal_bytes
                                 + sum(profile.shared_bytes[s] for s in c.shared))
        received = sum(profile.shared_bytes[s] for s in layer.input_shared)
        layers.append(LayerCosts(layer.name, actions, received))
    return ModelCosts(tuple(layers), first, last)


def _rest_split(model, inputs, loss_fn, layers, profile, repeats: int = 5,
                clock: str = "wall") -> tuple[Cost, Cost]:
    """The rest of the model (outside the layers) as two parts: before the first layer
    (first stage) and after the last one (last stage, the loss included). Bytes: what
    only that part saves, from one metered forward. Forward seconds: the median over
    `repeats` forwards of the time before the first layer starts and after the last
    one ends; backward seconds: those times the layers' backward-to-forward ratio under
    keep (the profile's rest time is one number for both parts, and a difference of two
    measured steps: too noisy to split)."""
    from ...model.training_step import compute_loss
    from ..layers import CallCapture
    from ..measured_step import clock_fn
    from ..meter import SavedTensorMeter, model_state

    now = clock_fn(clock)          # the profile's clock: the layers' times are on it

    first_name, last_name = layers[0].name, layers[-1].name
    meter = SavedTensorMeter(model_state(model))
    marks: dict = {}

    def entering(name):
        meter.context = name
        if name == first_name:
            marks.setdefault("enter", now())

    def leaving(name):
        meter.context = name if name != last_name else "after"
        if name == last_name:
            marks["exit"] = now()

    pre, post = [], []
    for k in range(repeats + 1):             # the first, metered, is not timed
        marks.clear()
        meter.context = "before"
        with CallCapture(layers, on_enter=entering, on_exit=leaving):
            t0 = now()
            if k == 0:
                with meter:
                    loss = compute_loss(model, inputs, loss_fn)
            else:
                loss = compute_loss(model, inputs, loss_fn)
            t1 = now()
        del loss
        if k:
            pre.append(marks["enter"] - t0)
            post.append(t1 - marks["exit"])
    before = sum(s.nbytes for s in meter.storages.values()
                 if s.where == "device" and s.contexts == {"before"})
    after = sum(s.nbytes for s in meter.storages.values()
                if s.where == "device" and s.contexts == {"after"})
    meter.release()
    fwd = sum(layer.options["keep"].fwd_s for layer in profile.layers)
    bwd = sum(layer.options["keep"].bwd_s for layer in profile.layers)
    ratio = bwd / fwd if fwd > 0 else 2.0
    p, q = statistics.median(pre), statistics.median(post)
    return Cost(p, p * ratio, before), Cost(q, q * ratio, after)
