"""Faults of the machine are never recorded as a candidate's result: with a real fault
in place, the tuning loop stops with one line naming the cause and the remedy (or
retries and goes on), records nothing of the chunk in flight, and a rerun after the fix
measures those very candidates."""
from __future__ import annotations

import pytest

from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.measure import MeasureSettings
from autosched.tuner import tune_tasks
from support import faults

SMALL = ["M=64", "N=64", "K=64"]
FAST = MeasureSettings(number=2, repeat=3, min_repeat_ms=0, build_timeout=60,
                       run_timeout=20, build_workers=2)


@pytest.fixture(scope="module")
def task(examples_dir):
    from autosched.workload import load_tasks

    return load_tasks(str(examples_dir / "matmul.py"), None, SMALL)[0]


def _config(tmp_path, trials: int = 4) -> TuneConfig:
    return TuneConfig(trials=trials, db_url=f"sqlite:///{tmp_path}/t.db",
                      work_dir=str(tmp_path / "logs"), batch_size=2, strategy="random",
                      transfer=False, measure=FAST)


def _records(config):
    with open_database(config.database_url) as db:
        return db.records()


def _tune(task, config, measurer, callbacks=()):
    try:
        return tune_tasks([task], config, list(callbacks), measurer=measurer)
    finally:
        measurer.close()


def _rerun_measures(task, config, interrupted: list[str], before: int) -> None:
    """A rerun on a healthy machine measures the interrupted chunk's candidates, and
    every record is a distinct candidate that nothing failed for the machine's sake."""
    measurer = faults.local_measurer(FAST, config.work_dir)
    result = _tune(task, config, measurer)
    assert result.stopped is None and result.trials == config.trials
    assert measurer.asked[0] == interrupted
    records = _records(config)
    keys = [r.candidate_key for r in records]
    assert len(records) == before + config.trials and len(set(keys)) == len(keys)
    assert set(interrupted) <= set(keys)
    assert not [r for r in records if r.result.error_kind in ("build_error", "run_error")]


def test_a_build_worker_that_cannot_start_stops_the_run(tmp_path, task):
    config = _config(tmp_path)
    measurer = faults.local_measurer(FAST, config.work_dir, python=str(tmp_path / "nope"))
    result = _tune(task, config, measurer)
    assert result.stopped == (
        f"the build worker failed to start 3 times (cannot start a build worker with "
        f"{tmp_path / 'nope'}: No such file or directory); check that `{tmp_path / 'nope'} "
        "-c 'import tvm, autosched'` works in this environment, then rerun")
    assert result.trials == 0 and _records(config) == []
    (chunk,) = measurer.asked
    assert len(chunk) == 2
    _rerun_measures(task, config, chunk, 0)


def test_a_worker_that_fails_to_start_once_is_retried_and_the_run_goes_on(tmp_path, task):
    config = _config(tmp_path)
    measurer = faults.local_measurer(FAST, config.work_dir,
                                     python=faults.python_failing_once(tmp_path))
    result = _tune(task, config, measurer)
    assert (tmp_path / "failed-once").exists()  # the fault did happen
    assert result.stopped is None and result.trials == 4
    records = _records(config)
    assert len(records) == 4 and all(r.ok for r in records)


def test_a_file_size_limit_in_the_build_worker_is_a_full_disk(tmp_path, task):
    config = _config(tmp_path)
    measurer = faults.local_measurer(FAST, config.work_dir,
                                     python=faults.python_with_file_limit(tmp_path, 12))
    result = _tune(task, config, measurer)
    assert result.stopped.startswith("the filesystem refused to store a built library (")
    assert "file too large" in result.stopped.lower() or \
        "file size limit exceeded" in result.stopped.lower()
    assert result.stopped.endswith("(or raise the file-size limit, `ulimit -f`), then rerun")
    assert _records(config) == []
    _rerun_measures(task, config, measurer.asked[0], 0)


@pytest.mark.slow
def test_a_full_build_disk_stops_the_run(tmp_path, task):
    if not faults.can_mount(tmp_path):
        pytest.skip("mounting a tmpfs is not permitted here")
    config = _config(tmp_path)
    measurer = faults.local_measurer(FAST, config.work_dir)
    folder = measurer.inner.builder.out_dir
    with faults.FullDisk(folder, tmp_path / "full"):
        result = _tune(task, config, measurer)
    assert result.stopped == (f"cannot write to the build folder {folder}: no space left on "
                              f"the device; make {folder} a writable folder with free space, "
                              "then rerun")
    assert _records(config) == []
    _rerun_measures(task, config, measurer.asked[0], 0)


def test_a_build_folder_lost_mid_run_keeps_the_completed_chunks(tmp_path, task):
    config = _config(tmp_path)
    measurer = faults.local_measurer(FAST, config.work_dir)
    folder = measurer.inner.builder.out_dir
    fault = faults.ReplaceFolderWithFile(folder)
    result = _tune(task, config, measurer, [fault])
    assert result.stopped == (f"the build folder {folder} is not a folder; make {folder} a "
                              "writable folder with free space, then rerun")
    assert result.trials == 2 and len(measurer.asked) == 2
    first = _records(config)
    assert [r.candidate_key for r in first] == measurer.asked[0] and all(r.ok for r in first)
    fault.undo()
    config = _config(tmp_path, trials=2)
    rerun = faults.local_measurer(FAST, config.work_dir)
    assert _tune(task, config, rerun).stopped is None
    records = _records(config)
    assert len(records) == 4 and len({r.candidate_key for r in records}) == 4
    assert all(r.ok for r in records)


@pytest.mark.slow
@pytest.mark.parametrize("fault, line", [
    ("missing", "no C/C++ compiler found to link the built library; install a C/C++ "
                "compiler (TVM links every CPU library with the first of g++, gcc, clang++, "
                "clang, c++, cc on PATH, or $CXX), then rerun"),
    ("broken", "even the task's default candidate fails to link: "),
])
def test_a_missing_or_broken_compiler_stops_the_cli_with_one_line(tmp_path, examples_dir,
                                                                  cli, fault, line):
    path = (faults.no_compiler_path(tmp_path) if fault == "missing"
            else faults.broken_compiler_path(tmp_path))
    db = f"sqlite:///{tmp_path}/t.db"
    argv = ["tune", str(examples_dir / "matmul.py"), *sum((["--arg", a] for a in SMALL), []),
            "--trials", "4", "--batch-size", "2", "--strategy", "random", "--no-transfer",
            "--db", db, "--work-dir", str(tmp_path / "logs")]
    proc = cli(*argv, env={"PATH": path})
    assert proc.returncode == 1, proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("autosched:")]
    assert len(said) == 1 and "Traceback" not in proc.stderr
    assert said[0].startswith("autosched: stopped after 0 of 4 trials: " + line)
    if fault == "broken":
        assert "broken-bin/g++ -shared -fPIC" in said[0]
    with open_database(db) as database:
        assert database.records() == []
    proc = cli(*argv)
    assert proc.returncode == 0, proc.stderr
    with open_database(db) as database:
        records = database.records()
    assert len(records) == 4 and all(r.ok for r in records)
    assert [r.candidate["sketch"] for r in records].count("default") == 1


def test_retry_failures_measures_the_poisoned_candidates_again(tmp_path, task, cli,
                                                               examples_dir):
    import dataclasses

    from autosched.results import MeasureResult

    healthy = _config(tmp_path / "healthy")
    assert _tune(task, healthy, faults.local_measurer(FAST, healthy.work_dir)).trials == 4
    good = _records(healthy)
    # What the old builder recorded when another run removed the build folder.
    poison = MeasureResult.failure("build_error", "ld: cannot open output file "
                                   "logs/builds/x.so: No such file or directory")
    db_url = f"sqlite:///{tmp_path}/poisoned.db"
    with open_database(db_url) as db:
        db.add_records([dataclasses.replace(r, result=poison, id=None) for r in good])
    argv = ["tune", str(examples_dir / "matmul.py"), *sum((["--arg", a] for a in SMALL), []),
            "--trials", "4", "--batch-size", "2", "--strategy", "random", "--no-transfer",
            "--db", db_url, "--work-dir", str(tmp_path / "logs")]
    bad = cli(*argv, "--retry-failures", "segfault")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--retry-failures: invalid choice: 'segfault'" in bad.stderr
    proc = cli(*argv, "--retry-failures", "build_error", "--retry-failures", "run_error")
    assert proc.returncode == 0, proc.stderr
    with open_database(db_url) as db:
        records = db.records()
        g = db.stats()["groups"][0]
        best = db.best(task.key, g["target_key"], g["hardware_key"], g["versions"])
        measured = db.measured_keys(task.key, g["target_key"], g["hardware_key"],
                                    g["versions"])
    assert sorted(r.candidate_key for r in records) == sorted(r.candidate_key for r in good)
    assert all(r.ok for r in records) and g["failures"] == {}
    assert measured == {r.candidate_key for r in good}
    assert best is not None and best.latency == min(r.latency for r in records)
