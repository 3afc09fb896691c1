"""BuildRunMeasurer.measure_stream with real CPU kernels: the next chunk builds while
the current one runs (seen by the measurer's observer, with the build workers' own
clock), the results are those of building and running one chunk after the other, and
no library outlives its chunk, whether the stream ends, is closed early or meets a
fault of the machine. And the tuning loop on a stream: each chunk committed as it
comes, the stream closed when a batch ends or a fault stops the run."""
from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import pytest
from support import tiny_space

from autosched.components import make_strategy
from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.errors import InfrastructureError
from autosched.measure.base import Measurer
from autosched.measure.builder import LocalBuilder
from autosched.measure.build_run import BuildRunMeasurer
from autosched.measure.local_runner import TEST_RUN_FAULT_ATTR, LocalRunner
from autosched.measure.simulated import SimulatedMeasurer
from autosched.tuner import Callback, tune_tasks

# Three chunks of two (one a build worker each): correct kernels, wrong answers and a
# compile error, so what each path returns is compared failure kind for failure kind.
# Each chunk has a kernel that is timed, so that it runs for a while.
CHUNKS = [["plain", "zeros"], ["vectorized", "plus_one"], ["rfactor", "compile_error"]]
KINDS = [[None, "wrong_answer"], [None, "wrong_answer"], [None, "build_error"]]
TINY_LOG = str(Path(__file__).resolve().parents[2] / tiny_space.LOG)
# a fault no kernel causes: the run worker reports it as the machine's
NO_BINARY = ("cuda_error:209:cudaErrorNoKernelImageForDevice:no kernel image is "
             "available for execution on the device")


@pytest.fixture(scope="module")
def slow_runs(settings):
    """Each correct kernel is timed for 3 repeats of at least 150 ms: a chunk runs for
    half a second or more, long past the start of the next chunk's builds."""
    return dataclasses.replace(settings, min_repeat_ms=150, build_workers=2)


class Events:
    """An observer: (what, chunk, start, end) of every build and run, as reported."""

    def __init__(self):
        self.seen: list[tuple[str, int, float, float]] = []

    def __call__(self, what: str, chunk: int, start: float, end: float) -> None:
        self.seen.append((what, chunk, start, end))

    def spans(self, what: str, chunk: int) -> list[tuple[float, float]]:
        return [(s, e) for w, k, s, e in self.seen if w == what and k == chunk]


def _measurer(settings, work, events=None, overlap=False) -> BuildRunMeasurer:
    """Libraries and logs in a folder of its own; the task's reference in `work`."""
    own = tempfile.mkdtemp(dir=work)
    return BuildRunMeasurer(LocalBuilder(settings, own),
                            LocalRunner(settings, work, scratch_dir=own), work,
                            build_workers=settings.build_workers, overlap_cpu=overlap,
                            observer=events)


def _chunks(kernels, matmul_task, inp, names=CHUNKS):
    return [[inp(matmul_task, getattr(kernels, n)) for n in chunk] for chunk in names]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> str:
    """One work dir for the module: the task's reference is computed once."""
    return str(tmp_path_factory.mktemp("pipeline"))


@pytest.fixture(scope="module")
def both(work, slow_runs, kernels, matmul_task, inp):
    """(events, results, builds left over) of the overlapped stream, then the same of
    the stream that builds each chunk after the previous one ran (llvm's default)."""
    out = []
    for overlap in (True, False):
        events = Events()
        with _measurer(slow_runs, work, events, overlap) as m:
            results = list(m.measure_stream(_chunks(kernels, matmul_task, inp)))
            out.append((events, results, os.listdir(m.builder.out_dir)))
    return out


def test_the_next_chunk_builds_while_the_current_one_runs(both):
    events, results, _ = both[0]
    assert len(results) == 3
    for k in range(3):
        assert len(events.spans("build", k)) == 2 and len(events.spans("run", k)) == 1
        (run_start, run_end), = events.spans("run", k)
        assert all(end <= run_start for _, end in events.spans("build", k))
        if k < 2:  # every build of chunk k+1 was in progress while chunk k ran
            for start, end in events.spans("build", k + 1):
                assert start < run_end and end > run_start, (k, start, end, run_start,
                                                             run_end)


def test_cpu_kernels_are_timed_without_builds_beside_them_by_default(both):
    events, _, _ = both[1]
    for k in range(2):
        (_, run_end), = events.spans("run", k)
        assert all(start >= run_end for start, _ in events.spans("build", k + 1))


def test_overlapped_results_equal_those_built_then_run(both, slow_runs):
    (_, overlapped, _), (_, serial, _) = both
    for results in (overlapped, serial):
        assert [[r.error_kind for r in chunk] for chunk in results] == KINDS
        for r in sum(results, []):
            if r.ok:
                assert len(r.latencies) == slow_runs.repeat and r.build_seconds > 0
                assert r.run_seconds > 3 * slow_runs.min_repeat_ms / 1000
    msgs = [[r.error_msg for r in chunk] for chunk in overlapped]
    assert msgs == [[r.error_msg for r in chunk] for chunk in serial]
    assert "1024 of 1024 elements outside tolerance" in msgs[1][1]  # outputs were checked


def test_every_library_is_deleted_once_its_chunk_ran(both):
    assert [left for _, _, left in both] == [[], []]


@pytest.fixture(scope="module")
def fast(work, settings):
    """An overlapping measurer with short runs, and its observer's events."""
    events = Events()
    with _measurer(settings, work, events, overlap=True) as m:
        yield m, events


def test_a_stream_closed_early_builds_nothing_it_keeps(fast, kernels, matmul_task, inp):
    m, events = fast
    events.seen.clear()
    stream = m.measure_stream(_chunks(kernels, matmul_task, inp))
    first = next(stream)
    stream.close()  # chunk 1 was building: it is given up
    assert [r.error_kind for r in first] == KINDS[0]
    assert {k for _, k, _, _ in events.seen} == {0}
    (again,) = m.measure([inp(matmul_task, kernels.plain)])  # the builders answer
    assert again.ok and os.listdir(m.builder.out_dir) == []


def test_a_fault_of_the_machine_mid_stream_keeps_what_was_yielded(fast, kernels,
                                                                  matmul_task, inp):
    m, _ = fast
    faulty = kernels.plain.with_attr(TEST_RUN_FAULT_ATTR, NO_BINARY)
    chunks = _chunks(kernels, matmul_task, inp)
    chunks[1][0] = inp(matmul_task, faulty)
    stream = m.measure_stream(chunks)
    assert [r.error_kind for r in next(stream)] == KINDS[0]
    with pytest.raises(InfrastructureError, match="no code for this GPU's architecture"):
        next(stream)  # chunk 2 was building: it is given up
    (again,) = m.measure([inp(matmul_task, kernels.vectorized)])
    assert again.ok
    # a given-up build still running is deleted when its worker answers, which the
    # next measurements collect (at most one per worker still building)
    for _ in range(4):
        if not os.listdir(m.builder.out_dir):
            break
        (plain,) = m.measure([inp(matmul_task, kernels.plain)])
        assert plain.ok
    assert os.listdir(m.builder.out_dir) == []


# ------------------------------------------------- the tuning loop on a streaming measurer


class LoggedStream(Measurer):
    """Replays the tiny matmul log through `measure_stream`, four candidates a chunk,
    and logs what the loop asks, what it yields and when the loop closes it."""

    concurrency = 4

    def __init__(self, log: list):
        self.sim = SimulatedMeasurer.from_log(TINY_LOG)
        self.log = log

    def measure_stream(self, chunks):
        self.log.append(("asked", len(chunks)))
        try:
            for k, chunk in enumerate(chunks):
                self.log.append(("yield", k))
                yield self.sim.measure(chunk)
        finally:
            self.log.append(("closed",))

    def measure(self, inputs):
        raise AssertionError("the loop streams")

    def hardware(self, target):
        return target.fingerprint

    def close(self) -> None:
        return None


class Commits(Callback):
    def __init__(self, log: list, fail_at: int | None = None):
        self.log, self.fail_at = log, fail_at

    def on_result(self, state, candidate, result) -> None:
        self.log.append(("commit",))
        if len(self.log) == self.fail_at:
            raise InfrastructureError("the database went away", "rerun")


def _stream_tune(tmp_path, task, log, fail_at=None):
    config = TuneConfig(trials=16, batch_size=8, work_dir=str(tmp_path),
                        db_url=f"sqlite:///{tmp_path}/t.db")
    result = tune_tasks([task], config, [Commits(log, fail_at)], measurer=LoggedStream(log),
                        space_factory=tiny_space.make_space,
                        strategy_factory=lambda: make_strategy("random"))
    with open_database(config.database_url) as db:
        return result, db.records(task_key=task.key)


def test_the_loop_commits_each_chunk_as_the_stream_yields_it(tmp_path, tiny_task):
    log = []
    result, records = _stream_tune(tmp_path, tiny_task, log)
    batch = [("asked", 2), ("yield", 0), *[("commit",)] * 4, ("yield", 1),
             *[("commit",)] * 4, ("closed",)]
    assert log == batch * 2
    assert result.trials == len(records) == 16 and result.stopped is None


def test_a_fault_while_committing_closes_the_stream_and_keeps_the_chunk(tmp_path,
                                                                      tiny_task):
    log = []
    result, records = _stream_tune(tmp_path, tiny_task, log, fail_at=3)
    assert log == [("asked", 2), ("yield", 0), ("commit",), ("closed",)]
    assert result.stopped == "the database went away; rerun"
    assert len(records) == 4  # the chunk was written in one transaction before the fault
