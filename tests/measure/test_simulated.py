"""The simulated measurer replays a `db export` log exactly and refuses what it lacks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import tiny_space

from autosched.db.jsonl import read_records
from autosched.errors import UserError
from autosched.measure import MeasureInput
from autosched.measure.simulated import NotInLog, SimulatedMeasurer
from search_space import Candidate

ROOT = Path(__file__).resolve().parents[2]
LOG = str(ROOT / tiny_space.LOG)


def test_every_logged_measurement_replays_as_it_was_recorded(tiny_task, target):
    records = read_records(LOG)
    sim = SimulatedMeasurer.from_log(LOG)
    assert len(sim) == len(records) == len(tiny_space.all_candidates())
    assert sim.keys(tiny_task.key) == {c.key for c in tiny_space.all_candidates()}
    inputs = [MeasureInput(tiny_task, target, Candidate.from_json(r.candidate), None)
              for r in records]
    assert sim.measure(inputs) == [r.result for r in records]
    assert sim.measured == [(tiny_task.key, r.candidate_key) for r in records]


def test_a_candidate_missing_from_the_log_is_refused_and_nothing_answered(tiny_task, target):
    logged = read_records(LOG)
    sim = SimulatedMeasurer(logged[1:])  # the default is left out
    default = MeasureInput(tiny_task, target, Candidate("default"), None)
    other = MeasureInput(tiny_task, target, Candidate.from_json(logged[1].candidate), None)
    with pytest.raises(NotInLog, match=r'no measurement of matmul\(M=64.* candidate {"sketch": "default"'):
        sim.measure([other, default])
    assert sim.measured == []
    assert sim.measure([other]) == [logged[1].result]


def test_the_last_measurement_of_a_candidate_wins_and_filters_pick_a_machine(tiny_task,
                                                                           target):
    first, second = read_records(LOG)[:2]
    again = first.__class__.from_json(dict(first.to_json(), hardware_key="elsewhere",
                                           result=second.result.to_json()))
    inp = MeasureInput(tiny_task, target, Candidate.from_json(first.candidate), None)
    assert SimulatedMeasurer([first, again]).measure([inp]) == [second.result]
    here = SimulatedMeasurer([first, again], hardware_key=first.hardware_key)
    assert here.measure([inp]) == [first.result]


def test_a_bad_log_is_one_user_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(open(LOG).readline() + "{not json\n")
    with pytest.raises(UserError, match=r"bad.jsonl:2: invalid JSON"):
        SimulatedMeasurer.from_log(str(bad))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(UserError, match="no records to replay"):
        SimulatedMeasurer.from_log(str(empty))
    assert json.loads(open(LOG).readline())["workload"] == "matmul"
