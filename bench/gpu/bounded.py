"""A child process with a time limit, for the GPU calls' steps: a step stopped at its
share of the call keeps what it printed, so a report says how far it got."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAIL_CHARS = 3000


def run_bounded(cmd: list[str], timeout: float, log: Path | None = None,
                env: dict | None = None) -> dict:
    """Run `cmd` from the repository root for at most `timeout` seconds (its process
    group killed at the limit); with `log`, its output goes there as it comes. Returns
    the command, its exit code (None when stopped at the limit), the seconds it ran,
    the output's tail and whether it was killed at the limit."""
    start = time.monotonic()
    sink = open(log, "w") if log else subprocess.PIPE
    try:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=sink,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, _ = proc.communicate()
    finally:
        if log:
            sink.close()
    text = log.read_text(errors="replace") if log else out
    killed = proc.returncode < 0
    return {"command": " ".join(cmd[1:]), "rc": None if killed else proc.returncode,
            "seconds": round(time.monotonic() - start, 1), "output_tail": text[-TAIL_CHARS:],
            "killed_at_limit": killed}
