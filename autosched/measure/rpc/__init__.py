"""`--runner rpc://HOST:PORT/KEY`: measure on TVM RPC servers behind a tracker.

Where things are:
- runner.py: `RPCRunner`, a `measure.base.Runner` over several server sessions;
- session.py: the session worker (role ``rpc``) that uploads, checks and times;
- tracker.py: the tracker protocol and `parse_rpc_address`.
"""
