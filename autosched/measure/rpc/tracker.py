"""Talking to TVM's RPC tracker: where it is (`RPCAddress`), what it holds (`summary`),
and asking it for a free server (`ServerRequest`).

The tracker speaks a small protocol (`tvm.rpc.base`): a 4-byte magic handshake, then
length-prefixed JSON messages. We speak it directly rather than through
`tvm.rpc.connect_tracker` because every call here needs a timeout (TVM's client retries
a refused connection for 60 s and waits for a free server forever) and a request for a
server must be pollable, so that the runner notices when the last server of its key is
gone while it waits. Connecting to the server the tracker hands out is TVM's own
`tvm.rpc.connect`, done by the session worker (`session.py`).
"""
from __future__ import annotations

import re
import select
import socket
import struct
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import parse_qsl, urlsplit

from ...errors import UserError

ENV_HOST, ENV_PORT, ENV_KEY = "TVM_TRACKER_HOST", "TVM_TRACKER_PORT", "TVM_TRACKER_KEY"
KEY_PATTERN = re.compile(r"[A-Za-z0-9._-]+")  # the tracker splits keys on ':'
CONNECT_TIMEOUT = 10.0


class TrackerError(Exception):
    """The tracker cannot be reached, or what answered is not a tracker."""


@dataclass(frozen=True)
class RPCAddress:
    """Where to measure: tracker host and port, the server key, and the runner's options
    (`?sessions=N&retries=R&wait=S` after the key)."""

    host: str
    port: int
    key: str
    sessions: int = 16     # most concurrent sessions, whatever the number of servers
    retries: int = 2       # a candidate whose server is lost goes to another one this often
    wait: float = 600.0    # seconds to wait for a free server before giving up

    @property
    def tracker(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"rpc://{self.tracker}/{self.key}"


_OPTIONS = {"sessions": (int, 1), "retries": (int, 0), "wait": (float, 0.001)}


def parse_rpc_address(address: str, environ: Mapping[str, str]) -> RPCAddress:
    """'HOST:PORT/KEY[?options]' -> RPCAddress; '' -> from TVM_TRACKER_HOST / _PORT / _KEY.
    Bad input is a UserError."""
    if not address:
        missing = [v for v in (ENV_HOST, ENV_PORT, ENV_KEY) if not environ.get(v)]
        if missing:
            raise UserError(f"--runner rpc needs {', '.join(missing)} set in the environment, "
                            "or use --runner rpc://HOST:PORT/KEY")
        address = f"{environ[ENV_HOST]}:{environ[ENV_PORT]}/{environ[ENV_KEY]}"
    parts = urlsplit(f"rpc://{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    key = parts.path.lstrip("/")
    if not parts.hostname or port is None or not KEY_PATTERN.fullmatch(key):
        raise UserError(f"--runner rpc://{address}: expected rpc://HOST:PORT/KEY with a key "
                        "of letters, digits, '.', '_' or '-'")
    options = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in _OPTIONS:
            raise UserError(f"--runner rpc: unknown option {name!r}; known: "
                            + ", ".join(_OPTIONS))
        kind, least = _OPTIONS[name]
        try:
            options[name] = kind(value)
        except ValueError:
            options[name] = None
        if options[name] is None or options[name] < least:
            raise UserError(f"--runner rpc: option {name} must be a number >= {least:g}, "
                            f"got {value!r}")
    return RPCAddress(parts.hostname, port, key, **options)


def parse_tracker(text: str) -> tuple[str, int]:
    """'HOST:PORT' (or '[IPv6]:PORT') -> (host, port); UserError when malformed."""
    parts = urlsplit(f"rpc://{text}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or parts.path or parts.query:
        raise UserError(f"--tracker {text!r}: expected HOST:PORT")
    return parts.hostname, port


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    from tvm.rpc import base

    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        raise TrackerError(f"cannot reach the RPC tracker at {host}:{port}: "
                           f"{e.strerror or e}") from None
    try:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = struct.unpack("<i", base.recvall(sock, 4))[0]
    except OSError as e:
        sock.close()
        raise TrackerError(f"{host}:{port} does not answer like an RPC tracker: "
                           f"{e.strerror or e}") from None
    if magic != base.RPC_TRACKER_MAGIC:
        sock.close()
        raise TrackerError(f"{host}:{port} is not an RPC tracker")
    return sock


def summary(host: str, port: int, timeout: float = CONNECT_TIMEOUT) -> dict:
    """The tracker's state: {"queue_info": {key: {"free", "pending"}},
    "server_info": [{"key": "server:KEY", "addr": [host, port]}, ...]}."""
    from tvm.rpc import base

    sock = _connect(host, port, timeout)
    try:
        base.sendjson(sock, [base.TrackerCode.SUMMARY])
        code, value = base.recvjson(sock)
    except (OSError, ValueError, TypeError) as e:
        raise TrackerError(f"RPC tracker at {host}:{port} did not answer: {e}") from None
    finally:
        sock.close()
    if code != base.TrackerCode.SUCCESS:
        raise TrackerError(f"RPC tracker at {host}:{port} refused the summary: {value}")
    return value


def servers_by_key(info: dict) -> dict[str, list[str]]:
    """Registered server addresses ('host:port') per key, from a summary."""
    out: dict[str, list[str]] = {}
    for server in info.get("server_info", []):
        key = str(server.get("key", ""))
        if key.startswith("server:"):
            host, port = server.get("addr", ["?", "?"])
            out.setdefault(key[len("server:"):], []).append(f"{host}:{port}")
    return out


def port_open(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether something accepts TCP connections at host:port (closed again at once).
    Only for servers that left the tracker: a live TVM server would take the empty
    connection for a broken client and re-register."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


class ServerRequest:
    """One request for a free server of `key`, pending at the tracker until `poll`
    returns the server (host, port, match key) or the request is closed. Closing an
    unanswered request gives the server the tracker may later pick for it back to
    others (the tracker skips requests whose connection is gone)."""

    def __init__(self, host: str, port: int, key: str, priority: int = 1):
        from tvm.rpc import base

        self._sock = _connect(host, port, CONNECT_TIMEOUT)
        try:
            base.sendjson(self._sock, [base.TrackerCode.REQUEST, key, "", priority])
        except OSError as e:
            self.close()
            raise TrackerError(f"RPC tracker at {host}:{port} dropped the request: {e}") from None
        self._where = f"{host}:{port}"

    def poll(self, timeout: float) -> tuple[str, int, str] | None:
        """The server once the tracker hands one out, else None after `timeout` s."""
        from tvm.rpc import base

        ready, _, _ = select.select([self._sock], [], [], timeout)
        if not ready:
            return None
        try:
            code, value = base.recvjson(self._sock)
        except (OSError, ValueError, TypeError) as e:
            raise TrackerError(f"RPC tracker at {self._where} closed the request: {e}") from None
        if code != base.TrackerCode.SUCCESS:
            raise TrackerError(f"RPC tracker at {self._where} refused the request: {value}")
        host, port, matchkey = value
        return str(host), int(port), str(matchkey)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
