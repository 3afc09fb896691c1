"""The tuning loop: propose -> measure (build, run, check) -> record -> learn.

Side effects hang off the loop as callbacks (database writes happen here because
they are the product; progress bars and logs are callbacks).
"""
from __future__ import annotations

import math
import random
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from typing import Callable, Iterator

from search_space import SPACE_VERSION, Candidate, InvalidCandidate, SearchSpace, generate_space

from .components import make_cost_model, make_strategy
from .config import TuneConfig
from .db import make_record, open_database
from .errors import BudgetExhausted, InfrastructureError, UserError
from .measure.base import Measurer, MeasureFuture
from .measure.factory import make_measurer
from .measure.settings import MeasureInput
from .results import MeasureResult
from .search import SearchStrategy
from .target import TargetSpec, resolve_target
from .task_scheduler import TaskScheduler
from .trial_budget import run_budget
from .validation import check_tasks
from .versions import current_versions


@dataclass
class TaskState:
    """What the loop knows about one task during a run."""

    task: object  # Task
    space: SearchSpace
    strategy: SearchStrategy
    measured: set[str]
    best_latency: float = math.inf
    best_record: object = None
    trials: int = 0                       # new measurements in this run
    failures: Counter = field(default_factory=Counter)
    history: list[float] = field(default_factory=list)  # best latency after each batch
    exhausted: bool = False
    retry: list[Candidate] = field(default_factory=list)  # failures to measure again
    pending: int = 0  # candidates whose results a later run records (see Measurer.collect)
    baseline: object = None  # the default candidate's module (see MeasureInput.baseline)

    @property
    def best_gflops(self) -> float:
        return self.task.flops / self.best_latency / 1e9 if math.isfinite(self.best_latency) else 0.0


@dataclass
class TuneResult:
    tasks: list[TaskState]
    db_url: str | None          # None for a dry run (no database is opened)
    target: TargetSpec
    stopped: str | None = None  # why the run ended before its budget (no RPC server left,
    #                             a fault of the machine: its cause and remedy; or the time
    #                             budget: "time budget of 60 s spent after 37 of 100 trials")
    out_of_time: bool = False   # `stopped` by `TuneConfig.time_budget_s`: a normal end
    warm_start: object = None   # WarmStart: what the cost model learned before the run
    dry_run: list | None = None  # DryRunReport per task, for `TuneConfig.dry_run`
    bundle: str | None = None   # what the measurer says is next (`Measurer.finish_run`):
    #                             a bundle's round written, or what to run before a rerun

    @property
    def trials(self) -> int:
        return sum(s.trials for s in self.tasks)


class Callback:
    """Hooks for progress display and logging; override what you need."""

    def on_start(self, states: list[TaskState], budget: int) -> None: ...
    def on_result(self, state: TaskState, candidate: Candidate, result: MeasureResult) -> None: ...
    def on_batch(self, states: list[TaskState], done: int, budget: int) -> None: ...
    def on_end(self, result: TuneResult) -> None: ...
    def on_dry_run_start(self, task, target: TargetSpec) -> None: ...
    def on_dry_run(self, report) -> None: ...  # a DryRunReport, after each task


def no_local_gpu_message() -> str:
    return ("--target cuda: no local GPU found; use --dry-run to generate, verify and compile "
            "candidates without running them, or --runner rpc://HOST:PORT/KEY to measure on a "
            "GPU server")


def tune(op_file: str, workloads: list[str] | None = None, args: list[str] | None = None,
         config: TuneConfig = TuneConfig(), callbacks: list[Callback] = ()) -> TuneResult:
    """Tune the selected workloads of an op file; returns per-task best records."""
    from .workload import load_tasks

    return tune_tasks(load_tasks(op_file, workloads, args), config, callbacks)


def tune_tasks(tasks, config: TuneConfig, callbacks: list[Callback] = (), *,
               measurer: Measurer | None = None,
               space_factory: Callable[[object, TargetSpec], SearchSpace] = generate_space,
               strategy_factory: Callable[[], SearchStrategy] | None = None,
               weights: list[float] | None = None,
               clock: Callable[[], float] = time.monotonic) -> TuneResult:
    """Tune `tasks` under `config`. `weights` (default: 1 each) say how often each task's
    kernel runs, say per model step: the task scheduler aims at the weighted sum.
    `config.time_budget_s` counts from this call on `clock` (seconds): once spent, no
    batch starts (the one running finishes and is recorded) and `TuneResult.stopped`
    says so, with `out_of_time` set. The parts of the loop can be given instead of made
    from the config: `measurer` (default: `make_measurer(config.measure, config.runner,
    config.work_dir)`, closed at the end; a given one stays open, its owner closes it),
    `space_factory(task, target)` (default: our rules, `generate_space`) and
    `strategy_factory()`, called once a task (default: `config.strategy`, the learned
    strategies of a run sharing one cost model). With `config.dry_run` nothing is
    measured and the database is not opened: `TuneResult.dry_run` holds the reports.
    Results that earlier runs left pending (a bundle, `--runner bundle:DIR`) are
    recorded first (`Measurer.collect`); results pending at the end are handed over by
    `Measurer.finish_run`, whose line is `TuneResult.bundle`. `config.total_trials`
    limits the run too (see trial_budget.py)."""
    deadline = None if config.time_budget_s is None else clock() + config.time_budget_s
    target = resolve_target(config.target)
    check_tasks(tasks, target)  # bad input stops here: nothing opened, nothing built
    if config.dry_run:
        return _dry_run(tasks, config, target, space_factory, callbacks)
    if target.kind == "cuda" and not target.has_local_device and config.runner == "local" \
            and measurer is None:
        raise UserError(no_local_gpu_message())
    new_strategy = strategy_factory or default_strategies(config, target)
    db = open_database(config.database_url)
    owned = measurer is None
    try:
        if owned:
            measurer = make_measurer(config.measure, config.runner, config.work_dir)
        versions = current_versions(SPACE_VERSION)
        measurer.check_run(tasks, target, versions)  # another command's bundle: refused
        try:  # records, and what the database holds, are of the machine that measures
            target = target.measured_on(measurer.hardware(target))
        except (BudgetExhausted, InfrastructureError) as e:
            return TuneResult([], db.url, target, stopped=str(e))
        for task in tasks:
            db.register_task(task.to_json())
        imported, learned = measurer.collect(db, tasks, target, versions,
                                             config.retry_failures)
        known_tasks = db.tasks()
        states = [_task_state(task, db, target, versions, config, space_factory,
                              new_strategy, known_tasks) for task in tasks]
        warm = _warm_start(states, config, db, target, versions, known_tasks, space_factory)
        result = TuneResult(states, db.url, target, warm_start=warm)
        budget = run_budget(measurer.budget(config.trials), config.total_trials, states)
        for cb in callbacks:
            cb.on_start(states, budget)
        _learn_imported(states, imported, learned, callbacks)
        try:
            result.stopped = _loop(states, config, budget, target, versions, db, measurer,
                                   TaskScheduler(len(states), weights), callbacks,
                                   lambda: deadline is not None and clock() >= deadline)
            result.out_of_time = result.stopped is not None
        except (BudgetExhausted, InfrastructureError) as e:
            result.stopped = str(e)  # committed chunks stay, the one in flight is dropped
        if result.stopped is None or result.out_of_time:
            result.bundle = measurer.finish_run(tasks, target, versions, config.trials)
        for cb in callbacks:
            cb.on_end(result)
        return result
    finally:
        try:
            if owned and measurer is not None:
                measurer.close()
        finally:
            db.close()


def _task_state(task, db, target, versions, config: TuneConfig, space_factory,
                new_strategy, known_tasks) -> TaskState:
    """A task's state at the start of a run: what the database holds for it on this
    target and machine, and a strategy seeded with its best records."""
    st = TaskState(task, space_factory(task, target), new_strategy(),
                   db.measured_keys(task.key, target.key, target.hardware_key, versions))
    _admit_retries(st, db, target, versions, config.retry_failures)
    st.best_record = db.best(task.key, target.key, target.hardware_key, versions)
    if st.best_record is not None:
        st.best_latency = st.best_record.latency
    _seed_strategy(st, db, target, versions, known_tasks)
    return st


def default_strategies(config: TuneConfig, target: TargetSpec) -> Callable[[], SearchStrategy]:
    """One strategy a task, as `config` names them; learned ones share one cost model
    (features of `target`'s kind and SM count), so what one task teaches helps the others."""
    if config.strategy != "evolutionary":
        make_strategy(config.strategy)  # validates the name
        return lambda: make_strategy(config.strategy)
    from cost_model import FeatureConfig

    sms = int(target.config.get("sm_count") or 0)
    features = FeatureConfig(target_kind=target.kind, sm_count=sms)
    model = make_cost_model("xgb", config.cost_model_path, seed=config.seed, features=features)
    return lambda: make_strategy("evolutionary", cost_model=model)


def _warm_start(states, config: TuneConfig, db, target, versions, known_tasks, space_factory):
    """Train the run's shared cost model on the database's records of other shapes of
    the tuned workloads, unless a model was given or transfer is off."""
    models = {id(s.strategy.cost_model): s.strategy.cost_model for s in states
              if s.strategy.cost_model is not None}
    if len(models) != 1 or config.cost_model_path or not config.transfer:
        return None  # strategies that do not share one model learn on their own
    from .warm_start import warm_start

    (model,) = models.values()
    return warm_start(model, [s.task for s in states], db, target, versions, known_tasks,
                      config.transfer_records, space_factory, config.shipped_models)


_SIMILAR_PER_TASK = 4


def _admit_retries(state: TaskState, db, target, versions, kinds) -> None:
    """Failures of `kinds` (`--retry-failures`) are measured again, first: their
    records are replaced by the new results (see `Database.add_records`)."""
    if not kinds:
        return
    failed = db.failed_records(state.task.key, target.key, target.hardware_key, versions,
                               kinds)
    state.measured -= {r.candidate_key for r in failed}
    state.retry = [Candidate.from_json(r.candidate) for r in failed]


def _seed_strategy(state: TaskState, db, target, versions, known_tasks: list[dict]) -> None:
    """Warm-start a strategy with the best records of this task and of other shapes of
    the same workload on this target and machine (adapted to this task's space)."""
    task = state.task
    best = db.top_k(task.key, target.key, target.hardware_key, versions, 16)
    for other in known_tasks:
        if other.get("workload") == task.workload and other.get("key") != task.key:
            best += db.top_k(other["key"], target.key, target.hardware_key, versions,
                             _SIMILAR_PER_TASK)
    state.strategy.seed_candidates([Candidate.from_json(r.candidate) for r in best])


def _dry_run(tasks, config: TuneConfig, target, space_factory, callbacks) -> TuneResult:
    """Generate, limit-check and compile candidates of every task; nothing is measured
    or recorded (how CUDA candidates are checked on a machine without a GPU)."""
    from .dry_run import dry_run_task

    reports = []
    for task in tasks:
        for cb in callbacks:
            cb.on_dry_run_start(task, target)
        reports.append(dry_run_task(task, target, config.trials or 64, config.seed,
                                    space_factory=space_factory))
        for cb in callbacks:
            cb.on_dry_run(reports[-1])
    return TuneResult([], None, target, dry_run=reports)


def _learn_imported(states, imported, learned, callbacks) -> None:
    """Results that earlier runs left pending (a bundle's), recorded at the start of
    the run: the new ones count as this run's trials, and the search learns from every
    result collected (earlier runs' too), as if it had measured them itself."""
    new = {(r.task_key, r.candidate_key) for r in imported}
    for st in states:
        pairs = learned.get(st.task.key)
        if not pairs:
            continue
        cands = [c for c, _ in pairs]
        st.strategy.update(st.space, cands, [st.space.apply(c) for c in cands],
                           [r for _, r in pairs])
        for cand, res in pairs:
            if (st.task.key, cand.key) in new:
                st.trials += 1
                if not res.ok:
                    st.failures[res.error_kind] += 1
                for cb in callbacks:
                    cb.on_result(st, cand, res)


def _loop(states, config, budget, target, versions, db, measurer, scheduler,
          callbacks, out_of_time: Callable[[], bool]) -> str | None:
    """Batches until the budget is spent or every task exhausted; the message of the
    time budget when that ended the loop first."""
    rng = random.Random(config.seed)
    done = 0
    while done < budget:
        if out_of_time():
            return (f"time budget of {config.time_budget_s:g} s spent after "
                    f"{sum(s.trials for s in states)} of {config.trials} trials")
        live = [i for i, s in enumerate(states) if not s.exhausted and not s.pending]
        if not live:
            break
        i = scheduler.next_task([s.history for s in states], live)
        st = states[i]
        n = next_batch_size(states, live, config.batch_size, budget - done)
        proposals = batch_proposals(st, n, rng)
        if not proposals:
            st.exhausted = True
            continue
        finished = []  # (proposal, result) of every done future
        # Commit as results arrive, a build-parallel chunk at a time: a kill loses at most
        # the chunk in flight (and the next one's builds), never a completed measurement.
        # A runner that measures several candidates at once (RPC sessions) gets chunks it
        # can fill; the measurer may build the next chunk while one runs.
        step = max(1, measurer.concurrency)
        chunks = [proposals[start:start + step] for start in range(0, len(proposals), step)]
        with closing(_measure(st, chunks, target, measurer)) as measured:
            for chunk, futures in zip(chunks, measured):
                ready = [(p, f.result()) for p, f in zip(chunk, futures) if f.done()]
                st.pending += len(chunk) - len(ready)
                if ready:
                    _record(st, [p for p, _ in ready], [r for _, r in ready], target,
                            versions, config, db, callbacks)
                finished += ready
        if finished:  # a task with pending results waits for them: it proposes no more
            st.strategy.update(st.space, [c for (c, _), _ in finished],
                               [m for (_, m), _ in finished], [r for _, r in finished])
            st.history.append(st.best_latency)
        done += len(proposals)
        for cb in callbacks:
            cb.on_batch(states, done, budget)
    return None


def next_batch_size(states, live, batch_size: int, remaining: int) -> int:
    """A full batch, except that tasks not yet tried keep a share of what remains: every
    task gets at least its first candidates (the default, the floor) within the budget."""
    untried = sum(1 for i in live if not states[i].history)
    return max(1, min(batch_size, remaining // max(1, untried)))


def batch_proposals(st: TaskState, n: int, rng: random.Random):
    """The default candidate first (the floor), then failures to retry, then the
    strategy's picks."""
    out = []
    default = st.space.default_candidate()
    if default is not None and default.key not in st.measured:
        out.append((default, st.space.apply(default)))
    for cand in st.retry:
        if len(out) < n and cand.key not in st.measured | {c.key for c, _ in out}:
            try:  # a failure that no longer builds a schedule stays as it was recorded
                out.append((cand, st.space.apply(cand)))
            except InvalidCandidate:
                continue
    if n > len(out):
        exclude = st.measured | {c.key for c, _ in out}
        out += st.strategy.propose(st.space, n - len(out), exclude, rng)
    return out[:n]


def _measure(st: TaskState, chunks, target, measurer: Measurer
             ) -> Iterator[list[MeasureFuture]]:
    """Limit-check every candidate; measure the ones that fit: each chunk's futures as
    soon as it is measured (`Measurer.measure_stream`), a limit-check failure's from
    `Measurer.settle`. Close it when done early."""
    checked = []  # per chunk: a result for each candidate that fails the check, else None
    inputs = []   # per chunk: the candidates to measure
    for chunk in chunks:
        checked.append([MeasureResult.failure("invalid", reason) if reason else None
                        for reason in (st.space.check(mod) for _, mod in chunk)])
        inputs.append([MeasureInput(st.task, target, cand, mod, _baseline(st))
                       for (cand, mod), r in zip(chunk, checked[-1]) if r is None])
    measured = measurer.measure_stream([todo for todo in inputs if todo])
    try:
        for chunk, known, todo in zip(chunks, checked, inputs):
            got = iter(next(measured) if todo else [])
            refused = [(MeasureInput(st.task, target, cand, mod, _baseline(st)), r)
                       for (cand, mod), r in zip(chunk, known) if r is not None]
            settled = iter(measurer.settle([i for i, _ in refused], [r for _, r in refused])
                           if refused else [])
            yield [next(got) if r is None else next(settled) for r in known]
    finally:
        measured.close()


def _baseline(st: TaskState):
    """The module of the task's default candidate, applied once: a builder builds it to
    tell a broken machine from a broken candidate."""
    if st.baseline is None:
        default = st.space.default_candidate()
        st.baseline = st.task.mod if default is None else st.space.apply(default)
    return st.baseline


def _record(st, proposals, results, target, versions, config, db, callbacks):
    records = [make_record(st.task, target, cand, res, versions, config.measure.to_json())
               for (cand, _), res in zip(proposals, results)]
    ids = db.add_records(records, replace_failures=config.retry_failures)  # one transaction
    for (cand, _), res, rec, rid in zip(proposals, results, records, ids):
        st.measured.add(cand.key)
        st.trials += 1
        if res.ok:
            if res.median < st.best_latency:
                st.best_latency = res.median
                st.best_record = rec.with_id(rid) if rid is not None else rec
        else:
            st.failures[res.error_kind] += 1
        for cb in callbacks:
            cb.on_result(st, cand, res)
    return records
