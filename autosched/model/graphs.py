"""Aten graphs of a model through torch's own machinery: dynamo captures the model,
AOTAutograd turns each captured graph into aten graphs (forward and backward for a
training step, one inference graph under no_grad), and a pass looks at or rewrites each.

Extraction and the torch.compile backend share this, so the graphs that are tuned are the
graphs that run. `scan(gm)` lists the matches of a graph in order; a node fused into an
earlier match (a ReLU epilogue) is not matched again. A graph that inductor will lay out
channels_last has its convolutions matched in NHWC (`conv_layouts`).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .aten_match import OpMatch, is_compute, match, op_name
from .conv_layouts import inductor_lays_out_channels_last, nhwc_match

GRAPH_KINDS = ("forward", "backward", "inference")


@dataclass
class GraphScan:
    """The matches of one aten graph and the computing operators left unmatched."""

    kind: str
    matches: list[OpMatch] = field(default_factory=list)
    uncovered: Counter = field(default_factory=Counter)


def scan(gm, kind: str, channels_last: bool = False) -> GraphScan:
    """Every operator call of `gm` that a workload computes, in graph order; with
    `channels_last` (the graph's convolutions run channels_last, see `aot_backend`),
    every 2-d convolution in its NHWC workload."""
    result = GraphScan(kind)
    fused = set()
    for node in gm.graph.nodes:
        if node in fused:
            continue
        found = match(node)
        if not found:
            if is_compute(node):
                result.uncovered[op_name(node)] += 1
            continue
        result.matches += [nhwc_match(m) for m in found] if channels_last else found
        fused.update(m.output for m in found if m.output is not node)
    return result


def inductor_graph(gm, example_inputs, kind: str, cudagraphs: Cudagraphs | None = None
                   ) -> Callable:
    """`gm` compiled by inductor as AOTAutograd would compile it (a boxed callable);
    operators a pass replaced by custom ops stay calls to those ops. With `cudagraphs`
    (one per captured graph, shared by its forward and backward) inductor wraps the
    result in its CUDA graph trees, as `mode="reduce-overhead"` does: inductor's own
    checks decide whether the graph can be captured (CPU tensors, input mutations,
    operators tagged `cudagraph_unsafe`) and log why not.

    The graph is traced again through inductor's decompositions first: AOTAutograd made
    it without them so that passes see the operators whole (softmax, layer norm, GELU),
    and inductor lowers only the decomposed forms of those. Random operators (dropout) stay
    aten's own generator calls (`fallback_random`): inductor replaces them by its fused
    generator in a pass over the joint graph, before the split, which these graphs never
    went through; inductor's lowering refuses them otherwise."""
    from contextlib import nullcontext

    from torch._guards import detect_fake_mode
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    patches, extra = {"fallback_random": True}, {}
    if cudagraphs is not None:
        patches["triton.cudagraphs"] = True
        extra = cudagraphs.inductor_kwargs(gm, example_inputs, kind)
    with config.patch(patches):
        with detect_fake_mode(example_inputs) or nullcontext():
            decomposed = make_fx(gm, decomposition_table=select_decomp_table())(
                *example_inputs)
        compiled = compile_fx_inner(decomposed, example_inputs,
                                    is_backward=kind == "backward",
                                    is_inference=kind == "inference", **extra)
    if cudagraphs is not None and kind == "forward":
        cudagraphs.note_forward(compiled)
    return compiled


def graph_compiler(name: str) -> Callable:
    """The graph compiler called `name`: "inductor", "eager", or "auto" (inductor where
    it can build, that is where a C++ compiler is on the PATH; eager otherwise)."""
    import shutil

    if name == "auto":
        name = "inductor" if any(shutil.which(c) for c in ("g++", "c++", "clang++")) \
            else "eager"
    compilers = {"inductor": inductor_graph, "eager": eager_graph}
    if name not in compilers:
        raise ValueError(f"unknown graph compiler {name!r}: one of auto, "
                         f"{', '.join(compilers)}")
    return compilers[name]


def lays_out(compile_graph: Callable) -> bool:
    """Whether `compile_graph` chooses the graphs' layouts (inductor does)."""
    return compile_graph is inductor_graph


def eager_graph(gm, example_inputs, kind: str, cudagraphs: Cudagraphs | None = None
                ) -> Callable:
    """`gm` run as it is, operator by operator (a boxed callable); with `cudagraphs`,
    captured and replayed by torch's CUDA graph trees as torch's own "cudagraphs"
    backend does (`torch._dynamo.backends.cudagraphs`), with its checks."""
    from torch._functorch.aot_autograd import make_boxed_func

    if cudagraphs is None:
        return make_boxed_func(gm.forward)
    from torch._dynamo.backends.debugging import boxed_nop

    # the trees need a callable that empties its argument list (freeing the inputs)
    run = boxed_nop(gm, example_inputs)
    return cudagraphs.trees(gm, example_inputs, kind, run)


def aot_backend(graph_pass: Callable, compile_graph: Callable = eager_graph,
                cudagraphs: bool = False, inductor_layouts: bool = False) -> Callable:
    """A torch.compile backend that runs `graph_pass(gm, kind, channels_last)` on each
    aten graph AOTAutograd makes of a captured graph, then
    `compile_graph(gm, example_inputs, kind)` on the result (eager aten by default,
    `inductor_graph` to let inductor fuse the rest).

    `channels_last` says whether the graph's convolutions run channels_last: with
    `inductor_layouts` (inductor compiles the graphs, or extraction tunes for the backend
    that it will), where inductor lays the forward (or inference) graph out so, decided
    on the graph as AOTAutograd made it, and the backward of that forward with it (its
    saved activations are then channels_last); never otherwise.

    The forward and backward are split as inductor splits them, whatever compiles them:
    by the min-cut partitioner, which honours activation checkpointing (whole and
    selective) and `torch._functorch.config.activation_memory_budget`. So the graphs a
    model's operators are extracted from (extract.py) are the graphs the backend later
    rewrites (the split decides, for one, in which layout a backward matmul reads its
    weight). As in inductor, the forward graph itself writes the buffers it updates (batch
    norm's running statistics): written after it returns, the min-cut split's saved
    copies of them would fail autograd's version check in backward. The joint-graph
    post-passes configured for inductor (torch._inductor.config.joint_custom_post_pass,
    such as runtime.joined_regions.JoinSelectiveRegions) run on the joint graph before
    the split, as in inductor. With `cudagraphs`, each captured graph gets one
    `Cudagraphs` state that its forward and backward compiles share (passed to
    `compile_graph` as `cudagraphs=`), as inductor's compile_fx shares one."""
    from functools import partial

    from torch._functorch.aot_autograd import aot_module_simplified

    def compiler(kind, state, layout, gm, example_inputs):
        if kind != "backward":   # a backward is compiled after its forward
            layout["channels_last"] = inductor_layouts and \
                inductor_lays_out_channels_last(gm, kind)
        elif layout["channels_last"]:
            _strides_from(gm, example_inputs)
        graph_pass(gm, kind, layout["channels_last"])
        gm.recompile()
        if state is None:
            return compile_graph(gm, example_inputs, kind)
        return compile_graph(gm, example_inputs, kind, cudagraphs=state)

    def backend(gm, example_inputs):
        state = Cudagraphs(len(example_inputs)) if cudagraphs else None
        layout = {"channels_last": False}   # one captured graph's forward and backward
        return aot_module_simplified(
            gm, example_inputs, keep_inference_input_mutations=True,
            fw_compiler=partial(compiler, "forward", state, layout),
            bw_compiler=partial(compiler, "backward", state, layout),
            inference_compiler=partial(compiler, "inference", state, layout),
            partition_fn=_partition_after_joint_passes)

    return backend


def _strides_from(gm, example_inputs) -> None:
    """`gm`'s node values propagated again from `example_inputs`. A backward graph's
    values were traced with the joint graph, in eager's layouts; AOTAutograd compiles it
    with its saved tensors as the forward really laid them out (channels_last where
    inductor or a kernel made them so), and the pass must see those."""
    from torch._guards import detect_fake_mode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = detect_fake_mode(example_inputs)
    if mode is None:
        FakeTensorProp(gm).propagate(*example_inputs)
    else:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*example_inputs)


def _partition_after_joint_passes(joint, joint_inputs, **kwargs):
    """The min-cut split of `joint` after inductor's configured joint post-passes."""
    import torch._inductor.config as inductor
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.custom_graph_pass import get_custom_graph_passes

    passes = get_custom_graph_passes(inductor.joint_custom_post_pass)
    for graph_pass in passes:
        graph_pass(joint.graph)
    if passes:
        joint.recompile()
    return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


class Cudagraphs:
    """What the forward and backward compiles of one captured graph share for CUDA
    graphs, as inductor's compile_fx shares it: whether the graph is still captured
    (a box that a refused forward clears for its backward too), the graph id, and the
    device the forward ran on (the backward tells that device's cudagraph tree manager
    when it runs uncaptured after a captured forward)."""

    def __init__(self, n_graph_inputs: int):
        from torch._inductor.cudagraph_utils import BoxedDeviceIndex
        from torch._inductor.utils import BoxedBool

        self.n_graph_inputs = n_graph_inputs
        self.enabled = BoxedBool(True)
        self.forward_device = BoxedDeviceIndex(None)
        self.forward_partitioned = False
        self.graph_id = _next_graph_id()

    def static_inputs(self, gm, n_inputs: int, kind: str) -> list[int]:
        """The inputs at fixed addresses, captured in place rather than copied in: the
        parameters and buffers of a forward, the saved tensors of a backward (the
        primals alone where inductor split the forward into several graphs)."""
        from torch._inductor import utils

        if kind == "backward":
            primals_only = _partition_aware_static_inputs()
            if self.forward_partitioned and primals_only is not None:
                return primals_only(gm)
            return list(range(utils.count_tangents(gm)))
        from torch._inductor.compile_fx import get_static_input_idxs

        return get_static_input_idxs(utils.num_fw_fixed_arguments(self.n_graph_inputs,
                                                                  n_inputs))

    def inductor_kwargs(self, gm, example_inputs, kind: str) -> dict:
        """compile_fx_inner's CUDA graph arguments for one of the graph's compiles."""
        return {"cudagraphs": self.enabled, "graph_id": self.graph_id,
                "static_input_idxs": self.static_inputs(gm, len(example_inputs), kind),
                "boxed_forward_device_index": self.forward_device}

    def note_forward(self, compiled) -> None:
        """Whether inductor split the forward into several graphs (as compile_fx notes
        it, where this torch makes the backward's static inputs depend on it)."""
        if _partition_aware_static_inputs() is None:
            return
        from torch._inductor.output_code import CompiledFxGraph

        if isinstance(compiled, CompiledFxGraph):
            maps = compiled.partition_maps
            self.forward_partitioned = bool(maps) and len(maps) > 1

    def trees(self, gm, example_inputs, kind: str, run: Callable) -> Callable:
        """`run` (gm's boxed callable) captured by torch's CUDA graph trees after the
        checks of torch's "cudagraphs" backend; `run` itself where they refuse."""
        from torch._dynamo.backends import cudagraphs as dynamo
        from torch._inductor import cudagraph_trees
        from torch._inductor.cudagraph_utils import (get_placeholder_info,
                                                     log_cudagraph_skip_and_bump_counter)

        static = self.static_inputs(gm, len(example_inputs), kind)
        skip = _capture_refusal(gm, static) if self.enabled else "its forward was not captured"
        if skip is not None:
            if self.enabled:
                self.enabled.value = False
                log_cudagraph_skip_and_bump_counter(f"skipping cudagraphs due to {skip}")
            return self._backward_uncaptured(run) if kind == "backward" else run
        device = dynamo.get_device_index(gm)
        if kind == "forward":
            self.forward_device.set(device)
        captured = cudagraph_trees.cudagraphify_impl(
            run, example_inputs, static, device_index=device,
            is_backward=kind == "backward", is_inference=kind == "inference",
            stack_traces=dynamo.get_stack_traces(gm),
            placeholders=get_placeholder_info(gm.graph),
            mutated_input_idxs=dynamo.find_input_mutations(gm.graph))
        captured._boxed_call = True
        return captured

    def _backward_uncaptured(self, run: Callable) -> Callable:
        """A backward run uncaptured after a captured forward tells the forward's
        cudagraph tree manager first (torch's "Backward Generation Handling")."""
        if self.forward_device.value is None:
            return run
        from torch._inductor import cudagraph_trees

        manager = cudagraph_trees.get_manager(self.forward_device.value,
                                              create_if_none_exists=False)

        def backward(inputs):
            if manager is not None:
                manager.set_to_running_backward()
            return run(inputs)

        backward._boxed_call = True
        return backward


def _capture_refusal(gm, static: list[int]) -> str | None:
    """Why torch's "cudagraphs" backend would not capture `gm` (None if it would): input
    mutations outside the static inputs (unless dynamo's config allows them), CPU
    tensors or several devices, an operator inductor holds unsafe to capture."""
    import torch._dynamo.config as dynamo_config
    from torch._dynamo.backends import cudagraphs as dynamo
    from torch._inductor import cudagraph_utils as cg
    from torch._inductor.utils import get_first_incompatible_cudagraph_node

    if not dynamo_config.cudagraph_backend_support_input_mutation:
        mutated = dynamo.find_input_mutations(gm.graph) - set(static)
        if mutated:
            return cg.get_mutation_stack_trace(cg.get_placeholder_info(gm.graph), mutated)
    devices = cg.check_multiple_devices_or_any_cpu_nodes(dynamo.get_device_node_mapping(gm))
    if devices:
        return devices
    node = get_first_incompatible_cudagraph_node(gm)
    return cg.format_default_skip_message(f"incompatible op ({node.name})") if node else None


def _partition_aware_static_inputs() -> Callable | None:
    """torch's static inputs of a backward after a split forward (the primals), or None
    in a torch that has no such rule (its backward treats every saved tensor as static)."""
    try:
        from torch._inductor.utils import get_static_bw_input_idxs
    except ImportError:
        return None
    return get_static_bw_input_idxs


def _next_graph_id() -> int:
    """A graph id from inductor's own counter, so ids never collide with its graphs'."""
    from torch._inductor.compile_fx import _graph_counter

    return next(_graph_counter)
