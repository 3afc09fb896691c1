"""CPU (llvm) rules. Placeholder rule set: only the default sketch until the
multi-level tiling rules land."""
from __future__ import annotations

from .sketch import DefaultSketch


class CpuRules:
    def sketches(self, task, target):
        return [DefaultSketch()]

    def check(self, mod, target):
        return None


RULES = CpuRules()
