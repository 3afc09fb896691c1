"""Each run's own folder under a shared work dir: made per measurer, removed by its own
close, and removed by a later run only once its owner process is gone."""
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

from autosched.measure.factory import make_measurer
from autosched.measure.scratch import (MARKER, Owner, RunFolder, owner_of, process_start,
                                       remove_stale)

_KILLED = textwrap.dedent("""
    import json, sys, time
    from autosched.workload import load_tasks
    from autosched.target import resolve_target
    from autosched.measure import MeasureInput, MeasureSettings
    from autosched.measure.factory import make_measurer

    task = load_tasks(sys.argv[1], arg_items=["M=16", "N=16", "K=16"])[0]
    m = make_measurer(MeasureSettings(number=1, repeat=1, min_repeat_ms=0, build_workers=1),
                      work_dir=sys.argv[2])
    (r,) = m.measure([MeasureInput(task, resolve_target("llvm"), None, task.mod)])
    print(json.dumps({"ok": r.ok, "folder": m.folder.path}), flush=True)
    time.sleep(600)
""")

_HOLDER = textwrap.dedent("""
    import sys, time
    from autosched.measure.scratch import RunFolder

    print(RunFolder.create(sys.argv[1]).path, flush=True)
    time.sleep(600)
""")


def _marker(folder) -> dict:
    with open(os.path.join(folder, MARKER)) as f:
        return json.load(f)


def test_each_measurer_has_its_own_folder_and_removes_only_it(tmp_path, settings, kernels,
                                                              matmul_task, inp):
    one_settings = dataclasses.replace(settings, build_workers=1)
    first = make_measurer(one_settings, work_dir=str(tmp_path))
    second = make_measurer(one_settings, work_dir=str(tmp_path))
    try:
        assert first.folder.path != second.folder.path
        for m in (first, second):
            assert os.path.dirname(m.folder.path) == str(tmp_path / "runs")
            assert os.path.basename(m.folder.path).startswith(f"{os.getpid()}-")
            assert _marker(m.folder.path) == {
                "pid": os.getpid(), "start": process_start(os.getpid()),
                "host": socket.gethostname(), "boot": Owner.current().boot,
                "pidns": os.readlink("/proc/self/ns/pid")}
        assert first.measure([inp(matmul_task, kernels.plain)])[0].ok
        first.close()
        assert not os.path.exists(first.folder.path)
        # the second run builds and runs on after the first removed its folder
        results = second.measure([inp(matmul_task, kernels.plain),
                                  inp(matmul_task, kernels.vectorized)])
        assert [r.error_kind for r in results] == [None, None]
        assert os.path.isdir(second.folder.builds) and os.path.isdir(second.folder.workers)
    finally:
        first.close()
        second.close()
    assert sorted(os.listdir(tmp_path)) == ["reference"]  # runs/ goes with the last run


def test_a_killed_run_leaves_its_folder_and_the_next_run_removes_it(
        tmp_path, child_env, examples_dir, settings):
    work = str(tmp_path / "work")
    script = tmp_path / "killed.py"
    script.write_text(_KILLED)
    killed = subprocess.Popen([sys.executable, str(script), str(examples_dir / "matmul.py"),
                               work], env=child_env, stdout=subprocess.PIPE, text=True)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, work], env=child_env,
                              stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(killed.stdout.readline())
        live = holder.stdout.readline().strip()
        assert info["ok"] and _marker(info["folder"])["pid"] == killed.pid
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        assert os.path.isdir(info["folder"])  # nobody closed it
        assert os.path.isdir(os.path.join(info["folder"], "builds"))

        with make_measurer(dataclasses.replace(settings, build_workers=1),
                           work_dir=work) as m:
            left = sorted(os.listdir(os.path.join(work, "runs")))
            assert left == sorted([os.path.basename(live), os.path.basename(m.folder.path)])
        assert not os.path.exists(info["folder"])
        assert os.path.isdir(live) and _marker(live)["pid"] == holder.pid  # owner alive
    finally:
        for proc in (killed, holder):
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def _fake_run(work: str, name: str, owner: dict | None) -> str:
    folder = os.path.join(work, "runs", name)
    os.makedirs(os.path.join(folder, "builds"))
    if owner is not None:
        with open(os.path.join(folder, MARKER), "w") as f:
            json.dump(owner, f)
    return folder


def test_only_folders_whose_owner_is_surely_gone_are_removed(tmp_path):
    work = str(tmp_path)
    me = Owner.current()
    here = dataclasses.asdict(me)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folders = {
        "alive": _fake_run(work, f"{me.pid}-a", here),
        # the same pid, started at another time: the pid was reused after a crash
        "reused": _fake_run(work, f"{me.pid}-b", {**here, "start": here["start"] - 1}),
        "rebooted": _fake_run(work, f"{me.pid}-c", {**here, "boot": "another-boot"}),
        "dead": _fake_run(work, f"{dead.pid}-d", {**here, "pid": dead.pid}),
        "other host": _fake_run(work, f"{dead.pid}-e", {**here, "pid": dead.pid,
                                                        "host": "elsewhere"}),
        "other container": _fake_run(work, f"{dead.pid}-h", {**here, "pid": dead.pid,
                                                             "pidns": "pid:[1]"}),
        # no marker yet: a run writing it now is kept, one that died before is not
        "unmarked alive": _fake_run(work, f"{me.pid}-f", None),
        "unmarked dead": _fake_run(work, f"{dead.pid}-g", None),
        "not ours": _fake_run(work, "notes", None),
    }
    removed = remove_stale(work)
    gone = {"reused", "rebooted", "dead", "unmarked dead"}
    assert sorted(removed) == sorted(folders[k] for k in gone)
    assert sorted(os.listdir(os.path.join(work, "runs"))) == sorted(
        os.path.basename(folders[k]) for k in set(folders) - gone)
    assert owner_of(folders["not ours"]) is None
    assert not owner_of(folders["alive"]).gone()


def test_a_folder_removes_only_itself(tmp_path):
    one, two = RunFolder.create(str(tmp_path)), RunFolder.create(str(tmp_path))
    one.remove()
    assert os.listdir(tmp_path / "runs") == [os.path.basename(two.path)]
    two.remove()
    assert os.listdir(tmp_path) == []
