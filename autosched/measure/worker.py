"""Measurement worker processes: a long-lived child Python process that serves one
JSON request at a time, and the parent-side handle that can time it out and kill it.

Why a separate process: a candidate kernel may hang (an endless loop), crash (a wild
store, SIGSEGV) or take the compiler down with it; only a process boundary survives
all three. Why not `multiprocessing`/fork: the parent already runs TVM (and maybe torch)
threads, and forking a threaded process is unsafe. The child is started with
`subprocess` (fork + exec of a fresh interpreter) and speaks a tiny protocol:

- parent -> child: one JSON object per line on the child's stdin;
- child -> parent: one JSON object per line on a private copy of the child's stdout;
  the child's own fd 1 is pointed at its log so that anything a library prints cannot
  corrupt the protocol. The first line is ``{"ready": true}`` once the heavy imports
  are done, so start-up time never counts against a build or run timeout.

Every child lives in its own process group (a compiler it started dies with it), dies
with its parent (PR_SET_PDEATHSIG on Linux, EOF on stdin elsewhere), and every live
handle is killed at interpreter exit.
"""
from __future__ import annotations

import atexit
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import weakref

from ..errors import InfrastructureError
from ..threads import kernel_thread_env

# The roles a child can serve: role -> "module:function" taking and returning a dict.
HANDLERS = {
    "build": "autosched.measure.builder:build_job",
    "run": "autosched.measure.run_job:run_job",
    # the same handler in a process that imports torch first, for kernels timed as a
    # torch model calls them (`beside_torch.py`)
    "run_torch": "autosched.measure.run_job:run_job",
    "rpc": "autosched.measure.rpc.session:run_job",
    "reference": "autosched.measure.reference.job:reference_job",
    "bundle_reference": "autosched.measure.bundle.target_reference:reference_kernel_job",
}
# What a role imports before it says ready, so start-up never eats into a timeout. The
# roles that only run kernels need TVM's runtime, not its compiler (which is absent on a
# bundle's measuring machine, and slow to import): they load the runtime themselves.
PRELOAD = {"build": ("tvm",), "rpc": ("tvm",), "reference": ("tvm",),
           "run": ("tvm_ffi", "numpy"), "run_torch": ("torch", "tvm_ffi", "numpy"),
           "bundle_reference": ("tvm_ffi", "numpy")}
STARTUP_TIMEOUT = 180.0  # importing TVM on a loaded machine can be slow
_LOG_TAIL = 1500

_LIVE: "weakref.WeakSet[WorkerProcess]" = weakref.WeakSet()


class WorkerDied(Exception):
    """The child exited (crash, signal, os._exit) while the parent waited for it."""


class WorkerStartError(InfrastructureError, RuntimeError):
    """A worker could not be started or never said it was ready: the interpreter, the
    environment or the log folder is broken. Never a candidate's fault."""


def describe_exit(returncode: int | None) -> str:
    """'killed by signal 11 (SIGSEGV)' / 'exited with status 3'."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown"
        return f"killed by signal {-returncode} ({name})"
    return f"exited with status {returncode}"


class WorkerProcess:
    """Parent-side handle of one child serving `role` (a key of HANDLERS), run by the
    interpreter `python`. WorkerStartError when the process cannot be started."""

    def __init__(self, role: str, log_dir: str, python: str = sys.executable):
        if role not in HANDLERS:
            raise ValueError(f"unknown worker role {role!r}")
        self.role = role
        self._buf = b""
        self.ready = False
        try:
            os.makedirs(log_dir, exist_ok=True)
            fd, self.log_path = tempfile.mkstemp(prefix=f"{role}-", suffix=".log",
                                                 dir=log_dir)
        except OSError as e:
            raise WorkerStartError(f"cannot create a {role} worker's log in {log_dir}: "
                                   f"{e.strerror}", f"make {log_dir} a writable folder "
                                   "with free space, then rerun") from None
        try:
            with os.fdopen(fd, "wb") as log:
                self.proc = subprocess.Popen(
                    [python, "-m", "autosched.measure.worker", role],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                    env=_child_env(), start_new_session=True, close_fds=True)
        except OSError as e:
            os.unlink(self.log_path)
            raise WorkerStartError(f"cannot start a {role} worker with {python}: "
                                   f"{e.strerror}", f"check that `{python} -c 'import "
                                   "tvm, autosched'` works here, then rerun") from None
        os.set_blocking(self.proc.stdout.fileno(), False)
        _LIVE.add(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, message: dict) -> None:
        """Write one request; WorkerDied when the child is already gone."""
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDied(self.death_message()) from None

    def poll_reply(self) -> dict | None:
        """A complete reply if one has arrived (non-blocking), else None.
        WorkerDied when the child closed its end (it exited or was killed)."""
        while b"\n" not in self._buf:
            try:
                chunk = os.read(self.fileno(), 1 << 16)
            except BlockingIOError:
                return None
            if not chunk:
                raise WorkerDied(self.death_message())
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def wait_reply(self, timeout: float) -> dict | None:
        """Block until a reply arrives (returned) or `timeout` seconds pass (None)."""
        import select

        deadline = time.monotonic() + timeout
        while True:
            reply = self.poll_reply()
            if reply is not None:
                return reply
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            select.select([self.fileno()], [], [], left)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Block until the child has finished its imports; WorkerStartError if it cannot."""
        remedy = (f"check that `{self.proc.args[0]} -c 'import tvm, autosched'` works "
                  "here, then rerun")
        try:
            reply = self.wait_reply(timeout)
        except WorkerDied as e:
            self.kill()
            raise WorkerStartError(f"measurement worker ({self.role}) failed to start: "
                                   f"{' '.join(str(e).split())[-400:]}", remedy) from None
        if reply is None or not reply.get("ready"):
            tail = " ".join(self.log_tail().split())[-400:]
            self.kill()
            raise WorkerStartError(f"measurement worker ({self.role}) did not start within "
                                   f"{timeout:.0f}s; log: {tail}", remedy)
        self.ready = True

    def death_message(self) -> str:
        """How the child ended plus the tail of what it wrote to its log."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        tail = self.log_tail()
        return describe_exit(code) + (f"; log: {tail}" if tail else "")

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - _LOG_TAIL))
                return f.read().decode(errors="replace").strip()
        except OSError:
            return ""

    def kill(self) -> None:
        """Kill the child and its process group (a compiler it ran), reap it, drop its log."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        _LIVE.discard(self)


def _child_env() -> dict:
    """The parent's environment, with the directory holding our package first on the
    path so the child imports the same autosched as the parent, and the kernel thread
    pool sized to the machine's cores (`threads.kernel_thread_env`)."""
    env = kernel_thread_env(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def error_text(e: Exception) -> str:
    """An exception's message without TVM's (long) C++ backtrace lines."""
    import traceback

    lines = [ln for ln in str(e).strip().splitlines()
             if ln.strip() and not ln.lstrip().startswith("File ")]
    text = f"{type(e).__name__}: " + " | ".join(lines[-4:])
    frames = traceback.extract_tb(e.__traceback__)
    if frames:  # where it was raised (TVM's C++ frames appear here too)
        last = frames[-1]
        text += f" (raised in {last.name} at {os.path.basename(last.filename)}:{last.lineno})"
    return text


@atexit.register
def kill_all_workers() -> None:
    """Kill every child still alive (an exception or Ctrl-C skipped close())."""
    for worker in list(_LIVE):
        worker.kill()


# ----------------------------------------------------------------------- child side


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() == 1:  # the parent died before we armed the signal
        os._exit(1)


def serve(role: str) -> None:
    """Child main loop: import the handler, say ready, answer requests until EOF."""
    _die_with_parent()
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints from libraries go to the log, not the protocol
    module_name, func_name = HANDLERS[role].split(":")
    handler = getattr(importlib.import_module(module_name), func_name)
    for heavy in PRELOAD[role]:
        importlib.import_module(heavy)
    import faulthandler

    faulthandler.enable()  # a crash leaves a Python traceback in the log
    proto.write(json.dumps({"ready": True, "pid": os.getpid()}).encode() + b"\n")
    for line in sys.stdin.buffer:
        try:
            reply = handler(json.loads(line))
        except Exception as e:  # handlers report their own failures; this is a last resort
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        proto.write(json.dumps(reply).encode() + b"\n")


if __name__ == "__main__":
    serve(sys.argv[1])
