"""`autosched db export --format metaschedule`: records as a MetaSchedule JSONDatabase
that TVM's own lookups (`compile_tir`, Relax's `MetaScheduleApplyDatabase`) apply to the
task's PrimFunc as exactly the schedule autosched measured; records whose schedule is
not a trace on that PrimFunc (a sketch's rewrite, the fast-math form, the empty default)
are skipped and counted by reason. The records are real candidates of each task's space
(sampled, not measured); a CUDA record is made for sm_90a without a GPU."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from autosched.cli.main import main
from autosched.db import make_record, open_database
from autosched.metaschedule_export import register_intrinsics
from autosched.results import MeasureResult
from autosched.target import resolve_target
from autosched.versions import current_versions
from autosched.workload import load_op_file, make_task
from search_space import SPACE_VERSION, Candidate, generate_space

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OPS = [str(EXAMPLES / "matmul.py"), str(EXAMPLES / "nn_ops.py")]
MP = str(EXAMPLES / "mixed_precision.py")
SM90A = json.dumps({"kind": "cuda", "arch": "sm_90a"})
REWRITE = "schedules a rewrite of the task's function (sketch rows)"
FAST = "schedules the fast-math form (sketch rows)"
UNSCHEDULED = ("unscheduled (sketch default): what MetaSchedule builds without a record, "
               "so the slower records are left out")


def _task(workload: str, args: dict, op_files=tuple(OPS)):
    """The task as the export rebuilds it: the first op file defining `workload`."""
    defs = [load_op_file(f) for f in op_files]
    return make_task(next(d[workload] for d in defs if workload in d), args)


def _record(task, target, sketch: str, seed: int, latency: float):
    """A correct record of a sampled candidate of `task` (median `latency` seconds)."""
    cand, _ = generate_space(task, target).sample(random.Random(seed), sketch=sketch)
    result = MeasureResult((latency,) * 3, None, "", 0.1, 0.1)
    return make_record(task, target, cand, result, current_versions(SPACE_VERSION))


def _export(capsys, url: str, out, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["db", "export", "--format", "metaschedule", "-o", str(out), "--db", url,
                 *argv])
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.fixture(scope="module")
def llvm_db(tmp_path_factory):
    """Fastest first. matmul 16^3: microkernel, tile, the unscheduled default; gelu:
    rows on its fast-math form, rows on its own; softmax: rows, which rewrites it, the
    unscheduled default."""
    target = resolve_target("llvm")
    mm = _task("matmul", {"M": 16, "N": 16, "K": 16})
    gelu = _task("gelu", {"M": 16, "N": 64})
    softmax = _task("softmax", {"M": 16, "N": 64})
    records = [_record(mm, target, "microkernel", 0, 2e-6),
               _record(mm, target, "tile", 0, 3e-6),
               _record(mm, target, "default", 0, 4e-6),
               _record(gelu, target, "rows", 0, 1e-6),
               _record(gelu, target, "rows", 1, 2e-6),
               _record(softmax, target, "rows", 0, 1e-6),
               _record(softmax, target, "default", 0, 2e-6)]
    assert records[3].candidate["decisions"]["fast_math"] is True
    assert records[4].candidate["decisions"]["fast_math"] is False
    url = f"sqlite:///{tmp_path_factory.mktemp('ms')}/t.db"
    with open_database(url) as db:
        db.add_records(records)
    return url, target, {"matmul": mm, "gelu": gelu, "softmax": softmax}, records


def _database(out):
    from tvm.s_tir import meta_schedule as ms

    return ms.database.JSONDatabase(work_dir=str(out), allow_missing=False)


def _run(mod, target, task) -> np.ndarray:
    """The output of `mod` built for `target` on the task's seeded inputs."""
    import tvm

    lib = tvm.compile(mod, target=target.tvm())
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(s.shape).astype(s.dtype))
            for s in task.inputs] + [tvm.runtime.tensor(np.zeros(s.shape, s.dtype))
                                     for s in task.outputs]
    lib["main"](*args)
    return args[-1].numpy()


def test_tvm_applies_the_best_exportable_record_as_autosched_replays_it(
        llvm_db, tmp_path, capsys):
    import tvm
    from tvm.s_tir.meta_schedule.tir_integration import compile_tir

    url, target, tasks, records = llvm_db
    out = tmp_path / "ms"
    code, stdout, err = _export(capsys, url, out, "--op-file", OPS[0], "--op-file", OPS[1])
    assert (code, err) == (0, "")
    assert stdout == (f"exported 2 records of 2 tasks (llvm) from {url} to {out} as a "
                      f"MetaSchedule database; skipped 3: 1 {REWRITE}; 1 {FAST}; 1 "
                      f"{UNSCHEDULED}\n")
    database = _database(out)
    assert len(database) == 2
    # the exported record of each task: the fastest whose schedule is a trace on it
    for name, rec in (("matmul", records[0]), ("gelu", records[4])):
        task = tasks[name]
        expected = generate_space(task, target).apply(Candidate.from_json(rec.candidate))
        sch = compile_tir(database, task.func, target.tvm())
        tvm.ir.assert_structural_equal(sch.mod, expected)
        top = database.query_tuning_record(_normalized(task), target.tvm(), "main")
        assert [float(s) for s in top.run_secs] == [rec.latency]
        assert top.target.export() == target.tvm().export()
        np.testing.assert_allclose(_run(sch.mod, target, task), _run(task.mod, target, task),
                                   rtol=1e-5, atol=1e-5)
    assert compile_tir(database, tasks["softmax"].func, target.tvm()) is None


def _normalized(task):
    from autosched.metaschedule_export import workload_module

    return workload_module(task.func)


def test_relax_build_applies_the_record_to_the_same_primfunc(llvm_db, tmp_path, capsys):
    import tvm
    from tvm import relax

    url, target, tasks, records = llvm_db
    out = tmp_path / "ms"
    assert _export(capsys, url, out, "--op-file", OPS[0], "--workload", "matmul")[0] == 0
    task = tasks["matmul"]
    bb = relax.BlockBuilder()
    a, b = (relax.Var(n, relax.TensorType((16, 16), "float32")) for n in "AB")
    with bb.function("main", [a, b]):
        gv = bb.add_func(task.func, "matmul")
        c = bb.emit(relax.call_tir(gv, [a, b], relax.TensorType((16, 16), "float32")))
        bb.emit_func_output(c)
    with target.tvm(), _database(out):
        mod = relax.transform.MetaScheduleApplyDatabase()(bb.get())
    expected = generate_space(task, target).apply(Candidate.from_json(records[0].candidate))
    tvm.ir.assert_structural_equal(mod["matmul"].body, expected["main"].body)
    assert mod["matmul"].attrs["tirx.is_scheduled"]


def test_all_keeps_every_exportable_record_and_a_rerun_replaces_the_directory(
        llvm_db, tmp_path, capsys):
    url, target, tasks, records = llvm_db
    out = tmp_path / "ms"
    out.mkdir()
    (out / "stale.json").write_text("{}")
    code, stdout, _ = _export(capsys, url, out, "--op-file", OPS[0], "--op-file", OPS[1],
                              "--all")
    # past the unscheduled default, nothing: MetaSchedule builds that without a record
    assert (code, stdout) == (0, f"exported 3 records of 2 tasks (llvm) from {url} to "
                                 f"{out} as a MetaSchedule database; skipped 4: 2 "
                                 f"{UNSCHEDULED}; 1 {REWRITE}; 1 {FAST}\n")
    assert sorted(p.name for p in out.iterdir()) == ["database_tuning_record.json",
                                                     "database_workload.json"]
    database = _database(out)
    top = database.get_top_k(database.commit_workload(_normalized(tasks["matmul"])), 5)
    assert [float(r.run_secs[0]) for r in top] == [2e-6, 3e-6]


@pytest.mark.parametrize("argv, line", [
    ((), "--format metaschedule needs --op-file: the database keeps each workload's name, "
         "not its definition; pass the op files that define them"),
    (("--op-file", OPS[0], "-o", "-"),
     "db export --format metaschedule writes a directory: name it with -o DIR"),
    (("--op-file", OPS[0], "--top", "2", "--all"),
     "db export: --top N and --all exclude each other"),
    (("--op-file", OPS[0], "--target-key", "llvm"),
     "--target-key 'llvm' is not JSON (`autosched db stats --json` lists the target "
     "configs)"),
])
def test_bad_input_is_one_line_exit_2(llvm_db, tmp_path, capsys, argv, line):
    code, stdout, err = _export(capsys, llvm_db[0], tmp_path / "ms", *argv)
    assert (code, stdout, err) == (2, "", f"autosched: error: {line}\n")
    assert not (tmp_path / "ms").exists()


def test_jsonl_export_takes_the_target_and_machine_filters_too(tmp_path, capsys):
    from support.records import hardware_key, make_rec, target_key

    url = f"sqlite:///{tmp_path}/t.db"
    with open_database(url) as db:
        db.add_records([make_rec("mm", 0), make_rec("mm", 1, target="cuda", hw="gpu"),
                        make_rec("mm", 2, hw="hw2")])
    for argv, cands in ((("--target-key", target_key("llvm-a")), [0, 2]),
                        (("--hardware-key", hardware_key("hw2")), [2]),
                        ((), [0, 1, 2])):
        capsys.readouterr()
        assert main(["db", "export", "--db", url, *argv]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [json.loads(ln)["candidate"]["decisions"]["i"][2] for ln in lines] == cands


def test_jsonl_export_refuses_the_metaschedule_options(llvm_db, capsys):
    capsys.readouterr()
    assert main(["db", "export", "--db", llvm_db[0], "--top", "2"]) == 2
    assert capsys.readouterr().err == ("autosched: error: db export: --op-file, --top and "
                                       "--all are for --format metaschedule\n")


def test_cuda_records_export_per_target_and_replay_on_the_task(tmp_path, capsys):
    """An sm_90a tile record and a tensor-core record (autosched's own intrinsics,
    registered from the directory), beside an llvm record of the same matmul: one
    database per target, so the mixed selection is refused."""
    import tvm
    from tvm.s_tir.meta_schedule.tir_integration import compile_tir

    cuda, llvm = resolve_target(SM90A), resolve_target("llvm")
    mm = _task("matmul", {"M": 64, "N": 64, "K": 64})
    mp = _task("matmul_mp", {"M": 128, "N": 128, "K": 128}, [MP])
    records = [_record(mm, cuda, "tile", 0, 5e-6), _record(mm, llvm, "tile", 0, 1e-5),
               _record(mp, cuda, "tensor_core", 0, 4e-6)]
    url = f"sqlite:///{tmp_path}/t.db"
    with open_database(url) as db:
        db.add_records(records)
    out = tmp_path / "ms"
    code, _, err = _export(capsys, url, out, "--op-file", OPS[0], "--op-file", MP)
    assert code == 2 and err == (
        f"autosched: error: the selected records are of 2 targets ({cuda.key}; "
        f"{llvm.key}): a MetaSchedule database does not tell targets apart; export one "
        "with --target-key JSON\n")
    code, stdout, _ = _export(capsys, url, out, "--op-file", OPS[0], "--op-file", MP,
                              "--target-key", cuda.key)
    assert (code, stdout) == (0, f"exported 2 records of 2 tasks (cuda) from {url} to "
                                 f"{out} as a MetaSchedule database; 1 use autosched's "
                                 "tensor intrinsics: call autosched.metaschedule_export."
                                 "register_intrinsics(DIR) before opening the database\n")
    assert register_intrinsics(str(out)) == 1
    database = _database(out)
    assert len(database) == 2
    for task, rec in ((mm, records[0]), (mp, records[2])):
        expected = generate_space(task, cuda).apply(Candidate.from_json(rec.candidate))
        sch = compile_tir(database, task.func, cuda.tvm())
        tvm.ir.assert_structural_equal(sch.mod, expected)


FRESH = """
import sys
from tvm.s_tir import meta_schedule as ms
try:
    ms.database.JSONDatabase(work_dir=sys.argv[1], allow_missing=False)
except Exception as e:
    print("without:", type(e).__name__)
from autosched.metaschedule_export import register_intrinsics
print("registered:", register_intrinsics(sys.argv[1]))
print("records:", len(ms.database.JSONDatabase(work_dir=sys.argv[1], allow_missing=False)))
"""


@pytest.mark.slow
def test_a_fresh_process_opens_tensor_core_records_after_register_intrinsics(
        tmp_path, capsys):
    """MetaSchedule replays every trace when it opens the files: without autosched's
    intrinsics registered that fails; `register_intrinsics(DIR)` is all it takes."""
    import subprocess
    import sys

    cuda = resolve_target(SM90A)
    mp = _task("matmul_mp", {"M": 128, "N": 128, "K": 128}, [MP])
    url = f"sqlite:///{tmp_path}/t.db"
    with open_database(url) as db:
        db.add_records([_record(mp, cuda, "tensor_core", 0, 4e-6)])
    assert _export(capsys, url, tmp_path / "ms", "--op-file", MP)[0] == 0
    proc = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / "ms")],
                          capture_output=True, text=True, timeout=300)
    assert proc.stdout == "without: RuntimeError\nregistered: 1\nrecords: 1\n", proc.stderr
