"""timing: settle takes more rounds exactly for the alternatives whose medians do not separate;
interleaved takes turns, each round starting with the next timer."""
from __future__ import annotations

import itertools

import pytest

from autosched.runtime.timing import interleaved, separated, settle, spread


def test_spread_and_separation():
    assert spread([1.0]) == 0.0
    assert spread([1.0, 2.0, 3.0, 4.0, 5.0]) == 1.0          # quartiles 2 and 4
    assert separated([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])
    assert not separated([1.0, 1.5, 0.5], [1.2, 1.7, 0.7])


def test_settle_samples_only_the_unseparated_until_the_cap():
    # "a" is far from both; "b" and "c" have the same noisy times: they never separate.
    noisy = [0.9, 1.1, 1.0, 1.2, 0.8]
    streams = {"a": itertools.repeat(5.0), "b": itertools.cycle(noisy),
               "c": itertools.cycle(noisy)}
    calls = {n: 0 for n in streams}

    def sample(name):
        calls[name] += 1
        return [(next(streams[name]), 0.0)]

    out = settle(sample, ["a", "b", "c"], repeats=3, max_repeats=7)
    assert calls == {"a": 3, "b": 7, "c": 7}
    assert [len(out[n]) for n in "abc"] == [3, 7, 7]


def test_settle_stops_at_once_when_all_are_apart():
    calls = []

    def sample(name):
        calls.append(name)
        return [(float(ord(name)), 0.0), (float(ord(name)), 0.0)]    # two layers a round

    out = settle(sample, ["a", "b"], repeats=2, max_repeats=10)
    assert calls == ["a", "a", "b", "b"] and len(out["a"]) == 4


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
