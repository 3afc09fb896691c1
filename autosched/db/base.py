"""The Database protocol: every backend (SQLite, PostgreSQL) behaves identically.

Queries that return records *for use* (best, top_k) always filter by task key, target
key, hardware key and compatible versions; listing queries may return anything.
"""
from __future__ import annotations

from typing import Collection, Iterable, Iterator, Protocol

from .record import Record


class Database(Protocol):
    url: str  # with any password masked
    schema_version: int

    def register_task(self, task_json: dict) -> None:
        """Remember a workload instance (workload name, args, key, FLOPs, arg specs)."""

    def add_records(self, records: Iterable[Record], *,
                    replace_failures: Collection[str] = ()) -> list[int | None]:
        """Commit records atomically; the id of each, or None for a duplicate of
        (task, target, hardware, versions, candidate). A stored failure of a kind in
        `replace_failures` for the same candidate and scope is replaced (deleted in the
        same transaction): what `tune --retry-failures` writes."""

    def measured_keys(self, task_key: str, target_key: str, hardware_key: str,
                      versions: dict) -> set[str]:
        """Candidate keys already measured (or failed) here: never measured again."""

    def failed_records(self, task_key: str, target_key: str, hardware_key: str,
                       versions: dict, kinds: Collection[str]) -> list[Record]:
        """The failures of these kinds in this scope, in insertion order."""

    def best(self, task_key: str, target_key: str, hardware_key: str,
             versions: dict) -> Record | None:
        """The fastest correct record usable on this target, machine and versions."""

    def top_k(self, task_key: str, target_key: str, hardware_key: str, versions: dict,
              k: int) -> list[Record]:
        """The k fastest correct usable records, fastest first (the search's warm start)."""

    def records(self, *, task_key: str | None = None, target_key: str | None = None,
                hardware_key: str | None = None, ok_only: bool = False,
                limit: int | None = None) -> list[Record]:
        """Records matching the filters, in insertion order (for training and listing)."""

    def record(self, record_id: int) -> Record | None:
        """Record `record_id` (the id `add_records` returned and `db best` lists), or None
        when there is none."""

    def tasks(self) -> list[dict]:
        """Every registered workload instance, in Task.to_json() shape. "flops" is None
        (and "inputs"/"outputs" empty) for a workload known only from imported records,
        until a tuner registers it."""

    def stats(self) -> dict:
        """Counts per task/target: records, ok, failures by kind, best latency."""

    def iter_records(self, *, task_key: str | None = None, target_key: str | None = None,
                     hardware_key: str | None = None, ok_only: bool = False,
                     batch: int = 1000) -> Iterator[Record]:
        """Like records(), streamed (exports of large databases)."""

    def count(self) -> int:
        """Number of records stored."""

    def prune(self, keep: int, *, drop_failures: bool = False, task_key: str | None = None,
              dry_run: bool = False, kinds: Collection[str] = ()) -> dict:
        """Delete correct records beyond the `keep` fastest of each usable scope (never
        the best) and, if asked, failures (only of `kinds` when given):
        {"slow": n, "failures": n, "kept": n}."""

    def close(self) -> None:
        ...

    def __enter__(self) -> "Database":
        ...

    def __exit__(self, *exc) -> None:
        ...
