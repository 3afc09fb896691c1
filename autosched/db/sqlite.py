"""The embedded backend: one SQLite file that several processes on one machine share.

WAL mode lets readers run beside the single writer; every write takes the write lock
up front (BEGIN IMMEDIATE) so a transaction never has to upgrade a read lock, which is
the case SQLite's busy handler cannot wait out. "database is locked" is retried with
jittered exponential backoff until `lock_timeout`, so concurrent tuners simply queue.
synchronous=FULL: a committed record survives a power cut, not only a crash; commits
are rare next to measurements, so their fsync costs nothing that matters.
SQLite over a network filesystem (NFS, SMB) is not safe: use PostgreSQL to share
between machines.
"""
from __future__ import annotations

import logging
import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar
from urllib.parse import parse_qsl, quote

from ..errors import InfrastructureError, UserError
from .schema import SQLITE
from .sqlbase import SqlDatabase

T = TypeVar("T")
log = logging.getLogger("autosched.db")

_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
_PREFIX = "sqlite:///"


def parse_sqlite_url(url: str) -> tuple[str, bool]:
    """`sqlite:///relative/path`, `sqlite:////absolute/path` or `sqlite:///:memory:`,
    optionally `?mode=ro`. Returns (path, read_only)."""
    if not url.lower().startswith(_PREFIX):
        raise UserError(f"--db: malformed SQLite URL {url!r}; use sqlite:///relative/path "
                        "or sqlite:////absolute/path")
    rest, _, query = url[len(_PREFIX):].partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = set(options) - {"mode"}
    if unknown or options.get("mode", "rw") not in ("rw", "ro"):
        raise UserError(f"--db: unsupported option in {url!r}; the only one is ?mode=ro")
    if not rest:
        raise UserError(f"--db: {url!r} names no file")
    path = rest if rest == ":memory:" else os.path.expanduser(rest)
    return path, options.get("mode") == "ro"


def _is_busy(e: sqlite3.Error) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


class SqliteDatabase(SqlDatabase):
    """`sqlite:///path`: a file shared by processes on this machine (not across NFS)."""

    dialect = SQLITE

    def __init__(self, url: str, *, upgrade: bool = False, create: bool = True,
                 lock_timeout: float = 120.0):
        self.url = url
        self.path, self.read_only = parse_sqlite_url(url)
        memory = self.path == ":memory:"
        if not create and not memory and not os.path.exists(self.path):
            raise UserError(f"no database at {os.path.abspath(self.path)} ({url}); "
                            "`autosched tune` or `autosched db import` creates it")
        self.lock_timeout = lock_timeout
        # SQLite's own busy wait, per attempt; _retry keeps trying until lock_timeout.
        self._busy_ms = int(min(lock_timeout, 1.0) * 1000)
        # One connection per object; the lock keeps threads' transactions apart.
        self._lock = threading.RLock()
        self._conn = self._connect()
        try:
            self._retry(self._configure)
            self._open_schema(upgrade, create)
        except BaseException:
            self._conn.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        memory = self.path == ":memory:"
        if not memory and not self.read_only:
            parent = Path(self.path).parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise UserError(f"cannot create directory {parent} for {self.url}: "
                                f"{e.strerror}") from None
        if not memory and self.read_only and not os.path.exists(self.path):
            raise UserError(f"no database at {self.path} (opened read-only by {self.url})")
        target = ":memory:" if memory else (
            f"file:{quote(os.path.abspath(self.path))}?mode={'ro' if self.read_only else 'rwc'}")
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves.
            return sqlite3.connect(target, uri=not memory, isolation_level=None,
                                   timeout=self._busy_ms / 1000, check_same_thread=False)
        except sqlite3.Error as e:
            raise UserError(f"cannot open {self.url}: {e}") from None

    def _configure(self) -> None:
        c = self._conn
        c.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        c.execute("PRAGMA foreign_keys = ON")
        if self.read_only:
            c.execute("PRAGMA query_only = ON")
            return
        if self.path != ":memory:":
            mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("%s: journal mode is %s, not WAL; readers will wait for writers",
                            self.url, mode)
        c.execute("PRAGMA synchronous = FULL")

    # -- transactions --------------------------------------------------------------
    def _retry(self, fn: Callable[[], T]) -> T:
        """Run `fn`, retrying while another process holds the lock."""
        deadline = time.monotonic() + self.lock_timeout
        delay, attempt = 0.002, 0
        while True:
            try:
                return fn()
            except sqlite3.Error as e:
                if not _is_busy(e):
                    raise self._user_error(e) from None
                if time.monotonic() >= deadline:
                    raise UserError(f"{self.url} stayed locked by another process for "
                                    f"{self.lock_timeout:.0f} s; is a transaction left "
                                    "open somewhere?") from None
            attempt += 1
            if attempt % 50 == 0:
                log.warning("%s is busy; still retrying (%d attempts)", self.url, attempt)
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.25)

    def transaction(self, fn: Callable[..., T], *, write: bool) -> T:
        def once() -> T:
            with self._lock:
                return attempt()

        def attempt() -> T:
            self._conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                out = fn(self._conn.cursor())
                self._conn.execute("COMMIT")
                return out
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

        return self._retry(once)

    def _stream(self, sql: str, params: tuple, batch: int) -> Iterator[tuple]:
        # Its own connection, so the caller may query or write through this object
        # while iterating; one SELECT reads one consistent snapshot in WAL mode.
        memory = self.path == ":memory:"
        conn = self._conn if memory else self._connect()
        try:
            if not memory:
                conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            cur = self._retry(lambda: conn.execute(sql, params))
            while True:
                chunk = self._retry(lambda: cur.fetchmany(batch))
                if not chunk:
                    return
                yield from chunk
        finally:
            if not memory:
                conn.close()

    def _user_error(self, e: sqlite3.Error) -> Exception:
        """The sqlite errors a user can act on become one clear line."""
        msg = str(e)
        low = msg.lower()
        if "readonly" in low or "read-only" in low or "query_only" in low.replace(" ", "_"):
            return UserError(f"{self.url} is read-only here; records cannot be added ({msg})")
        if "not a database" in low or "malformed" in low:
            return UserError(f"{self.path} is not a usable SQLite database ({msg})")
        if "disk is full" in low or "disk i/o" in low:  # the machine's, not the input's
            return InfrastructureError(f"cannot write to {self.url}: {msg}",
                                       f"free space on the disk holding "
                                       f"{os.path.abspath(self.path)}, then rerun")
        if "unable to open" in low:
            return UserError(f"cannot use {self.url}: {msg}")
        return e

    def integrity_check(self) -> str:
        """SQLite's own consistency check: "ok" when the file is sound."""
        rows = self.transaction(lambda cur: cur.execute("PRAGMA integrity_check").fetchall(),
                                 write=False)
        return "; ".join(str(r[0]) for r in rows)

    def close(self) -> None:
        self._conn.close()
