"""Measurement settings and inputs (plain data shared by builders and runners)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class MeasureSettings:
    """How candidates are built and timed. Stored with every record (provenance)."""

    number: int = 5            # calls per repeat
    repeat: int = 3            # repeats; the median of these is the latency
    min_repeat_ms: int = 20    # grow `number` until one repeat takes this long
    warmup: int = 1            # untimed calls before timing
    build_timeout: float = 60.0
    run_timeout: float = 30.0
    build_workers: int = 2
    check_correctness: bool = True

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, eq=False)
class MeasureInput:
    """One candidate to measure: its task, target (TargetSpec), candidate and module."""

    task: Any
    target: Any
    candidate: Any
    mod: Any
