"""The bundle directory on its own: runner names and directories that are no bundle, the
one-machine rule for results, the lock, and the one run request builder the bundle and
the local runner share. (`test_bundle.py` takes bundles through real tune rounds.)"""
from __future__ import annotations

import json
import os

import pytest
from support.bundles import measure

from autosched.measure.runners import parse_runner, runner_factory
from autosched.errors import UserError
from autosched.measure import MeasureSettings
from autosched.measure.bundle.format import BundleError, one_machine


def test_runner_names_and_bad_directories(tmp_path):
    assert parse_runner("bundle:/data/round") == ("bundle", "/data/round")
    assert parse_runner("bundle:") == ("bundle", "")
    make = runner_factory
    (tmp_path / "file").write_text("x")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("x")
    for name, message in [("bundle:", "needs a directory"),
                          (f"bundle:{tmp_path / 'file'}", "not a directory"),
                          (f"bundle:{tmp_path / 'home'}",
                           "neither empty nor a bundle (it holds 'notes.txt')")]:
        with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
            make(name)(MeasureSettings(), str(tmp_path / "w"), str(tmp_path / "s"))
    assert sorted(os.listdir(tmp_path / "home")) == ["notes.txt"]  # nothing written there


def test_results_from_two_machines_are_refused():
    a = {"id": "r1-0000", "hardware": {"device": "cpu", "model": "A"}, "host": "h1"}
    b = {"id": "r1-0001", "hardware": {"device": "cpu", "model": "B"}, "host": "h2"}
    assert one_machine([a, dict(a, id="r1-0002")], "d") == a["hardware"]
    assert one_machine([], "d") is None
    with pytest.raises(BundleError, match="r1-0000 and r1-0001 were measured on different "
                                          "machines"):
        one_machine([a, b], "d")


def test_one_process_works_on_a_bundle_at_a_time(tmp_path):
    from autosched.measure.bundle.format import BundleLock

    with BundleLock(str(tmp_path)):
        with pytest.raises(BundleError, match="another process is working on this bundle"):
            BundleLock(str(tmp_path)).acquire()
    with BundleLock(str(tmp_path)):  # released at the end of the block
        pass


def test_measuring_what_is_not_a_bundle_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text("{not json")
    cases = {"missing": "no such bundle directory", "empty": "not a bundle (no manifest.json)",
             "broken": "manifest.json is not a bundle manifest"}
    for name, message in cases.items():
        proc = measure(tmp_path / name, tmp_path)
        assert proc.returncode == 2, (name, proc.stderr)
        assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_the_local_runner_and_the_bundle_ask_the_run_worker_alike():
    """One request builder: the bundle reads its settings back from the manifest's JSON
    and asks for exactly what the local runner asks for with the same settings."""
    from autosched.measure.run_job import run_request

    settings = MeasureSettings(number=7, repeat=2, min_repeat_ms=3, warmup=4,
                               check_correctness=False, flush_l2=False, stream="default")
    local = run_request(settings, "/b/lib/r1-0000.so", "/b/reference/k", "cuda")
    assert local == {"lib": "/b/lib/r1-0000.so", "reference": "/b/reference/k",
                     "device": "cuda", "warmup": 4, "number": 7, "repeat": 2,
                     "min_repeat_ms": 3, "check": False, "flush_l2": False,
                     "stream": "default"}
    manifest_settings = json.loads(json.dumps(settings.to_json()))
    assert run_request(manifest_settings, "/b/lib/r1-0000.so", "/b/reference/k",
                       "cuda") == local
