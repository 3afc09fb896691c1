"""The one table from `--runner` names to runners: `local`, `rpc://HOST:PORT/KEY` (or
plain `rpc`, the tracker from the environment) and `bundle:DIR`.

Each factory imports its implementation when called, so resolving a name never loads
a runner the run does not use. `factory.make_measurer` resolves the name here.
"""
from __future__ import annotations

import os
from typing import Callable

from ..errors import UserError


def _local_runner(settings, work_dir: str, scratch_dir: str, address: str):
    from .local_runner import LocalRunner

    if address:
        raise UserError(f"--runner local takes no address, got 'local://{address}'")
    return LocalRunner(settings, work_dir, scratch_dir=scratch_dir)


def _rpc_runner(settings, work_dir: str, scratch_dir: str, address: str):
    from .rpc.runner import RPCRunner
    from .rpc.tracker import parse_rpc_address

    # plain "rpc": the tracker and key come from TVM_TRACKER_HOST / _PORT / _KEY
    return RPCRunner(settings, work_dir, parse_rpc_address(address, os.environ),
                     scratch_dir=scratch_dir)


def _bundle_runner(settings, work_dir: str, scratch_dir: str, address: str):
    from .bundle.runner import BundleRunner

    return BundleRunner(settings, work_dir, scratch_dir, address)


# Runner scheme -> factory(settings, work_dir, scratch_dir, address). "local" or "local://";
# "rpc://HOST:PORT/KEY" maps to scheme "rpc" with address "HOST:PORT/KEY"; "bundle:DIR"
# to scheme "bundle" with address "DIR".
RUNNERS: dict[str, Callable] = {"local": _local_runner, "rpc": _rpc_runner,
                                "bundle": _bundle_runner}


def parse_runner(name: str) -> tuple[str, str]:
    """'local' -> ('local', ''); 'rpc://h:9190/key' -> ('rpc', 'h:9190/key');
    'bundle:DIR' -> ('bundle', 'DIR')."""
    scheme, sep, address = (name or "").strip().partition("://")
    if not sep:
        scheme, sep, address = scheme.partition(":")
    return scheme, address if sep else ""


_FORMS = {"rpc": "rpc://...", "bundle": "bundle:DIR"}


def runner_factory(name: str) -> Callable:
    """`--runner` -> `make(settings, work_dir, scratch_dir)`, which makes the Runner (the
    shared reference data under `work_dir`, its own worker logs and temporary files in
    the run's `scratch_dir`); an unknown scheme is a UserError before anything is made."""
    scheme, address = parse_runner(name)
    factory = RUNNERS.get(scheme)
    if factory is None:
        raise UserError(f"unknown --runner {name!r}; use one of: "
                        + ", ".join(_FORMS.get(s, s) for s in RUNNERS))
    return lambda settings, work_dir, scratch_dir: factory(settings, work_dir, scratch_dir,
                                                           address)
