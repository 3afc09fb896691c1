"""The per-layer actions a plan chooses from: what each keeps for backward, what it costs.

| action                         | saved for backward                       | extra time            |
|--------------------------------|------------------------------------------|-----------------------|
| keep                           | everything autograd saves                | none                  |
| memeff_ln                      | LayerNorms save output + 1/std           | input rebuilt (cheap) |
| memeff                         | also GELU saves output + 1-byte mask     | derivative lookup     |
| recompute_attention            | attention core keeps only its inputs     | core forward again    |
| recompute_attention+memeff_ln  | both of the above                        | both                  |
| recompute_attention+memeff     | attention core inputs, memeff GELU + LN  | both                  |
| fused_attention                | attention core as one fused op: no probs | probs in its backward |
| selective                      | outputs of matmul-like ops + layer input | cheap ops again       |
| selective_dense                | those but attention's batched products   | also those products   |
| selective_narrow               | those no wider than their data operand   | also wider matmuls    |
| selective*+fused_attention     | a selective rule's, core fused           | both                  |
| recompute                      | the layer's inputs only                  | whole forward again   |
| offload                        | nothing on the device (copies on host)   | transfers not hidden  |
| offload+memeff_ln              | host copies of the memeff_ln-reduced set | smaller transfers     |
| offload+memeff                 | host copies of the memeff-reduced set    | smaller transfers     |

`recompute` is non-reentrant `torch.utils.checkpoint`; `selective` is the same with a
`create_selective_checkpoint_contexts` policy (checkpointing.py; the three selective
actions differ in the save rule of save_rules.py; compiled, a selective or recomputed
layer after a selective one joins its region and keeps no input, joined_regions.py);
`recompute_attention`
checkpoints only the layer's attention-core submodules, as Megatron-LM's selective
recomputation does; `offload` is offload.py; the memeff forms are memeff/ (the fused
attention core is memeff/attention.py: offered where the core is that function).
planned_layer.PlannedLayer carries an action out. This table is plain data (no torch), so
the predictor and the solver read it without importing torch.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Action:
    name: str
    memeff: tuple = ()                # module kinds made memory-efficient
    recompute: str | None = None      # None, "full", "selective" or "attention"
    offload: bool = False
    saves: str = "all"                # selective: the save rule (save_rules.RULES)
    fused_core: bool = False          # attention cores run as one fused op

    @property
    def reforms(self) -> bool:
        """Whether the layer runs another program of the same function (memory-efficient
        or fused forms): its gradients equal eager's to the forms' tolerance, not exactly."""
        return bool(self.memeff) or self.fused_core


LN, ALL = ("layer_norm",), ("gelu", "layer_norm")
FUSED = "fused_attention"
ACTIONS = {a.name: a for a in (
    Action("keep"),
    Action("memeff_ln", memeff=LN),
    Action("memeff", memeff=ALL),
    Action("recompute_attention", recompute="attention"),
    Action("recompute_attention+memeff_ln", memeff=LN, recompute="attention"),
    Action("recompute_attention+memeff", memeff=ALL, recompute="attention"),
    Action("selective", recompute="selective"),
    Action("selective_dense", recompute="selective", saves="dense"),
    Action("selective_narrow", recompute="selective", saves="narrow"),
    Action(FUSED, fused_core=True),
    Action(f"selective+{FUSED}", fused_core=True, recompute="selective"),
    Action(f"selective_dense+{FUSED}", fused_core=True, recompute="selective", saves="dense"),
    Action(f"selective_narrow+{FUSED}", fused_core=True, recompute="selective", saves="narrow"),
    Action("recompute", recompute="full"),
    Action("offload", offload=True),
    Action("offload+memeff_ln", memeff=LN, offload=True),
    Action("offload+memeff", memeff=ALL, offload=True),
)}

# the actions that keep every activation on the device (no host memory involved)
ON_DEVICE = tuple(n for n, a in ACTIONS.items() if not a.offload)


def is_selective(name: str) -> bool:
    """Whether action `name` recomputes its layer per op under a save rule."""
    return ACTIONS[name].recompute == "selective"


def selective_action(rule: str) -> str:
    """The selective action of save rule `rule`."""
    return "selective" if rule == "all" else f"selective_{rule}"


def base_action(name: str) -> str:
    """The action whose compute an offloaded layer runs ("offload+memeff_ln" -> "memeff_ln")."""
    if not ACTIONS[name].offload:
        return name
    base = name.partition("+")[2] or "keep"
    if base not in ACTIONS or ACTIONS[base].offload:
        raise ValueError(f"{name}: no on-device action to take its compute from")
    return base
