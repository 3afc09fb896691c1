"""`autosched db show RECORD_ID` and `autosched.kernel_source`: a record's kernel as
TVMScript, CUDA source or SASS, rebuilt from the op file; records that cannot be
replayed faithfully (unknown id, failed, other space version) are one line, exit 2.

CUDA is compiled in a subprocess (`autosched` itself): a process that compiled CUDA
has TVM's CUDA runtime registered for good, which must not leak into other tests."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from support.records import make_rec
from support.sass_tools import skip_without_cuobjdump

from autosched.cli.main import main
from autosched.db import make_record, open_database
from autosched.errors import UserError
from autosched.kernel_source import kernel_source, read_record
from autosched.results import MeasureResult
from autosched.target import resolve_target
from autosched.versions import current_versions
from autosched.workload import load_op_file, make_task
from search_space import SPACE_VERSION, Candidate, generate_space

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MATMUL = str(EXAMPLES / "matmul.py")
MP = str(EXAMPLES / "mixed_precision.py")
SM90A = json.dumps({"kind": "cuda", "arch": "sm_90a"})


def _record(op_file: str, workload: str, args: dict, target, sketch: str | None = None,
            seed: int = 0):
    """A correct record of a real candidate of `workload` (sampled, not measured)."""
    task = make_task(load_op_file(op_file)[workload], args)
    cand, mod = generate_space(task, target).sample(random.Random(seed), sketch=sketch)
    result = MeasureResult((2e-6, 2e-6, 2e-6), None, "", 0.1, 0.1)
    return make_record(task, target, cand, result, current_versions(SPACE_VERSION)), mod


def _store(url: str, records) -> list[int]:
    with open_database(url) as db:
        return db.add_records(records)


def _show(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["db", "show", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _parse(text: str):
    import tvm

    return tvm.script.from_source(text)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A tiny real CPU tune: matmul 16^3, three trials, into a fresh sqlite database."""
    from conftest import run_cli

    tmp = tmp_path_factory.mktemp("tuned")
    url = f"sqlite:///{tmp}/t.db"
    proc = run_cli("tune", MATMUL, "--arg", "M=16", "--arg", "N=16", "--arg", "K=16",
                   "--target", "llvm", "--trials", "3", "--seed", "0", "--db", url,
                   "--work-dir", str(tmp / "w"), cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open_database(url, create=False) as db:
        return url, db.records()


@pytest.mark.slow
def test_show_prints_each_tuned_records_schedule_as_tvmscript(tuned, capsys):
    import tvm

    url, records = tuned
    assert len(records) == 3 and all(r.ok for r in records)
    target = resolve_target("llvm")
    task = make_task(load_op_file(MATMUL)["matmul"], {"M": 16, "N": 16, "K": 16})
    for rec in records:
        code, out, err = _show(capsys, str(rec.id), "--db", url, "--op-file", MATMUL)
        assert code == 0
        sketch = rec.candidate["sketch"]
        assert err == (f"record {rec.id}: matmul(M=16,N=16,K=16,dtype=float32) on llvm, "
                       f"sketch {sketch}, {rec.latency * 1e3:.4g} ms\n")
        replayed = generate_space(task, target).apply(Candidate.from_json(rec.candidate))
        # what it prints is the candidate's schedule itself: it parses back to it
        tvm.ir.assert_structural_equal(_parse(out), replayed)
        assert "T.prim_func" in out and "for " in out
    # --tir is the default view, printed alike
    code, out, _ = _show(capsys, str(records[0].id), "--db", url, "--op-file", MATMUL,
                         "--tir")
    assert code == 0 and out == kernel_source(records[0], MATMUL).tir + "\n"


def test_api_returns_the_tir_of_a_cpu_record_and_no_cuda(tmp_path):
    target = resolve_target("llvm")
    rec, mod = _record(MATMUL, "matmul", {"M": 16, "N": 16, "K": 16}, target, "tile")
    (rid,) = _store(f"sqlite:///{tmp_path}/t.db", [rec])
    got = read_record(f"sqlite:///{tmp_path}/t.db", rid)
    assert got == rec.with_id(rid)
    source = kernel_source(got, MATMUL)
    assert (source.record_id, source.task, source.sketch) == (
        rid, "matmul(M=16,N=16,K=16)", "tile")
    assert source.target == target.config
    assert (source.cuda, source.sass, source.build) == (None, None, None)
    assert source.tir == mod.script()
    import tvm

    tvm.ir.assert_structural_equal(_parse(source.tir), mod)
    # the candidate's decisions are the printed loops: 16 rows as 2 parallel blocks of
    # 2 x 4 (the register tile), 16 columns vectorised, the unroll depth annotated
    assert rec.candidate["decisions"] == {"C.cache_write": False, "C.unroll": 64,
                                          "C.v_i": [1, 2, 2], "C.v_i.reg": 4,
                                          "C.v_j@16": [1, 1, 1, 1]}
    assert ('for i_0_j_0_i_1_j_1_fused in T.parallel(2, annotations={'
            '"pragma_auto_unroll_max_step": 64' in source.tir)
    assert "for k_0, i_2, j_2, k_1, i_3 in T.grid(1, 2, 1, 16, 4):" in source.tir
    assert "for j_3 in T.vectorized(16):" in source.tir


def test_a_candidate_that_does_not_replay_is_refused():
    from dataclasses import replace

    rec, _ = _record(MATMUL, "matmul", {"M": 16, "N": 16, "K": 16}, resolve_target("llvm"))
    cases = [({"sketch": "nope", "decisions": {}}, "does not replay: unknown sketch 'nope'"),
             ({"sketch": "tile", "decisions": {"C.unroll": 3}},
              "does not replay: candidate has no value for decision 'C.v_j@16'")]
    for candidate, why in cases:
        with pytest.raises(UserError) as e:
            kernel_source(replace(rec, candidate=candidate), MATMUL)
        assert str(e.value) == f"the record of matmul(M=16,N=16,K=16) {why}"
    with pytest.raises(UserError) as e:
        kernel_source(replace(rec, candidate={"decisions": {}}), MATMUL)
    assert str(e.value) == "the record holds no readable candidate: candidate JSON needs " \
        "a 'sketch'"


def test_a_changed_or_missing_definition_is_refused(tmp_path, write_op):
    target = resolve_target("llvm")
    rec, _ = _record(MATMUL, "matmul", {"M": 16, "N": 16, "K": 16}, target)
    changed = write_op("""
        from tvm import te
        import autosched

        @autosched.workload
        def matmul(M=512, N=512, K=512, dtype="float32"):
            A = te.placeholder((M, K), name="A", dtype=dtype)
            B = te.placeholder((K, N), name="B", dtype=dtype)
            k = te.reduce_axis((0, K), name="k")
            C = te.compute((M, N), lambda i, j: te.max(A[i, k] + B[k, j], axis=k), name="C")
            return A, B, C
    """)
    with pytest.raises(UserError, match=r"^.*op\.py: matmul has changed since the record "
                       r"was made \(the rebuilt task key differs\); pass the op file it "
                       r"was tuned from$"):
        kernel_source(rec, changed)
    with pytest.raises(UserError) as e:
        kernel_source(rec, MP)
    assert str(e.value) == (f"{MP} defines no workload 'matmul' (it defines "
                            "batch_matmul_mp, conv2d_nhwc_mp, dense_bias_gelu_mp, "
                            "matmul_mp); pass the op file the record was tuned from")


def test_records_that_cannot_be_shown_are_one_line_exit_2(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/t.db"
    now = current_versions(SPACE_VERSION)
    ok, _ = _record(MATMUL, "matmul", {"M": 16, "N": 16, "K": 16}, resolve_target("llvm"))
    old = make_rec(cand=1, tvm=now["tvm"], space="0")
    failed = make_rec(cand=2, tvm=now["tvm"], space=now["space"], error="build_error")
    ok_id, old_id, failed_id = _store(url, [ok, old, failed])
    cases = [
        ((str(ok_id + 10),), f"no record {ok_id + 10} in {url} (`autosched db best` lists "
                             "the record ids)"),
        (("x",), "db show: argument RECORD_ID: invalid int value: 'x' (see `autosched db "
                 "show --help`)"),
        ((str(old_id),), f"record {old_id} was made with space version 0 and TVM "
                         f"{now['tvm']}; this autosched has space version {now['space']} "
                         f"and TVM {now['tvm']}: its candidate cannot be replayed "
                         "faithfully here"),
        ((str(failed_id),), f"record {failed_id} is a failed measurement (build_error: "
                            "build_error of candidate 2); only a measured kernel can be "
                            "shown"),
        ((str(ok_id),), f"db show needs --op-file: record {ok_id} is of workload 'matmul', "
                        "whose definition the database does not keep; pass the op file "
                        "that defines it"),
        ((str(ok_id), "--op-file", MATMUL, "--cuda"),
         f"record {ok_id} is for llvm: --cuda shows CUDA records only (--tir shows any)"),
        ((str(ok_id), "--sass"),
         f"record {ok_id} is for llvm: --sass shows CUDA records only (--tir shows any)"),
        ((str(ok_id), "--tir", "--cuda"),
         "db show: argument --cuda: not allowed with argument --tir (see `autosched db "
         "show --help`)"),
    ]
    for argv, line in cases:
        code, out, err = _show(capsys, *argv, "--db", url)
        assert (code, out, err) == (2, "", f"autosched: error: {line}\n"), argv
    code, _, err = _show(capsys, "1", "--db", f"sqlite:///{tmp_path}/none.db")
    assert code == 2 and err.count("\n") == 1 and "no database at" in err
    assert not (tmp_path / "none.db").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_tensor_core_record_shows_its_cuda_source_and_hmma_sass(tmp_path, cli, capsys):
    """No GPU needed: the record is made of a sampled tensor-core candidate for sm_90a,
    nvcc compiles it and cuobjdump reads the fatbin."""
    skip_without_cuobjdump()
    url = f"sqlite:///{tmp_path}/t.db"
    rec, mod = _record(MP, "matmul_mp", {"M": 128, "N": 128, "K": 128},
                       resolve_target(SM90A), "tensor_core")
    (rid,) = _store(url, [rec])
    head = (f"record {rid}: matmul_mp(M=128,N=128,K=128) on cuda, sketch tensor_core, "
            "0.002 ms\n")
    code, out, err = _show(capsys, str(rid), "--db", url, "--op-file", MP)  # no build
    assert (code, err) == (0, head) and out == mod.script() + "\n"
    assert 'thread="blockIdx.x"' in out and 'thread="threadIdx.x"' in out

    proc = cli("db", "show", str(rid), "--db", url, "--op-file", MP, "--cuda")
    assert (proc.returncode, proc.stderr) == (0, head)
    assert 'extern "C" __global__ void' in proc.stdout
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in proc.stdout

    proc = cli("db", "show", str(rid), "--db", url, "--op-file", MP, "--sass")
    assert (proc.returncode, proc.stderr) == (0, head)
    assert "code for sm_90a" in proc.stdout and "Function : main_kernel" in proc.stdout
    lines = proc.stdout.splitlines()
    assert sum(" HMMA.16816.F32 " in ln for ln in lines) > 0
