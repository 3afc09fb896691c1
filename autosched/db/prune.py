"""Pruning: keep the fastest correct records of each usable scope, drop the rest.

The scope is (task, target, hardware, TVM version, space version): the set best() and
top_k() rank within. Keeping the `keep` fastest of each scope, in the same order those
queries use (latency, then id), means best() and top_k(k <= keep) answer exactly as
before. Failures are kept unless asked: they stop the tuner from measuring a known-bad
candidate again and teach the cost model what fails.
"""
from __future__ import annotations

_RANKED = ("SELECT id, ROW_NUMBER() OVER (PARTITION BY task_key, target_key, hardware_key, "
           "tvm_version, space_version ORDER BY latency, id) AS rn "
           "FROM autosched_records WHERE error_kind IS NULL")
_FAILED = "SELECT id FROM autosched_records WHERE error_kind IS NOT NULL"


def _selects(keep: int, task_key: str | None,
             kinds: tuple[str, ...]) -> tuple[tuple[str, tuple], tuple[str, tuple]]:
    task_filter, task_params = ("", ()) if task_key is None else (" AND task_key = ?",
                                                                 (task_key,))
    slow = (f"SELECT id FROM ({_RANKED}{task_filter}) ranked WHERE rn > ?",
            task_params + (keep,))
    kind_filter = f" AND error_kind IN ({', '.join('?' * len(kinds))})" if kinds else ""
    failed = (_FAILED + task_filter + kind_filter, task_params + kinds)
    return slow, failed


def _count(cur, select: tuple[str, tuple]) -> int:
    cur.execute(f"SELECT COUNT(*) FROM ({select[0]}) doomed", select[1])
    return int(cur.fetchone()[0])


def prune(db, keep: int, *, drop_failures: bool = False, task_key: str | None = None,
          dry_run: bool = False, kinds=()) -> dict:
    """See SqlDatabase.prune. One transaction: a crash deletes all or nothing."""
    if int(keep) < 1:
        raise ValueError("keep must be at least 1: the best record is never deleted")
    if kinds and not drop_failures:
        raise ValueError("failure kinds select which failures to drop: drop_failures")
    slow, failed = _selects(int(keep), task_key, tuple(sorted(set(kinds))))

    def work(cur) -> dict:
        out = {"slow": _count(cur, slow), "failures": _count(cur, failed) if drop_failures
               else 0}
        if not dry_run:
            cur.execute(f"DELETE FROM autosched_records WHERE id IN ({slow[0]})", slow[1])
            if drop_failures:
                cur.execute(f"DELETE FROM autosched_records WHERE id IN ({failed[0]})",
                            failed[1])
        cur.execute("SELECT COUNT(*) FROM autosched_records", ())
        total = int(cur.fetchone()[0])
        out["kept"] = total - (out["slow"] + out["failures"] if dry_run else 0)
        return out

    return db.transaction(work, write=not dry_run)
