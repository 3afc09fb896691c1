"""Two `autosched tune` runs from one folder (the default work dir `logs/`) writing one
database: neither may remove files the other still needs, so every record is a
candidate's own result and both tasks export."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from autosched.db import open_database

from conftest import ROOT

SOFTMAX = ["--arg", "M=32", "--arg", "N=64"]
MATMUL = ["--arg", "M=32", "--arg", "N=32", "--arg", "K=32"]
# Failures a candidate can cause by itself; a build error here would be the other run's
# cleanup, since every candidate of these two tasks compiles.
CANDIDATE_FAILURES = {"run_error", "run_timeout", "wrong_answer", "invalid"}


def _tune(cwd, db_url, op, args, trials) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "autosched.cli", "tune", str(op), *args, "--target", "llvm",
           "--trials", str(trials), "--batch-size", "4", "--min-repeat-ms", "0",
           "--db", db_url]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_both(first: subprocess.Popen, second: subprocess.Popen, timeout: float):
    """(first's output, first's end time, second's output): the end time shows that the
    second run went on measuring after the first had cleaned up."""
    deadline = time.monotonic() + timeout
    while first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    first_end = time.time()
    out_first = first.communicate(timeout=max(1.0, deadline - time.monotonic()))
    out_second = second.communicate(timeout=max(1.0, deadline - time.monotonic()))
    return out_first, first_end, out_second


@pytest.mark.slow
def test_two_tuners_in_one_folder_keep_each_others_builds(tmp_path, examples_dir, cli):
    db_url = f"sqlite:///{tmp_path}/team.db"
    short = _tune(tmp_path, db_url, examples_dir / "softmax.py",
                  ["--workload", "softmax", *SOFTMAX], trials=6)
    long = _tune(tmp_path, db_url, examples_dir / "matmul.py", MATMUL, trials=24)
    (out_s, err_s), short_end, (out_l, err_l) = _wait_both(short, long, timeout=500)
    assert short.returncode == 0, err_s
    assert long.returncode == 0, err_l

    db = open_database(db_url)
    records = db.records()
    db.close()
    by_task = {}
    for r in records:
        by_task.setdefault(r.workload, []).append(r)
    assert sorted(by_task) == ["matmul", "softmax"]
    assert len(by_task["softmax"]) == 6 and len(by_task["matmul"]) == 24
    after = [r for r in by_task["matmul"] if r.provenance["time"] > short_end]
    assert after, "the runs did not overlap: the matmul run ended first"
    kinds = [r.result.error_kind for r in records]
    print(f"matmul records after the softmax run ended: {len(after)} of 24; "
          f"failure kinds: {sorted(k for k in kinds if k)}")
    assert kinds.count("build_error") == 0 and kinds.count("build_timeout") == 0
    assert {k for k in kinds if k is not None} <= CANDIDATE_FAILURES
    assert all(r.ok for r in after if r.candidate["sketch"] == "default")

    # each run cleaned up only its own folder; the shared reference data stays, and
    # each run has its own log, even when both started in the same second
    logs = tmp_path / "logs"
    assert sorted(p for p in os.listdir(logs) if not p.startswith("tune-")) == ["reference"]
    assert len(os.listdir(logs / "reference")) == 2
    for out, task, trials in ((out_s, "softmax", 6), (out_l, "matmul", 24)):
        path = out.split("log: ")[-1].strip()
        with open(os.path.join(tmp_path, path)) as f:
            lines = [json.loads(line) for line in f]
        assert [e["task_key"] for e in lines] == [by_task[task][0].task_key] * trials
    assert len(list(logs.glob("tune-*.log"))) == 2

    for op, args in (("softmax.py", ["--workload", "softmax", *SOFTMAX]),
                     ("matmul.py", MATMUL)):
        out = tmp_path / f"lib-{op}"
        proc = cli("export", str(examples_dir / op), *args, "--target", "llvm",
                   "--db", db_url, "-o", str(out), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert (out / "kernels.so").is_file() and (out / "manifest.json").is_file()
