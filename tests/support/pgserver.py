"""A throwaway PostgreSQL server for tests and benchmarks.

`PgServer().start()` runs initdb and pg_ctl on a temporary data directory, listening only
on 127.0.0.1 on a free port, with password (scram-sha-256) authentication for TCP.
PostgreSQL refuses to run as root, so when we are root the server runs as the `postgres`
OS user (`runuser -u postgres --`). Use it as a context manager or call stop().

    with PgServer() as pg:
        url = pg.url()                      # superuser URL
        pg.execute("CREATE DATABASE x")

`find_bindir()` raises PgUnavailable when no server binaries are installed (Debian
package `postgresql-15`, or any `postgresql-NN`).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SUPERUSER = "postgres"
SUPERUSER_PASSWORD = "super-secret-pw"


class PgUnavailable(RuntimeError):
    """No PostgreSQL server binaries here (or no OS user to run them as)."""


def find_bindir() -> Path:
    """The directory holding initdb and pg_ctl: $PG_BINDIR, else the newest
    /usr/lib/postgresql/NN/bin, else PATH."""
    candidates = [os.environ.get("PG_BINDIR", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit()
                         else 0, reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).parent))
    for c in candidates:
        if c and (Path(c) / "initdb").exists() and (Path(c) / "pg_ctl").exists():
            return Path(c)
    raise PgUnavailable("PostgreSQL server binaries (initdb, pg_ctl) not found; "
                        "install the Debian package postgresql-15")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One temporary server; `url(user, password, dbname)` builds connection URLs."""

    def __init__(self, *, fsync: bool = True):
        self.bindir = find_bindir()
        self.fsync = fsync
        self.port = 0
        self.datadir: Path | None = None
        self._as_user: list[str] = []
        self._tmp: str | None = None
        self._databases = 0
        self._opts = ""

    # -- lifecycle -----------------------------------------------------------------
    def _prepare_user(self, path: str) -> None:
        if os.geteuid() != 0:
            return
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            raise PgUnavailable("running as root and there is no `postgres` OS user "
                                "to run the server as") from None
        self._as_user = ["runuser", "-u", "postgres", "--"]
        os.chown(path, pw.pw_uid, pw.pw_gid)

    def _run(self, *argv: str) -> None:
        proc = subprocess.run(self._as_user + list(argv), capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{Path(argv[0]).name} failed ({proc.returncode}):\n"
                               f"{proc.stdout}\n{proc.stderr}")

    def start(self) -> "PgServer":
        self._tmp = tempfile.mkdtemp(prefix="autosched-pg-")
        os.chmod(self._tmp, 0o755)
        self.datadir = Path(self._tmp) / "data"
        self.datadir.mkdir(mode=0o700)
        pwfile = Path(self._tmp) / "pw"
        pwfile.write_text(SUPERUSER_PASSWORD + "\n")
        for p in (self._tmp, str(self.datadir), str(pwfile)):
            self._prepare_user(p)
        self._run(str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", SUPERUSER,
                  f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=trust",
                  "-E", "UTF8", "--locale=C", "--no-sync")
        pwfile.unlink()
        self.port = free_port()
        self._pg_ctl_start()
        return self

    def _pg_ctl_start(self) -> None:
        self._opts = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                      f"-c unix_socket_directories={self._tmp} -c max_connections=100 "
                      f"-c fsync={'on' if self.fsync else 'off'}")
        self.resume()

    def halt(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data: what a restart or a failover looks like to
        clients (their connections drop); `resume()` starts it again on the same port.
        `mode` "immediate" stops it as a crash would."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w",
                  "stop")

    def resume(self) -> None:
        """Start the server (again) on its data directory and port."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-w", "-t", "60",
                  "-l", str(Path(self._tmp) / "server.log"), "-o", self._opts, "start")

    def restart(self, down_seconds: float = 0.0) -> None:
        """Crash (immediate shutdown: every connection drops), stay down `down_seconds`,
        start again on the same port and data."""
        self.halt("immediate")
        time.sleep(down_seconds)
        self.resume()

    def stop(self) -> None:
        if self.datadir is not None and (self.datadir / "postmaster.pid").exists():
            try:
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "fast",
                          "-w", "stop")
            except RuntimeError:
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m",
                          "immediate", "-w", "stop")
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self.datadir = None

    def __enter__(self) -> "PgServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log(self) -> str:
        path = Path(self._tmp or "") / "server.log"
        return path.read_text() if path.exists() else ""

    # -- use -----------------------------------------------------------------------
    def url(self, user: str = SUPERUSER, password: str | None = SUPERUSER_PASSWORD,
            dbname: str = "postgres") -> str:
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, owner: str = SUPERUSER) -> str:
        """CREATE DATABASE with a name unique on this server; returns the name."""
        self._databases += 1
        name = f"db{self._databases}"
        self.execute(f"CREATE DATABASE {name} OWNER {owner}")
        return name

    def execute(self, *statements: str, dbname: str = "postgres") -> None:
        """Run statements as the superuser, each in autocommit (CREATE DATABASE needs it)."""
        import psycopg

        with psycopg.connect(self.url(dbname=dbname), autocommit=True) as conn:
            for sql in statements:
                conn.execute(sql)
