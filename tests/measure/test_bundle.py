"""`--runner bundle:DIR` end to end on the CPU, through real processes: `autosched tune`
builds a round into DIR, `python -m autosched.measure.bundle DIR` measures it in a
process where the TVM compiler cannot be imported, a rerun of the same tune command
records the results (like the local runner's records) and builds the next round."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.bundles import measure, measure_cmd, measure_env

from autosched.db import open_database
from autosched.measure import MeasureSettings
from autosched.results import MeasureResult
from autosched.measure.bundle.format import read_results

ROOT = Path(__file__).resolve().parents[2]
MATMUL = str(ROOT / "examples" / "matmul.py")
SHAPE = ["--arg", "M=32", "--arg", "N=32", "--arg", "K=32"]
ROUND = 4        # candidates a round (--batch-size)
TRIALS = 2 * ROUND
# min_repeat_ms makes each candidate take a few tenths of a second to measure, so the
# kill test can stop a measurement between two results
SETTINGS = MeasureSettings(min_repeat_ms=40, run_timeout=30.0, build_timeout=60.0)

def tune(bundle, work, *extra, shape=SHAPE):
    """`autosched tune` of the 32^3 matmul with `--runner bundle:DIR`."""
    args = [sys.executable, "-m", "autosched", "tune", MATMUL, *shape, "--target", "llvm",
            "--trials", str(TRIALS), "--batch-size", str(ROUND), "--strategy", "random",
            "--runner", f"bundle:{bundle}", "--work-dir", str(work),
            "--db", f"sqlite:///{work}/tune.db",
            "--min-repeat-ms", str(SETTINGS.min_repeat_ms),
            "--run-timeout", str(SETTINGS.run_timeout), *extra]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def records(db_url: str):
    db = open_database(db_url)
    try:
        return db.records()
    finally:
        db.close()


@pytest.fixture(scope="module")
def round_one(tmp_path_factory):
    """A bundle whose first round (ROUND candidates) is built and not measured."""
    base = tmp_path_factory.mktemp("bundle")
    proc = tune(base / "b", base / "work")
    assert proc.returncode == 0, proc.stderr
    return base / "b", base / "work"


@pytest.fixture
def bundle(round_one, tmp_path):
    """A private copy of `round_one` and its work dir (reference data, no records)."""
    src, work = round_one
    shutil.copytree(src, tmp_path / "b")
    shutil.copytree(work / "reference", tmp_path / "work" / "reference")
    return tmp_path / "b", tmp_path / "work"


@pytest.mark.slow
def test_round_trip_records_like_the_local_runner_and_builds_the_next_round(bundle, tmp_path,
                                                                            target):
    directory, work = bundle
    db_url = f"sqlite:///{work}/tune.db"
    first = json.loads((directory / "manifest.json").read_text())
    assert (first["round"], first["spent"], len(first["candidates"])) == (1, ROUND, ROUND)
    assert first["settings"] == SETTINGS.to_json()

    proc = measure(directory, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert last_line(proc.stdout) == (f"bundle {directory}: measured {ROUND} candidates "
                                      f"({ROUND} correct) on this machine; rerun the tune "
                                      "command to record them")
    results = read_results(str(directory))
    assert sorted(results) == [f"r1-{i:04d}" for i in range(ROUND)]
    assert all(r["hardware"] == target.fingerprint for r in results.values())
    again = measure(directory, tmp_path)
    assert again.returncode == 0
    assert last_line(again.stdout) == (f"bundle {directory}: nothing to measure: all {ROUND} "
                                       "candidates of round 1 have results; rerun the tune "
                                       "command to record them")

    proc = tune(directory, work)
    assert proc.returncode == 0, proc.stderr
    assert f"autosched: round 2 written to {directory}: {ROUND} candidates of 1 task(s), " \
        in proc.stdout
    recorded = records(db_url)
    assert len(recorded) == ROUND
    by_key = {r.candidate_key: r for r in recorded}
    for r in results.values():
        rec = by_key[r["candidate_key"]]
        assert rec.result.to_json() == r["result"] and rec.hardware == target.fingerprint
        assert rec.provenance["host"] == r["host"] and rec.provenance["time"] == r["time"]
    _assert_like_local_records(recorded, tmp_path, target)

    second = json.loads((directory / "manifest.json").read_text())
    assert (second["round"], second["spent"], len(second["candidates"])) == (2, TRIALS, ROUND)
    assert not {c["candidate_key"] for c in second["candidates"]} & set(by_key)
    assert sorted(os.listdir(directory / "lib")) == [f"r2-{i:04d}.so" for i in range(ROUND)]

    assert measure(directory, tmp_path).returncode == 0
    proc = tune(directory, work)
    assert proc.returncode == 0, proc.stderr
    assert last_line(proc.stdout) == (f"autosched: bundle {directory}: all {TRIALS} trials "
                                      "measured and recorded; nothing left to build")
    keys = [r.candidate_key for r in records(db_url)]
    assert len(keys) == TRIALS and len(set(keys)) == TRIALS


def _assert_like_local_records(bundled, tmp_path, target):
    """A local run with the same settings makes records with the same fields, settings,
    versions, target and machine as the bundle's."""
    from autosched import tune as tune_api
    from autosched.config import TuneConfig

    url = f"sqlite:///{tmp_path}/local.db"
    config = TuneConfig(trials=1, db_url=url, work_dir=str(tmp_path / "local"),
                        strategy="random", measure=SETTINGS)
    tune_api(MATMUL, args=["M=32", "N=32", "K=32"], config=config)
    (local,) = records(url)
    theirs = next(r for r in bundled if r.candidate_key == local.candidate_key)  # default
    assert set(theirs.to_json()) == set(local.to_json())
    assert set(theirs.provenance) == set(local.provenance)
    assert theirs.provenance["settings"] == local.provenance["settings"]
    for field in ("task_key", "target_key", "hardware", "hardware_key", "versions",
                  "candidate"):
        assert getattr(theirs, field) == getattr(local, field), field
    assert local.hardware == target.fingerprint
    assert len(theirs.result.latencies) == len(local.result.latencies) == SETTINGS.repeat
    assert theirs.result.build_seconds > 0 and theirs.result.run_seconds > 0


@pytest.mark.slow
def test_a_killed_measurement_resumes_and_nothing_is_recorded_twice(bundle, tmp_path):
    directory, work = bundle
    proc = subprocess.Popen(measure_cmd(directory), cwd=tmp_path, env=measure_env(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(read_results(str(directory))) < 2 and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {cid: (directory / "results" / f"{cid}.json").read_bytes()
              for cid in read_results(str(directory))}
    assert 2 <= len(before) < ROUND, proc.stderr.read()
    proc.stderr.close()

    resumed = measure(directory, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"measured {ROUND - len(before)} candidates" in last_line(resumed.stdout)
    after = read_results(str(directory))
    assert sorted(after) == [f"r1-{i:04d}" for i in range(ROUND)]
    assert all((directory / "results" / f"{c}.json").read_bytes() == b
               for c, b in before.items())  # kept, not measured again
    assert all(r["result"]["error_kind"] is None for r in after.values())

    proc = tune(directory, work)
    assert proc.returncode == 0, proc.stderr
    keys = [r.candidate_key for r in records(f"sqlite:///{work}/tune.db")]
    assert sorted(keys) == sorted(r["candidate_key"] for r in after.values())


@pytest.mark.slow
def test_a_bundle_of_another_task_target_or_version_is_refused(bundle, tmp_path):
    directory, work = bundle
    other_task = tune(directory, work, shape=["--arg", "M=16", "--arg", "N=32", "--arg",
                                              "K=32"])
    assert other_task.returncode == 2
    assert other_task.stderr == (f"autosched: error: bundle {directory} holds other tasks "
                                 "(matmul(M=32,N=32,K=32,dtype=float32)) than this command "
                                 "(matmul(M=16,N=32,K=32,dtype=float32)); give these tasks "
                                 "their own bundle directory\n")
    other_target = tune(directory, work, "--target", '{"kind": "llvm", "mcpu": "generic"}')
    assert other_target.returncode == 2 and "was built for target" in other_target.stderr

    path = directory / "manifest.json"
    original = path.read_text()
    manifest = json.loads(original)
    manifest["versions"]["space"] = "0"
    path.write_text(json.dumps(manifest))
    old_space = tune(directory, work)
    assert old_space.returncode == 2
    assert "was built with space version 0, this is" in old_space.stderr
    assert old_space.stderr.count("\n") == 1

    manifest["versions"]["autosched"] = "0.0.0"
    path.write_text(json.dumps(manifest))
    proc = measure(directory, tmp_path)
    assert proc.returncode == 2
    assert "was built with autosched 0.0.0, this machine has" in proc.stderr
    assert not read_results(str(directory))  # nothing measured

    (tmp_path / "file").write_text("x")
    not_a_dir = tune(tmp_path / "file", work)
    assert not_a_dir.returncode == 2
    assert not_a_dir.stderr == (f"autosched: error: --runner bundle:{tmp_path / 'file'}: "
                                "not a directory\n")
    assert not os.path.exists(f"{work}/tune.db") or not records(f"sqlite:///{work}/tune.db")


def test_results_from_another_machine_stop_the_measurement(bundle, tmp_path):
    directory, _ = bundle
    manifest = json.loads((directory / "manifest.json").read_text())
    entry = manifest["candidates"][0]
    foreign = {"id": entry["id"], "task_key": entry["task_key"], "candidate": entry["candidate"],
               "result": {"latencies": [1e-6]}, "host": "elsewhere",
               "hardware": {"device": "cpu", "model": "Another CPU"}}
    (directory / "results" / f"{entry['id']}.json").write_text(json.dumps(foreign))
    proc = measure(directory, tmp_path)
    assert proc.returncode == 2
    assert "has results from another machine" in proc.stderr
    assert sorted(read_results(str(directory))) == [entry["id"]]


class _NoVectorRules:
    """The tiny space's rules on a target that refuses vector loops: a limit-check
    failure the loop finds before anything is built."""

    def __init__(self):
        from support import tiny_space

        self.rules = tiny_space.TinyRules()

    def sketches(self, task, target):
        return self.rules.sketches(task, target)

    def check(self, mod, target):
        return "vector loops are refused here" if "T.vectorized" in mod.script() else None


def _no_vector_space(task, target):
    from search_space import SearchSpace

    return SearchSpace(task, target, _NoVectorRules())


@pytest.mark.slow
def test_limit_check_failures_wait_in_the_round_and_carry_the_measuring_machine(tmp_path,
                                                                                target):
    from support import tiny_space

    from autosched.config import TuneConfig
    from autosched.tuner import tune_tasks
    from autosched.workload import load_tasks

    directory, url = tmp_path / "b", f"sqlite:///{tmp_path}/t.db"
    config = TuneConfig(trials=8, batch_size=8, runner=f"bundle:{directory}",
                        strategy="random", db_url=url, work_dir=str(tmp_path / "w"),
                        measure=MeasureSettings(number=2, repeat=3, min_repeat_ms=0))
    tasks = load_tasks(MATMUL, None, [f"{k}={v}" for k, v in tiny_space.SHAPE.items()])
    first = tune_tasks(tasks, config, space_factory=_no_vector_space)
    assert first.bundle.startswith(f"round 1 written to {directory}: 8 candidates")
    assert not records(url)  # nothing is recorded before the round's machine measured it
    entries = json.loads((directory / "manifest.json").read_text())["candidates"]
    refused = [e for e in entries if e["candidate"]["decisions"].get("vectorize") == 1]
    assert refused and len(refused) < len(entries)
    assert all(e["lib"] is None and e["known"]["error_kind"] == "invalid" for e in refused)
    assert all(e["lib"] and e["known"] is None for e in entries if e not in refused)

    assert measure(directory, tmp_path).returncode == 0
    second = tune_tasks(tasks, config, space_factory=_no_vector_space)
    assert second.bundle == (f"bundle {directory}: all 8 trials measured and recorded; "
                             "nothing left to build")
    recorded = records(url)
    assert len(recorded) == 8 and {r.hardware_key for r in recorded} == {target.hardware_key}
    assert sorted(r.candidate_key for r in recorded if r.result.error_kind == "invalid") == \
        sorted(e["candidate_key"] for e in refused)
    assert second.tasks[0].trials == 8 and second.tasks[0].failures["invalid"] == len(refused)


def test_import_records_each_result_once_and_a_retry_replaces_its_failure(tmp_path, target):
    """Import alone, on result files as the measuring side writes them: a rerun adds
    nothing; a newer result of a failed candidate is recorded only under
    `--retry-failures`, and then replaces the failure."""
    from autosched.measure.bundle.format import write_json
    from autosched.measure.bundle.runner import BundleRunner
    from autosched.versions import current_versions
    from autosched.workload import load_tasks
    from search_space import SPACE_VERSION, Candidate

    (task,) = load_tasks(MATMUL, None, ["M=32", "N=32", "K=32"])
    versions = current_versions(SPACE_VERSION)
    directory = tmp_path / "b"
    (directory / "results").mkdir(parents=True)
    a, b = Candidate("default"), Candidate.make("split", {"i": [2, 16]})
    manifest = {"format": 1, "round": 2, "spent": 3, "candidates": [], "target_key": target.key,
                "tasks": {task.key: {"name": task.name}}, "versions": versions}
    write_json(str(directory / "manifest.json"), manifest)

    def result(cid, cand, outcome):
        write_json(str(directory / "results" / f"{cid}.json"), {
            "id": cid, "round": int(cid[1]), "task_key": task.key, "candidate": cand.to_json(),
            "candidate_key": cand.key, "result": outcome.to_json(), "settings": {"number": 2},
            "hardware": target.fingerprint, "host": "gpu-node-7", "user": "batch",
            "time": 1.5e9})

    result("r1-0000", a, MeasureResult.failure("run_error", "driver reset"))
    result("r1-0001", b, MeasureResult((2e-6, 3e-6, 2e-6)))
    db = open_database(f"sqlite:///{tmp_path}/t.db")
    db.register_task(task.to_json())

    def import_all(retry=()):
        runner = BundleRunner(MeasureSettings(), str(tmp_path / "w"), None, str(directory))
        try:
            added, _ = runner.import_results(db, [task], target, versions, retry)
        finally:
            runner.close()
        return sorted((r.candidate_key, r.result.error_kind) for r in added)

    try:
        assert import_all() == sorted([(a.key, "run_error"), (b.key, None)])
        assert import_all() == []
        result("r2-0000", a, MeasureResult((1e-6, 1e-6, 1e-6)))
        assert import_all() == []  # already recorded: its failure stands
        assert import_all(("run_error",)) == [(a.key, None)]
        assert import_all(("run_error",)) == []
        recorded = {r.candidate_key: r for r in db.records()}
        assert sorted(recorded) == sorted([a.key, b.key]) and recorded[a.key].ok
        assert recorded[a.key].provenance["host"] == "gpu-node-7"
        assert recorded[a.key].provenance["settings"] == {"number": 2}
    finally:
        db.close()


def test_a_cuda_bundle_on_a_machine_without_a_gpu_is_the_machines_fault(bundle, tmp_path):
    from autosched.target import local_gpu

    if local_gpu() is not None:
        pytest.skip("this machine has a GPU")
    directory, _ = bundle
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["target"]["kind"], manifest["device"] = "cuda", "cuda"
    path.write_text(json.dumps(manifest))
    proc = measure(directory, tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == ("python -m autosched.measure.bundle: error: no NVIDIA GPU found on "
                           "this machine (nvidia-smi); measure the bundle on the GPU machine "
                           "it was built for\n")
    assert not read_results(str(directory))  # nothing recorded for any candidate


def test_crashing_hanging_and_wrong_kernels_are_their_own_results(bundle, tmp_path):
    """Each candidate runs in a child with the round's timeout: a kernel that kills its
    process, one that never returns and one that computes wrongly are that candidate's
    run_error, run_timeout and wrong_answer, and the candidates after them still run."""
    import tvm
    from support.kernels import broken_kernels

    directory, _ = bundle
    mods = broken_kernels(32)
    broken = {"r1-0001": "raise_segv", "r1-0002": "hang", "r1-0003": "plus_one"}
    for cid, name in broken.items():
        (directory / "lib" / f"{cid}.so").unlink()
        tvm.compile(mods[name], target="llvm").export_library(str(directory / "lib" /
                                                                  f"{cid}.so"))
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["settings"]["run_timeout"] = 3.0
    path.write_text(json.dumps(manifest))

    proc = measure(directory, tmp_path)
    assert proc.returncode == 0, proc.stderr
    results = {cid: r["result"] for cid, r in read_results(str(directory)).items()}
    assert {cid: r["error_kind"] for cid, r in results.items()} == {
        "r1-0000": None, "r1-0001": "run_error", "r1-0002": "run_timeout",
        "r1-0003": "wrong_answer"}
    assert "killed by signal 11 (SIGSEGV)" in results["r1-0001"]["error_msg"]
    assert results["r1-0002"]["error_msg"] == "run did not finish within 3s; worker killed"
    assert "output C:" in results["r1-0003"]["error_msg"]
