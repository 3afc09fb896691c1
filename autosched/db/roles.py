"""PostgreSQL privileges for the two roles a team needs besides the owner.

- reader: SELECT only. Runs `db stats`, `db best`, `db export`, `autosched export`.
  Asked to add records, it gets a clear UserError (permission denied), not a traceback.
- writer: what a tuner needs: read everything, insert records and workloads, and update
  a workload's description (FLOPs, argument specs) when it is registered again. It cannot
  delete: pruning and upgrades are the owner's.

An administrator runs these statements (printed by `grant_statements`, and listed in
docs/database.md) as the owner of the tables after `autosched db upgrade` created them.
"""
from __future__ import annotations

import re

_TABLES = "autosched_schema, autosched_workloads, autosched_records"


def grant_statements(role: str, *, write: bool) -> list[str]:
    """The GRANT statements that make `role` a reader (write=False) or a writer."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", role):
        raise ValueError(f"role name {role!r}: use lower-case letters, digits and _")
    out = [f"GRANT USAGE ON SCHEMA public TO {role};",
           f"GRANT SELECT ON {_TABLES} TO {role};"]
    if write:
        out += [f"GRANT INSERT ON autosched_workloads, autosched_records TO {role};",
                f"GRANT UPDATE (workload, args, flops, arg_specs) ON autosched_workloads "
                f"TO {role};"]
    return out
