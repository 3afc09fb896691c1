"""make_measurer end to end with real kernels: good candidates are timed, every broken
one becomes the right failure, and tuning goes on after hangs and crashes."""
import dataclasses
import math
import os

import pytest

from autosched.errors import UserError
from autosched.results import MeasureResult
from autosched.measure.runners import RUNNERS, parse_runner
from autosched.measure.builder import LocalBuilder
from autosched.measure.build_run import BuildRunMeasurer
from autosched.measure.factory import make_measurer
from autosched.measure.local_runner import LocalRunner

# (kernel, expected failure kind or None for a correct kernel)
MIXED = [
    ("plain", None),
    ("hang", "run_timeout"),
    ("vectorized", None),
    ("raise_segv", "run_error"),
    ("rfactor", None),
    ("plus_one", "wrong_answer"),
    ("wild_store", "run_error"),
    ("zeros", "wrong_answer"),
    ("compile_error", "build_error"),
    ("build_hang", "build_timeout"),
    ("missing_symbol", "run_error"),
    ("half_written", "wrong_answer"),
    ("clobbers_input", "wrong_answer"),
    ("build_crash", "build_error"),
    ("plain", None),
]


@pytest.fixture(scope="module")
def measurer(tmp_path_factory, settings):
    m = make_measurer(settings, "local", work_dir=str(tmp_path_factory.mktemp("measure")))
    yield m
    m.close()


@pytest.fixture(scope="module")
def mixed(measurer, kernels, matmul_task, target):
    from autosched.measure import MeasureInput

    inputs = [MeasureInput(matmul_task, target, None, getattr(kernels, name)) for name, _ in MIXED]
    return dict(zip(range(len(MIXED)), measurer.measure(inputs)))


def _by_name(mixed, name):
    return [mixed[i] for i, (n, _) in enumerate(MIXED) if n == name]


def test_every_candidate_gets_exactly_its_outcome(mixed, settings):
    assert [mixed[i].error_kind for i in range(len(MIXED))] == [k for _, k in MIXED]
    good = [r for r in mixed.values() if r.ok]
    assert len(good) == 4
    for r in good:  # timed after a hang, a crash and a timed-out build alike
        assert len(r.latencies) == settings.repeat
        assert all(0 < x < 0.1 for x in r.latencies) and math.isfinite(r.median)
        assert r.build_seconds > 0 and r.run_seconds > 0
    for r in mixed.values():
        if not r.ok:
            assert r.median == math.inf and r.error_msg


def test_run_failures_say_what_happened(mixed, settings):
    (hang,) = _by_name(mixed, "hang")
    assert hang.error_msg.startswith(f"run did not finish within {settings.run_timeout:g}s")
    assert settings.run_timeout <= hang.run_seconds < settings.run_timeout + 30
    for name in ("raise_segv", "wild_store"):
        (r,) = _by_name(mixed, name)
        assert r.error_msg.startswith("run worker killed by signal 11 (SIGSEGV)"), r.error_msg
    (missing,) = _by_name(mixed, "missing_symbol")
    assert "exited with status 127" in missing.error_msg
    assert "undefined symbol: autosched_test_no_such_symbol" in missing.error_msg


def test_wrong_answers_report_their_errors(mixed):
    (plus_one,) = _by_name(mixed, "plus_one")
    assert "1024 of 1024 elements outside tolerance" in plus_one.error_msg
    assert "max abs err 1.000e+00" in plus_one.error_msg and "max rel err" in plus_one.error_msg
    (zeros,) = _by_name(mixed, "zeros")
    assert zeros.error_msg.startswith("output C:") and "max rel err 1.000e+00" in zeros.error_msg
    (half,) = _by_name(mixed, "half_written")
    assert "512 of 1024 elements outside tolerance" in half.error_msg
    assert "512 NaN where the reference has a number" in half.error_msg
    (clobber,) = _by_name(mixed, "clobbers_input")
    assert clobber.error_msg == "input B was modified by the kernel"


def test_failed_builds_never_reach_the_runner(mixed, settings):
    (timeout,) = _by_name(mixed, "build_hang")
    assert timeout.run_seconds == 0 and timeout.build_seconds >= settings.build_timeout
    for name in ("compile_error", "build_crash"):
        (r,) = _by_name(mixed, name)
        assert r.run_seconds == 0 and r.build_seconds > 0


def test_libraries_are_deleted_once_measured(mixed, measurer):
    assert os.listdir(measurer.folder.builds) == []


def test_a_crash_gets_the_next_candidate_a_fresh_worker(measurer, kernels, matmul_task, inp,
                                                        is_alive):
    (ok,) = measurer.measure([inp(matmul_task, kernels.plain)])
    first = measurer.runner.worker_pid
    assert ok.ok and first is not None
    crash, after = measurer.measure([inp(matmul_task, kernels.raise_segv),
                                     inp(matmul_task, kernels.vectorized)])
    assert crash.error_kind == "run_error" and after.ok
    second = measurer.runner.worker_pid
    assert second != first and not is_alive(first) and is_alive(second)


def test_the_run_worker_is_recycled_after_a_number_of_runs(tmp_path, settings, kernels,
                                                          matmul_task, inp, is_alive):
    work = str(tmp_path)
    runner = LocalRunner(settings, work, runs_per_worker=2)
    with BuildRunMeasurer(LocalBuilder(settings, work), runner, work) as measurer:
        assert measurer.measure([inp(matmul_task, kernels.plain)])[0].ok
        first = runner.worker_pid
        assert measurer.measure([inp(matmul_task, kernels.vectorized)])[0].ok
        assert runner.worker_pid == first  # two runs: still the first worker
        assert measurer.measure([inp(matmul_task, kernels.plain)])[0].ok
        assert runner.worker_pid != first and not is_alive(first)


def test_real_workloads_pass_their_own_check(measurer, task_of, inp):
    """Unscheduled and reordered kernels of every example, several dtypes: no false alarm."""
    from tvm import s_tir

    tasks = [task_of("softmax.py", M=16, N=64), task_of("softmax.py", "layer_norm", M=8, N=32),
             task_of("dense_gelu.py", M=8, N=16, K=64),
             task_of("conv2d.py", N=1, C=4, H=8, W=8, F=4),
             task_of("batch_matmul.py", B=2, M=8, N=8, K=16),
             task_of("matmul.py", M=16, N=16, K=256, dtype="float16"),
             task_of("matmul.py", M=16, N=16, K=64, dtype="float64")]
    inputs = [inp(t, t.mod) for t in tasks]
    for t in tasks[-2:]:  # a different summation order than the reference's
        sch = s_tir.Schedule(t.mod)
        _, _, k = sch.get_loops(sch.get_sblock("C"))
        sch.rfactor(sch.split(k, [None, 8])[1], 0)
        inputs.append(inp(t, sch.mod))
    results = measurer.measure(inputs)
    assert [r.error_kind for r in results] == [None] * len(inputs), [r.error_msg for r in results]


def test_without_correctness_checks_a_wrong_kernel_is_timed(measurer, settings, kernels,
                                                           matmul_task, inp):
    runner = LocalRunner(dataclasses.replace(settings, check_correctness=False),
                         measurer.work_dir)
    try:
        inputs = [inp(matmul_task, kernels.plus_one)]
        results = runner.run(inputs, measurer.builder.build(inputs))
    finally:
        runner.close()
    assert results[0].ok and len(results[0].latencies) == settings.repeat


def test_close_stops_workers_and_removes_the_temporary_work_dir(settings, kernels, matmul_task,
                                                                inp, is_alive):
    with make_measurer(dataclasses.replace(settings, build_workers=1)) as m:
        (r,) = m.measure([inp(matmul_task, kernels.plain)])
        pids = m.builder.worker_pids + [m.runner.worker_pid]
        work_dir = m.work_dir
        assert r.ok and len(pids) == 2 and all(is_alive(p) for p in pids)
        assert os.listdir(os.path.join(work_dir, "reference")) == [matmul_task.key]
    assert not any(is_alive(p) for p in pids)
    assert not os.path.exists(work_dir)
    with pytest.raises(RuntimeError, match="closed"):
        m.measure([])
    m.close()  # twice is fine


def test_a_kept_work_dir_keeps_only_the_reference(tmp_path, settings, kernels, matmul_task,
                                                  inp):
    with make_measurer(dataclasses.replace(settings, build_workers=1),
                       work_dir=str(tmp_path)) as m:
        assert m.measure([inp(matmul_task, kernels.plain)])[0].ok
    assert sorted(os.listdir(tmp_path)) == ["reference"]
    assert os.listdir(tmp_path / "reference") == [matmul_task.key]


@pytest.mark.parametrize("name, message", [
    ("remote", "unknown --runner 'remote'; use one of: local, rpc://..."),
    ("ssh://host:22/key", "unknown --runner 'ssh://host:22/key'; use one of: local, rpc://..."),
    ("local://somewhere", "--runner local takes no address"),
])
def test_unknown_runner_is_a_user_error(tmp_path, settings, name, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        make_measurer(settings, name, work_dir=str(tmp_path))


def test_runner_names_resolve_through_one_table():
    assert set(RUNNERS) == {"local", "rpc", "bundle"}
    assert parse_runner("local") == ("local", "")
    assert parse_runner(" rpc://10.0.0.1:9190/h100 ") == ("rpc", "10.0.0.1:9190/h100")


def test_a_failed_artifact_passed_to_a_runner_stays_a_build_failure(tmp_path, settings,
                                                                   matmul_task, inp):
    from autosched.measure.base import BuildArtifact

    runner = LocalRunner(settings, str(tmp_path))
    art = BuildArtifact(None, "build_timeout", "too slow", 3.0)
    (r,) = runner.run([inp(matmul_task, None)], [art])
    assert r == MeasureResult.failure("build_timeout", "too slow", build_seconds=3.0)
    assert runner.worker_pid is None  # nothing was started for it
    runner.close()
