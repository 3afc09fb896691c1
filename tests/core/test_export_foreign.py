"""Export from records another machine measured (a build host without the GPU): the
one other machine is taken and said, several are refused by name, `--hardware` picks,
and this machine's own records still come first. The manifest names the records used
and the machine that measured them."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import run_cli
from support.gpu_log import LOG, load_task

from autosched.db import make_record, open_database
from autosched.db.jsonl import import_records
from autosched.errors import UserError
from autosched.exporting import choose_records, export_tasks, machine_label
from autosched.results import MeasureResult
from autosched.target import TargetSpec, resolve_target
from autosched.versions import current_versions
from autosched.workload import load_tasks
from search_space import SPACE_VERSION, generate_space

ROOT = str(Path(__file__).resolve().parents[2])
ALPHA = {"device": "cpu", "model": "Fake CPU Alpha", "mcpu": "x", "cores": 2,
         "machine": "x86_64"}
BETA = {"device": "cpu", "model": "Fake CPU Beta", "mcpu": "x", "cores": 2,
        "machine": "x86_64"}


@pytest.fixture(scope="module")
def task(examples_dir):
    return load_tasks(str(examples_dir / "matmul.py"), None, ["M=32", "N=32", "K=32"])[0]


@pytest.fixture(scope="module")
def cands(task, target):
    """The default and three distinct sampled candidates of the task's llvm space."""
    space, rng = generate_space(task, target), random.Random(3)
    out = [space.default_candidate()]
    while len(out) < 4:
        cand, _ = space.sample(rng)
        if cand not in out:
            out.append(cand)
    return out


def ok(ms: float) -> MeasureResult:
    s = ms * 1e-3
    return MeasureResult((s, s, s), None, "", 0.1, 0.1)


def fill(url, task, target, cands, machines) -> dict:
    """Records of `task` measured on each machine (fingerprint -> latencies in ms of
    cands[0..3], None for a build error): {model or 'here': id of its fastest}."""
    versions = current_versions(SPACE_VERSION)
    best = {}
    with open_database(url) as db:
        db.register_task(task.to_json())
        for fingerprint, latencies in machines:
            spec = target if fingerprint is None else \
                TargetSpec("llvm", target.config, fingerprint, False)
            recs = [make_record(task, spec, c, ok(ms) if ms else
                                MeasureResult.failure("build_error", "no"), versions)
                    for c, ms in zip(cands, latencies)]
            ids = db.add_records(recs)
            fastest = min((m, i) for m, i in zip(latencies, ids) if m)[1]
            best["here" if fingerprint is None else fingerprint["model"]] = fastest
    return best


def manifest_of(path) -> dict:
    with open(path) as f:
        return json.load(f)


def key_of(fingerprint) -> str:
    return TargetSpec("llvm", {}, fingerprint, False).hardware_key


def test_the_one_other_machine_is_taken_and_said(tmp_path, task, target, cands):
    url = f"sqlite:///{tmp_path}/a.db"
    best = fill(url, task, target, cands, [(ALPHA, [3.0, 1.0, None, 2.0])])
    lines = []
    manifest = manifest_of(export_tasks([task], "llvm", str(tmp_path / "lib"), url,
                                        say=lines.append))
    (kernel,) = manifest["kernels"]
    assert kernel["record_id"] == best["Fake CPU Alpha"]
    assert kernel["latency_s"] == 1e-3
    assert kernel["candidate"] == cands[1].to_json()
    assert kernel["hardware_key"] == key_of(ALPHA)
    assert manifest["hardware"] == ALPHA
    assert manifest["target_key"] == target.key
    assert lines == [f"{task.name}: records of Fake CPU Alpha (hardware {key_of(ALPHA)}), "
                     "measured on another machine"]


def test_several_other_machines_are_refused_by_name_and_hardware_picks(tmp_path, task,
                                                                       target, cands):
    url = f"sqlite:///{tmp_path}/ab.db"
    best = fill(url, task, target, cands, [(ALPHA, [3.0, 1.0, None, 2.0]),
                                           (BETA, [4.0, None, 0.5, 5.0])])
    with pytest.raises(UserError) as err:
        export_tasks([task], "llvm", str(tmp_path / "lib"), url)
    first, second = sorted([machine_label(ALPHA, key_of(ALPHA)),
                            machine_label(BETA, key_of(BETA))],
                           key=lambda label: label.split("hardware ")[1])
    assert str(err.value) == (
        f"no valid record for {task.name} on this llvm target in {url} from this machine, "
        f"and 2 other machines measured it: {first}; {second}; choose one with --hardware "
        "KEY_OR_NAME")
    assert not (tmp_path / "lib").exists()

    lines = []
    beta = manifest_of(export_tasks([task], "llvm", str(tmp_path / "beta"), url,
                                    hardware="fake cpu beta", say=lines.append))
    assert [k["record_id"] for k in beta["kernels"]] == [best["Fake CPU Beta"]]
    assert beta["kernels"][0]["candidate"] == cands[2].to_json()
    assert beta["hardware"] == BETA
    assert len(lines) == 1 and "Fake CPU Beta" in lines[0]
    alpha = manifest_of(export_tasks([task], "llvm", str(tmp_path / "alpha"), url,
                                     hardware=key_of(ALPHA)[:6], say=lines.append))
    assert [k["record_id"] for k in alpha["kernels"]] == [best["Fake CPU Alpha"]]
    with pytest.raises(UserError, match=r"^--hardware Gamma: no valid record of .* from "
                                        r"that machine; machines with records: Fake CPU"):
        export_tasks([task], "llvm", str(tmp_path / "g"), url, hardware="Gamma")


def test_this_machines_records_come_first_and_nothing_is_said(tmp_path, task, target,
                                                               cands):
    url = f"sqlite:///{tmp_path}/here.db"
    best = fill(url, task, target, cands, [(ALPHA, [3.0, 1.0, None, 2.0]),
                                           (None, [6.0, 7.0, 8.0, 9.0])])
    lines = []
    manifest = manifest_of(export_tasks([task], "llvm", str(tmp_path / "lib"), url,
                                        say=lines.append))
    assert [k["record_id"] for k in manifest["kernels"]] == [best["here"]]
    assert manifest["hardware"] == target.fingerprint
    assert lines == []


def test_the_cli_stops_with_one_line_listing_the_machines(tmp_path, task, target, cands):
    url = f"sqlite:///{tmp_path}/cli.db"
    fill(url, task, target, cands, [(ALPHA, [3.0, 1.0, None, 2.0]),
                                    (BETA, [4.0, None, 0.5, 5.0])])
    op = "examples/matmul.py"
    common = ["export", op, "--arg", "M=32", "--arg", "N=32", "--arg", "K=32",
              "--target", "llvm", "--db", url]
    proc = run_cli(*common, "-o", str(tmp_path / "lib"), cwd=ROOT)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "2 other machines measured it" in line and "Fake CPU Alpha" in line \
        and "Fake CPU Beta" in line and "--hardware" in line
    proc = run_cli(*common, "--hardware", "Fake CPU Alpha", "-o", str(tmp_path / "lib"),
                   cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == (f"{task.name}: records of Fake CPU Alpha (hardware "
                                   f"{key_of(ALPHA)}), measured on another machine")
    assert manifest_of(tmp_path / "lib" / "manifest.json")["hardware"] == ALPHA


def test_a_build_host_takes_the_gpus_records_under_the_gpus_own_limits(tmp_path):
    """The synthetic H100 log's records carry the H100's limits in their target config;
    a host without a GPU resolves the same arch with the default limits, and still
    chooses them (nothing is compiled here)."""
    url = f"sqlite:///{tmp_path}/gpu.db"
    gpu_task = load_task(0)
    here = resolve_target('{"kind": "cuda", "arch": "sm_90a"}')
    with open_database(url) as db:
        assert import_records(db, LOG) == (120, 0)
        logged = [r for r in db.records(task_key=gpu_task.key) if r.ok]
        lines = []
        (rec,) = choose_records(db, [gpu_task], here, current_versions(SPACE_VERSION),
                                say=lines.append)
    assert here.key != logged[0].target_key
    assert rec.id == min(logged, key=lambda r: r.latency).id
    assert lines == [f"{gpu_task.name}: records of NVIDIA H100 80GB HBM3 (synthetic) "
                     f"(hardware {logged[0].hardware_key}), measured on another machine"]
    plain = resolve_target('{"kind": "cuda", "arch": "sm_80"}')
    with open_database(url) as db, pytest.raises(UserError, match="from this machine or "
                                                                  "another"):
        choose_records(db, [gpu_task], plain, current_versions(SPACE_VERSION))
