"""Shape buckets: one captured CUDA graph per bucket for inputs whose size varies.

A CUDA graph replays fixed kernels on fixed addresses, so it serves one shape. A model
whose batch size or sequence length changes from call to call would need a capture per
size; `bucketed(fn, sizes=[...], dim=...)` needs one per bucket instead:

    step = autosched.model.bucketed(model, sizes=[128, 256, 512], dim=1)
    out = step(tokens)          # tokens [B, 300]: padded to [B, 512], one replay, sliced

Each call pads its inputs along `dim` to the smallest bucket at least as large as their
size (with `pad_value`), copies them into the bucket's static input buffers, replays the
bucket's graph and returns the outputs cut back to the call's size along `out_dim`. The
first call that lands in a bucket captures its graph (after warm-up runs, which also let
torch.compile compile the bucket's static shape); all buckets' graphs share one memory
pool (`torch.cuda.graph_pool_handle()`), so buckets that never run at once do not each
hold their own intermediates. A call with other sizes in its other dimensions (another
batch size when the sequence length is bucketed) is captured as a graph of its own.
Sharing the pool is safe in any order of replays: each graph's outputs stay alive (held
here), and whatever else a graph allocates is dead when it ends. The outputs carry no
autograd history; to train, capture the whole step (forward, backward, optimizer) in fn.

Padding is harmless where each output row depends only on its own and earlier rows
(row-wise layers, causal attention): the padded rows are cut off. Where padding would
leak into valid rows (non-causal attention, a mean over the sequence), ask for the valid
size: `valid="length"` passes `valid_length=` (a 0-d int64 tensor) to `fn`,
`valid="mask"` passes `valid_mask=` (a bool tensor of the bucket's size, True on valid
rows). Both are static buffers the graph reads, refilled on every call.

A size above the largest bucket raises a `BucketError` (`oversize="error"`, the default);
with `oversize="eager"` such a call runs `fn` on its inputs as they are, uncaptured.

The capture is an interface (`GraphCapture`): `CudaGraphCapture` is torch's
`torch.cuda.graph`; tests and CPU runs pass their own. Do not bucket a function compiled
with `autosched.model.backend(..., cudagraphs=True)` (or inductor's "reduce-overhead"):
that function captures itself, and captures do not nest; compile it without CUDA graphs.
"""
from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..errors import UserError

VALID_KINDS = (None, "length", "mask")
SAME_AS_DIM = "dim"  # out_dim's default: the outputs are cut along the inputs' dim
OVERSIZE = ("error", "eager")


class BucketError(UserError, ValueError):
    """A call or a configuration that the buckets cannot serve (one line)."""


class GraphCapture(Protocol):
    """How graphs are captured and replayed (`CudaGraphCapture` on a GPU)."""

    def new_pool(self) -> Any:
        """A memory pool handle that every graph of one `Bucketed` shares."""

    def capture(self, run: Callable[[], Any], pool: Any,
                bucket: int) -> tuple[Callable[[], None], Any]:
        """Capture `run()` (which reads and writes only static buffers) into the pool:
        (replay, outputs), where replay() recomputes `outputs` in place."""


class CudaGraphCapture:
    """`torch.cuda.graph` capture: `warmup` runs on a side stream first (as torch's
    documentation asks: lazy initialisation, compiles and allocator warm-up happen
    outside the capture), then one capture into the shared pool."""

    def __init__(self, warmup: int = 2):
        self.warmup = warmup

    def new_pool(self):
        return torch.cuda.graph_pool_handle()

    def capture(self, run, pool, bucket):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            outputs = run()
        return graph.replay, outputs


@dataclass
class _Graph:
    """One captured bucket: its static buffers, outputs and replay."""

    bucket: int
    inputs: list[torch.Tensor]
    valid: torch.Tensor | None
    replay: Callable[[], None]
    outputs: Any


def _check_sizes(sizes) -> tuple[int, ...]:
    try:
        values = list(sizes)
    except TypeError:
        raise BucketError(f"bucketed: sizes is a list of positive ints, not {sizes!r}") from None
    if not values:
        raise BucketError("bucketed: sizes is empty; give at least one bucket size")
    bad = [s for s in values if isinstance(s, bool) or not isinstance(s, int) or s < 1]
    if bad:
        raise BucketError(f"bucketed: bucket sizes are positive ints, not {bad[0]!r}")
    return tuple(sorted(set(values)))


class Bucketed:
    """`fn` run through one captured graph per bucket (see the module doc); made by
    `bucketed`. `captures` lists the buckets captured, in order; `calls` counts the
    calls served per bucket (None for calls run uncaptured)."""

    def __init__(self, fn: Callable, sizes: Sequence[int], dim: int = 0,
                 out_dim: int | None | Sequence[int | None] | str = SAME_AS_DIM, pad_value=0,
                 valid: str | None = None, oversize: str = "error",
                 capture: GraphCapture | None = None, copy_outputs: bool = True):
        if not callable(fn):
            raise BucketError(f"bucketed: fn must be callable, not {type(fn).__name__}")
        self.fn = fn
        self.sizes = _check_sizes(sizes)
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise BucketError(f"bucketed: dim is an int, not {dim!r}")
        self.dim = dim
        self.out_dim = dim if isinstance(out_dim, str) and out_dim == SAME_AS_DIM else out_dim
        if isinstance(self.out_dim, (str, bool)) or not (
                self.out_dim is None or isinstance(self.out_dim, (int, tuple, list))):
            raise BucketError(f"bucketed: out_dim is an int, None or one per output, not "
                              f"{out_dim!r}")
        if valid not in VALID_KINDS:
            raise BucketError(f"bucketed: valid is 'length', 'mask' or None, not {valid!r}")
        if oversize not in OVERSIZE:
            raise BucketError(f"bucketed: oversize is 'error' or 'eager', not {oversize!r}")
        self.pad_value, self.valid, self.oversize = pad_value, valid, oversize
        self.copy_outputs = copy_outputs
        self._capture = capture
        self._pool = None
        self._graphs: dict[tuple, _Graph] = {}
        self.captures: list[int] = []
        self.calls: Counter = Counter()

    # ------------------------------------------------------------------ choosing
    def bucket_for(self, size: int) -> int | None:
        """The smallest bucket >= size (None above the largest)."""
        i = bisect.bisect_left(self.sizes, size)
        return self.sizes[i] if i < len(self.sizes) else None

    def _size_of(self, tensors) -> int:
        if not tensors:
            raise BucketError("bucketed: the call has no tensor arguments to pad")
        sizes = set()
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor):
                raise BucketError(f"bucketed: argument {i} is a {type(t).__name__}; the "
                                  "bucketed function takes tensors only (bind the rest "
                                  "with functools.partial)")
            if not -t.dim() <= self.dim < t.dim():
                raise BucketError(f"bucketed: dim {self.dim} is out of range for argument "
                                  f"{i} of shape {list(t.shape)}")
            sizes.add(t.shape[self.dim])
        if len(sizes) > 1:
            raise BucketError(f"bucketed: the arguments differ in size along dim "
                              f"{self.dim}: {sorted(sizes)}")
        size = sizes.pop()
        if size < 1:
            raise BucketError(f"bucketed: size {size} along dim {self.dim}; a call pads "
                              "at least one row")
        return size

    # ------------------------------------------------------------------ running
    def __call__(self, *tensors):
        size = self._size_of(tensors)
        bucket = self.bucket_for(size)
        if bucket is None:
            if self.oversize == "eager":
                self.calls[None] += 1
                return self.fn(*tensors, **self._valid_kwargs_eager(tensors, size))
            raise BucketError(f"bucketed: size {size} along dim {self.dim} is above the "
                              f"largest bucket {self.sizes[-1]} (buckets {list(self.sizes)})")
        key = (bucket,) + tuple((self._padded_shape(t, bucket), t.dtype, t.device)
                                for t in tensors)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = self._new_graph(tensors, size, bucket)
        self._copy_in(graph, tensors, size)
        graph.replay()
        self.calls[bucket] += 1
        return self._cut(graph.outputs, size, bucket)

    def _padded_shape(self, t: torch.Tensor, bucket: int) -> tuple[int, ...]:
        shape = list(t.shape)
        shape[self.dim] = bucket
        return tuple(shape)

    @torch.no_grad()
    def _copy_in(self, graph: _Graph, tensors, size: int) -> None:
        for buffer, t in zip(graph.inputs, tensors):
            buffer.narrow(self.dim, 0, size).copy_(t)
            if size < graph.bucket:
                buffer.narrow(self.dim, size, graph.bucket - size).fill_(self.pad_value)
        if self.valid == "length":
            graph.valid.fill_(size)
        elif self.valid == "mask":
            graph.valid[:size].fill_(True)
            graph.valid[size:].fill_(False)

    def _valid_kwargs(self, valid: torch.Tensor | None) -> dict:
        return {} if self.valid is None else {f"valid_{self.valid}": valid}

    def _valid_kwargs_eager(self, tensors, size: int) -> dict:
        device = tensors[0].device
        if self.valid == "length":
            return {"valid_length": torch.tensor(size, dtype=torch.int64, device=device)}
        if self.valid == "mask":
            return {"valid_mask": torch.ones(size, dtype=torch.bool, device=device)}
        return {}

    def _new_graph(self, tensors, size: int, bucket: int) -> _Graph:
        capture = self._capture or _default_capture(tensors)
        if self._pool is None:
            self._pool = capture.new_pool()
        device = tensors[0].device
        inputs = [torch.empty(self._padded_shape(t, bucket), dtype=t.dtype, device=device)
                  for t in tensors]
        valid = None
        if self.valid == "length":
            valid = torch.zeros((), dtype=torch.int64, device=device)
        elif self.valid == "mask":
            valid = torch.zeros(bucket, dtype=torch.bool, device=device)
        graph = _Graph(bucket, inputs, valid, lambda: None, None)
        self._copy_in(graph, tensors, size)  # the warm-up runs see real data
        kwargs = self._valid_kwargs(valid)
        replay, outputs = capture.capture(lambda: self.fn(*inputs, **kwargs), self._pool,
                                          bucket)
        self._check_outputs(outputs, bucket)
        graph.replay, graph.outputs = replay, outputs
        self.captures.append(bucket)
        return graph

    # ------------------------------------------------------------------ outputs
    def _out_dims(self, n: int) -> list[int | None]:
        if self.out_dim is None or isinstance(self.out_dim, int):
            return [self.out_dim] * n
        dims = list(self.out_dim)
        if len(dims) != n:
            raise BucketError(f"bucketed: out_dim names {len(dims)} outputs; fn returned {n}")
        return dims

    def _check_outputs(self, outputs, bucket: int) -> None:
        flat = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        for i, (o, d) in enumerate(zip(flat, self._out_dims(len(flat)))):
            if not isinstance(o, torch.Tensor):
                raise BucketError(f"bucketed: fn returned a {type(o).__name__} as output "
                                  f"{i}; a captured function returns tensors")
            if d is not None and (not -o.dim() <= d < o.dim() or o.shape[d] != bucket):
                raise BucketError(f"bucketed: output {i} of shape {list(o.shape)} has no "
                                  f"dim {d} of the bucket's size {bucket}; give out_dim "
                                  "(None for an output that is not cut)")

    def _cut(self, outputs, size: int, bucket: int):
        flat = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        cut = []
        for o, d in zip(flat, self._out_dims(len(flat))):
            if d is not None and size < bucket:
                o = o.narrow(d, 0, size)
            cut.append(o.clone() if self.copy_outputs else o)
        if isinstance(outputs, (tuple, list)):
            return type(outputs)(cut)
        return cut[0]


def _default_capture(tensors) -> GraphCapture:
    devices = {t.device.type for t in tensors}
    if devices != {"cuda"}:
        raise BucketError(f"bucketed: CUDA graphs capture CUDA tensors; this call's are on "
                          f"{', '.join(sorted(devices))} (pass capture= to capture otherwise)")
    return CudaGraphCapture()


def bucketed(fn: Callable, sizes: Sequence[int], dim: int = 0, **options) -> Bucketed:
    """`fn` captured once per shape bucket and replayed (see the module doc).

    `sizes` are the bucket sizes along `dim` of every tensor argument. Options:
    `out_dim` (the outputs' dim cut back to the call's size: `dim` by default, None for
    none, or one per output), `pad_value` (0), `valid` (None, "length" or "mask": what
    `fn` is told of the valid rows), `oversize` ("error" or "eager"), `capture` (a
    `GraphCapture`; `CudaGraphCapture()` by default), `copy_outputs` (True: return
    copies; False: views of the graph's static outputs, overwritten by the next call)."""
    return Bucketed(fn, sizes, dim, **options)
