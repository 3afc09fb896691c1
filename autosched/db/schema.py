"""The tables, their version, and the migrations between versions.

A database records its schema version in `autosched_schema`. A fresh database gets every
migration in one transaction; an older one is migrated only by `autosched db upgrade`
(older autosched releases cannot open it afterwards, so this is an explicit step); a newer
one is refused. Each migration runs inside the caller's transaction, so a crash during an
upgrade leaves the old schema intact.

Version history:
  1. workloads, records (results as JSON only), the uniqueness rule.
  2. ranked columns extracted from the JSON (latency, failure kind, TVM and space
     versions), backfilled, and the indexes that best/top_k/measured_keys use.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass

from ..errors import UserError

SCHEMA_VERSION = 2
TABLES = ("autosched_schema", "autosched_workloads", "autosched_records")


@dataclass(frozen=True)
class Dialect:
    """What differs between the SQL of the two backends (everything else is shared)."""

    name: str
    id_column: str
    real: str
    table_exists: str  # one `?` parameter: the table name; returns a row when it exists


SQLITE = Dialect("sqlite", "INTEGER PRIMARY KEY AUTOINCREMENT", "REAL",
                 "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?")
POSTGRES = Dialect("postgresql", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
                   "DOUBLE PRECISION",
                   "SELECT c FROM (SELECT to_regclass(?) AS c) t WHERE c IS NOT NULL")


def _v1(cur, d: Dialect) -> None:
    cur.execute(f"CREATE TABLE autosched_schema (version INTEGER NOT NULL, "
                f"updated {d.real} NOT NULL)")
    cur.execute(f"CREATE TABLE autosched_workloads ("
                f"task_key TEXT PRIMARY KEY, workload TEXT NOT NULL, args TEXT NOT NULL, "
                f"flops {d.real}, arg_specs TEXT)")
    # Record ids are never reused (AUTOINCREMENT / IDENTITY): kernel libraries cite them.
    cur.execute(f"CREATE TABLE autosched_records ("
                f"id {d.id_column}, "
                f"task_key TEXT NOT NULL REFERENCES autosched_workloads (task_key), "
                f"target_key TEXT NOT NULL, hardware_key TEXT NOT NULL, hardware TEXT NOT NULL, "
                f"versions TEXT NOT NULL, candidate_key TEXT NOT NULL, "
                f"candidate TEXT NOT NULL, result TEXT NOT NULL, provenance TEXT NOT NULL, "
                f"created {d.real} NOT NULL)")
    cur.execute("CREATE UNIQUE INDEX autosched_records_unique ON autosched_records "
                "(task_key, target_key, hardware_key, versions, candidate_key)")


def _backfill_v2(cur) -> None:
    cur.execute("SELECT id, result, versions FROM autosched_records")
    updates = []
    for rid, result, versions in cur.fetchall():
        result, versions = json.loads(result), json.loads(versions)
        kind = result.get("error_kind")
        lat = statistics.median(result["latencies"]) if kind is None else None
        updates.append((lat, kind, versions.get("tvm"), versions.get("space"), rid))
    for row in updates:
        cur.execute("UPDATE autosched_records SET latency = ?, error_kind = ?, "
                    "tvm_version = ?, space_version = ? WHERE id = ?", row)


def _v2(cur, d: Dialect) -> None:
    for column, kind in (("latency", d.real), ("error_kind", "TEXT"),
                         ("tvm_version", "TEXT"), ("space_version", "TEXT")):
        cur.execute(f"ALTER TABLE autosched_records ADD COLUMN {column} {kind}")
    _backfill_v2(cur)
    # best/top_k: equality on the scope, then (latency, id) order — the exact ORDER BY,
    # so LIMIT k reads k index entries instead of sorting the scope — correct only.
    cur.execute("CREATE INDEX autosched_records_rank ON autosched_records "
                "(task_key, target_key, hardware_key, tvm_version, space_version, latency, "
                "id) WHERE error_kind IS NULL")
    # measured_keys: the same scope, covering the candidate key.
    cur.execute("CREATE INDEX autosched_records_measured ON autosched_records "
                "(task_key, target_key, hardware_key, tvm_version, space_version, "
                "candidate_key)")


MIGRATIONS = {1: _v1, 2: _v2}


def read_version(cur, d: Dialect, *, strict: bool = True) -> int | None:
    """The schema version, or None when the database has no autosched tables yet.

    `strict` also refuses a database holding our table names without a version. Only
    ask for it under the schema lock: while another process is creating the tables,
    PostgreSQL may show some of them to a concurrent transaction and not others."""
    cur.execute(d.table_exists, ("autosched_schema",))
    if cur.fetchone() is None:
        for table in TABLES[1:] if strict else ():
            cur.execute(d.table_exists, (table,))
            if cur.fetchone() is not None:
                raise UserError(f"the database has a {table} table but no autosched_schema "
                                "table; it was not made by autosched or is damaged")
        return None
    cur.execute("SELECT version FROM autosched_schema")
    rows = cur.fetchall()
    if len(rows) != 1:
        raise UserError(f"the autosched_schema table has {len(rows)} rows instead of 1; "
                        "the database is damaged")
    return int(rows[0][0])


def check_openable(found: int | None, url: str, upgrade: bool) -> None:
    """Refuse a schema this release cannot use; `found` None means a fresh database."""
    if found is None or found == SCHEMA_VERSION:
        return
    if found > SCHEMA_VERSION:
        raise UserError(f"{url} has schema version {found}, newer than this autosched "
                        f"understands ({SCHEMA_VERSION}); upgrade autosched to use it")
    if not upgrade:
        raise UserError(f"{url} has schema version {found}, older than this autosched's "
                        f"({SCHEMA_VERSION}); run `autosched db upgrade --db {url}` "
                        "(older autosched releases cannot open it afterwards)")


def migrate(cur, d: Dialect, found: int | None, target: int = SCHEMA_VERSION) -> None:
    """Apply migrations found+1 .. target inside the caller's transaction."""
    start = found or 0
    for version in range(start + 1, target + 1):
        MIGRATIONS[version](cur, d)
    now = time.time()
    if found is None:
        cur.execute("INSERT INTO autosched_schema (version, updated) VALUES (?, ?)",
                    (target, now))
    else:
        cur.execute("UPDATE autosched_schema SET version = ?, updated = ?", (target, now))
