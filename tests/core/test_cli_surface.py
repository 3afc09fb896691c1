"""The surface a user meets first: `--version`, bare `autosched`, argparse errors with one
prefix, defaults in every --help, -v / --log-level, the one database every command
resolves (--db, else $AUTOSCHED_DB, else WORK_DIR/autosched.db) and `report` without
matplotlib."""
from __future__ import annotations

import json
import logging
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from support.records import make_rec, task_json

from autosched.cli import main
from autosched.cli.main import build_parser
from autosched.cli.options import database_url
from autosched.cli.report import NO_MATPLOTLIB
from autosched.db import open_database
from autosched.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
MATMUL = str(ROOT / "examples" / "matmul.py")
SMALL = ["--arg", "M=16", "--arg", "N=16", "--arg", "K=16"]


def _python(code: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd or ROOT)


def _dist(*names: str) -> str:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return "not installed"


def _flat(text: str) -> str:
    return " ".join(text.split())  # help wraps with the terminal's width


# Runs `autosched --version` in-process, then names the heavy modules it loaded.
VERSION_PROBE = """
import json, sys
from autosched.cli import main
code = main(["--version"])
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"tvm", "tvm_ffi", "torch", "xgboost"})
print(json.dumps({"code": code, "heavy": heavy}))
"""


def test_version_prints_what_a_bug_report_needs_without_importing_tvm(cli_here):
    proc = cli_here("--version")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.splitlines() == [
        "autosched: 0.1.0",
        f"tvm: {_dist('apache-tvm')}",
        f"tvm-ffi: {_dist('apache-tvm-ffi')}",
        f"torch: {_dist('torch')}",
        f"xgboost: {_dist('xgboost-cpu', 'xgboost')}",
        "search space: 12",
        "cost-model features: 6",
        f"python: {platform.python_version()} ({platform.system()} {platform.machine()})",
    ]
    assert _dist("autosched") in ("0.1.0", "not installed")  # the package's own metadata
    probe = _python(VERSION_PROBE)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout.splitlines()[-1]) == {"code": 0, "heavy": []}


def test_bare_autosched_prints_the_help_with_the_exit_codes(capsys):
    assert main([]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out == build_parser().format_help()
    assert out.startswith("usage: autosched ")
    assert ("-v, --verbose log more: -v info, -vv debug --log-level LEVEL level of the "
            "library's log messages on stderr: debug, info, warning, error (default: "
            "warning; -v: info) --version") in _flat(out)  # flags show no default
    assert out.endswith("exit codes:\n"
                        "  0    success\n"
                        "  1    failure: a run stopped before its budget, a fault of the "
                        "machine, an internal error\n"
                        "  2    bad input: one line on stderr saying what to fix\n"
                        "  130  interrupted (Ctrl-C)\n")


@pytest.mark.parametrize("argv, line", [
    (["tune", "--trials", "many", "op.py"],
     "autosched: error: tune: argument --trials: invalid int value: 'many' "
     "(see `autosched tune --help`)"),
    (["db"], "autosched: error: db: the following arguments are required: COMMAND "
             "(see `autosched db --help`)"),
    (["db", "best", "-k", "0"], "autosched: error: db best: argument -k/--top: must be at "
                                "least 1 (see `autosched db best --help`)"),
    (["--log-level", "loud"], "autosched: error: argument --log-level: invalid choice: "
                              "'loud' (choose from 'debug', 'info', 'warning', 'error') "
                              "(see `autosched --help`)"),
])
def test_argparse_errors_carry_one_prefix_and_exit_2(argv, line, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == line + "\n"


@pytest.mark.parametrize("argv, shown", [
    (["tune"], ["--trials N the measurements this tuning run makes, shared by the tasks "
                "(default: 64; with only --total-trials, that total)",
                "--seed SEED (default: 0)", "--work-dir WORK_DIR the run's logs, and the "
                "database WORK_DIR/autosched.db unless --db or $AUTOSCHED_DB names one "
                "(default: logs)", "--db URL database URL: sqlite:///PATH or "
                "postgresql://USER@HOST:PORT/DB (default: $AUTOSCHED_DB, else "
                "sqlite:///WORK_DIR/autosched.db)"]),
    (["tune-model"], ["--batch-size BATCH_SIZE (default: 16)"]),
    (["export"], ["--target TARGET (default: llvm)", "(default: $AUTOSCHED_DB, else "
                  "sqlite:///logs/autosched.db)"]),
    (["export-model"], ["(default: side-by-side)"]),
    (["report"], ["--output DIR where the tuning-curve PNGs go (default: logs/report)"]),
    (["db", "stats"], ["--db URL database URL: sqlite:///PATH or "
                       "postgresql://USER@HOST:PORT/DB (default: $AUTOSCHED_DB, else "
                       "sqlite:///logs/autosched.db)"]),
    (["cost-model", "train"], ["train on records of this target kind (default: llvm)"]),
    (["plan"], ["--time-limit TIME_LIMIT solver seconds (default: 10.0)"]),
])
def test_every_help_shows_the_defaults(argv, shown, capsys):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    out = _flat(capsys.readouterr().out)
    for text in shown:
        assert text in out
    assert "(default: None)" not in out and "(default: False)" not in out
    assert "--debug" not in out  # accepted after the command, listed only at the top


@pytest.fixture
def filled(tmp_path):
    """The URL of a SQLite database with two records of one task."""
    url = f"sqlite:///{tmp_path}/team.db"
    with open_database(url) as db:
        db.register_task(task_json("mm"))
        db.add_records([make_rec("mm", 0, 3e-3), make_rec("mm", 1, 1e-3)])
    return url


@pytest.mark.parametrize("argv", [["-v", "db", "stats"], ["db", "stats", "-v"],
                                  ["db", "stats", "--log-level", "INFO"]])
def test_verbose_logs_which_database_and_why(argv, filled, capsys):
    logger = logging.getLogger("autosched")
    before = (logger.level, list(logger.handlers))
    assert main(argv, environ={"AUTOSCHED_DB": filled}) == 0
    out, err = capsys.readouterr()
    assert err == f"autosched: INFO: autosched.cli: database {filled} ($AUTOSCHED_DB)\n"
    assert out.splitlines()[0] == f"database  {filled} (sqlite, schema 2)"
    assert (logger.level, logger.handlers) == before  # undone after the command


def test_without_verbose_nothing_is_logged(filled, capsys):
    assert main(["db", "stats", "--db", filled], environ={}) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("db, work_dir, environ, want", [
    ("sqlite:///given.db", "w", {"AUTOSCHED_DB": "sqlite:///env.db"}, "sqlite:///given.db"),
    (None, "w", {"AUTOSCHED_DB": "postgresql+psycopg://u@h/d"}, "postgresql+psycopg://u@h/d"),
    (None, "w", {}, "sqlite:///w/autosched.db"),
    (None, "/abs/w", {"AUTOSCHED_DB": " "}, "sqlite:////abs/w/autosched.db"),
    (None, None, {}, "sqlite:///logs/autosched.db"),
])
def test_one_function_resolves_every_database(db, work_dir, environ, want):
    assert database_url(db, work_dir, environ) == want


@pytest.mark.parametrize("db, environ, message", [
    (None, {"AUTOSCHED_DB": "mysql://u:pw@h/d"},
     "AUTOSCHED_DB: unsupported URL 'mysql://u:***@h/d'; use sqlite:///PATH or "
     "postgresql://USER@HOST:PORT/DB"),
    ("", {}, "--db: empty URL; use sqlite:///PATH or postgresql://USER@HOST:PORT/DB"),
])
def test_a_bad_database_url_is_blamed_on_its_source(db, environ, message):
    with pytest.raises(UserError) as e:
        database_url(db, None, environ)
    assert str(e.value) == message


def test_db_report_and_export_read_autosched_db(filled, tmp_path, capsys):
    env = {"AUTOSCHED_DB": filled}
    assert main(["report", "--no-plots"], environ=env) == 0
    via_env = capsys.readouterr().out
    assert main(["report", "--no-plots", "--db", filled], environ={}) == 0
    assert capsys.readouterr().out == via_env
    row = via_env.splitlines()[2].split()  # after the header and its rule: the task
    assert row[0] == "mm(M=64,N=32)" and row[-2:] == ["2", "0"]
    rows = tmp_path / "rows.jsonl"
    assert main(["db", "export", "-o", str(rows)], environ=env) == 0
    assert capsys.readouterr().out == f"exported 2 records from {filled} to {rows}\n"
    copy = f"sqlite:///{tmp_path}/copy.db"
    assert main(["db", "import", str(rows)], environ={"AUTOSCHED_DB": copy}) == 0
    assert capsys.readouterr().out == f"imported 2 records into {copy} (0 already present)\n"
    empty = f"sqlite:///{tmp_path}/empty.db"
    open_database(empty).close()
    assert main(["export", MATMUL, *SMALL, "-o", str(tmp_path / "lib")],
                environ={"AUTOSCHED_DB": empty}) == 2
    assert f" in {empty} from this machine or another" in capsys.readouterr().err


def test_tune_and_db_agree_on_the_default_and_on_autosched_db(cli, tmp_path):
    none = {"AUTOSCHED_DB": ""}  # unset, whatever the outer environment says
    tuned = cli("tune", MATMUL, *SMALL, "--trials", "0", cwd=tmp_path, env=none)
    assert tuned.returncode == 0, tuned.stderr
    assert tuned.stdout.splitlines()[-1].startswith(
        "records: sqlite:///logs/autosched.db   log: logs/tune-")
    stats = cli("db", "stats", cwd=tmp_path, env=none)
    assert stats.returncode == 0, stats.stderr
    assert stats.stdout.splitlines()[:2] == [
        "database  sqlite:///logs/autosched.db (sqlite, schema 2)",
        "records   0 (0 correct, 0 failed), 1 workloads"]
    url = f"sqlite:///{tmp_path}/env.db"
    tuned = cli("tune", MATMUL, *SMALL, "--trials", "0", "--work-dir", "w", cwd=tmp_path,
                    env={"AUTOSCHED_DB": url})
    assert tuned.returncode == 0, tuned.stderr
    assert tuned.stdout.splitlines()[-1].startswith(f"records: {url}   log: w/tune-")
    assert not (tmp_path / "w" / "autosched.db").exists()


# `autosched report` where `import matplotlib` fails, as in a plain `pip install autosched`.
NO_MATPLOTLIB_PROBE = """
import sys
sys.modules["matplotlib"] = None  # any import of it now raises ImportError
from autosched.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_report_without_matplotlib_prints_the_table_and_how_to_get_plots(filled, tmp_path,
                                                                        capsys):
    assert main(["report", "--db", filled, "--no-plots"]) == 0
    table = capsys.readouterr().out
    out = tmp_path / "plots"
    proc = _python(NO_MATPLOTLIB_PROBE, "report", "--db", filled, "-o", str(out))
    assert proc.returncode == 0
    assert proc.stdout == table
    assert proc.stderr == NO_MATPLOTLIB + "\n"
    assert NO_MATPLOTLIB == ("autosched: no tuning-curve plots: they need matplotlib (pip "
                             "install 'autosched[plot]'); --no-plots leaves them out")
    assert not out.exists()


def test_the_cost_model_command_has_one_name_in_help_and_the_old_one_still_runs(tmp_path,
                                                                              capsys):
    """"model" is a PyTorch model; the cost model's command and option say "cost-model".
    The old spellings stay for users' scripts: hidden from help, one warning line."""
    top = build_parser().format_help()
    assert "{tune,export,tune-model,export-model,report,db,cost-model,plan,workers}" in top
    assert "cost-model train cost models (warm starts for tune)" in _flat(top)
    rows = [line.split()[0] for line in top.splitlines() if line.startswith("    ")]
    assert "cost-model" in rows and "model" not in rows
    out = str(tmp_path / "m.json")
    for argv in (["cost-model"], ["model"]):
        assert main([*argv, "train", "--db", f"sqlite:///{tmp_path}/t.db", "--op-file",
                     "missing.py", "-o", out]) == 2
        warned = ["autosched: warning: `autosched model` is now `autosched cost-model`; "
                  "the old name will go"] if argv == ["model"] else []
        assert capsys.readouterr().err.splitlines() == [
            *warned, "autosched: error: --op-file: not found: missing.py"]
    assert main(["cost-model"]) == 2
    assert capsys.readouterr().err == ("autosched: error: cost-model: the following arguments "
                                       "are required: {train} (see `autosched cost-model "
                                       "--help`)\n")


def test_tune_takes_the_cost_model_as_cost_model_and_the_old_option_with_a_warning(capsys):
    from autosched.cli.tune import tune_config

    parse = build_parser().parse_args
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    tune_help = _flat(capsys.readouterr().out)
    assert "--cost-model PATH cost model to warm-start from" in tune_help
    assert "--model" not in tune_help
    assert tune_config(parse(["tune", MATMUL, "--cost-model", "m.json"])).cost_model_path == "m.json"
    assert capsys.readouterr().err == ""
    assert tune_config(parse(["tune", MATMUL, "--model", "m.json"])).cost_model_path == "m.json"
    assert capsys.readouterr().err == ("autosched: warning: --model is now --cost-model; the "
                                       "old name will go\n")
    with pytest.raises(UserError, match="give only --cost-model"):
        tune_config(parse(["tune", MATMUL, "--model", "a.json", "--cost-model", "b.json"]))
