"""A real measurement farm on loopback for the tests: TVM's RPC tracker and servers
(`python -m tvm.exec.rpc_tracker` / `rpc_server`) as separate process groups on ports
chosen free at start time. Every process is killed by `stop()` (and at exit)."""
from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

STARTUP_TIMEOUT = 240.0  # both TVM processes import TVM; slow on a loaded machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REPORTING_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "reporting_server.py")


def _start(args: list[str], log_path: str) -> subprocess.Popen:
    """`python -m ARGS` (or `python SCRIPT.py ...`) in a process group of its own."""
    argv = args if args[0].endswith(".py") else ["-m", *args]
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, *argv], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _kill_group(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    if sig == signal.SIGKILL:
        proc.wait(timeout=30)


@dataclass
class Server:
    key: str
    port: int
    proc: subprocess.Popen
    log: str

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def sessions_started(self) -> int:
        """How many sessions this server has accepted (from its log)."""
        with open(self.log, errors="replace") as f:
            return f.read().count("start serving at")


class Farm:
    """A tracker on a free loopback port; servers are added per key."""

    def __init__(self, log_dir: str):
        os.makedirs(log_dir, exist_ok=True)
        self.log_dir = log_dir
        self.servers: list[Server] = []
        self.port = free_port()
        self.tracker = _start(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port",
                               str(self.port), "--port-end", str(self.port + 1)],
                              os.path.join(log_dir, "tracker.log"))
        atexit.register(self.stop)
        self._wait(lambda info: True, "the tracker to start")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, key: str, **options) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"rpc://{self.address}/{key}" + (f"?{query}" if query else "")

    def summary(self) -> dict:
        from autosched.measure.rpc.tracker import summary

        return summary("127.0.0.1", self.port, timeout=5)

    def registered(self, key: str) -> list[str]:
        from autosched.measure.rpc.tracker import servers_by_key

        return sorted(servers_by_key(self.summary()).get(key, []))

    def add_servers(self, key: str, n: int, cpu: str | None = None,
                    cores: int | None = None) -> list[Server]:
        """Start n servers of `key` side by side; return once all are registered. With
        `cpu` and `cores`, they describe that CPU (`reporting_server.py`), not this one."""
        program = ["tvm.exec.rpc_server"] if cpu is None else \
            [REPORTING_SERVER, "--cpu", cpu, "--cores", str(cores)]
        new = []
        for _ in range(n):
            port = free_port()
            log = os.path.join(self.log_dir, f"server-{key}-{port}.log")
            proc = _start([*program, "--tracker", self.address, "--key", key,
                           "--host", "127.0.0.1", "--port", str(port), "--port-end",
                           str(port + 1)], log)
            new.append(Server(key, port, proc, log))
        self.servers += new
        want = {s.address for s in new}
        self._wait(lambda info: want <= set(self.registered(key)), f"{n} servers of {key}")
        return new

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            try:
                if ready(self.summary()):
                    return
            except Exception:  # not listening yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}; logs in {self.log_dir}")
            time.sleep(0.5)

    def kill(self, server: Server) -> None:
        """SIGKILL the server's whole process group (TVM's server is two processes)."""
        _kill_group(server.proc)

    def freeze(self, server: Server) -> None:
        _kill_group(server.proc, signal.SIGSTOP)

    def wait_gone(self, key: str, addresses: set[str], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while set(self.registered(key)) & addresses:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{addresses} still registered after {timeout}s")
            time.sleep(0.2)

    def stop(self) -> None:
        for server in self.servers:
            _kill_group(server.proc)
        if self.tracker is not None:
            _kill_group(self.tracker)
            self.tracker = None
