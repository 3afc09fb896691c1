"""Tuning-log databases: records of measured candidates, shared by a team.

Where things are:
- connect.py: `open_database(url)`, the one place URLs become backends (sqlite.py,
  postgres.py, both on sqlbase.py: one set of queries, schema.py the tables and their
  upgrades, rows.py records <-> rows);
- base.py: `Database`, the interface every backend implements;
- record.py: `Record` (one measured or failed candidate, JSON data) and `make_record`;
  the result it holds is `autosched.results.MeasureResult`, so the database imports
  nothing of measurement;
- urls.py: `normalize_url`, `mask_password`, `DEFAULT_DB_URL`;
- jsonl.py: records as JSON lines (`autosched db import|export`); stats.py, prune.py,
  roles.py: `autosched db stats|prune|grant`.
"""
from __future__ import annotations

from ..lazy import lazy_names

# `rows` is a module: the row layout both backends store, for tools that write rows
# directly (bench/db.py times inserts); `from autosched.db import rows` imports it.
__all__ = ["Database", "Record", "open_database", "normalize_url", "make_record",
           "compatible_versions", "mask_password", "DEFAULT_DB_URL", "read_records",
           "write_records", "rows"]

__getattr__ = lazy_names(__name__, {
    "Database": ".base", "Record": ".record", "make_record": ".record",
    "compatible_versions": ".record", "open_database": ".connect",
    "normalize_url": ".urls", "mask_password": ".urls", "DEFAULT_DB_URL": ".urls",
    "read_records": ".jsonl", "write_records": ".jsonl"})
