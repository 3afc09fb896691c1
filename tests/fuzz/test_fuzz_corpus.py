"""The fuzz corpus (te_gen.py): random but valid tensor expressions tune on llvm with no
internal error and every measured candidate correct, and dry-run for CUDA (candidates
compiled with nvcc, no GPU) with no internal error. bench/fuzz_corpus.py is the larger
run; this is the part CI can afford."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from autosched import TuneConfig, load_tasks, open_database, tune_tasks
from autosched.measure import MeasureSettings

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = str(HERE / "te_gen.py")
SEEDS = range(10)
TRIALS = 3  # a program
FAST = MeasureSettings(number=1, repeat=1, min_repeat_ms=0, build_timeout=60,
                       run_timeout=20)


def _tasks(seeds):
    return load_tasks(CORPUS, arg_items=[f"seed={s}" for s in seeds])


def test_the_generator_is_seeded_and_covers_every_kind_of_step():
    again = {t.name: t.key for t in _tasks(SEEDS)}
    assert again == {t.name: t.key for t in _tasks(SEEDS)}  # same seed, same program
    tasks = _tasks(range(60))
    assert len({t.key for t in tasks}) == 60
    stems = Counter()
    for task in tasks:
        script = task.func.script()
        stems.update({re.sub(r"\d+(_v\d)?$", "", b) for b in re.findall(r'T\.sblock\("(\w+)"\)',
                                                                   script)})
    kinds = {"tanh", "sigmoid", "exp", "sqrt_abs", "relu", "scale", "square", "add", "mul",
             "max", "div", "pair", "combine", "transpose", "stride", "window_sum",
             "window_max", "window_conv", "reduce_sum", "reduce_max", "reduce_mean",
             "matmul", "matmul_t", "batch_matmul"}
    assert kinds <= set(stems), sorted(kinds - set(stems))
    assert sum(1 for t in tasks if len(t.outputs) > 1) > 0  # several outputs
    odd = {s for t in tasks for spec in t.inputs for s in spec.shape if s in (7, 13, 33)}
    assert odd == {7, 13, 33}


def test_every_program_tunes_and_every_measured_candidate_is_correct(tmp_path):
    """One run over the corpus (the task scheduler shares the trials out; random search,
    the cheapest strategy: bench/fuzz_corpus.py runs the evolutionary one): no exception,
    every program measured (its default candidate at least), no wrong answer."""
    tasks = _tasks(SEEDS)
    url = f"sqlite:///{tmp_path}/fuzz.db"
    config = TuneConfig(trials=TRIALS * len(tasks), db_url=url, work_dir=str(tmp_path),
                        strategy="random", batch_size=TRIALS, measure=FAST)
    result = tune_tasks(tasks, config)
    with open_database(url) as db:
        outcomes = {t.name: Counter(r.result.error_kind or "ok"
                                    for r in db.records(task_key=t.key)) for t in tasks}
    assert all(o["ok"] >= 1 for o in outcomes.values()), outcomes
    assert not any(o["wrong_answer"] for o in outcomes.values()), outcomes
    assert sum(sum(o.values()) for o in outcomes.values()) == result.trials
    assert result.stopped is None


CUDA_DRY_RUN = textwrap.dedent("""
    import json, sys
    from autosched import dry_run_task, load_tasks, resolve_target
    corpus, count = sys.argv[1], int(sys.argv[2])
    target = resolve_target("cuda")
    rows = []
    for task in load_tasks(corpus, arg_items=[f"seed={s}" for s in sys.argv[3:]]):
        report = dry_run_task(task, target, count, seed=0)
        rows.append({"task": task.name, "generated": report.generated,
                     "compiled": report.compiled, "failures": dict(report.messages)})
    print("RESULT", json.dumps(rows))
""")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_cuda_dry_run_of_every_program_raises_nothing(tmp_path):
    """In a subprocess: a process that compiled CUDA keeps TVM's CUDA runtime."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", CUDA_DRY_RUN, CORPUS, "1",
                          *map(str, SEEDS)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
    rows = json.loads(line[len("RESULT "):])
    assert [r["task"] for r in rows] == [f"fuzz(seed={s})" for s in SEEDS]
    assert all(r["generated"] == 1 for r in rows), rows
    assert all(r["compiled"] == 1 for r in rows), rows
