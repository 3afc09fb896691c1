"""Moving records between databases as JSON lines: one Record.to_json() per line.

Import validates the whole file before writing and then adds everything in one
transaction, so a bad line leaves the database untouched; duplicates (the uniqueness
rule of the database) are skipped, so importing the same file twice adds nothing.
Export writes to a temporary file next to the destination and renames it into place,
so an interrupted export never leaves a truncated file behind.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Iterable

from ..errors import UserError
from .record import Record
from .rows import check_record


def parse_line(line: bytes) -> Record:
    """One JSON line -> a Record that can be stored; ValueError says why not."""
    try:
        data = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(data, dict):
        raise ValueError("a record must be a JSON object")
    rec = Record.from_json(data)
    check_record(rec)
    return rec


def read_records(path: str) -> list[Record]:
    """Every record of a JSON-lines file ('-': standard input), all validated; a bad
    line raises UserError naming the file and line number. Blank lines are skipped."""
    name = "<stdin>" if path == "-" else path
    try:
        stream = sys.stdin.buffer if path == "-" else open(path, "rb")
    except OSError as e:
        raise UserError(f"cannot read {name}: {e.strerror}") from None
    records = []
    with stream:
        for lineno, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                records.append(parse_line(line))
            except ValueError as e:
                raise UserError(f"{name}:{lineno}: {e}; nothing was imported") from None
    return records


def import_records(db, path: str) -> tuple[int, int]:
    """Add the records of `path` to `db` in one transaction: (added, already present)."""
    records = read_records(path)
    ids = db.add_records(records)
    added = sum(1 for i in ids if i is not None)
    return added, len(ids) - added


def write_records(records: Iterable[Record], path: str) -> int:
    """Write records as JSON lines to `path` ('-': standard output), atomically for a
    file. Returns how many were written."""
    if path == "-":
        n = 0
        for rec in records:
            sys.stdout.write(rec.dumps() + "\n")
            n += 1
        sys.stdout.flush()
        return n
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".export-", suffix=".jsonl.tmp", dir=directory)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror}") from None
    try:
        n = 0
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for rec in records:
                f.write(rec.dumps() + "\n")
                n += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return n
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
