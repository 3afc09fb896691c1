"""Transfer: a model trained on other tasks' records, from groups and from a database."""
from __future__ import annotations

import json
import random

import pytest

from autosched import cli
from autosched.db import make_record, open_database
from autosched.results import MeasureResult
from autosched.training_data import train_model
from autosched.versions import current_versions
from autosched.workload import load_op_file, make_task
from cost_model.transfer import TransferReport, train_from_records
from cost_model.xgb_ranker import XGBRanker, sidecar_path
from search_space import SPACE_VERSION, Candidate, SearchSpace

EXAMPLE_MATMUL = "examples/matmul.py"


def pairwise_accuracy(scores, latencies) -> float:
    good = total = 0
    for a in range(len(latencies)):
        for b in range(a + 1, len(latencies)):
            if latencies[a] != latencies[b]:
                total += 1
                good += (scores[a] > scores[b]) == (latencies[a] < latencies[b])
    return good / total


def measured_group(synthetic, task, n, seed):
    space = synthetic.make_space(task)
    rng = random.Random(seed)
    pairs = {}
    while len(pairs) < n:
        cand, _ = space.sample(rng)
        pairs[cand.key] = (cand, synthetic.synthetic_latency(cand))
    return list(pairs.values())


def test_model_trained_on_other_shapes_ranks_a_new_shape(synthetic):
    def space_factory(task, target):
        return SearchSpace(task, target, synthetic.TilingRules())

    tasks = [synthetic.matmul_task(128, 256, 128), synthetic.matmul_task(256, 128, 256)]
    groups = [(task, measured_group(synthetic, task, 64, seed)) for seed, task in enumerate(tasks)]
    stale = Candidate.make("tile", {"i": [1, 1, 1, 1]})  # no longer replays: skipped
    groups[0][1].append((stale, MeasureResult(latencies=(1.0,))))
    report = TransferReport()
    model = train_from_records(groups, synthetic.LLVM, space_factory=space_factory,
                               report=report)
    assert (report.groups, report.rows, report.skipped_candidates) == (2, 128, 1)
    assert report.failures > 0 and model.summary["transfer"]["rows"] == 128
    held_out = synthetic.matmul_task(256, 256, 256)
    pairs = measured_group(synthetic, held_out, 60, seed=9)
    space = synthetic.make_space(held_out)
    cands = [c for c, _ in pairs]
    scores = model.predict(held_out, cands, [space.apply(c) for c in cands])
    lat = [r.median for _, r in pairs]
    assert pairwise_accuracy(scores, lat) > 0.7  # a cold model scores everything 0


@pytest.fixture
def tuning_db(tmp_path, synthetic):
    """A SQLite database with synthetic measurements of two matmul shapes of the example
    op file, plus records the trainer must skip."""
    url = f"sqlite:///{tmp_path}/records.db"
    db = open_database(url)
    versions = current_versions(SPACE_VERSION)
    wdef = load_op_file(EXAMPLE_MATMUL)["matmul"]
    records = []
    for seed, shape in enumerate([(128, 128, 64), (64, 128, 128)]):
        task = make_task(wdef, dict(zip("MNK", shape), dtype="float32"))
        db.register_task(task.to_json())
        for cand, res in measured_group(synthetic, task, 24, seed):
            records.append(make_record(task, synthetic.LLVM, cand, res, versions))
    other = make_task(synthetic.matmul_def("gemm"), {"M": 64, "N": 64, "K": 64})
    records.append(make_record(other, synthetic.LLVM, Candidate("default"),
                               MeasureResult(latencies=(1.0,)), versions))
    old = dict(versions, space="0")
    records.append(make_record(task, synthetic.LLVM, Candidate("default"),
                               MeasureResult(latencies=(1.0,)), old))
    db.add_records(records)
    db.close()
    return url, sum(1 for r in records[:48] if not r.ok)


def test_a_model_is_trained_from_a_database(tmp_path, tuning_db, synthetic):
    url, failures = tuning_db
    # the records were measured in the tiling sketch's space, so they replay there
    model, _ = train_model(url, [EXAMPLE_MATMUL], "llvm", rounds=30,
                           space_factory=synthetic.make_space)
    out = str(tmp_path / "model.json")
    model.save(out)
    meta = json.load(open(sidecar_path(out)))
    assert meta["summary"]["transfer"] == {
        "groups": 2, "rows": 48, "failures": failures,
        "skipped_candidates": 0,
        "skipped_records": {"workload not in the op files": 1,
                            "other TVM or space version": 1}}
    assert XGBRanker().load(out).trained


def test_cli_reports_unusable_input_with_one_line(tmp_path, tuning_db, capsys):
    url, _ = tuning_db
    other_ops = tmp_path / "ops.py"
    other_ops.write_text("import autosched\nfrom tvm import te\n\n@autosched.workload\n"
                         "def relu(N=8):\n    A = te.placeholder((N,), name='A')\n"
                         "    return A, te.compute((N,), lambda i: A[i], name='B')\n")
    out = str(tmp_path / "m.json")
    assert cli.main(["cost-model", "train", "--db", url, "--op-file", str(other_ops),
                     "-o", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autosched: error:") and "no usable llvm records" in err
    assert len(err.splitlines()) == 1
    # with the real CPU rules the tiling candidates do not replay: no signal, exit 2
    assert cli.main(["cost-model", "train", "--db", url, "--op-file", EXAMPLE_MATMUL,
                     "-o", out]) == 2
    assert "no ranking signal" in capsys.readouterr().err
    assert cli.main(["cost-model", "train", "--db", url, "--op-file", "missing.py",
                     "-o", out]) == 2
    assert "not found" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()


def test_cli_trains_on_records_of_the_cpu_space(tmp_path, target, capsys):
    """`autosched cost-model train` on records of our real CPU space (latencies made up:
    training needs no kernel, only candidates that replay)."""
    from search_space import generate_space

    url = f"sqlite:///{tmp_path}/cpu.db"
    versions = current_versions(SPACE_VERSION)
    task = make_task(load_op_file(EXAMPLE_MATMUL)["matmul"],
                     {"M": 64, "N": 64, "K": 64, "dtype": "float32"})
    space, rng = generate_space(task, target), random.Random(0)
    cands = {c.key: c for c in (space.sample(rng)[0] for _ in range(12))}
    with open_database(url) as db:
        db.register_task(task.to_json())
        db.add_records([make_record(task, target, c, MeasureResult(latencies=(1e-3 * (i + 1),)),
                                    versions) for i, c in enumerate(cands.values())])
    out = str(tmp_path / "cpu.json")
    code = cli.main(["cost-model", "train", "--db", url, "--op-file", EXAMPLE_MATMUL, "-o", out,
                     "--rounds", "5"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"trained on {len(cands)} candidates of 1 task groups" in captured.err
    assert captured.out.strip() == f"wrote {out}"
    assert XGBRanker().load(out).summary["transfer"]["rows"] == len(cands)
