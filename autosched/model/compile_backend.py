"""`torch.compile(model, backend=autosched.model.backend(DIR))`: the model's operators on
the kernels that beat torch, the rest left to torch.

DIR is what `autosched export-model` wrote: a kernel library of the winners and
`model_ops.json`, the decision for every task. The backend takes DIR, or the library
already loaded from it (`autosched.torch.load_library(DIR)`), so one loaded library can
serve the backend and the runtime's kernel users alike.

Dynamo captures the model, AOTAutograd makes its aten graphs (forward and backward for
training, so gradients run through the backward operators' kernels: the weight- and
input-gradient matmuls, convolution, GELU and softmax backward), and each operator call
that a workload computes (`aten_match.py`) is replaced by
`torch.ops.autosched.<workload>.graph` (the op without its autograd layer: the graphs are
already differentiated) where

* the library has the kernel for exactly this workload and these shapes, and
* `model_ops.json` chose it: export-model's decision (`autosched.model.choice.OpChoice`),
  the kernel as called through its torch op timed beside torch's operator, or as
  recorded against torch's baseline record.

Everything else runs as torch runs it: compiled by inductor (the default where inductor
can build; `compiler="eager"` runs the aten graph operator by operator), which fuses
the operators left to torch around the kernels' calls. A shape the library lacks (another
batch size, dynamic shapes) falls back to torch; compile with `dynamic=False` so a new
shape gets its own static graph. Every decision is logged (logger ``autosched.model``)
and listed by `explain(backend)`.

`cudagraphs=True` captures the compiled step in CUDA graphs and replays it, through
torch's CUDA graph trees (what `mode="reduce-overhead"` turns on): with inductor, the
compile asks inductor for them; with the eager compiler, the aten graphs are captured as
torch's own "cudagraphs" backend captures them. torch's checks decide per graph (CPU
tensors, input mutations, operators tagged unsafe) and log a graph left uncaptured. The
kernels' ops are functional, on the inputs' device, launched on torch's current stream
(the capturing stream) and allocate their outputs through torch, so they are captured
like aten's. It needs a CUDA library and a GPU: elsewhere it is refused in one line.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UserError
from .aten_match import OpMatch
from .choice import CHOICES_NAME, SPLIT_CALL, read_choices, shape_text
from .conv_layouts import permuted
from .graphs import aot_backend, graph_compiler, lays_out, scan

log = logging.getLogger("autosched.model")
aten = torch.ops.aten
CHANNELS_LAST = torch.channels_last


@dataclass(frozen=True)
class Decision:
    """What the backend did with one operator call of one graph."""

    graph: str       # forward | backward | inference
    op: str          # the aten operator
    workload: str    # the autosched workload that computes it ("" if none does)
    shape: str
    chosen: str      # autosched | torch
    reason: str


class AutoschedBackend:
    """A torch.compile backend over one exported model library (see the module doc)."""

    def __init__(self, library, compiler: str = "auto", cudagraphs: bool = False):
        if not isinstance(cudagraphs, bool):
            raise UserError(f"cudagraphs is True or False, not {cudagraphs!r}")
        library = _model_library(library)
        if cudagraphs:
            _check_cudagraphs(library)
        self.cudagraphs = cudagraphs
        self.directory = library if isinstance(library, Path) else library.path
        self.choices = {(c.workload, tuple(sorted(c.params.items()))): c
                        for c in read_choices(self.directory) or []}
        self.kernels, self.ops = {}, {}
        if not isinstance(library, Path):
            for entry in library.manifest.kernels:
                key = (entry.workload, tuple(sorted(entry.args.items())))
                self.kernels[key] = entry
                self.ops[entry.workload] = library.graph_op(entry.workload)
        self.decisions: list[Decision] = []
        self.compile_graph = graph_compiler(compiler)

    def __call__(self, gm, example_inputs):
        if self.cudagraphs and not any(isinstance(t, torch.Tensor) and t.is_cuda
                                       for t in example_inputs):
            raise UserError("cudagraphs=True captures CUDA work, and this graph's inputs are "
                            "not on a CUDA device (move the model and inputs to the GPU, or "
                            "leave cudagraphs off)")
        return aot_backend(self.rewrite, self.compile_graph, self.cudagraphs,
                           lays_out(self.compile_graph))(gm, example_inputs)

    def __str__(self) -> str:
        return f"autosched kernels of {self.directory}"

    def decide(self, m: OpMatch) -> tuple[str, str]:
        """("autosched" or "torch", why) for one matched operator call: export-model's
        decision for its task (model_ops.json), where the library holds its kernel."""
        exported = self.choices.get(m.key)
        if m.key not in self.kernels:
            return "torch", exported.reason if exported else "shape not in the library"
        if exported is None:
            return "torch", (f"no decision in {CHOICES_NAME} for this shape (export the "
                             "library with `autosched export-model`)")
        return exported.chosen, exported.reason

    def rewrite(self, gm, kind: str, channels_last: bool = False) -> None:
        """Replace the chosen operator calls of one aten graph by their kernels (its
        convolutions in NHWC where the graph runs `channels_last`)."""
        found = scan(gm, kind, channels_last)
        decided = [(m, *self.decide(m)) for m in found.matches]
        # the outputs of one operator go to kernels together or not at all
        torch_groups = {id(m.group) for m, chosen, _ in decided
                        if m.group is not None and chosen == "torch"}
        replaced = {}   # a replaced call's output node -> the node now computing its value
        copies = {}     # a value read NCHW -> its channels_last copy, made once
        for m, chosen, reason in decided:
            if chosen == "autosched" and m.group is not None and id(m.group) in torch_groups:
                chosen, reason = "torch", SPLIT_CALL
            self._note(Decision(kind, m.op, m.workload, shape_text(m.params), chosen,
                                reason))
            if chosen == "autosched":
                replaced[m.output] = self._replace(gm.graph, m, self.kernels[m.key],
                                                   replaced, copies)
        for name, count in found.uncovered.items():
            for _ in range(count):
                self._note(Decision(kind, name, "", "", "torch", "no autosched workload"))
        gm.graph.eliminate_dead_code()
        gm.graph.lint()

    def _note(self, d: Decision) -> None:
        self.decisions.append(d)
        log.info("autosched backend: %s graph: %s %s -> %s (%s)", d.graph, d.op,
                 f"{d.workload}({d.shape})" if d.workload else "", d.chosen, d.reason)

    def _replace(self, graph, m: OpMatch, entry, replaced: dict, copies: dict):
        """Compute `m`'s output with its kernel and return the node that does. An input
        that an earlier replaced call computed is read from that call's kernel (the
        scan matched the node it replaced; reading that would compute it twice); any
        other input an NHWC kernel takes whose graph value is not channels_last is read
        from its channels_last copy in `copies` (`_channels_last_copy`)."""
        op = self.ops[entry.workload]
        perms = m.input_perms or (None,) * len(m.inputs)
        with graph.inserting_before(m.output):
            args = []
            for node, shape, perm in zip(m.inputs, m.input_shapes, perms):
                have = permuted(node.meta["val"].shape, perm)
                if node in replaced:   # the same value (new nodes have no meta)
                    node = replaced[node]
                elif perm is not None and \
                        not node.meta["val"].is_contiguous(memory_format=CHANNELS_LAST):
                    node = _channels_last_copy(graph, node, copies)
                if perm is not None:  # a view: zero-copy where it is channels_last
                    node = graph.call_function(aten.permute.default, (node, list(perm)))
                if have != tuple(shape):
                    node = graph.call_function(aten.reshape.default, (node, list(shape)))
                args.append(node)
            out = graph.call_function(op, tuple(args))
            have = permuted(entry.outputs[0].shape, m.output_perm)
            if m.output_perm is not None:
                out = graph.call_function(aten.permute.default, (out, list(m.output_perm)))
            if have != tuple(m.output_shape):
                out = graph.call_function(aten.reshape.default, (out, list(m.output_shape)))
        m.output.replace_all_uses_with(out)
        return out


def _channels_last_copy(graph, node, copies: dict):
    """The channels_last copy of `node`, a value an NHWC kernel reads that the graph
    says is NCHW, made once per graph: for a placeholder (the model's input, a weight)
    before the graph's first computation, for a computed value right after it. Inductor
    fuses the copy with its other work (a pointwise producer writes channels_last at
    once). A computed value's graph strides are eager's: inductor may have laid it out
    channels_last already (the output of a convolution left to torch), and without the
    copy the kernel's exact-stride input would make inductor copy it to NCHW, and the op
    copy it back."""
    if node not in copies:
        if node.op == "placeholder":
            where = graph.inserting_before(next(n for n in graph.nodes
                                                if n.op != "placeholder"))
        else:
            where = graph.inserting_after(node)
        with where:
            copies[node] = graph.call_function(
                aten.clone.default, (node,), {"memory_format": CHANNELS_LAST})
    return copies[node]


def _model_library(library):
    """The loaded `KernelLibrary` as given; a directory loaded through the same door
    (`load_library`); a directory without kernels (export-model found torch faster
    everywhere and wrote only model_ops.json) as its `Path`."""
    from ..torch.errors import LibraryError
    from ..torch.library import KernelLibrary, load_library

    if isinstance(library, KernelLibrary):
        return library
    directory = Path(library)
    if not directory.is_dir():
        raise LibraryError(f"model library not found: {library} is not a directory")
    if not (directory / "manifest.json").is_file():
        return directory
    return load_library(directory)


def _check_cudagraphs(library) -> None:
    """cudagraphs=True needs CUDA kernels (where the library has any) and a GPU."""
    device = None if isinstance(library, Path) else library.manifest.device_type
    if device is not None and device != "cuda":
        directory = library.path
        raise UserError(f"cudagraphs=True captures CUDA work, and {directory} holds {device} "
                        "kernels; export the model with --target cuda, or leave cudagraphs "
                        "off")
    if not torch.cuda.is_available():
        raise UserError("cudagraphs=True needs a CUDA GPU, and torch sees none here; leave "
                        "cudagraphs off on the CPU")


def backend(library, compiler: str = "auto", cudagraphs: bool = False) -> AutoschedBackend:
    """The torch.compile backend for the library `autosched export-model` wrote:
    ``torch.compile(model, backend=autosched.model.backend(DIR))``; `library` is that
    directory or the library loaded from it (`autosched.torch.load_library(DIR)`).
    `compiler` compiles what stays torch's: "inductor", "eager", or "auto" (inductor
    where it can build). `cudagraphs=True` captures and replays the compiled step with
    torch's CUDA graph trees (a CUDA library on a GPU; refused elsewhere)."""
    return AutoschedBackend(library, compiler, cudagraphs)


def explain(compiled_backend: AutoschedBackend, graph: str | None = None) -> str:
    """A table of the decisions the backend made so far (one graph kind if given); equal
    decisions are one row with their number of calls."""
    from ..tables import format_table

    counts = Counter(d for d in compiled_backend.decisions if graph in (None, d.graph))
    rows = [(d.graph, d.op, d.workload.removeprefix("aten_"), d.shape, str(n), d.chosen,
             d.reason) for d, n in counts.items()]
    return format_table(("graph", "op", "workload", "shape", "calls", "chosen", "why"), rows)
