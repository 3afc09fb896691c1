"""Tuning-log databases: `open_database(url)` is the one place URLs become backends."""
from __future__ import annotations

from ..errors import UserError
from .base import Database
from .record import Record, compatible_versions, make_record

DEFAULT_DB_URL = "sqlite:///logs/autosched.db"


def open_database(url: str | None = None) -> Database:
    """`sqlite:///path` (the default, under ./logs/) or `postgresql://user@host:port/db`."""
    url = url or DEFAULT_DB_URL
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "sqlite":
        from .sqlite import SqliteDatabase

        return SqliteDatabase(url)
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresDatabase

        return PostgresDatabase(url)
    raise UserError(f"--db: unsupported URL {mask_password(url)!r}; use sqlite:///PATH "
                    "or postgresql://USER@HOST:PORT/DB")


def mask_password(url: str) -> str:
    """The URL with any password replaced by ***, for logs, errors and stats."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


__all__ = ["Database", "Record", "open_database", "make_record", "compatible_versions",
           "mask_password", "DEFAULT_DB_URL"]
