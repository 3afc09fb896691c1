"""The one typed, frozen configuration of a tuning run (built by the CLI or the API)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .measure.settings import MeasureSettings


@dataclass(frozen=True)
class TuneConfig:
    target: str = "llvm"
    trials: int = 64            # new measurements for the whole run, shared by all tasks
    db_url: str | None = None   # None: sqlite:///<work_dir>/autosched.db
    runner: str = "local"       # "local" or "rpc://HOST:PORT/KEY"
    strategy: str = "evolutionary"
    seed: int = 0
    batch_size: int = 16
    dry_run: bool = False
    work_dir: str = "logs"
    model_path: str | None = None
    # without model_path: warm-start the cost model from the database's records of
    # other shapes of the same workloads (see warm_start.py)
    transfer: bool = True
    measure: MeasureSettings = field(default_factory=MeasureSettings)

    def __post_init__(self):
        from .errors import UserError

        if self.trials < 0:
            raise UserError(f"--trials must be >= 0, got {self.trials}")
        if self.batch_size < 1:
            raise UserError(f"batch size must be >= 1, got {self.batch_size}")

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.work_dir}/autosched.db"
