"""The CUDA rule set: `RULES` (see `rules.py`)."""
from .rules import RULES

__all__ = ["RULES"]
