"""A real TVM RPC server whose sessions describe other hardware, for the tests of
runners that read a server's hardware: `python reporting_server.py --cpu NAME --cores N`
plus `tvm.exec.rpc_server`'s own --tracker, --key, --host, --port and --port-end.

TVM's server answers hardware questions with global functions of its process
(`autosched.measure.rpc.session.CPU_FUNCTIONS`). Before serving, this start-up registers
the CPU-name and core-count functions anew (TVM's documented `server_init_callback`),
saying `--cpu` and `--cores`: everything else is the stock server, serving real sessions
on this machine. Run as a script, so that TVM's server process receives the callback by
value (it cannot import this folder)."""
from __future__ import annotations

import argparse
import functools


def _report(cpu_function: str, cpu: str, cores_function: str, cores: int) -> None:
    """In the server process, before it serves: describe the other CPU."""
    import tvm_ffi

    tvm_ffi.register_global_func(cpu_function, lambda: cpu, override=True)
    tvm_ffi.register_global_func(cores_function, lambda logical: cores, override=True)


def main() -> None:
    from tvm import rpc

    from autosched.measure.rpc.session import CPU_FUNCTIONS

    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", required=True)
    parser.add_argument("--cores", type=int, required=True)
    for name in ("--tracker", "--key", "--host"):
        parser.add_argument(name, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--port-end", type=int, required=True)
    args = parser.parse_args()
    host, port = args.tracker.rsplit(":", 1)
    report = functools.partial(_report, CPU_FUNCTIONS["cpu"][0], args.cpu,
                               CPU_FUNCTIONS["cores"][0], args.cores)
    server = rpc.Server(args.host, args.port, args.port_end, tracker_addr=(host, int(port)),
                        key=args.key, server_init_callback=report)
    server.proc.join()


if __name__ == "__main__":
    main()
