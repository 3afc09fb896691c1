"""bench/provenance.py stamps every result with what made it, every file in bench/results
carries such a stamp and is listed in bench/README.md, and every script has a recipe there."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from support.modules import load_by_path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
provenance = load_by_path(BENCH / "provenance.py", "bench_provenance")

# bench modules that are imported by the scripts and write nothing themselves
LIBRARIES = {"baselines.py", "cost_model_data.py", "model_e2e_peers.py", "model_library.py",
             "ops.py", "peers.py", "provenance.py", "training_plans_report.py"}


@pytest.fixture(scope="module")
def stamp():
    return provenance.stamp(seed=7, argv=[str(BENCH / "vs_metaschedule.py"), "--trials", "4",
                                          "--ops", "matmul softmax"])


def test_stamp_says_command_commit_versions_seed_and_machine(stamp):
    assert stamp["command"] == "python bench/vs_metaschedule.py --trials 4 --ops 'matmul softmax'"
    assert shlex.split(stamp["command"])[1:] == ["bench/vs_metaschedule.py", "--trials", "4",
                                                 "--ops", "matmul softmax"]
    assert re.fullmatch(r"[0-9a-f]{40}", stamp["commit"])
    assert isinstance(stamp["dirty"], bool)
    versions = stamp["versions"]
    for name in ("autosched", "tvm", "tvm_ffi", "torch", "xgboost", "numpy", "space", "features"):
        assert isinstance(versions[name], str) and versions[name], name
    from autosched.versions import AUTOSCHED_VERSION, tvm_version

    assert versions["autosched"] == AUTOSCHED_VERSION and versions["tvm"] == tvm_version()
    assert stamp["seed"] == 7
    machine = stamp["machine"]
    assert machine["model"] and machine["cores"] >= 1 and machine["mcpu"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp["time_utc"])


def test_stamp_round_trips_through_json(stamp, tmp_path):
    assert json.loads(json.dumps(stamp)) == stamp
    path = tmp_path / "result.json"
    provenance.write_json(path, {"rows": [1.5, 2]}, stamp)
    data = json.loads(path.read_text())
    assert list(data) == ["provenance", "rows"]
    assert data["provenance"] == stamp and data["rows"] == [1.5, 2]


def test_write_json_refuses_a_second_provenance(stamp, tmp_path):
    with pytest.raises(ValueError):
        provenance.write_json(tmp_path / "x.json", {"provenance": {}}, stamp)


def test_sidecar_and_header_carry_the_same_stamp(stamp, tmp_path):
    png = tmp_path / "curve.png"
    side = provenance.write_sidecar(png, stamp)
    assert side == str(png) + ".provenance.json"
    assert json.loads(Path(side).read_text()) == {"file": "curve.png", "provenance": stamp}
    line = provenance.header(stamp)
    assert "\n" not in line and line.startswith("# provenance: ")
    assert provenance.read_header(line) == stamp
    with pytest.raises(ValueError):
        provenance.read_header("matmul 2.4 ms")


def test_settings_go_under_their_own_key():
    s = provenance.stamp(seed=None, argv=["bench/db.py"], sizes=[10, 20])
    assert s["seed"] is None and s["settings"] == {"sizes": [10, 20]}


def test_outside_a_checkout_the_commit_is_unknown(tmp_path):
    assert provenance.git_state(tmp_path) == {"commit": None, "dirty": None}


def _result_files():
    return sorted(p for p in RESULTS.iterdir()
                  if p.is_file() and not p.name.endswith(provenance.SIDECAR_SUFFIX))


def _stamp_of(path: Path) -> dict:
    if path.suffix == ".json":
        return json.loads(path.read_text())["provenance"]
    side = Path(provenance.sidecar_path(path))
    if side.exists():
        return json.loads(side.read_text())["provenance"]
    return provenance.read_header(path.read_text().splitlines()[0])


@pytest.mark.parametrize("path", _result_files(), ids=lambda p: p.name)
def test_every_result_says_what_made_it(path):
    stamp = _stamp_of(path)
    assert stamp["command"].startswith(("python bench/", "PYTHONPATH=. python bench/"))
    assert re.fullmatch(r"[0-9a-f]{40}", stamp["commit"])
    for key in ("versions", "seed", "machine"):
        assert key in stamp
    if stamp.get("reconstructed"):
        assert stamp["command_source"]


def _listed(path: Path, readme: str) -> bool:
    """Named in the README, or a plot / printed table beside a JSON result it names."""
    beside = path.with_suffix(".json")
    return f"`{path.name}`" in readme or (beside != path and beside.exists()
                                           and f"`{beside.name}`" in readme)


def test_every_result_is_listed_in_the_bench_readme():
    readme = (BENCH / "README.md").read_text()
    missing = [p.name for p in _result_files() if not _listed(p, readme)]
    assert not missing, f"bench/README.md does not list {missing}"
    sidecars = [p for p in RESULTS.iterdir() if p.name.endswith(provenance.SIDECAR_SUFFIX)]
    orphans = [p.name for p in sidecars
               if not (RESULTS / p.name[:-len(provenance.SIDECAR_SUFFIX)]).exists()]
    assert not orphans


def _scripts():
    return sorted(p for p in BENCH.glob("*.py") if p.name not in LIBRARIES)


@pytest.mark.parametrize("script", _scripts(), ids=lambda p: p.name)
def test_every_bench_script_stamps_its_output(script):
    source = script.read_text()
    assert "import provenance" in source and "provenance.stamp(" in source
    assert "json.dump(" not in source, "write JSON results with provenance.write_json"
    assert f"python bench/{script.name}" in (BENCH / "README.md").read_text(), "no recipe"


@pytest.mark.parametrize("script", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_bench_uses_only_public_names_of_the_project(script):
    source = script.read_text()
    private_import = re.findall(r"^\s*from (?:autosched|search_space|cost_model)[\w.]* import "
                                r"[^\n]*\b_[a-z]\w*", source, re.MULTILINE)
    # the project's private names; torch's own (torch._dynamo.config) are torch's business
    private_attribute = [m for m in re.findall(r"\b\w+\._[a-z]\w*", source)
                         if not m.startswith("torch._")]
    patched = re.findall(r"\bsetattr\(|monkeypatch", source)
    assert not private_import and not private_attribute and not patched
