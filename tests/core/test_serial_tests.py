"""The `serial` list in tests/conftest.py names tests that exist: a renamed file or test
would otherwise silently run alongside the others again."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import SERIAL, is_serial

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("entry", SERIAL)
def test_every_serial_entry_names_a_test_file_or_function(entry):
    path, _, name = entry.partition("::")
    source = TESTS / path
    assert source.is_file(), entry
    if name:
        tree = ast.parse(source.read_text())
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert name in names, entry


def test_serial_matches_the_file_or_the_one_test_with_any_parameters():
    assert is_serial("tests/db/test_concurrency.py::test_four_processes_thousand_commits_each")
    assert is_serial("tests/measure/test_bundle.py::"
                   "test_a_killed_measurement_resumes_and_nothing_is_recorded_twice")
    assert is_serial("tests/runtime/test_prediction.py::"
                   "test_predicted_slowdown_over_keeping_everything_is_close[40%]")
    assert not is_serial("tests/measure/test_bundle.py::"
                       "test_round_trip_records_like_the_local_runner_and_builds_the_next_round")
    assert not is_serial("tests/db/test_concurrency.py.orig::test_x")
