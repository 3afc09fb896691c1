"""Profile a model for planning: per layer and per action, time and saved bytes.

One captured training step records every layer's inputs (layers.py). Then each layer is
run on its own, with those real inputs, under each action that applies to it: the bytes
it saves for backward come from the meter (meter.py), and forward and backward times are
the median of `repeats` runs after a warm-up. Those times are then measured again where
they run, in the whole model (context_costs.py: per group of identical layers and per
action, the model with the group under the action beside the all-kept model, round by
round): an action's cost per layer is its keep time plus the step difference over the
group's size, which sees what a layer alone does not (allocation and cache effects of a
recomputed conv block, a compiler's layouts and fusion across layer boundaries). The
rest of the model (everything outside the layers) is the all-kept step minus the layers'
keep times; its bytes are what the whole step saves outside the layers.

With `compile=True` every layer body, and every whole model above, runs compiled
(torch.compile applied for compilation, see planned_layer.py and compiled_plans.py, each
with its own backend instance so no two share a graph): the times are those of the
compiled plan, recompute as the partitioner fuses it, layouts as the whole graph has them.
A layer's saved bytes are those of its compiled body (the partitioner's choice of
tensors; inductor's channels-last copies of convolution weights are kept for backward
too); the rest's bytes and the reference (keep) step, the base of percentage budgets,
stay eager's. What the whole compiled graph saves
beyond that, plan(compile=True) measures and fits (make_plan.py). A compiled profile is
of one layout (compiled_plans.LAYOUTS): every layer body and whole model compiled under it.

Storages that cross a layer boundary (a layer's inputs and outputs) are "shared": whoever
saves one, it is counted once. The profile therefore keeps, per action, the layer's own
("internal") bytes and the set of shared storages it saves; the predictor (prediction.py)
adds a shared storage once if any of its savers keeps it on the device. A plan compiled
with compile_planned on inductor or autosched.model.backend joins a selective or
recomputed layer after a selective one to its region (joined_regions.py): that layer does
not keep its inputs (ModelProfile.joins_selective).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from .actions import ACTIONS, FUSED, selective_action
from .bandwidth import Bandwidth, host_device_bandwidth
from .apply_plan import apply_actions
from .compiled_plans import (INDUCTOR_LAYOUT, LAYOUTS, compile_planned, forget_compiled_variants,
                             joins_selective_regions, partitioner_backend)
from .context_costs import bytes_in_context, context_costs
from .layers import (AUTOMATIC_RULE, CallCapture, containers_spec, fed_by_previous,
                     find_layers, identical_groups, run_once_in_order, tensors_in)
from .memeff import fusable_cores, swappable
from .meter import OUTSIDE, SavedTensorMeter, model_state, storage_key
from .options import PlanOptions, plan_options
from .planned_layer import PlannedLayer
from .save_rules import distinct_rules
from .timing import settle, spread
from .trace import COMPUTE_HEAVY, attention_cores, trace_ops
from ..model.training_step import compute_loss, training_step
from .measured_step import clock_fn, measure_step


@dataclass(frozen=True)
class ActionCost:
    fwd_s: float
    bwd_s: float
    internal_bytes: int            # device bytes of storages the layer itself created
    shared: frozenset              # ids of shared storages it saves on the device
    host_bytes: int = 0            # bytes it moves to host memory (offload), each way
    spread_s: float = 0.0          # confidence of fwd_s + bwd_s: half its samples' IQR

    @property
    def time_s(self) -> float:
        return self.fwd_s + self.bwd_s


@dataclass
class LayerProfile:
    name: str
    index: int
    options: dict                  # action name -> ActionCost
    custom_ops: list = field(default_factory=list)
    attention_cores: list = field(default_factory=list)
    memeff_modules: list = field(default_factory=list)
    input_shared: frozenset = frozenset()   # the shared storages of the layer's inputs
    # its activation inputs are (views of) the previous layer's outputs: its checkpoint
    # region can join the previous one's (joined_regions.py)
    follows_previous: bool = False
    fused_attention: dict = field(default_factory=dict)   # memeff.fusable_cores


@dataclass
class ModelProfile:
    layers: list
    shared_bytes: dict             # shared storage id -> bytes
    rest_bytes: int                # saved outside the layers, not shared
    rest_shared: frozenset         # shared storages the rest saves
    rest_time_s: float
    keep_step_time_s: float        # measured step without any action
    keep_saved_bytes: int          # measured activation bytes without any action
    bandwidth: Bandwidth
    device: str
    containers: str                # the block containers whose children are the layers
                                   # (layers.find_layers' spec: comma-separated, run order)
    layer_rule: str
    memeff_kernels: dict = field(default_factory=dict)  # kind -> Kernel.id measured with
    compiled_with: str | None = None   # the torch.compile backend the times are of, if any
    # a selective or recomputed layer after a selective one joins its region, keeping no
    # input (plans compiled with compile_planned on a backend that joins regions)
    joins_selective: bool = False
    layout: str = INDUCTOR_LAYOUT  # compiled: the layout the times are of (compiled_plans)
    # costs paid once by a plan that runs any of their actions (once_costs.OnceCost)
    once_costs: tuple = ()


def _detached(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().requires_grad_(obj.requires_grad)
    if isinstance(obj, tuple):
        return tuple(_detached(x) for x in obj)
    if isinstance(obj, list):
        return [_detached(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _detached(v) for k, v in obj.items()}
    return obj


def _grad_targets(out):
    outs = [t for t in tensors_in(out) if t.requires_grad]
    return outs, [torch.ones_like(t) for t in outs]


def _run_once(body, call, meter=None, now=time.perf_counter):
    args, kwargs = _detached(call.args), _detached(call.kwargs)
    t0 = now()
    if meter is not None:
        with meter:
            out = body(*args, **kwargs)
    else:
        out = body(*args, **kwargs)
    if isinstance(out, torch.Tensor) and out.is_cuda:
        torch.cuda.synchronize()
    t1 = now()
    outs, grads = _grad_targets(out)
    if outs:
        torch.autograd.backward(outs, grads)
    if outs and outs[0].is_cuda:
        torch.cuda.synchronize()
    return t1 - t0, now() - t1, out


def _saved_by(body, call, exclude, shared_ids, out_ids) -> tuple[int, frozenset, int]:
    """(own device bytes, shared storages saved on the device, host bytes) of one forward."""
    meter = SavedTensorMeter(exclude)
    _, _, out = _run_once(body, call, meter)
    own_out = {storage_key(t): out_ids[i] for i, t in enumerate(tensors_in(out))
               if i < len(out_ids)}
    internal, shared = 0, set()
    for key, entry in meter.storages.items():
        if entry.where != "device":
            continue
        if key in shared_ids:
            shared.add(shared_ids[key])
        elif key in own_out:
            shared.add(own_out[key])
        else:
            internal += entry.nbytes
    meter.release()
    return internal, frozenset(shared), meter.host_bytes


def applicable_actions(module, trace, allow_offload: bool, fused: bool = False) -> list[str]:
    """The actions that mean something for this layer (keep and recompute always do);
    fused: its attention cores have the fused form (memeff.fusable_cores), alone and
    under each selective rule."""
    forms = [name for name, kinds in (("memeff_ln", ("layer_norm",)), ("memeff", ("gelu",)))
             if swappable(module, kinds)]  # the memory-efficient forms this layer has
    names = ["keep", "recompute"] + forms
    if attention_cores(module, trace):
        names += ["recompute_attention"] + [f"recompute_attention+{f}" for f in forms]
    selective = [selective_action(r) for r in ("all", *distinct_rules(trace.heavy))] \
        if trace.names() & COMPUTE_HEAVY else []
    names += selective
    if fused:
        names += [FUSED] + [f"{s}+{FUSED}" for s in selective]
    if allow_offload:
        names += ["offload"] + [f"offload+{f}" for f in forms]
    return names


def profile_model(model, inputs, loss_fn=None, options: PlanOptions | None = None, *,
                  layout: str = INDUCTOR_LAYOUT, **knobs) -> ModelProfile:
    """Measure everything the planner needs (see the module docstring).

    options: a PlanOptions (its fields also as keywords, `knobs`; allow_offload None: no
    offload). compile: the layers and the rest timed compiled with options.backend (a
    registered name, or a backend of tuned kernels). layout: compiled, one of
    compiled_plans.LAYOUTS: every layer body and whole model is compiled under it
    (plan() profiles each layout worth trying and keeps the fastest plan).
    """
    options = plan_options(options, knobs)
    clock_fn(options.clock)
    if layout not in LAYOUTS or (layout != INDUCTOR_LAYOUT and not options.compile):
        raise ValueError(f"layout {layout!r}: a compiled profile's, one of {', '.join(LAYOUTS)}")
    found = find_layers(model, options.layers)
    if options.layers is None:
        found = _run_once_in_order(model, inputs, loss_fn, found)
    saved_grads = {p: p.grad for p in model.parameters()}
    try:
        with torch._dynamo.config.patch(recompile_limit=max(
                64, torch._dynamo.config.recompile_limit)):
            return _profile(model, inputs, loss_fn, found, options, layout)
    finally:
        for p, g in saved_grads.items():
            p.grad = g
        if options.compile:
            forget_compiled_variants()


def _run_once_in_order(model, inputs, loss_fn, found):
    """The automatic rule's layers (layers.run_once_in_order), from a forward pass."""
    capture = CallCapture(found)
    with capture:
        compute_loss(model, inputs, loss_fn)
    return run_once_in_order(found, capture)


def _profile(model, inputs, loss_fn, found, options: PlanOptions, layout) -> ModelProfile:
    kernels, repeats, clock = options.kernels or {}, options.repeats, options.clock
    backend = options.backend if options.compile else None
    containers = containers_spec(found)
    exclude = model_state(model)
    meter = SavedTensorMeter(exclude)

    def entering(layer_name):             # what the layer saves is labelled with its name
        meter.context = layer_name

    def leaving(layer_name):
        meter.context = OUTSIDE

    capture = CallCapture(found, on_enter=entering, on_exit=leaving)
    with capture, meter:
        loss = compute_loss(model, inputs, loss_fn)
    loss.backward()
    del loss
    calls = capture.single_calls()
    shared_ids, shared_bytes, in_ids, out_ids = {}, {}, {}, {}
    for layer in found:
        call = calls[layer.name]
        in_ids[layer.name] = frozenset(_share(t, shared_ids, shared_bytes)
                                       for t in tensors_in((call.args, call.kwargs)))
        out_ids[layer.name] = [_share(t, shared_ids, shared_bytes)
                               for t in tensors_in(call.output)]
    rest_bytes, rest_shared = 0, set()
    for key, entry in meter.storages.items():
        if OUTSIDE in entry.contexts:
            if key in shared_ids:
                rest_shared.add(shared_ids[key])
            elif entry.contexts == {OUTSIDE}:
                rest_bytes += entry.nbytes
    keep_bytes = meter.device_bytes
    meter.release()
    device = next((t.device for t in exclude), torch.device("cpu"))
    follows = fed_by_previous(found, calls, [*exclude, *tensors_in(inputs)])
    profiles = _profile_layers(found, calls, exclude, (shared_ids, in_ids, out_ids), follows,
                               options, layout)
    groups, in_context = _in_context(model, inputs, loss_fn, found, calls, profiles,
                                     containers, options, layout)
    profiles, whole_time = in_context.layers, in_context.keep_s
    keep_time = whole_time if backend is None else statistics.median(measure_step(
        model, inputs, loss_fn, repeats=2 * repeats, clock=clock).times_s)   # eager's
    rest_time = whole_time - sum(p.options["keep"].time_s for p in profiles)
    bw = options.bandwidth or host_device_bandwidth(device, options.bandwidth_path,
                                                    clock=clock)
    return bytes_in_context(ModelProfile(
        profiles, shared_bytes, rest_bytes, frozenset(rest_shared), rest_time, keep_time,
        keep_bytes, bw, str(device), containers,
        AUTOMATIC_RULE if options.layers is None else "given",
        {kind: k.id for kind, k in kernels.items()}, None if backend is None else str(backend),
        backend is not None and joins_selective_regions(backend), layout,
        in_context.once_costs), groups, in_context.saved)


def _in_context(model, inputs, loss_fn, found, calls, profiles, containers,
                options: PlanOptions, layout):
    """The profile's times as the whole model measures them (compiled with the options'
    backend under `layout`, if compiled), per group of identical layers and action: the
    groups, and what context_costs.py found (costs, the all-kept step, each variant's
    bytes, once costs)."""
    kernels, repeats, clock = options.kernels or {}, options.repeats, options.clock
    backend = options.backend if options.compile else None
    cores = [p.attention_cores for p in profiles]
    fused = [p.fused_attention for p in profiles]
    index = {layer.name: i for i, layer in enumerate(found)}
    groups = [[index[layer.name] for layer in members]
              for members in identical_groups(found, calls).values()]

    def build(actions):
        if backend is None:
            return apply_actions(model, actions, containers, cores, kernels,
                                 fused_attention=fused)
        run = compile_planned(model, actions, kernels, backend=backend, layers=containers,
                              attention_cores=cores, layout=layout, fused_attention=fused)
        training_step(run, inputs, loss_fn)        # compiled now, not while timed
        return run

    def measure(run):
        return measure_step(run, inputs, loss_fn, repeats=1, warmup=0,
                            clock=clock).step_time_s

    def saved_of(run):
        return measure_step(run, inputs, loss_fn, repeats=1, warmup=0).saved_bytes
    return groups, context_costs(profiles, groups, build, measure, 3 * repeats, saved_of)


def _profile_layers(found, calls, exclude, ids, follows, options: PlanOptions,
                    layout=INDUCTOR_LAYOUT) -> list[LayerProfile]:
    """Bytes per layer and action; times pooled over layers with the same signature (each
    runs `repeats` times, the median is over all their runs), so identical blocks get the
    same, steadier, numbers; actions whose medians do not separate get up to 3x the
    rounds (timing.settle), and each time records its spread. Compiled, the timed bodies
    are compiled with the options' backend, under `layout`. ids: (shared storage ids,
    each layer's input ids, each layer's output ids)."""
    shared_ids, in_ids, out_ids = ids
    kernels, repeats, now = options.kernels or {}, options.repeats, clock_fn(options.clock)
    backend = options.backend if options.compile else None
    actions, allow_offload = options.actions, bool(options.allow_offload)
    info = {}
    for layer in found:
        call = calls[layer.name]
        trace = trace_ops(layer.module, call.args, call.kwargs)
        cores = attention_cores(layer.module, trace)
        fused = fusable_cores(layer.module, cores, call.args, call.kwargs) if cores else {}
        names = [n for n in applicable_actions(layer.module, trace, allow_offload, bool(fused))
                 if actions is None or n in actions]
        info[layer.name] = (trace, names, cores, fused)
    saved, times = {}, {}
    for members in identical_groups(found, calls).values():
        names = info[members[0].name][1]
        runners = {}
        for name in names:
            timed = None
            if backend is not None:     # one compile per group: its members time alike
                first = members[0]
                timed = torch.compile(PlannedLayer(
                    first.module, ACTIONS[name], first.index, None, info[first.name][2],
                    kernels, compile=True, backend=backend,
                    fused_attention=info[first.name][3]),
                    backend=partitioner_backend(1.0, backend, layout=layout))
            runners[name] = []
            for layer in members:
                body = PlannedLayer(layer.module, ACTIONS[name], layer.index, None,
                                    info[layer.name][2], kernels,
                                    fused_attention=info[layer.name][3])
                call = calls[layer.name]
                runners[name].append((body if timed is None else timed, call))
                _run_once(*runners[name][-1], now=now)          # warm-up (and compile)
                # the bytes of what is timed: compiled, the partitioner's saved tensors
                # (inductor's channels-last copies of convolution weights among them)
                saved[layer.name, name] = _saved_by(runners[name][-1][0], call, exclude,
                                                    shared_ids, out_ids[layer.name])

        def sample(name, runners=runners):
            return [_run_once(body, call, now=now)[:2] for body, call in runners[name]]

        samples = settle(sample, names, repeats, max_repeats=3 * repeats)
        for name in names:
            fwd, bwd = zip(*samples[name])
            stats = (statistics.median(fwd), statistics.median(bwd),
                     spread([f + b for f, b in samples[name]]))
            for layer in members:
                times[layer.name, name] = stats
    profiles = []
    for i, layer in enumerate(found):
        trace, names, cores, fused = info[layer.name]
        options = {n: ActionCost(*times[layer.name, n][:2], *saved[layer.name, n],
                                 spread_s=times[layer.name, n][2]) for n in names}
        profiles.append(LayerProfile(layer.name, layer.index, options, trace.custom_ops(),
                                     cores, swappable(layer.module), in_ids[layer.name],
                                     follows[i], fused_attention=fused))
    return profiles


def _share(t, ids: dict, sizes: dict) -> int:
    key = storage_key(t)
    if key not in ids:
        ids[key] = len(ids)
        sizes[ids[key]] = key[3] if key else 0
    return ids[key]


def restrict(profile: ModelProfile, allowed) -> ModelProfile:
    """The same profile offering only the `allowed` actions (keep is always kept)."""
    import dataclasses

    allowed = set(allowed) | {"keep"}
    layers = [dataclasses.replace(layer, options={n: c for n, c in layer.options.items()
                                                  if n in allowed})
              for layer in profile.layers]
    return dataclasses.replace(profile, layers=layers)
