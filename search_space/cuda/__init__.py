"""The CUDA rule set: `RULES` (see `rules.py`), and `reference_schedule`, the plain
valid GPU schedule the correctness reference runs on the device (`common.py`)."""
from .common import reference_schedule
from .limits import GpuLimits
from .rules import RULES

__all__ = ["RULES", "GpuLimits", "reference_schedule"]
