"""End to end on the CPU with real builds and runs: tune -> records -> export -> run."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.measure import MeasureSettings
from search_space.sketch import Sketch

SMALL = ["M=64", "N=64", "K=64"]
FAST = MeasureSettings(number=2, repeat=3, min_repeat_ms=0, build_timeout=60, run_timeout=20)


def _config(tmp_path, trials, **kw):
    return TuneConfig(trials=trials, db_url=f"sqlite:///{tmp_path}/t.db",
                      work_dir=str(tmp_path / "logs"), batch_size=4, measure=FAST, **kw)


def test_tune_records_every_trial_and_exports_a_correct_kernel(tmp_path, examples_dir):
    import tvm

    from autosched import export, tune

    op = str(examples_dir / "matmul.py")
    result = tune(op, args=SMALL, config=_config(tmp_path, 8))
    state = result.tasks[0]
    assert state.trials == 8 and result.trials == 8
    db = open_database(f"sqlite:///{tmp_path}/t.db")
    records = db.records(task_key=state.task.key)
    db.close()
    assert len(records) == 8 and len({r.candidate_key for r in records}) == 8
    default = [r for r in records if r.candidate["sketch"] == "default"]
    assert len(default) == 1 and default[0].ok
    ok = [r for r in records if r.ok]
    assert ok and state.best_latency == min(r.latency for r in ok) <= default[0].latency

    out = tmp_path / "lib"
    manifest_path = export(op, "llvm", str(out), f"sqlite:///{tmp_path}/t.db", args=SMALL)
    manifest = json.loads(open(manifest_path).read())
    (kernel,) = manifest["kernels"]
    assert kernel["symbol"] == "matmul" and kernel["latency_s"] == state.best_latency
    assert kernel["inputs"][0]["shape"] == [64, 64] and manifest["versions"]["tvm"]
    lib = tvm.runtime.load_module(str(out / "kernels.so"))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64), dtype=np.float32)
    b = rng.standard_normal((64, 64), dtype=np.float32)
    # TVM's own tensors: kernels assume 64-byte aligned buffers, which numpy does not promise
    args = [tvm.runtime.tensor(x, tvm.cpu()) for x in (a, b, np.zeros((64, 64), np.float32))]
    lib["matmul"](*args)
    np.testing.assert_allclose(args[2].numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_rerun_resumes_and_measures_nothing_twice(tmp_path, examples_dir):
    from autosched import tune

    op = str(examples_dir / "matmul.py")
    tune(op, args=SMALL, config=_config(tmp_path, 5))
    second = tune(op, args=SMALL, config=_config(tmp_path, 5, seed=0))
    assert second.trials == 5
    db = open_database(f"sqlite:///{tmp_path}/t.db")
    keys = [r.candidate_key for r in db.records()]
    db.close()
    assert len(keys) == 10 and len(set(keys)) == 10


def test_export_without_records_is_a_clear_error(tmp_path, examples_dir, cli):
    proc = cli("export", str(examples_dir / "matmul.py"), "--target", "llvm",
               "--db", f"sqlite:///{tmp_path}/empty.db", "-o", str(tmp_path / "lib"))
    assert proc.returncode == 2
    assert "no valid record for matmul" in proc.stderr
    assert not (tmp_path / "lib").exists()


def _count(db_path) -> int:
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5) as con:
            return con.execute("SELECT COUNT(*) FROM autosched_records").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_kill_9_keeps_completed_records_and_a_rerun_resumes(tmp_path, examples_dir, cli):
    db_path = tmp_path / "k.db"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    argv = [sys.executable, "-m", "autosched.cli", "tune", str(examples_dir / "matmul.py"),
            *sum((["--arg", a] for a in SMALL), []), "--trials", "200", "--batch-size", "4",
            "--db", f"sqlite:///{db_path}", "--work-dir", str(tmp_path / "logs")]
    log = open(tmp_path / "tune.err", "w")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log,
                            start_new_session=True)
    deadline = time.time() + 300
    while _count(db_path) < 6 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    assert proc.poll() is None, (tmp_path / "tune.err").read_text()
    os.killpg(proc.pid, signal.SIGKILL)  # the tuner and its build/run workers
    proc.wait()
    with sqlite3.connect(db_path) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    before = _count(db_path)
    assert before >= 6
    rerun = cli("tune", str(examples_dir / "matmul.py"), *sum((["--arg", a] for a in SMALL), []),
                "--trials", "4", "--db", f"sqlite:///{db_path}", "--work-dir",
                str(tmp_path / "logs"))
    assert rerun.returncode == 0, rerun.stderr
    db = open_database(f"sqlite:///{db_path}")
    keys = [r.candidate_key for r in db.records()]
    db.close()
    assert len(keys) == before + 4 and len(set(keys)) == len(keys)


@pytest.mark.parametrize("trials", [3])
def test_cli_prints_the_per_task_table(tmp_path, examples_dir, cli, trials):
    proc = cli("tune", str(examples_dir / "matmul.py"), *sum((["--arg", a] for a in SMALL), []),
               "--trials", str(trials), "--work-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    header, _, row = proc.stdout.splitlines()[:3]
    assert header.split()[:3] == ["task", "GFLOP", "best"]
    assert row.startswith("matmul(M=64,N=64,K=64,dtype=float32)") and f"  {trials}  " in row
    assert (tmp_path / "logs" / "autosched.db").exists()
    assert list((tmp_path / "logs").glob("tune-*.log"))


class _ZerosSketch(Sketch):
    """Test device: a 'schedule' whose kernel writes zeros (fast and wrong)."""

    name = "zeros"

    def apply(self, sch, decide):
        decide.choice("variant", [0, 1, 2])


def _space_with_a_wrong_sketch(task, target):
    from search_space import SearchSpace
    from search_space.cpu import RULES
    from tvm import te

    class WrongSpace(SearchSpace):
        def _schedule(self, sketch, decide):
            mod = super()._schedule(sketch, decide)
            if sketch.name != "zeros":
                return mod
            a, b = (te.placeholder(s.shape, s.dtype, s.name) for s in task.inputs)
            out = task.outputs[0]
            c = te.compute(out.shape, lambda i, j: te.const(0.0, out.dtype), name="C")
            import tvm

            func = te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")
            return tvm.IRModule({"main": func})

    class Rules:
        def sketches(self, task, target):
            return RULES.sketches(task, target) + [_ZerosSketch()]

        def check(self, mod, target):
            return RULES.check(mod, target)

    return WrongSpace(task, target, Rules())


def test_wrong_answers_are_recorded_and_never_best(tmp_path, examples_dir):
    from autosched.tuner import tune_tasks
    from autosched.workload import load_tasks

    task = load_tasks(str(examples_dir / "matmul.py"), None, SMALL)[0]
    config = _config(tmp_path, 12, strategy="random")

    from autosched.search import RandomSearch
    from search_space import Candidate

    class WrongFirst(RandomSearch):
        """Proposes every 'zeros' variant first, then random candidates."""

        def propose(self, space, n, exclude, rng):
            picks = [Candidate.make("zeros", {"variant": v}) for v in (0, 1, 2)]
            picks = [(c, space.apply(c)) for c in picks if c.key not in exclude][:n]
            taken = exclude | {c.key for c, _ in picks}
            return picks + super().propose(space, n - len(picks), taken, rng)

    state = tune_tasks([task], config, space_factory=_space_with_a_wrong_sketch,
                       strategy_factory=WrongFirst).tasks[0]
    db = open_database(config.database_url)
    records = db.records(task_key=task.key)
    best = db.best(task.key, records[0].target_key, records[0].hardware_key,
                   records[0].versions)
    db.close()
    zeros = [r for r in records if r.candidate["sketch"] == "zeros"]
    assert len(zeros) == 3 and all(r.result.error_kind == "wrong_answer" for r in zeros)
    assert state.failures["wrong_answer"] == 3
    assert best.candidate["sketch"] != "zeros" and best.ok
    assert state.best_record.candidate["sketch"] != "zeros"
