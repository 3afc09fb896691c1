"""The install an ML engineer can live with. pyproject.toml states ranges, so that the
torch and xgboost an environment already holds satisfy them and pip keeps them; the core
depends on neither xgboost distribution (two install the one `xgboost` module, and both
at once break it) nor on psycopg; constraints.txt pins one tested point inside the
ranges; the metadata carries the license. Where an optional module is missing, the
command that needs it says so on one line that names the extra to install."""
from __future__ import annotations

import email
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]


def requirements(extra: str | None = None) -> dict[str, Requirement]:
    """Distribution name -> requirement, of the core (None) or of one extra."""
    lines = PROJECT["dependencies"] if extra is None else EXTRAS[extra]
    reqs = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r for r in reqs}


def constraints() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is no exact pin"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def accepts(extra: str | None, name: str, version: str) -> bool:
    return requirements(extra)[name].specifier.contains(version, prereleases=True)


def test_the_core_holds_the_tuner_and_no_optional_stack():
    assert sorted(requirements()) == ["apache-tvm", "apache-tvm-ffi", "cloudpickle", "numpy",
                                      "psutil", "scipy", "tornado"]
    assert sorted(EXTRAS) == ["plot", "postgres", "test", "torch", "xgboost", "xgboost-cpu"]
    assert sorted(requirements("postgres")) == ["psycopg", "psycopg-pool"]
    assert requirements("postgres")["psycopg"].extras == {"binary"}


@pytest.mark.parametrize("extra", [None, *EXTRAS])
def test_no_exact_pins_and_never_both_xgboost_distributions(extra):
    reqs = requirements(extra)
    assert not {"xgboost", "xgboost-cpu"} <= set(reqs)
    for req in reqs.values():
        for spec in req.specifier:
            assert spec.operator not in ("==", "===") or spec.version.endswith(".*"), req


@pytest.mark.parametrize("version", ["2.13.0", "2.13.0+cpu", "2.14.1", "2.15.0", "3.0.0"])
def test_an_installed_torch_from_2_13_on_is_kept(version):
    assert accepts("torch", "torch", version) and accepts("test", "torch", version)


@pytest.mark.parametrize("version", ["2.5.1", "2.9.0", "2.12.1"])
def test_torch_before_2_13_is_below_the_floor(version):
    # the model path and the compiled training plans call inductor's
    # get_custom_graph_passes, which torch has from 2.13 on
    assert not accepts("torch", "torch", version)


@pytest.mark.parametrize("version", ["2.1.4", "3.0.5", "3.2.0"])
def test_an_installed_xgboost_of_either_distribution_is_kept(version):
    assert accepts("xgboost", "xgboost", version)
    assert accepts("xgboost-cpu", "xgboost-cpu", version)
    assert accepts("test", "xgboost-cpu", version)
    assert not accepts("xgboost", "xgboost", "1.7.6")  # no lambdarank_pair_method


@pytest.mark.parametrize("name, version, ok", [
    ("apache-tvm", "0.27.0.post1", True), ("apache-tvm", "0.27.0", True),
    ("apache-tvm", "0.26.0", False), ("apache-tvm", "0.28.0", False),
    ("apache-tvm-ffi", "0.1.14.post1", True), ("apache-tvm-ffi", "0.1.15.post2", False),
    ("numpy", "1.26.4", True), ("numpy", "2.4.6", True), ("numpy", "1.25.2", False),
])
def test_tvm_stays_0_27_with_its_ffi(name, version, ok):
    assert accepts(None, name, version) is ok


def test_constraints_pin_every_direct_requirement_inside_its_range():
    pins = constraints()
    for extra in [None, *EXTRAS]:
        for name, req in requirements(extra).items():
            if extra == "xgboost":
                assert name not in pins  # CI installs xgboost-cpu, never both
                continue
            assert name in pins, f"constraints.txt pins no {name}"
            assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])
    assert {"torch", "xgboost-cpu", "psycopg", "psycopg-binary"} <= set(pins)
    assert pins["psycopg-binary"] == pins["psycopg"]
    assert pins["torch"].local == "cpu"  # never the several-GB CUDA build of PyPI
    assert "-c constraints.txt" in (ROOT / ".ci" / "run").read_text()


def test_the_license_is_apache_2_0_in_the_built_metadata(tmp_path):
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tmp_path / name)
    out = tmp_path / "out"
    out.mkdir()
    build = ("import sys, setuptools.build_meta as b; "
             "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))")
    proc = subprocess.run([sys.executable, "-c", build, str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dist_info = out / proc.stdout.split()[-1]
    meta = email.message_from_string((dist_info / "METADATA").read_text())
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert (dist_info / "licenses" / "LICENSE").read_text() == text
    assert sorted(meta.get_all("Provides-Extra")) == sorted(EXTRAS)
    assert "xgboost-cpu>=2.1; extra == \"xgboost-cpu\"" in meta.get_all("Requires-Dist")


def test_a_postgres_url_without_psycopg_is_one_line_naming_the_extra(monkeypatch, capsys):
    from autosched.cli import main

    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` fails
    code = main(["db", "stats", "--db", "postgresql://ann:s3cret@127.0.0.1:9/tuning"])
    assert code == 2
    assert capsys.readouterr().err == (
        "autosched: error: --db postgresql://ann:***@127.0.0.1:9/tuning: PostgreSQL needs "
        "psycopg and psycopg-pool (import of psycopg halted; None in sys.modules): "
        "pip install 'autosched[postgres]'\n")


def test_the_learned_cost_model_without_xgboost_is_a_user_error_naming_the_extras(
        monkeypatch):
    from autosched.components import make_cost_model, make_strategy
    from autosched.errors import UserError
    from cost_model import CostModelError, XGBRanker

    monkeypatch.setitem(sys.modules, "xgboost", None)
    line = ("the XGBoost cost model needs the xgboost module: pip install "
            "'autosched[xgboost-cpu]' (or 'autosched[xgboost]', with GPU support)")
    with pytest.raises(UserError) as e:
        make_cost_model("xgb")
    assert str(e.value) == line
    with pytest.raises(CostModelError, match=r"autosched\[xgboost-cpu\]"):
        XGBRanker()
    assert type(make_strategy("random")).__name__ == "RandomSearch"  # needs no xgboost
