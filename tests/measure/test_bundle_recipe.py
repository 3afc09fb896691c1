"""A task whose reference data is above `--bundle-reference-mib` travels as a recipe: on
the CPU, end to end through real processes (build here, measure where the TVM compiler
cannot be imported: reduced check, regenerated inputs, reference kernel, candidates
judged, then recorded); for CUDA, the bundle of a 4096^3 matmul holds fatbin reference
kernels and a few hundred KiB instead of 192 MiB of arrays."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.bundles import measure

from autosched.measure.bundle.format import read_results

ROOT = Path(__file__).resolve().parents[2]
MATMUL = str(ROOT / "examples" / "matmul.py")
ARGS = ["M=128", "N=128", "K=128"]   # 192 KiB of reference data; reduced to 64^3
LIMIT_MIB = "0.1"
ROUND = 4
NAME = "matmul(M=128,N=128,K=128,dtype=float32)"
SMALL = "matmul(M=64,N=64,K=64,dtype=float32)"


def tune(bundle, work, *args, target="llvm", trials=ROUND, limit=LIMIT_MIB):
    """`autosched tune` of the matmul with `--runner bundle:DIR`."""
    cmd = [sys.executable, "-m", "autosched", "tune", MATMUL,
           *[x for a in args for x in ("--arg", a)], "--target", target,
           "--trials", str(trials), "--batch-size", str(ROUND), "--strategy", "random",
           "--runner", f"bundle:{bundle}", "--work-dir", str(work),
           "--db", f"sqlite:///{work}/tune.db", "--min-repeat-ms", "1",
           "--bundle-reference-mib", limit]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)


def the_task(args=ARGS):
    from autosched.workload import load_tasks

    (task,) = load_tasks(MATMUL, None, args)
    return task


@pytest.fixture(scope="module")
def recipe_round(tmp_path_factory):
    """A bundle whose round 1 carries the 128^3 matmul's recipe."""
    base = tmp_path_factory.mktemp("recipe")
    proc = tune(base / "b", base / "work", *ARGS)
    assert proc.returncode == 0, proc.stderr
    return base / "b", base / "work"


@pytest.fixture
def bundle(recipe_round, tmp_path):
    """A private copy of `recipe_round`, with the work dir that built it."""
    src, work = recipe_round
    shutil.copytree(src, tmp_path / "b")
    shutil.copytree(work, tmp_path / "work")
    return tmp_path / "b", tmp_path / "work"


def test_reference_bytes_count_inputs_and_outputs():
    from autosched.measure.bundle.recipe import reference_bytes

    assert reference_bytes(the_task()) == 3 * 128 * 128 * 4
    assert reference_bytes(the_task(["M=4096", "N=4096", "K=4096"])) == 192 * 2 ** 20
    assert reference_bytes(the_task(["M=64", "N=32", "K=16", "dtype=float16"])) == \
        (64 * 16 + 16 * 32 + 64 * 32) * 2


def test_a_task_above_the_limit_ships_its_recipe_and_no_arrays(recipe_round):
    directory, work = recipe_round
    task = the_task()
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["settings"]["bundle_reference_mib"] == 0.1
    assert manifest["tasks"][task.key]["recipe"] == f"recipes/{task.key}"
    folder = directory / "recipes" / task.key
    assert sorted(os.listdir(folder)) == ["check", "check.so", "kernel.so", "recipe.json"]
    recipe = json.loads((folder / "recipe.json").read_text())
    assert (recipe["seed"], recipe["target"], recipe["schedule"]) == (0, {"kind": "llvm"},
                                                                     "unscheduled")
    assert recipe["task"]["key"] == task.key and recipe["task"]["reduction_extent"] == 128
    assert recipe["check"]["args"] == {"M": 64, "N": 64, "K": 64, "dtype": "float32"}
    check = json.loads((folder / "check" / "meta.json").read_text())
    assert check["task"] == SMALL and check["expected"]["device"] == "cpu"
    assert [e["shape"] for e in check["inputs"] + check["outputs"]] == [[64, 64]] * 3
    assert os.listdir(directory / "reference") == []  # made where it is measured
    small = the_task(["M=64", "N=64", "K=64"])
    assert os.listdir(work / "reference") == [small.key]  # the full one was never computed


def test_the_same_task_below_the_limit_ships_its_arrays(tmp_path):
    proc = tune(tmp_path / "b", tmp_path / "work", *ARGS, limit="0.2")
    assert proc.returncode == 0, proc.stderr
    task = the_task()
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["tasks"][task.key]["recipe"] is None
    assert os.listdir(tmp_path / "b" / "recipes") == []
    assert sorted(os.listdir(tmp_path / "b" / "reference" / task.key)) == [
        "in0.npy", "in1.npy", "meta.json", "out0.npy"]


@pytest.mark.slow
def test_the_measuring_machine_checks_regenerates_and_judges_then_tune_records(bundle,
                                                                                tmp_path):
    from autosched.db import open_database
    from autosched.measure.reference.check import tolerance_for
    from autosched.measure.reference.data import load_reference, random_inputs
    from autosched.measure.reference.store import ensure_reference

    directory, work = bundle
    task = the_task()
    final = directory / "reference" / task.key
    (directory / "reference" / f".tmp-{task.key}-99").mkdir()  # a killed measurement's
    final.mkdir()
    (final / "in0.npy").write_bytes(b"half written")

    proc = measure(directory, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(rf"reference of {re.escape(NAME)}: checked at the reduced shape "
                        rf"{re.escape(SMALL)}, then computed by its reference kernel in "
                        r"\d+\.\ds", lines[0]), lines[0]
    assert lines[-1] == (f"bundle {directory}: measured {ROUND} candidates ({ROUND} correct) "
                         "on this machine; rerun the tune command to record them")
    assert os.listdir(directory / "reference") == [task.key]

    made = load_reference(str(final))
    inputs, expected = made.arrays()
    assert all(np.array_equal(a, b) for a, b in
               zip(inputs, random_inputs(task.inputs, task.key, 0), strict=True))
    cpu = ensure_reference(task, str(tmp_path / "cpu"))  # what shipping arrays would carry
    assert np.array_equal(expected[0], cpu.arrays()[1][0])  # the same code, bit for bit
    assert made.tolerances() == [tolerance_for("float32", 128, expected[0])]
    assert made.meta["check"]["ok"] and made.meta["check"]["task"] == SMALL

    mtime = (final / "meta.json").stat().st_mtime_ns
    shutil.rmtree(directory / "results")
    (directory / "results").mkdir()
    again = measure(Path("b"), tmp_path)  # named relative to where it is measured
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == f"reference of {NAME}: made earlier on this machine"
    assert (final / "meta.json").stat().st_mtime_ns == mtime
    results = read_results(str(directory))
    assert [r["result"]["error_kind"] for r in results.values()] == [None] * ROUND

    kernel = directory / "recipes" / task.key / "kernel.so"
    built = kernel.stat().st_mtime_ns
    proc = tune(directory, work, *ARGS, trials=2 * ROUND)
    assert proc.returncode == 0, proc.stderr
    assert f"round 2 written to {directory}: {ROUND} candidates" in proc.stdout
    db = open_database(f"sqlite:///{work}/tune.db")
    try:
        recorded = db.records()
    finally:
        db.close()
    assert sorted(r.candidate_key for r in recorded) == \
        sorted(r["candidate_key"] for r in results.values())
    assert kernel.stat().st_mtime_ns == built  # the recipe is kept, not built again
    assert os.listdir(directory / "reference") == []  # round 2 travels without the arrays


def _replace(library: Path, n: int, name: str) -> None:
    import tvm

    from support.kernels import broken_kernels

    library.unlink()
    tvm.compile(broken_kernels(n)[name], target="llvm").export_library(str(library))


@pytest.mark.slow
def test_a_reference_kernel_that_fails_measures_nothing_of_its_task(bundle, tmp_path):
    directory, _ = bundle
    task = the_task()
    folder = directory / "recipes" / task.key
    prefix = f"reference of {NAME}: "
    cases = [("kernel.so", 128, "raise_segv",
              "its reference kernel failed: the reference worker killed by signal 11 "
              "(SIGSEGV)"),
             ("check.so", 64, "plus_one",
              f"its reference kernel is wrong at the reduced shape {SMALL}: wrong_answer: "
              "output C: 4096 of 4096 elements outside tolerance")]
    for library, n, kernel, why in cases:
        _replace(folder / library, n, kernel)
        proc = measure(directory, tmp_path)
        assert proc.returncode == 1, proc.stdout
        first = proc.stdout.splitlines()[0]
        assert first.startswith(prefix + why), first
        assert first.endswith(f"; its {ROUND} candidates are not measured")
        assert proc.stdout.splitlines()[1] == (f"bundle {directory}: measured 0 candidates "
                                               "(0 correct) on this machine; rerun the tune "
                                               "command to record them")
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert proc.stderr.startswith(f"python -m autosched.measure.bundle: error: the "
                                      f"reference of {NAME} cannot be trusted on this "
                                      f"machine ({why}")
        assert f"nothing was recorded for its {ROUND} candidates; measure the bundle " \
            in proc.stderr
        assert not read_results(str(directory))
        assert os.listdir(directory / "reference") == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_cuda_bundle_of_a_4096_cubed_matmul_carries_fatbin_kernels_not_arrays(tmp_path):
    """Built on this machine, which has no GPU (cuda_compile's build-host driver): the
    round of 4 candidates and the task's reference kernels, far below the 64 MiB that
    one call to a GPU machine carries; the CPU reference (40 minutes) is never made."""
    from autosched.measure.cuda import fatbin
    from autosched.target import resolve_target

    directory, work = tmp_path / "b", tmp_path / "work"
    args = ["M=4096", "N=4096", "K=4096"]
    proc = tune(directory, work, *args, target="cuda", limit="8")
    assert proc.returncode == 0, proc.stderr
    size = float(re.search(r"1 task\(s\), ([\d.]+) MiB", proc.stdout)[1])
    total = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    assert size == round(total / 2 ** 20, 1) and total < 1 * 2 ** 20
    task, arch = the_task(args), resolve_target("cuda").config["arch"]
    folder = directory / "recipes" / task.key
    recipe = json.loads((folder / "recipe.json").read_text())
    assert recipe["schedule"] == "reference_schedule"
    assert recipe["target"] == resolve_target("cuda").config
    libraries = [folder / "kernel.so", folder / "check.so",
                 *sorted((directory / "lib").iterdir())]
    assert len(libraries) == 2 + ROUND
    assert all([e.arch for e in fatbin.library_entries(str(p))] == [arch] for p in libraries)
    assert os.listdir(directory / "reference") == []
    small = the_task(["M=64", "N=64", "K=64"])
    assert os.listdir(work / "reference") == [small.key]
    if shutil.which("g++") is not None:
        _assert_the_check_passes(folder, small, resolve_target("cuda"))


def _assert_the_check_passes(folder: Path, small, target) -> None:
    """What the GPU machine's check compares: the reduced instance's reference kernel
    (its module, run by the CUDA emulator) against the CPU outputs the bundle carries,
    judged as a candidate is."""
    from autosched.measure.bundle.recipe import kernel_input
    from autosched.measure.run_job import check_outputs, load_reference_arrays
    from support import cuda_emulator

    specs, inputs, expected, tols = load_reference_arrays(str(folder / "check"))
    got = cuda_emulator.emulate(kernel_input(small, target).mod, target,
                                {s.name: a for s, a in zip(specs[0], inputs, strict=True)},
                                {s.name: (s.shape, s.dtype) for s in specs[1]})
    outs = [got[s.name] for s in specs[1]]
    assert check_outputs(specs, inputs, inputs, outs, expected, tols) is None
    wrong = [outs[0] + np.float32(1e-2)]
    assert check_outputs(specs, inputs, inputs, wrong, expected, tols).startswith(
        "output C: 4096 of 4096 elements outside tolerance")
