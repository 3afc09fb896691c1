"""A measurer that replays earlier measurements instead of building and running.

The log is JSON lines of records, exactly what `autosched db export` writes (one
`Record.to_json()` per line), so any tuning database can become a simulation: search
strategies and cost models are then tested and benchmarked on real measurements without
a compiler or the hardware they came from (as Kernel Tuner's simulation mode replays its
cache). A candidate the log does not hold is not a failure of that candidate: `measure`
raises `NotInLog` and nothing of that batch is answered, so nothing false is recorded.

The latencies are those of the machine that measured them, so a replay records with
that machine's fingerprint (`hardware`), not the one of the machine replaying: a GPU
log replayed on a build host without a GPU writes the GPU's records. A log that mixes
machines for the tuned target says so instead of guessing (pick one with
`hardware_key`).
"""
from __future__ import annotations

import json
from typing import Iterable

from ..errors import UserError
from ..results import MeasureResult
from ..target import TargetSpec
from .base import Measurer
from .settings import MeasureInput


class NotInLog(LookupError):
    """The simulation was asked for a measurement its log does not hold."""


class SimulatedMeasurer(Measurer):
    """Answers each input with the logged result of the same task and candidate.

    `records` are `Record`s (see `from_log` for a file). Where the log holds the same
    candidate more than once (re-measured, or measured on several machines), the one
    given last wins; pass `target_key` / `hardware_key` to replay one machine's
    measurements of a mixed log.
    """

    concurrency = 1

    def __init__(self, records: Iterable, *, target_key: str | None = None,
                 hardware_key: str | None = None):
        self._results: dict[tuple[str, str], MeasureResult] = {}
        self._candidates: dict[tuple[str, str], dict] = {}  # its JSON, as logged
        self._machines: dict[str, dict[str, dict]] = {}  # target key -> {hw key: fingerprint}
        for rec in records:
            if target_key is not None and rec.target_key != target_key:
                continue
            if hardware_key is not None and rec.hardware_key != hardware_key:
                continue
            self._results[(rec.task_key, rec.candidate_key)] = rec.result
            self._candidates[(rec.task_key, rec.candidate_key)] = rec.candidate
            self._machines.setdefault(rec.target_key, {})[rec.hardware_key] = rec.hardware
        self.measured: list[tuple[str, str]] = []  # (task key, candidate key), in order

    @classmethod
    def from_log(cls, path: str, **filters) -> "SimulatedMeasurer":
        """A simulation of the JSON-lines log at `path` (a bad line is a UserError)."""
        from ..db.jsonl import read_records

        measurer = cls(read_records(path), **filters)
        if not measurer._results:
            raise UserError(f"{path}: no records to replay")
        return measurer

    def __len__(self) -> int:
        return len(self._results)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._results

    def keys(self, task_key: str) -> set[str]:
        """The candidate keys the log holds for one task."""
        return {c for t, c in self._results if t == task_key}

    def candidates(self, task_key: str) -> list:
        """The candidates the log holds for one task (as `Candidate`s), in log order:
        what a search restricted to the log may propose."""
        from search_space import Candidate

        return [Candidate.from_json(c) for (t, _), c in self._candidates.items()
                if t == task_key]

    def result(self, task_key: str, candidate_key: str) -> MeasureResult:
        """The logged result; NotInLog when there is none."""
        try:
            return self._results[(task_key, candidate_key)]
        except KeyError:
            raise NotInLog(f"the simulation log has no measurement of candidate "
                           f"{candidate_key} of task {task_key}") from None

    def hardware(self, target: TargetSpec) -> dict:
        """The fingerprint of the machine whose measurements are replayed: the one
        machine of the log's records of `target` (of any target when the log holds none
        of this exact config). A log of several such machines is a UserError naming them
        (pass `hardware_key`); an empty replay has only the target's own fingerprint."""
        machines = self._machines.get(target.key)
        if machines is None:
            machines = {k: fp for m in self._machines.values() for k, fp in m.items()}
        if not machines:
            return target.fingerprint
        if len(machines) > 1:
            names = ", ".join(f"{fp.get('name') or fp.get('model') or '?'} ({key})"
                              for key, fp in sorted(machines.items()))
            raise UserError(f"the simulation log holds measurements of {len(machines)} "
                            f"machines for this target: {names}; replay one of them "
                            "(hardware_key=...)")
        (fingerprint,) = machines.values()
        return dict(fingerprint)

    def measure(self, inputs: list[MeasureInput]) -> list[MeasureResult]:
        """One logged result per input, in order; NotInLog (before answering any of
        them) when one is missing."""
        keys = [(inp.task.key, inp.candidate.key) for inp in inputs]
        for inp, key in zip(inputs, keys):
            if key not in self._results:
                raise NotInLog(f"the simulation log has no measurement of {inp.task.name} "
                               f"candidate {json.dumps(inp.candidate.to_json())}")
        self.measured += keys
        return [self._results[key] for key in keys]
