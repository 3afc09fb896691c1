"""The one typed, frozen configuration of a tuning run (built by the CLI or the API)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import UserError
from .results import FAILURE_KINDS
from .measure.settings import MeasureSettings


@dataclass(frozen=True)
class RecordBudget:
    """How many records of other shapes the cost model's warm start replays: at most
    `max_records`, shared evenly by the shapes, at most `per_task` and at least
    `min_per_task` each (see warm_start.py)."""

    per_task: int = 256
    min_per_task: int = 32
    max_records: int = 2048


@dataclass(frozen=True)
class TuneConfig:
    target: str = "llvm"
    trials: int = 64            # new measurements for the whole run, shared by all tasks
    db_url: str | None = None   # None: sqlite:///<work_dir>/autosched.db
    runner: str = "local"       # "local" or "rpc://HOST:PORT/KEY"
    strategy: str = "evolutionary"
    seed: int = 0
    batch_size: int = 16
    # generate, limit-check and compile `trials` candidates (64 when 0) a task; nothing
    # is run and the database is not opened
    dry_run: bool = False
    work_dir: str = "logs"
    cost_model_path: str | None = None
    # without cost_model_path: warm-start the cost model from the database's records of
    # other shapes of the same workloads (see warm_start.py)
    transfer: bool = True
    transfer_records: RecordBudget = field(default_factory=RecordBudget)
    # where the shipped cost models are looked up when the database gives no warm start
    # (shipped_models.py); None: the package's autosched/cost_models/
    shipped_models: str | None = None
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    # failure kinds whose records for the tuned tasks are measured again and replaced
    # (`--retry-failures`, after the environment was fixed)
    retry_failures: tuple[str, ...] = ()
    # wall-clock seconds for the run (`--time-budget`; None: no limit): once spent, no
    # batch starts, and the result says so (`TuneResult.stopped`, `out_of_time`)
    time_budget_s: float | None = None
    # stop once the database holds this many records of the run's tasks on this target
    # and machine, earlier runs' included (`--total-trials`; see trial_budget.py)
    total_trials: int | None = None

    def __post_init__(self):
        if self.trials < 0:
            raise UserError(f"--trials must be >= 0, got {self.trials}")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise UserError(f"--time-budget must be > 0 seconds, got {self.time_budget_s:g}")
        if self.total_trials is not None and self.total_trials < 1:
            raise UserError(f"--total-trials must be >= 1, got {self.total_trials}")
        if self.measure.build_workers < 1:
            raise UserError(f"--build-workers must be >= 1, got {self.measure.build_workers}")
        if self.batch_size < 1:
            raise UserError(f"batch size must be >= 1, got {self.batch_size}")
        unknown = sorted(set(self.retry_failures) - set(FAILURE_KINDS))
        if unknown:
            raise UserError(f"--retry-failures: unknown failure kind {unknown[0]!r}; "
                            f"one of {', '.join(FAILURE_KINDS)}")

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.work_dir}/autosched.db"
