"""`autosched workers --tracker HOST:PORT`: the measurement farm behind an RPC tracker,
its servers and the queue of every key (what `--runner rpc://HOST:PORT/KEY` will use)."""
from __future__ import annotations

import argparse
import json
import os

from ..errors import UserError


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `workers` command to the main CLI's subparsers."""
    p = subparsers.add_parser("workers", help="servers and queues of an RPC tracker")
    p.add_argument("--tracker", metavar="HOST:PORT",
                   help="the tracker (default: $TVM_TRACKER_HOST:$TVM_TRACKER_PORT)")
    p.add_argument("--key", help="show only the servers of this key (exit 2 when it has none)")
    p.add_argument("--json", action="store_true", help="print the tables as JSON")
    return p


def farm_state(info: dict, key: str | None = None) -> dict:
    """{"keys": [{"key", "servers", "free", "pending"}], "servers": [{"address", "key"}]}
    from a tracker summary; keys without servers or waiting requests are left out."""
    from ..measure.rpc.tracker import servers_by_key

    by_key = servers_by_key(info)
    queues = info.get("queue_info", {})
    keys = []
    for name in sorted(set(by_key) | set(queues)):
        q = queues.get(name, {})
        row = {"key": name, "servers": len(by_key.get(name, [])), "free": int(q.get("free", 0)),
               "pending": int(q.get("pending", 0))}
        if (row["servers"] or row["pending"]) and key in (None, name):
            keys.append(row)
    servers = [{"address": addr, "key": name} for name in sorted(by_key)
               for addr in sorted(by_key[name]) if key in (None, name)]
    return {"keys": keys, "servers": servers}


def _tracker_address(text: str | None) -> tuple[str, int]:
    from ..measure.rpc.tracker import ENV_HOST, ENV_PORT, parse_tracker

    if not text:
        host, port = os.environ.get(ENV_HOST), os.environ.get(ENV_PORT)
        if not (host and port):
            raise UserError(f"workers: give --tracker HOST:PORT (or set {ENV_HOST} and "
                            f"{ENV_PORT})")
        text = f"{host}:{port}"
    return parse_tracker(text)


def run(args: argparse.Namespace) -> int:
    """Print the tracker's servers and queues (or JSON); UserError when it has none."""
    from ..measure.rpc.tracker import TrackerError, summary
    from ..tables import format_table

    host, port = _tracker_address(args.tracker)
    try:
        state = farm_state(summary(host, port), args.key)
    except TrackerError as e:
        raise UserError(str(e)) from None
    if args.key and not state["servers"]:
        raise UserError(f"no RPC server is registered under key '{args.key}' at tracker "
                        f"{host}:{port}")
    if args.json:
        print(json.dumps({"tracker": f"{host}:{port}", **state}, indent=1))
        return 0
    n_servers = len(state["servers"])
    print(f"tracker {host}:{port}: {n_servers} server{'s' * (n_servers != 1)}, "
          f"{len(state['keys'])} key{'s' * (len(state['keys']) != 1)}")
    if state["keys"]:
        print()
        print(format_table(("key", "servers", "free", "busy", "waiting requests"),
                           [(k["key"], k["servers"], k["free"], max(0, k["servers"] - k["free"]),
                             k["pending"]) for k in state["keys"]]))
    if state["servers"]:
        print()
        print(format_table(("server", "key"), [(s["address"], s["key"])
                                               for s in state["servers"]]))
    return 0
