"""No worker outlives the program that started it: normal exit without close(), an
uncaught exception, and SIGKILL of the parent while a worker is busy."""
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

_SCRIPT = textwrap.dedent("""
    import json, sys
    from autosched.workload import load_tasks
    from autosched.target import resolve_target
    from autosched.measure import MeasureInput, MeasureSettings
    from autosched.measure.builder import TEST_FAULT_ATTR
    from autosched.measure.factory import make_measurer

    task = load_tasks(sys.argv[1], arg_items=["M=16", "N=16", "K=16"])[0]
    target = resolve_target("llvm")
    m = make_measurer(MeasureSettings(number=1, repeat=1, min_repeat_ms=0, build_workers=1,
                                      build_timeout=600))
    (r,) = m.measure([MeasureInput(task, target, None, task.mod)])
    print(json.dumps({"ok": r.ok, "pids": m.builder.worker_pids + [m.runner.worker_pid],
                      "work_dir": m.work_dir}), flush=True)
    if sys.argv[2] == "raise":
        raise RuntimeError("boom")  # no close(): the exit handlers must clean up
    print("building", flush=True)  # the build worker now sleeps in its (test-only) fault
    m.measure([MeasureInput(task, target, None, task.mod.with_attr(TEST_FAULT_ATTR, "sleep:600"))])
""")


def _start(tmp_path, child_env, examples_dir, mode):
    script = tmp_path / "measure_then.py"
    script.write_text(_SCRIPT)
    return subprocess.Popen([sys.executable, str(script), str(examples_dir / "matmul.py"), mode],
                            env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_dead(pids, is_alive, seconds=20.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(is_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if is_alive(p)]


def test_workers_and_temp_files_go_when_an_exception_ends_the_program(
        tmp_path, child_env, examples_dir, is_alive):
    proc = _start(tmp_path, child_env, examples_dir, "raise")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "RuntimeError: boom" in err
    info = json.loads(out.splitlines()[0])
    assert info["ok"] and len(info["pids"]) == 2
    assert _wait_dead(info["pids"], is_alive) == []
    assert not os.path.exists(info["work_dir"])  # close() never ran; the exit handler did


def test_a_busy_worker_dies_with_a_killed_parent(tmp_path, child_env, examples_dir, is_alive):
    proc = _start(tmp_path, child_env, examples_dir, "kill")
    info = {"work_dir": str(tmp_path / "none")}
    try:
        info = json.loads(proc.stdout.readline())
        assert proc.stdout.readline().strip() == "building"
        time.sleep(2.0)  # the build worker is inside its 600 s sleep, not reading stdin
        assert all(is_alive(p) for p in info["pids"])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert _wait_dead(info["pids"], is_alive) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        shutil.rmtree(info["work_dir"], ignore_errors=True)  # SIGKILL leaves it behind
