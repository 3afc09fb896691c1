"""A failure up for `--retry-failures` whose candidate no longer builds a schedule (an
`invalid` record, or a sketch that now refuses its decisions) is left as recorded: the
batch is filled from the rest, and nothing raises out of the loop."""
from __future__ import annotations

import random

from search_space import Candidate, InvalidCandidate

from autosched import tuner


class _Space:
    def default_candidate(self):
        return Candidate.make("default", {})

    def apply(self, cand):
        if cand.sketch == "broken":
            raise InvalidCandidate("broken: no longer fits")
        return f"mod of {cand.key}"


class _Strategy:
    def propose(self, space, n, exclude, rng):
        return [(Candidate.make("tile", {"t": i}), f"proposed {i}") for i in range(n)]


def test_a_retry_that_does_not_replay_is_skipped_and_the_batch_filled():
    good = Candidate.make("tile", {"t": 99})
    state = tuner.TaskState(task=None, space=_Space(), strategy=_Strategy(), measured=set(),
                            retry=[Candidate.make("broken", {"x": 1}), good])
    out = tuner.batch_proposals(state, 4, random.Random(0))
    assert [c for c, _ in out] == [Candidate.make("default", {}), good, Candidate.make("tile", {"t": 0}),
                                   Candidate.make("tile", {"t": 1})]
    assert out[1][1] == f"mod of {good.key}"
