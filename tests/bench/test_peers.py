"""The benches' interleaved timing: every side takes its turn in every round, each round
starting with the next side."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from peers import interleaved  # noqa: E402


def test_interleaved_rounds_take_turns_and_keep_every_reading():
    calls = []

    def timer(name, readings):
        it = iter(readings)

        def read():
            calls.append(name)
            return next(it)
        return read

    seconds = interleaved({"ours": timer("ours", [1.0, 9.0, 2.0]),
                           "torch": timer("torch", [3.0, 4.0, 5.0])}, rounds=3)
    assert calls == ["ours", "torch", "torch", "ours", "ours", "torch"]
    assert seconds == {"ours": [1.0, 9.0, 2.0], "torch": [3.0, 4.0, 5.0]}


def test_interleaved_refuses_no_rounds():
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        interleaved({"ours": lambda: 1.0}, rounds=0)
