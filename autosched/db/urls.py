"""Database URLs: the dialect a URL names, and the URL as logs and errors may show it."""
from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from ..errors import UserError

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


def mask_password(url: str) -> str:
    """The URL with any password replaced by ***, for logs, errors and stats (both the
    `user:password@` form and a `password=` query parameter, which libpq accepts)."""
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
