"""No internal error from a space: any exception while a sketch makes its program, its
decisions or its schedule is that candidate's InvalidCandidate, with one line (the
exception's type when its text is empty); a sketch that never schedules the task stops
being drawn; rules that cannot analyse the task leave the default candidate; and a
tuning run over such sketches measures what is valid and counts it exactly."""
from __future__ import annotations

import logging
import random
from collections import Counter
from pathlib import Path

import pytest

from autosched import TuneConfig, load_tasks, open_database, tune_tasks
from autosched.measure import MeasureSettings
from search_space import Candidate, InvalidCandidate, SearchSpace
from search_space.sketch import DefaultSketch, Sketch

ROOT = Path(__file__).resolve().parents[2]
FAST = MeasureSettings(number=1, repeat=1, min_repeat_ms=0, build_timeout=60,
                       run_timeout=20)


class EmptyError(Sketch):
    """Unrolls the row loop by `u`; odd values fail with an exception that has no text
    (as a bare `next()` on an empty iterator does inside a rule)."""

    name = "empty"

    def apply(self, sch, decide) -> None:
        u = decide.choice("u", (0, 1, 2, 3, 4, 5))
        if u % 2:
            next(iter(()))
        if u:
            sch.annotate(sch.get_loops(sch.get_sblock("C"))[0], "pragma_auto_unroll_max_step",
                         u)


class RaisingProgram(Sketch):
    """Its rewrite of the computation fails (a two-line message)."""

    name = "program"

    def program(self, func, decide):
        raise ValueError("rewrite failed\n  no block named 'X'")

    def apply(self, sch, decide) -> None:
        return None


class Broken(Sketch):
    """Fails on every decision, in the schedule itself (a TVM error)."""

    name = "broken"

    def apply(self, sch, decide) -> None:
        decide.choice("v", (0, 1))
        sch.get_sblock("no_such_block")


class Rules:
    def __init__(self, *sketches):
        self.offered = sketches

    def sketches(self, task, target):
        return [DefaultSketch(), *self.offered]

    def check(self, mod, target):
        return None


class Unreadable(Rules):
    """Rules whose analysis of the task fails (with an empty message), and whose limit
    check fails too."""

    def sketches(self, task, target):
        raise IndexError()

    def check(self, mod, target):
        raise KeyError()


@pytest.fixture(scope="module")
def matmul():
    return load_tasks(str(ROOT / "examples" / "matmul.py"), arg_items=["M=16", "N=16", "K=16"])[0]


def test_an_exception_with_an_empty_message_is_an_invalid_candidate(matmul, target):
    space = SearchSpace(matmul, target, Rules(EmptyError()))
    with pytest.raises(InvalidCandidate) as e:
        space.apply(Candidate.make("empty", {"u": 3}))
    assert str(e.value) == "empty: StopIteration"
    assert space.apply(Candidate.make("empty", {"u": 2})) is not None
    rng = random.Random(0)
    drawn = {space.sample(rng, "empty")[0].values()["u"] for _ in range(40)}
    assert drawn == {0, 2, 4}  # sampling retries past the failures
    assert space.given_up == {}


def test_a_failing_rewrite_is_the_candidate_s_failure_with_its_last_line(matmul, target):
    space = SearchSpace(matmul, target, Rules(RaisingProgram()))
    with pytest.raises(InvalidCandidate, match=r"^program: no block named 'X'$"):
        space.apply(Candidate("program"))
    with pytest.raises(InvalidCandidate, match=r"^program: no block named 'X'$"):
        space.decision_specs(Candidate("program"))


def test_a_sketch_that_never_applies_is_given_up_and_the_default_remains(matmul, target,
                                                                         caplog):
    space = SearchSpace(matmul, target, Rules(Broken(), RaisingProgram()))
    rng = random.Random(1)
    drawn = Counter()
    with caplog.at_level(logging.WARNING, logger="autosched.search_space"):
        for _ in range(12):
            try:
                drawn[space.sample(rng)[0].sketch] += 1
            except InvalidCandidate:  # only failing sketches were left to draw
                drawn["refused"] += 1
    # the default once (then sampling prefers the sketches with decisions); the two
    # broken ones alone, 32 tries a call, until each has failed 48 times; then the
    # default alone: two calls found nothing valid to draw (seeded: exact)
    assert drawn == {"default": 10, "refused": 2}
    assert sorted(space.given_up) == ["broken", "program"]
    assert space.given_up["program"] == "program: no block named 'X'"
    assert space.given_up["broken"].startswith("broken: ")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("matmul(M=16,N=16,K=16,dtype=float32) on llvm: no sketch "
                                  "schedules this task (")
    assert warnings[0].endswith("); only its default candidate is tuned")
    with pytest.raises(InvalidCandidate, match="^could not sample a valid schedule: broken: "):
        space.sample(rng, "broken")  # asked for by name, it is still tried


def test_rules_that_cannot_read_the_task_leave_its_default_candidate(matmul, target, caplog):
    with caplog.at_level(logging.WARNING, logger="autosched.search_space"):
        space = SearchSpace(matmul, target, Unreadable())
    assert list(space.sketches) == ["default"]
    assert [r.getMessage() for r in caplog.records] == [
        "no sketch for matmul(M=16,N=16,K=16,dtype=float32) on llvm (IndexError); only "
        "its default candidate is tuned"]
    cand, mod = space.sample(random.Random(0))
    assert cand == space.default_candidate() == Candidate("default")
    assert space.check(mod) == "limit check failed: KeyError"


def test_a_tuning_run_measures_the_valid_candidates_and_counts_them(matmul, tmp_path):
    """Two tasks in one run: one whose only other sketch fails on half its decisions
    (with an empty message), one whose other sketches never apply. Every valid
    candidate is measured once and correct; nothing else is recorded."""
    other = load_tasks(str(ROOT / "examples" / "matmul.py"),
                       arg_items=["M=8", "N=16", "K=16"])[0]

    def spaces(task, target):
        rules = Rules(EmptyError()) if task is matmul else Rules(Broken(), RaisingProgram())
        return SearchSpace(task, target, rules)

    url = f"sqlite:///{tmp_path}/t.db"
    config = TuneConfig(trials=12, db_url=url, work_dir=str(tmp_path), strategy="random",
                        batch_size=4, measure=FAST)
    result = tune_tasks([matmul, other], config, space_factory=spaces)
    with open_database(url) as db:
        first = db.records(task_key=matmul.key)
        second = db.records(task_key=other.key)
    assert sorted(r.candidate["decisions"].get("u", -1) for r in first) == [-1, 0, 2, 4]
    assert [r.candidate["sketch"] for r in second] == ["default"]
    assert all(r.ok for r in first + second)
    assert [s.trials for s in result.tasks] == [4, 1] and result.trials == 5
    assert all(not s.failures for s in result.tasks)
    assert result.tasks[1].space.given_up.keys() == {"broken", "program"}


def test_the_block_transform_of_the_issue_tunes(cli_here, tmp_path):
    """The chain of two 8x8 contractions per block: its micro-kernel sketch fails on some
    decisions with an exception that has no message; the run measures and exits 0."""
    db = tmp_path / "t.db"
    run = cli_here("tune", str(ROOT / "examples" / "block_transform.py"), "--arg", "B=16",
                   "--target", "llvm", "--trials", "2", "--db", f"sqlite:///{db}",
                   cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "internal error" not in run.stderr
    with open_database(f"sqlite:///{db}") as database:
        records = database.records()
    assert len(records) == 2 and len({r.candidate_key for r in records}) == 2
    assert {r.workload for r in records} == {"block_transform"}
