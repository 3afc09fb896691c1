"""Measurement: build candidates in parallel worker processes, run them in an isolated
worker with timeouts, check every output against the reference, time the correct ones.

Interfaces:
- `MeasureInput`: task + target + candidate + scheduled module.
- `Builder.build(inputs) -> list[BuildArtifact]` (parallel, timed, isolated).
- `Runner.run(inputs, artifacts) -> list[MeasureResult]` (check against reference, time).
- `make_measurer(config)` in `autosched.measure.factory` resolves the runner name
  (`local`, `rpc://HOST:PORT/KEY`) to objects; nothing deeper reads configuration.
"""
from .result import FAILURE_KINDS, MeasureResult
from .settings import MeasureInput, MeasureSettings

__all__ = ["MeasureResult", "FAILURE_KINDS", "MeasureInput", "MeasureSettings"]
