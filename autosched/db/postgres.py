"""The shared backend: a PostgreSQL database a team uses from many machines.

Connections come from a psycopg_pool pool. Uniqueness is the server's (a unique index
and INSERT .. ON CONFLICT DO NOTHING), so concurrent writers never duplicate a record.
Transactions that fail on a serialization failure or a deadlock (possible when the
server defaults to SERIALIZABLE) are retried with backoff. A connection lost after the
database was opened (a restart, a failover, a dropped link) is retried with backoff for
`reconnect_timeout` seconds, then raised as InfrastructureError: the tuning loop stops
without recording the chunk in flight. Failures a user can act on when opening (bad
URL, wrong credentials, unreachable server, a read-only role asked to write) become one
UserError line with the password masked.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Callable, Iterator, TypeVar

from ..errors import InfrastructureError, UserError
from .schema import POSTGRES
from .sqlbase import SqlDatabase

T = TypeVar("T")
log = logging.getLogger("autosched.db")

_RETRIES = 8  # serialization failures and deadlocks
_SCHEMA_LOCK_ID = 0x6175_746F_7363  # "autosc": pg_advisory_lock key for schema changes


def _one_line(e: Exception, secret: str | None) -> str:
    text = " ".join(str(e).split())
    return text.replace(secret, "***") if secret else text


class _Cursor:
    """A psycopg cursor that takes the `?` placeholders the shared SQL is written with."""

    def __init__(self, cur):
        self.cur = cur

    def execute(self, sql: str, params: tuple = ()):
        self.cur.execute(sql.replace("?", "%s"), params)
        return self

    def fetchone(self):
        return self.cur.fetchone()

    def fetchall(self):
        return self.cur.fetchall()


class PostgresDatabase(SqlDatabase):
    """`postgresql://user[:password]@host[:port]/dbname` (libpq URL; the password may
    also come from PGPASSWORD or ~/.pgpass, which keeps it out of command lines)."""

    dialect = POSTGRES

    def __init__(self, url: str, *, upgrade: bool = False, create: bool = True,
                 pool_size: int = 4, connect_timeout: int = 10,
                 reconnect_timeout: float = 30.0):
        from .urls import mask_password

        try:  # an optional extra: a SQLite-only install does without it
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as e:
            raise UserError(f"--db {mask_password(url)}: PostgreSQL needs psycopg and "
                            f"psycopg-pool ({(str(e).splitlines() or [''])[0]}): "
                            "pip install 'autosched[postgres]'") from None
        self.url = mask_password(url)
        self._secret = _password(url)
        self.reconnect_timeout = reconnect_timeout
        conninfo = self._conninfo(url, connect_timeout)
        self._probe(psycopg, conninfo)
        self._pool = ConnectionPool(conninfo, min_size=1, max_size=pool_size, open=False,
                                    timeout=float(connect_timeout) + 5, name="autosched-db",
                                    kwargs={"autocommit": True})
        try:
            self._pool.open(wait=True, timeout=float(connect_timeout) + 5)
            self._open_schema(upgrade, create)
        except BaseException:
            self._pool.close()
            raise

    def _conninfo(self, url: str, connect_timeout: int) -> str:
        from urllib.parse import urlsplit

        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        try:
            urlsplit(url).port  # libpq would only say "connection is bad" later
        except ValueError as e:
            raise UserError(f"--db: malformed PostgreSQL URL {self.url!r} ({e})") from None
        try:
            conninfo_to_dict(url)
            return make_conninfo(url, connect_timeout=connect_timeout,
                                 application_name="autosched")
        except ProgrammingError as e:
            raise UserError(f"--db: malformed PostgreSQL URL {self.url!r} "
                            f"({_one_line(e, self._secret)})") from None

    def _probe(self, psycopg, conninfo: str) -> None:
        """Connect once in the foreground: the pool would only log why it cannot."""
        try:
            psycopg.connect(conninfo).close()
        except psycopg.Error as e:
            raise UserError(f"cannot connect to {self.url}: "
                            f"{_one_line(e, self._secret)}") from None

    # -- transactions --------------------------------------------------------------
    def transaction(self, fn: Callable[..., T], *, write: bool,
                     session_lock: bool = False, block: bool = True) -> T:
        import psycopg
        from psycopg import errors
        from psycopg_pool import PoolTimeout

        conflicts = lost = 0
        lost_since = None
        while True:
            try:
                with self._pool.connection() as conn:
                    if not block:  # one statement in autocommit: atomic by itself
                        with conn.cursor() as cur:
                            return fn(_Cursor(cur))
                    return self._once(conn, fn, write, session_lock)
            except (errors.SerializationFailure, errors.DeadlockDetected) as e:
                conflicts += 1
                if conflicts > _RETRIES:
                    raise UserError(f"{self.url}: a write kept conflicting with other "
                                    f"writers ({_one_line(e, self._secret)})") from None
                log.info("%s: retrying after %s", self.url, type(e).__name__)
                _backoff(0.01, conflicts)
            except (errors.InsufficientPrivilege, errors.ReadOnlySqlTransaction) as e:
                what = "write to" if write else "read"
                raise UserError(f"{self.url}: this role may not {what} the autosched tables "
                                f"({_one_line(e, self._secret)})") from None
            except (PoolTimeout, psycopg.OperationalError) as e:
                # A restarted server or a dropped link: the pool replaces the broken
                # connection. Retrying a write is safe because inserts are idempotent
                # (a batch that did commit comes back as duplicates).
                lost += 1
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since >= self.reconnect_timeout:
                    raise InfrastructureError(
                        f"lost the connection to the database server {self.url} "
                        f"({_one_line(e, self._secret)}) and could not reconnect within "
                        f"{self.reconnect_timeout:g} s", "check that the server is running "
                        "and reachable, then rerun: committed records are kept") from None
                log.warning("%s: connection lost (%s); retrying", self.url,
                            _one_line(e, self._secret))
                _backoff(0.5, lost)

    @staticmethod
    def _once(conn, fn, write: bool, session_lock: bool):
        # Pool connections are in autocommit mode: conn.transaction() is a real
        # BEGIN/COMMIT, and the session lock below is taken outside any transaction.
        if session_lock:
            conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK_ID,))
        try:
            conn.read_only = not write  # BEGIN READ ONLY: a read path cannot write
            with conn.transaction(), conn.cursor() as cur:
                return fn(_Cursor(cur))
        finally:
            if session_lock and not conn.closed:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK_ID,))

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        # best/top_k/measured_keys are single SELECTs: no BEGIN/COMMIT round trips.
        return self.transaction(lambda cur: cur.execute(sql, params).fetchall(),
                                 write=False, block=False)

    def _schema_transaction(self, fn: Callable[..., T]) -> T:
        # The lock is taken before BEGIN: a transaction that began before another
        # process created the tables would still see them as missing (PostgreSQL's
        # catalog caches are refreshed at transaction start), then fail to create them.
        return self.transaction(fn, write=True, session_lock=True)

    def _insert_returning(self, cur, sql: str, params: list[tuple]) -> list[int | None]:
        raw = cur.cur
        raw.executemany(sql.replace("?", "%s"), params, returning=True)
        out = []
        while True:
            row = raw.fetchone()
            out.append(None if row is None else int(row[0]))
            if not raw.nextset():
                break
        return out

    def _stream(self, sql: str, params: tuple, batch: int) -> Iterator[tuple]:
        # A server-side cursor streams a consistent snapshot without loading it all.
        with self._pool.connection() as conn:
            conn.read_only = True
            with conn.transaction(), conn.cursor(name="autosched_stream") as cur:
                cur.itersize = batch
                cur.execute(sql.replace("?", "%s"), params)
                yield from cur

    def close(self) -> None:
        self._pool.close()


def _backoff(base: float, attempt: int) -> None:
    time.sleep(min(base * 2 ** (attempt - 1), 5.0) * (0.5 + random.random()))


def _password(url: str) -> str | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).password
    except ValueError:
        return None
