"""Arguments that several commands share, defined once so they read the same everywhere."""
from __future__ import annotations

import argparse
import logging
import os
import tempfile
from collections.abc import Mapping

from ..errors import UserError

log = logging.getLogger("autosched.cli")

# Where a command's database is when neither --db nor $AUTOSCHED_DB names one:
# sqlite:///<work dir>/autosched.db, the work dir being `tune --work-dir` or, for every
# command without that option, DEFAULT_WORK_DIR.
DB_ENV = "AUTOSCHED_DB"
DEFAULT_WORK_DIR = "logs"
DB_URL_HELP = (f"database URL: sqlite:///PATH or postgresql://USER@HOST:PORT/DB (default: "
               f"${DB_ENV}, else sqlite:///{DEFAULT_WORK_DIR}/autosched.db)")
# The same for the commands with --work-dir (`tune`, `tune-model`).
DB_URL_HELP_WORK_DIR = (f"database URL: sqlite:///PATH or postgresql://USER@HOST:PORT/DB "
                        f"(default: ${DB_ENV}, else sqlite:///WORK_DIR/autosched.db)")


def database_url(db: str | None, work_dir: str | None = None,
                 environ: Mapping[str, str] | None = None) -> str:
    """The database every command uses: `db` (the --db option), else $AUTOSCHED_DB,
    else `sqlite:///<work_dir>/autosched.db` (work_dir defaults to `logs`).

    The one place that reads the environment for it (`environ`, default os.environ), so
    that `tune`, `export`, `report` and `db` never disagree about where records are; the
    algorithms below the CLI get the URL, never the environment. A URL from the
    environment is checked here, so that a bad one is blamed on the variable.
    """
    if db is not None:
        if not db.strip():
            raise UserError("--db: empty URL; use sqlite:///PATH or "
                            "postgresql://USER@HOST:PORT/DB")
        url, source = db, "--db"
    else:
        env = os.environ if environ is None else environ
        url, source = env.get(DB_ENV, "").strip(), f"${DB_ENV}"
        if not url:
            url, source = f"sqlite:///{work_dir or DEFAULT_WORK_DIR}/autosched.db", "default"
    from ..db import mask_password, normalize_url

    if source == f"${DB_ENV}":  # a bad --db is reported where it is opened, as before
        normalize_url(url, source=DB_ENV)
    log.info("database %s (%s)", mask_password(url), source)
    return url


def seconds(text: str) -> float:
    """argparse type: a number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def add_selection(parser: argparse.ArgumentParser) -> None:
    """The op file and which of its workloads, with which parameters (`tune`, `export`)."""
    parser.add_argument("op_file", help="Python file with @autosched.workload functions")
    parser.add_argument("--workload", action="append", metavar="NAME",
                        help="workload to select (repeatable; default: all in the file)")
    parser.add_argument("--arg", action="append", metavar="K=V",
                        help="override a workload parameter (repeat a key for shape variants)")
    parser.add_argument("--load-timeout", type=seconds, default=60.0, metavar="SECONDS",
                        help="stop if the op file, or a workload building its tensors, takes "
                             "longer than this (0: no limit)")


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path`: a crash or full disk never leaves a half-written plan
    where the old one was (also the pipeline plan's writer)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UserError(f"-o {path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".plan-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
