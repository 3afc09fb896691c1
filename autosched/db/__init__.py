"""Tuning-log databases: `open_database(url)` is the one place URLs become backends."""
from __future__ import annotations

from ..errors import UserError
from .base import Database
from .record import Record, compatible_versions, make_record

DEFAULT_DB_URL = "sqlite:///logs/autosched.db"


# Dialects and the backend that serves each; a `+driver` part of a URL is dropped (the
# backend picks its own driver: sqlite3 for SQLite, psycopg 3 for PostgreSQL).
_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgresql", "postgres": "postgresql"}


def normalize_url(url: str, source: str = "--db") -> tuple[str, str]:
    """(dialect, URL without a driver) of a database URL, so SQLAlchemy / Optuna-style
    URLs work unchanged: `postgresql+psycopg2://...` -> ("postgresql", "postgresql://...").

    Any driver of a known dialect is accepted and dropped, since autosched talks to each
    dialect through one driver of its own. `source` names where the URL came from in the
    UserError of an unknown dialect (`--db`, or the environment variable).
    """
    scheme, sep, rest = url.partition(":")
    dialect = scheme.split("+", 1)[0].lower() if sep else ""
    if dialect not in _DIALECTS:
        raise UserError(f"{source}: unsupported URL {mask_password(url)!r}; use "
                        "sqlite:///PATH or postgresql://USER@HOST:PORT/DB")
    return _DIALECTS[dialect], f"{dialect}:{rest}"


def open_database(url: str | None = None, *, upgrade: bool = False,
                  create: bool = True) -> Database:
    """`sqlite:///path` (the default, under ./logs/) or `postgresql://user@host:port/db`;
    a `+driver` in the scheme (`postgresql+psycopg://`, `sqlite+pysqlite:///`) is dropped.

    A fresh database gets the current schema when `create` (else UserError: commands
    that only read say so instead of creating an empty file). An older schema is refused
    with a UserError unless `upgrade` (what `autosched db upgrade` passes); a newer one
    always is.
    """
    dialect, url = normalize_url(url or DEFAULT_DB_URL)
    if dialect == "sqlite":
        from .sqlite import SqliteDatabase

        return SqliteDatabase(url, upgrade=upgrade, create=create)
    from .postgres import PostgresDatabase

    return PostgresDatabase(url, upgrade=upgrade, create=create)


def mask_password(url: str) -> str:
    """The URL with any password replaced by ***, for logs, errors and stats (both the
    `user:password@` form and a `password=` query parameter, which libpq accepts)."""
    import re
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed URL>"
    netloc, query = parts.netloc, parts.query
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        if ":" in userinfo:
            netloc = userinfo.split(":", 1)[0] + ":***@" + hostport
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", query)
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


__all__ = ["Database", "Record", "open_database", "normalize_url", "make_record",
           "compatible_versions", "mask_password", "DEFAULT_DB_URL"]
