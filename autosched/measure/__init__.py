"""Measurement: build candidates in parallel worker processes, run them in an isolated
worker with timeouts, check every output against the reference, time the correct ones.

- `MeasureInput`: task + target (TargetSpec) + candidate + scheduled IRModule.
- `factory.make_measurer(settings, runner="local", work_dir=None) -> Measurer`:
  `measure(inputs) -> list[MeasureResult]`, `close()`, a context manager. The one place
  runner names (`local`, `rpc://HOST:PORT/KEY`) become objects.
- `base.Builder` / `base.Runner`: the interfaces; `builder.LocalBuilder`,
  `local_runner.LocalRunner` implement them.
- `scratch`: each run's own folder under the work dir (builds, worker logs), and the
  removal of folders whose run has died;
- `reference`: seeded inputs and expected outputs per task, on disk as `.npy`;
  `check`: the dtype-aware comparison rule.
"""
from .result import FAILURE_KINDS, MeasureResult
from .settings import MeasureInput, MeasureSettings

__all__ = ["MeasureResult", "FAILURE_KINDS", "MeasureInput", "MeasureSettings"]
