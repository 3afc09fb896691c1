"""Memory-efficient forms: GELU and LayerNorm save the output for backward instead of the
input; an attention core runs as one fused op that saves no probabilities.

    from autosched.runtime import memeff
    lean = memeff.swap_memeff(block)                    # a clone, parameters shared
    memeff.predicted_savings(block, inputs_by_name)     # the bytes that frees
    kernels = memeff.memeff_library_kernels(autosched.torch.load_library("memeff_lib"))

kernels.py     the Kernel type and the torch reference kernels (tables, tolerances)
functions.py   the autograd Functions, as gelu() and layer_norm()
modules.py     nn.Module drop-ins for nn.GELU and nn.LayerNorm
swap.py        the module swap and the bytes it frees
library.py     the fused GELU backward from an exported autosched library
workloads.py   the op file of that fused backward (tune and export it)
attention.py   the fused attention core, and which cores are its function
"""
from .attention import FusedAttention, fusable_cores
from .functions import gelu, layer_norm
from .kernels import TORCH_GELU, TORCH_LAYER_NORM, Kernel
from .library import memeff_library_kernels
from .modules import MemEffGELU, MemEffLayerNorm
from .swap import predicted_savings, swap_memeff, swappable

__all__ = ["FusedAttention", "fusable_cores", "gelu", "layer_norm", "Kernel", "TORCH_GELU",
           "TORCH_LAYER_NORM", "memeff_library_kernels", "MemEffGELU", "MemEffLayerNorm",
           "predicted_savings", "swap_memeff", "swappable"]
