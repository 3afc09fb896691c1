"""The command line with an RPC farm: `autosched workers`, and the one-line errors of
`tune --runner rpc...` (exit 2, detected before any tuning starts)."""
from __future__ import annotations

import json
import os

from support.rpcfarm import free_port

from autosched.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MATMUL = [os.path.join(ROOT, "examples", "matmul.py"), "--arg", "M=64", "--arg", "N=64",
          "--arg", "K=64", "--target", "llvm"]


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("autosched: error: ")
    return lines[0]


def test_workers_lists_servers_and_queues(farm, pool, capsys):
    key, servers = pool
    assert main(["workers", "--tracker", farm.address]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"tracker {farm.address}: ")
    row = next(ln.split() for ln in out.splitlines() if ln.startswith(f"{key} "))
    assert row == [key, "2", "2", "0", "0"]  # servers, free, busy, waiting requests
    for s in servers:
        assert f"{s.address}  {key}" in out

    assert main(["workers", "--tracker", farm.address, "--key", key, "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert state["tracker"] == farm.address
    assert state["keys"] == [{"key": key, "servers": 2, "free": 2, "pending": 0}]
    assert sorted(s["address"] for s in state["servers"]) == sorted(s.address for s in servers)


def test_workers_reads_the_tracker_from_the_environment(farm, pool, capsys, monkeypatch):
    monkeypatch.setenv("TVM_TRACKER_HOST", "127.0.0.1")
    monkeypatch.setenv("TVM_TRACKER_PORT", str(farm.port))
    assert main(["workers", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tracker"] == farm.address


def test_workers_errors_are_one_line_exit_2(farm, capsys, monkeypatch):
    monkeypatch.delenv("TVM_TRACKER_HOST", raising=False)
    port = free_port()
    assert main(["workers", "--tracker", f"127.0.0.1:{port}"]) == 2
    assert f"cannot reach the RPC tracker at 127.0.0.1:{port}" in _error_line(capsys)
    assert main(["workers", "--tracker", farm.address, "--key", "nosuch"]) == 2
    assert "no RPC server is registered under key 'nosuch'" in _error_line(capsys)
    assert main(["workers"]) == 2
    assert "give --tracker HOST:PORT" in _error_line(capsys)


def test_bad_tracker_address_is_one_line_exit_2_as_users_run_it(cli, tmp_path):
    port = free_port()
    r = cli("tune", *MATMUL, "--runner", f"rpc://127.0.0.1:{port}/gpu", "--db",
            f"sqlite:///{tmp_path}/t.db", "--work-dir", str(tmp_path / "w"), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (f"autosched: error: --runner rpc://127.0.0.1:{port}/gpu: "
                                f"cannot reach the RPC tracker at 127.0.0.1:{port}: "
                                "Connection refused")


def test_unknown_key_is_one_line_exit_2(farm, tmp_path, capsys):
    args = ["tune", *MATMUL, "--db", f"sqlite:///{tmp_path}/t.db", "--work-dir",
            str(tmp_path / "w")]
    assert main([*args, "--runner", farm.url("nosuch")]) == 2
    line = _error_line(capsys)
    assert line.startswith(f"autosched: error: --runner {farm.url('nosuch')}: no RPC server "
                           f"is registered under key 'nosuch' at tracker {farm.address} (")
    assert not (tmp_path / "w" / "workers").exists()  # nothing was built or run


def test_plain_rpc_takes_the_tracker_and_key_from_the_environment(farm, tmp_path, capsys,
                                                                  monkeypatch):
    args = ["tune", *MATMUL, "--db", f"sqlite:///{tmp_path}/t.db", "--work-dir",
            str(tmp_path / "w"), "--runner", "rpc"]
    for var in ("TVM_TRACKER_HOST", "TVM_TRACKER_PORT", "TVM_TRACKER_KEY"):
        monkeypatch.delenv(var, raising=False)
    assert main(args) == 2
    assert "--runner rpc needs TVM_TRACKER_HOST, TVM_TRACKER_PORT, TVM_TRACKER_KEY set" \
        in _error_line(capsys)
    monkeypatch.setenv("TVM_TRACKER_HOST", "127.0.0.1")
    monkeypatch.setenv("TVM_TRACKER_PORT", str(farm.port))
    monkeypatch.setenv("TVM_TRACKER_KEY", "from-env")
    assert main(args) == 2
    assert f"--runner rpc://{farm.address}/from-env: no RPC server is registered under key " \
           "'from-env'" in _error_line(capsys)


def test_malformed_runner_is_one_line_exit_2(tmp_path, capsys):
    args = ["tune", *MATMUL, "--db", f"sqlite:///{tmp_path}/t.db", "--work-dir",
            str(tmp_path / "w")]
    assert main([*args, "--runner", "rpc://trackerhost/key"]) == 2
    assert "expected rpc://HOST:PORT/KEY" in _error_line(capsys)
