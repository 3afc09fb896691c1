"""Random but valid tensor expressions, one per seed: the fuzz corpus of the search space.

This file is an op file: `fuzz(seed=S)` is a workload, so the corpus tunes like any
user's operator (`autosched tune tests/fuzz/te_gen.py --arg seed=3 --target llvm`), and
several seeds are one `load_tasks(path, args=["seed=1", "seed=2", ...])` call.

Each program is a short chain of steps on a float32 tensor, drawn from what users write
outside the DNN set as much as in it: elementwise maps (exp, tanh, sigmoid, sqrt of abs,
max, a guarded division), broadcasts of a smaller input, reductions (sum, max, mean) over
one or several axes, contractions (batched, with a transposed operand, chained),
strided, windowed and transposed reads, and multi-output computations (one te.compute
with two outputs, and an intermediate returned beside the result). Sizes are small and
often odd (3, 7, 13, 33), so every program builds in about a second. Values stay finite:
each tensor carries a bound on its magnitude, and `exp` only sees inputs within 8.
"""
from __future__ import annotations

import random

from tvm import te, tirx

import autosched

SIZES = (3, 4, 7, 8, 12, 13, 16, 33)
MAX_ELEMENTS = 6144   # per tensor
MAX_WORK = 1 << 17    # multiply-adds of one step
STEPS = (1, 4)        # steps per program, inclusive


class _Gen:
    """Draws one program; every choice goes through `self.rng`."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.inputs: list = []
        self.extra_outputs: list = []
        self.names = 0

    def name(self, stem: str) -> str:
        self.names += 1
        return f"{stem}{self.names}"

    def placeholder(self, shape) -> tuple:
        t = te.placeholder(tuple(shape), name=self.name("in"), dtype="float32")
        self.inputs.append(t)
        return t, 1.0

    def shape(self, rank: int) -> list[int]:
        while True:
            shape = [self.rng.choice(SIZES) for _ in range(rank)]
            if rank == 3:
                shape[0] = self.rng.choice((2, 3, 4))
            if _count(shape) <= MAX_ELEMENTS:
                return shape

    def program(self) -> list:
        x = self.placeholder(self.shape(self.rng.choice((1, 2, 2, 2, 3))))
        produced = []
        for _ in range(self.rng.randint(*STEPS)):
            steps = [s for s in _STEPS if s[1](x[0])]
            step = self.rng.choices([s[0] for s in steps], [s[2] for s in steps])[0]
            x = step(self, x, produced)
            produced.append(x)
        if produced[:-1] and self.rng.random() < 0.25:
            self.extra_outputs.append(self.rng.choice(produced[:-1])[0])
        outputs = list(dict.fromkeys(self.extra_outputs + [x[0]]))
        return self.inputs + outputs


def _count(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _shape(t) -> list[int]:
    return [int(s) for s in t.shape]


def _f(value: float):
    return tirx.const(value, "float32")


# -- elementwise -------------------------------------------------------------------------

def _unary(g: _Gen, x, produced):
    t, bound = x
    ops = [("tanh", te.tanh, 1.0), ("sigmoid", te.sigmoid, 1.0),
           ("sqrt_abs", lambda v: te.sqrt(te.abs(v)), bound ** 0.5),
           ("relu", lambda v: te.max(v, _f(0.0)), bound),
           ("scale", lambda v: v * _f(0.5) - _f(0.25), bound * 0.5 + 0.25),
           ("square", lambda v: v * v, bound * bound)]
    if bound <= 8.0:
        ops.append(("exp", te.exp, 2981.0))
    name, fn, out_bound = g.rng.choice(ops)
    return te.compute(t.shape, lambda *i: fn(t(*i)), name=g.name(name)), out_bound


def _binary(g: _Gen, x, produced):
    """x op y, y a smaller input broadcast along the axes it lacks, or an earlier tensor
    of the same shape (a DAG, not a chain)."""
    t, bound = x
    shape = _shape(t)
    same = [p for p in produced if _shape(p[0]) == shape and p[0] is not t]
    if same and g.rng.random() < 0.4:
        (y, ybound), axes = g.rng.choice(same), list(range(len(shape)))
    else:
        axes = sorted(g.rng.sample(range(len(shape)), g.rng.randint(1, len(shape))))
        y, ybound = g.placeholder([shape[a] for a in axes])
    ops = [("add", lambda a, b: a + b, bound + ybound),
           ("mul", lambda a, b: a * b, bound * ybound),
           ("max", te.max, max(bound, ybound)),
           ("div", lambda a, b: a / (_f(1.0) + te.abs(b)), bound)]
    name, fn, out_bound = g.rng.choice(ops)
    out = te.compute(t.shape, lambda *i: fn(t(*i), y(*[i[a] for a in axes])), name=g.name(name))
    return out, out_bound


def _two_outputs(g: _Gen, x, produced):
    """One te.compute with two outputs (TVM makes a block of each), both read by the next
    map. (A program could return one of them at most: outputs need distinct names.)"""
    t, bound = x
    a, b = te.compute(t.shape, lambda *i: (te.tanh(t(*i)), t(*i) * t(*i) + _f(1.0)),
                      name=g.name("pair"))
    out = te.compute(t.shape, lambda *i: a(*i) * b(*i), name=g.name("combine"))
    return out, bound * bound + 1.0


# -- reads: transposed, strided, windowed --------------------------------------------------

def _transpose(g: _Gen, x, produced):
    t, bound = x
    shape = _shape(t)
    perm = list(range(len(shape)))
    while perm == sorted(perm):
        g.rng.shuffle(perm)
    inverse = [perm.index(a) for a in range(len(perm))]
    out = te.compute([shape[p] for p in perm],
                     lambda *i: t(*[i[inverse[a]] for a in range(len(perm))]) + _f(1.0),
                     name=g.name("transpose"))
    return out, bound + 1.0


def _strided(g: _Gen, x, produced):
    """Every other element along one axis, from an offset (a downsample)."""
    t, bound = x
    shape = _shape(t)
    axis = g.rng.choice([a for a, s in enumerate(shape) if s >= 3])
    offset = g.rng.randrange(2)
    new = list(shape)
    new[axis] = (shape[axis] - offset + 1) // 2

    def read(*i):
        idx = list(i)
        idx[axis] = idx[axis] * 2 + offset
        return t(*idx) * _f(2.0)

    return te.compute(new, read, name=g.name("stride")), bound * 2.0


def _window(g: _Gen, x, produced):
    """A sliding-window reduction over the last two axes (pooling, or a small
    convolution with a weight input), stride 1 or 2."""
    t, bound = x
    shape = _shape(t)
    h, w = shape[-2:]
    wu, wv = g.rng.choice([(2, 2), (3, 3), (3, 1), (1, 3)])
    wu, wv = min(wu, h), min(wv, w)
    stride = g.rng.choice((1, 1, 2))
    oh, ow = (h - wu) // stride + 1, (w - wv) // stride + 1
    u = te.reduce_axis((0, wu), name=g.name("u"))
    v = te.reduce_axis((0, wv), name=g.name("v"))
    kind = g.rng.choice(("sum", "max", "conv"))
    weight = g.placeholder([wu, wv])[0] if kind == "conv" else None

    def read(*i):
        value = t(*i[:-2], i[-2] * stride + u, i[-1] * stride + v)
        if kind == "max":
            return te.max(value, axis=[u, v])
        if kind == "conv":
            value = value * weight[u, v]
        return te.sum(value, axis=[u, v])

    out = te.compute(shape[:-2] + [oh, ow], read, name=g.name("window_" + kind))
    return out, bound * (1.0 if kind == "max" else wu * wv)


# -- reductions and contractions ----------------------------------------------------------

def _reduce(g: _Gen, x, produced):
    """sum, max or mean over a random non-empty set of axes (all of them: shape (1,))."""
    t, bound = x
    shape = _shape(t)
    axes = sorted(g.rng.sample(range(len(shape)), g.rng.randint(1, len(shape))))
    kept = [a for a in range(len(shape)) if a not in axes]
    raxes = {a: te.reduce_axis((0, shape[a]), name=g.name("r")) for a in axes}
    kind = g.rng.choice(("sum", "max", "mean"))
    n = _count([shape[a] for a in axes])

    def read(*i):
        pos = dict(zip(kept, i))
        value = t(*[pos[a] if a in pos else raxes[a] for a in range(len(shape))])
        rs = [raxes[a] for a in axes]
        if kind == "max":
            return te.max(value, axis=rs)
        return te.sum(value * _f(1.0 / n) if kind == "mean" else value, axis=rs)

    out_shape = [shape[a] for a in kept] or [1]
    if not kept:
        out = te.compute(out_shape, lambda _: read(), name=g.name("reduce_" + kind))
    else:
        out = te.compute(out_shape, read, name=g.name("reduce_" + kind))
    return out, bound * (n if kind == "sum" else 1.0)


def _contract(g: _Gen, x, produced):
    """x[..., m, k] * w[k, n] (or w[n, k], a transposed operand; or a batched w[b, k, n])
    summed over k."""
    t, bound = x
    shape = _shape(t)
    lead, kdim = shape[:-1], shape[-1]
    choices = [n for n in SIZES if _count(lead + [n]) <= MAX_ELEMENTS
               and _count(lead + [n, kdim]) <= MAX_WORK]
    n = g.rng.choice(choices or [1])
    form = g.rng.choice(("kn", "nk", "batched") if len(shape) == 3 else ("kn", "nk"))
    k = te.reduce_axis((0, kdim), name=g.name("k"))
    if form == "kn":
        w = g.placeholder([kdim, n])[0]
        out = te.compute(lead + [n], lambda *i: te.sum(t(*i[:-1], k) * w[k, i[-1]], axis=k),
                         name=g.name("matmul"))
    elif form == "nk":
        w = g.placeholder([n, kdim])[0]
        out = te.compute(lead + [n], lambda *i: te.sum(t(*i[:-1], k) * w[i[-1], k], axis=k),
                         name=g.name("matmul_t"))
    else:
        w = g.placeholder([shape[0], kdim, n])[0]
        out = te.compute(lead + [n], lambda b, m, j: te.sum(t[b, m, k] * w[b, k, j], axis=k),
                         name=g.name("batch_matmul"))
    return out, bound * kdim


# (step, applies to tensor t, weight)
_STEPS = (
    (_unary, lambda t: True, 3),
    (_binary, lambda t: True, 3),
    (_two_outputs, lambda t: True, 1),
    (_transpose, lambda t: len(t.shape) >= 2, 1),
    (_strided, lambda t: any(int(s) >= 3 for s in t.shape), 1),
    (_window, lambda t: len(t.shape) >= 2 and min(int(s) for s in t.shape[-2:]) >= 2, 2),
    (_reduce, lambda t: _count(_shape(t)) > 1, 2),
    (_contract, lambda t: len(t.shape) >= 2 and _count(_shape(t)) * 3 <= MAX_WORK, 3),
)


@autosched.workload
def fuzz(seed=0):
    """The random program of `seed`: its inputs, then its outputs."""
    return _Gen(seed).program()
