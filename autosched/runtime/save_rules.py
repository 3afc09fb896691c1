"""Which compute-heavy outputs a selective checkpoint keeps: the rules of the selective
actions (actions.py), read by the checkpoint policies (checkpointing.py) and by the
profile, which offers a rule for a layer only where it keeps something else than the
others (trace.OpTrace.heavy records what the rules need).

| rule   | keeps the output of a compute-heavy op...                                        |
|--------|-----------------------------------------------------------------------------------|
| all    | always                                                                            |
| dense  | unless it is a batched product of activations (attention scores, weighted sums)  |
| narrow | unless it has more elements than its data operand (an expanding contraction)     |

Recomputing a contraction costs 2K flops per output element (K its contraction length),
and the cheapest elements to drop are those of short contractions and of outputs wider
than their input. In a transformer block `dense` recomputes the attention core's two
batched products (K = head dim and sequence length) and keeps the projections; `narrow`
recomputes the QKV projection, the scores and the MLP's first linear (each wider than its
input) and keeps the attention output, the output projection and the MLP's second linear.
Compiled, a transformer block keeps the most under `all`, less under `dense`, much less
under `narrow`, and only its input recomputed whole. AOTAutograd's partitioner makes the
same kind of choice over the whole graph from a flop estimate; a plan makes it per layer
from measured step times.
"""
from __future__ import annotations

from .trace import FUSED_ATTENTION

RULES = ("all", "dense", "narrow")

# products of two activations: attention's scores and weighted sums, fused attention
BATCHED_PRODUCTS = {"bmm", "baddbmm", "matmul", *FUSED_ATTENTION}


def keeps(rule: str, name: str, output_numel: int, operand_numel: int) -> bool:
    """Whether selective recomputation under `rule` keeps the output of compute-heavy op
    `name` (output_numel: its first output's elements; operand_numel: its data operand's)."""
    if rule == "all":
        return True
    if rule == "dense":
        return name not in BATCHED_PRODUCTS
    if rule == "narrow":
        return output_numel <= operand_numel
    raise ValueError(f"unknown save rule {rule!r}; known: {', '.join(RULES)}")


def distinct_rules(heavy: list) -> list[str]:
    """The rules besides "all" worth an action of their own for a layer whose compute-heavy
    ops are `heavy` ((name, output elements, operand elements) each): those that keep some
    but not all of them, and not the same ones as a rule before them."""
    if not heavy:
        return []
    seen = {tuple(True for _ in heavy)}
    out = []
    for rule in RULES[1:]:
        kept = tuple(keeps(rule, *op) for op in heavy)
        if any(kept) and kept not in seen:
            seen.add(kept)
            out.append(rule)
    return out
