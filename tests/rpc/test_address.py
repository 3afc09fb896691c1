"""Parsing `--runner rpc...` and `--tracker`, and the farm table, without processes."""
from __future__ import annotations

import pytest

from autosched.cli.workers import farm_state
from autosched.errors import UserError
from autosched.measure.runners import parse_runner
from autosched.measure.factory import make_measurer
from autosched.measure.rpc.tracker import (RPCAddress, parse_rpc_address, parse_tracker,
                                           servers_by_key)

ENV = {"TVM_TRACKER_HOST": "10.0.0.5", "TVM_TRACKER_PORT": "9190", "TVM_TRACKER_KEY": "h100"}


def test_url_form_with_defaults():
    scheme, address = parse_runner("rpc://head.example:9190/gpu-h100")
    assert scheme == "rpc"
    a = parse_rpc_address(address, {})
    assert a == RPCAddress("head.example", 9190, "gpu-h100", sessions=16, retries=2, wait=600.0)
    assert str(a) == "rpc://head.example:9190/gpu-h100"


def test_options_and_ipv6():
    a = parse_rpc_address("[::1]:9000/cpu_a.1?sessions=3&retries=0&wait=2.5", {})
    assert (a.host, a.port, a.key, a.sessions, a.retries, a.wait) == ("::1", 9000, "cpu_a.1",
                                                                       3, 0, 2.5)
    assert a.tracker == "[::1]:9000"


def test_plain_rpc_reads_the_tvm_environment_variables():
    assert parse_runner("rpc") == ("rpc", "")
    a = parse_rpc_address("", ENV)
    assert (a.host, a.port, a.key) == ("10.0.0.5", 9190, "h100")
    # the URL form wins over the environment
    assert parse_rpc_address("h:1/k", ENV).host == "h"


@pytest.mark.parametrize("env, missing", [
    ({}, "TVM_TRACKER_HOST, TVM_TRACKER_PORT, TVM_TRACKER_KEY"),
    ({"TVM_TRACKER_HOST": "h", "TVM_TRACKER_PORT": "1"}, "TVM_TRACKER_KEY"),
])
def test_plain_rpc_without_environment_says_what_is_missing(env, missing):
    with pytest.raises(UserError, match=f"needs {missing} set"):
        parse_rpc_address("", env)


@pytest.mark.parametrize("address, match", [
    ("hostonly/key", "expected rpc://HOST:PORT/KEY"),
    ("h:notaport/key", "expected rpc://HOST:PORT/KEY"),
    ("h:99999/key", "expected rpc://HOST:PORT/KEY"),
    ("h:9190", "expected rpc://HOST:PORT/KEY"),
    ("h:9190/a:b", "expected rpc://HOST:PORT/KEY"),
    ("h:9190/k?sessions=0", "sessions must be a number >= 1"),
    ("h:9190/k?retries=-1", "retries must be a number >= 0"),
    ("h:9190/k?wait=soon", "wait must be a number"),
    ("h:9190/k?timeout=3", "unknown option 'timeout'"),
])
def test_bad_addresses_are_user_errors(address, match):
    with pytest.raises(UserError, match=match):
        parse_rpc_address(address, {})


def test_tracker_address():
    assert parse_tracker("127.0.0.1:9190") == ("127.0.0.1", 9190)
    assert parse_tracker("[::1]:9190") == ("::1", 9190)
    for bad in ("127.0.0.1", "h:x", "h:9190/key"):
        with pytest.raises(UserError, match="expected HOST:PORT"):
            parse_tracker(bad)


def test_unreachable_tracker_is_a_user_error_before_anything_starts(tmp_path):
    from support.rpcfarm import free_port

    from autosched.measure import MeasureSettings

    port = free_port()  # nothing listens there
    with pytest.raises(UserError, match=f"cannot reach the RPC tracker at 127.0.0.1:{port}"):
        make_measurer(MeasureSettings(), f"rpc://127.0.0.1:{port}/k", str(tmp_path))
    assert not (tmp_path / "workers").exists()  # no worker was started


SUMMARY = {
    "queue_info": {"a": {"free": 1, "pending": 0}, "b": {"free": 0, "pending": 3},
                   "gone": {"free": 0, "pending": 0}},
    "server_info": [{"key": "server:a", "addr": ["10.0.0.2", 9001]},
                    {"key": "server:a", "addr": ["10.0.0.1", 9001]},
                    {"key": "server:b", "addr": ["10.0.0.3", 9002]},
                    {"key": "client:x", "addr": ["10.0.0.9", 1]}],
}


def test_servers_by_key_and_farm_table():
    assert servers_by_key(SUMMARY) == {"a": ["10.0.0.2:9001", "10.0.0.1:9001"],
                                       "b": ["10.0.0.3:9002"]}
    state = farm_state(SUMMARY)
    assert state["keys"] == [{"key": "a", "servers": 2, "free": 1, "pending": 0},
                             {"key": "b", "servers": 1, "free": 0, "pending": 3}]
    assert state["servers"] == [{"address": "10.0.0.1:9001", "key": "a"},
                                {"address": "10.0.0.2:9001", "key": "a"},
                                {"address": "10.0.0.3:9002", "key": "b"}]
    only_b = farm_state(SUMMARY, "b")
    assert [k["key"] for k in only_b["keys"]] == ["b"]
    assert only_b["servers"] == [{"address": "10.0.0.3:9002", "key": "b"}]
