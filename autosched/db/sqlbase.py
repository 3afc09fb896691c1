"""The Database protocol in SQL that both backends share, so they behave identically.

A backend supplies transactions (`transaction`: one atomic unit, retried on transient
conflicts, errors turned into UserError where the user can act) and streaming reads
(`_stream`). Queries are written with `?` placeholders; the PostgreSQL backend rewrites
them. Every query that returns records *for use* filters on task, target, hardware and
the (TVM, space) versions in SQL, and the results are checked again in Python.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Collection, Iterable, Iterator, TypeVar

from ..errors import UserError
from . import rows, schema
from .record import Record, compatible_versions

T = TypeVar("T")
log = logging.getLogger("autosched.db")

_SCOPE = ("r.task_key = ? AND r.target_key = ? AND r.hardware_key = ? "
          "AND r.tvm_version = ? AND r.space_version = ?")


class SqlDatabase:
    """Shared implementation; see autosched.db.base.Database for the contract."""

    dialect: schema.Dialect
    url: str  # password masked
    schema_version: int
    upgraded_from: int | None = None  # set when opening migrated an older schema
    created: bool = False  # set when opening created the tables

    # -- backend hooks -------------------------------------------------------------
    def transaction(self, fn: Callable[..., T], *, write: bool) -> T:
        """`fn(cursor)` as one atomic unit, retried on transient conflicts; its result.
        Public for the SQL helpers beside the backends (stats, prune)."""
        raise NotImplementedError

    def _stream(self, sql: str, params: tuple, batch: int) -> Iterator[tuple]:
        raise NotImplementedError

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """The rows of one SELECT (atomic by itself; a backend may skip BEGIN/COMMIT)."""
        return self.transaction(lambda cur: _fetchall(cur, sql, params), write=False)

    def _schema_transaction(self, fn: Callable[..., T]) -> T:
        """A write transaction that no other process's schema change runs beside, and
        that starts only after the previous one committed (so it sees its tables)."""
        return self.transaction(fn, write=True)

    def _insert_returning(self, cur, sql: str, params: list[tuple]) -> list[int | None]:
        out = []
        for p in params:
            cur.execute(sql, p)
            row = cur.fetchone()
            out.append(None if row is None else int(row[0]))
        return out

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- schema --------------------------------------------------------------------
    def _open_schema(self, upgrade: bool, create: bool) -> None:
        found = self.transaction(
            lambda cur: schema.read_version(cur, self.dialect, strict=False), write=False)
        schema.check_openable(found, self.url, upgrade)
        if found is None and not create:
            raise UserError(f"{self.url} holds no autosched records yet (no tables); "
                            "`autosched tune` or `autosched db import` creates them")
        if found != schema.SCHEMA_VERSION:
            found = self._schema_transaction(
                lambda cur: self._create_or_migrate(cur, upgrade))
            self.created = found is None
            if found is not None and found != schema.SCHEMA_VERSION:
                self.upgraded_from = found
                log.info("upgraded %s from schema %d to %d", self.url, found,
                         schema.SCHEMA_VERSION)
        self.schema_version = schema.SCHEMA_VERSION

    def _create_or_migrate(self, cur, upgrade: bool) -> int | None:
        found = schema.read_version(cur, self.dialect)  # another process may have won
        schema.check_openable(found, self.url, upgrade)
        if found != schema.SCHEMA_VERSION:
            schema.migrate(cur, self.dialect, found)
        return found

    # -- writes --------------------------------------------------------------------
    def register_task(self, task_json: dict) -> None:
        """Remember a workload instance (Task.to_json()): name, args, key, FLOPs, specs."""
        row = rows.task_row(task_json)

        def write(cur):
            cur.execute("INSERT INTO autosched_workloads (task_key, workload, args, flops, "
                        "arg_specs) VALUES (?, ?, ?, ?, ?) ON CONFLICT (task_key) DO UPDATE "
                        "SET workload = excluded.workload, args = excluded.args, "
                        "flops = excluded.flops, arg_specs = excluded.arg_specs", row)

        self.transaction(write, write=True)

    def add_records(self, records: Iterable[Record], *,
                    replace_failures: Collection[str] = ()) -> list[int | None]:
        """Commit all records in one transaction; the id of each, None for a duplicate
        of (task, target, hardware, versions, candidate), including within the batch.
        A stored failure of a kind in `replace_failures` for the same candidate and
        scope is deleted first, in the same transaction, so the new result takes its
        place (one record per candidate and scope: the uniqueness rule)."""
        records = list(records)
        for rec in records:
            rows.check_record(rec)
        if not records:
            return []
        workloads = list({r.task_key: rows.workload_row(r) for r in records}.values())
        kinds = sorted(set(replace_failures))

        def write(cur):
            created = time.time()
            for w in workloads:
                cur.execute(rows.INSERT_WORKLOAD, w)
            params = [rows.record_row(r, created) for r in records]
            if kinds:
                for p in params:
                    cur.execute(rows.delete_failure_sql(len(kinds)),
                                rows.unique_key(p) + tuple(kinds))
            return self._insert_returning(cur, rows.INSERT_RECORD, params)

        return self.transaction(write, write=True)

    # -- queries for use -----------------------------------------------------------
    def measured_keys(self, task_key: str, target_key: str, hardware_key: str,
                      versions: dict) -> set[str]:
        """Candidate keys measured (or failed) in this scope: never measured again."""
        pair = rows.version_pair(versions)
        if pair is None:
            return set()
        sql = f"SELECT r.candidate_key FROM autosched_records r WHERE {_SCOPE}"
        params = (task_key, target_key, hardware_key, *pair)
        found = self._query(sql, params)
        return {key for (key,) in found}

    def failed_records(self, task_key: str, target_key: str, hardware_key: str,
                       versions: dict, kinds: Collection[str]) -> list[Record]:
        """The failures of these kinds in this scope, in insertion order (what
        `tune --retry-failures` measures again)."""
        pair = rows.version_pair(versions)
        kinds = sorted(set(kinds))
        if pair is None or not kinds:
            return []
        sql = (f"SELECT {rows.RECORD_COLUMNS} FROM {rows.RECORD_FROM} WHERE {_SCOPE} "
               f"AND r.error_kind IN ({', '.join('?' * len(kinds))}) ORDER BY r.id")
        found = self._query(sql, (task_key, target_key, hardware_key, *pair, *kinds))
        return [rows.row_record(row) for row in found]

    def top_k(self, task_key: str, target_key: str, hardware_key: str, versions: dict,
              k: int) -> list[Record]:
        """The k fastest correct records usable in this scope, fastest first (ties: the
        older record first, the same order prune keeps)."""
        pair = rows.version_pair(versions)
        if pair is None or k <= 0:
            return []
        sql = (f"SELECT {rows.RECORD_COLUMNS} FROM {rows.RECORD_FROM} WHERE {_SCOPE} "
               "AND r.error_kind IS NULL ORDER BY r.latency, r.id LIMIT ?")
        params = (task_key, target_key, hardware_key, *pair, int(k))
        found = self._query(sql, params)
        out = [rows.row_record(row) for row in found]
        # Belt and braces: nothing unusable leaves this method even if SQL were wrong.
        return [r for r in out if r.ok and r.task_key == task_key and r.target_key ==
                target_key and r.hardware_key == hardware_key and
                compatible_versions(r.versions, versions)]

    def best(self, task_key: str, target_key: str, hardware_key: str,
             versions: dict) -> Record | None:
        """The fastest correct record usable on this target, machine and versions."""
        found = self.top_k(task_key, target_key, hardware_key, versions, 1)
        return found[0] if found else None

    # -- listing -------------------------------------------------------------------
    def _record_query(self, task_key, target_key, hardware_key, ok_only, limit, after=None):
        where, params = [], []
        for column, value in (("r.task_key", task_key), ("r.target_key", target_key),
                              ("r.hardware_key", hardware_key)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if ok_only:
            where.append("r.error_kind IS NULL")
        if after is not None:
            where.append("r.id > ?")
            params.append(after)
        sql = f"SELECT {rows.RECORD_COLUMNS} FROM {rows.RECORD_FROM}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY r.id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return sql, tuple(params)

    def records(self, *, task_key: str | None = None, target_key: str | None = None,
                hardware_key: str | None = None, ok_only: bool = False,
                limit: int | None = None) -> list[Record]:
        """Records matching the filters, in insertion order (any target or version)."""
        sql, params = self._record_query(task_key, target_key, hardware_key, ok_only, limit)
        found = self._query(sql, params)
        return [rows.row_record(row) for row in found]

    def iter_records(self, *, task_key: str | None = None, target_key: str | None = None,
                     hardware_key: str | None = None, ok_only: bool = False,
                     batch: int = 1000) -> Iterator[Record]:
        """Like records() but streamed, for exporting large databases."""
        sql, params = self._record_query(task_key, target_key, hardware_key, ok_only, None)
        for row in self._stream(sql, params, batch):
            yield rows.row_record(row)

    def record(self, record_id: int) -> Record | None:
        """Record `record_id`, or None when the database holds no record of that id."""
        sql = f"SELECT {rows.RECORD_COLUMNS} FROM {rows.RECORD_FROM} WHERE r.id = ?"
        found = self._query(sql, (int(record_id),))
        return rows.row_record(found[0]) if found else None

    def count(self) -> int:
        """Number of records stored."""
        found = self._query("SELECT COUNT(*) FROM autosched_records")
        return int(found[0][0])

    def tasks(self) -> list[dict]:
        """Every registered workload instance, in Task.to_json() shape."""
        sql = ("SELECT task_key, workload, args, flops, arg_specs FROM autosched_workloads "
               "ORDER BY workload, task_key")
        return [rows.task_json(r) for r in self._query(sql)]

    def stats(self) -> dict:
        """Totals, and per (task, target, hardware, TVM version, space version) group:
        records, correct ones, failures by kind and the best latency in seconds."""
        from .stats import collect

        return collect(self)

    # -- maintenance ---------------------------------------------------------------
    def prune(self, keep: int, *, drop_failures: bool = False, task_key: str | None = None,
              dry_run: bool = False, kinds: Collection[str] = ()) -> dict:
        """Delete correct records beyond the `keep` fastest of each usable scope (so
        best() and top_k(k <= keep) return what they returned before), and failures
        when `drop_failures` (only those of `kinds` when given). Returns
        {"slow": n, "failures": n, "kept": n}."""
        from .prune import prune

        return prune(self, keep, drop_failures=drop_failures, task_key=task_key,
                     dry_run=dry_run, kinds=kinds)


def _fetchall(cur, sql: str, params: tuple) -> list[tuple]:
    cur.execute(sql, params)
    return cur.fetchall()
