"""A measurer that replays earlier measurements instead of building and running.

The log is JSON lines of records, exactly what `autosched db export` writes (one
`Record.to_json()` per line), so any tuning database can become a simulation: search
strategies and cost models are then tested and benchmarked on real measurements without
a compiler or the hardware they came from (as Kernel Tuner's simulation mode replays its
cache). A candidate the log does not hold is not a failure of that candidate: `measure`
raises `NotInLog` and nothing of that batch is answered, so nothing false is recorded.
"""
from __future__ import annotations

import json
from typing import Iterable

from ..errors import UserError
from ..target import TargetSpec
from .result import MeasureResult
from .settings import MeasureInput


class NotInLog(LookupError):
    """The simulation was asked for a measurement its log does not hold."""


class SimulatedMeasurer:
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
        for rec in records:
            if target_key is not None and rec.target_key != target_key:
                continue
            if hardware_key is not None and rec.hardware_key != hardware_key:
                continue
            self._results[(rec.task_key, rec.candidate_key)] = rec.result
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

    def result(self, task_key: str, candidate_key: str) -> MeasureResult:
        """The logged result; NotInLog when there is none."""
        try:
            return self._results[(task_key, candidate_key)]
        except KeyError:
            raise NotInLog(f"the simulation log has no measurement of candidate "
                           f"{candidate_key} of task {task_key}") from None

    def hardware(self, target: TargetSpec) -> dict:
        """The target's own fingerprint: a replay stands in for the machine it tunes for."""
        return target.fingerprint

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

    def close(self) -> None:
        return None

    def __enter__(self) -> "SimulatedMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
