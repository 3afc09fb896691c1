"""`open_database(url)`: the one place URLs become backends."""
from __future__ import annotations

from .base import Database
from .urls import DEFAULT_DB_URL, normalize_url


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
