"""The entry points of the command line: `python -m autosched` lists every command, and
`--help` stays instant because no command imports torch, xgboost or TVM to build its parser."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("tune", "export", "tune-model", "export-model", "report", "db", "cost-model",
            "plan", "workers")
HEAVY = ("torch", "xgboost", "tvm", "tvm_ffi")

# Calls the console script's target for each --help, then names the heavy modules loaded.
HELP_PROBE = """
import contextlib, importlib, io, json, sys
module, _, attr = sys.argv[1].partition(":")
main = getattr(importlib.import_module(module), attr)
codes = []
for argv in json.loads(sys.argv[2]):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            codes.append(main([*argv, "--help"]))
        except SystemExit as e:
            codes.append(e.code)
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[3])))
print(json.dumps({"codes": codes, "heavy": heavy}))
"""


def _python(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=ROOT)


def _console_script() -> str:
    tomllib = pytest.importorskip("tomllib")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["scripts"]["autosched"]


def test_python_m_autosched_lists_every_command():
    proc = _python("-m", "autosched", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: autosched ")
    assert "{" + ",".join(COMMANDS) + "}" in proc.stdout
    rows = {line.split()[0] for line in proc.stdout.splitlines() if line.startswith("    ")}
    assert set(COMMANDS) <= rows, proc.stdout


def test_python_m_autosched_reports_bad_input_with_exit_2():
    proc = _python("-m", "autosched", "no-such-command")
    assert proc.returncode == 2
    assert proc.stderr.startswith("autosched: error: ") and len(proc.stderr.splitlines()) == 1


def test_help_imports_no_heavy_module():
    argvs = [[], *([c] for c in COMMANDS), ["db", "stats"], ["cost-model", "train"]]
    proc = _python("-c", HELP_PROBE, _console_script(), json.dumps(argvs), json.dumps(HEAVY))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["codes"] == [0] * len(argvs)
    assert out["heavy"] == []
