"""Tuned model libraries for the benches, made through the CLI as a user makes them.

    path = write_model(work, "gpt", model_config, input_config)
    library = tune_and_export(path, work / "gpt", trials, db, train=True)

`write_model` writes a model file that runs examples/<name>.py at a bench-sized config
(make_model(**model_config), make_inputs(**input_config)); `tune_and_export` runs
`autosched tune-model` and `autosched export-model` on it: the exported folder holds the
kernels that beat torch's baseline and `model_ops.json`, for autosched.model.backend(DIR).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.model_files import MODEL_FILE


def write_model(directory: Path, name: str, model_config: dict, input_config: dict,
                example: str | None = None) -> Path:
    """bench_<name>.py in `directory`: examples/<example, default name>.py at a config."""
    path = directory / f"bench_{name}.py"
    path.write_text(MODEL_FILE.format(example=str(ROOT / "examples" / f"{example or name}.py"),
                                      model=model_config, inputs=input_config))
    return path


def cli(*args, env: dict | None = None) -> str:
    """`autosched ARGS` in a subprocess; its stdout, or exit with its error."""
    env = dict(os.environ, **(env or {}))
    # the repository first, then what the caller's path holds (a staged TVM, say)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-m", "autosched.cli", *args], env=env, check=False,
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"autosched {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def tune_and_export(path: Path, work: Path, trials: int, db: str, train: bool,
                    target: str | None = None, env: dict | None = None) -> Path:
    """tune-model then export-model of one mode (training step or inference); the
    library's folder. target: --target for both (default: the CLI's); env: extra
    environment of both commands (e.g. the kernels' thread pool size)."""
    flag = ["--train"] if train else []
    flag += ["--target", target] if target else []
    cli("tune-model", str(path), *flag, "--trials", str(trials), "--db", db,
        "--work-dir", str(work / "logs"), env=env)
    out = work / ("train" if train else "inference")
    print(cli("export-model", str(path), *flag, "--db", db, "-o", str(out), env=env))
    return out
