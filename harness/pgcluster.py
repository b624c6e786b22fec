"""A throw-away PostgreSQL cluster for tests and benchmarks.

The cluster lives in a temporary folder (data directory, unix socket, log), listens on
a free loopback TCP port only, runs with ``fsync=off`` for speed and is stopped and
deleted by :meth:`PgCluster.stop` (also registered with :mod:`atexit`, so an aborted
test session does not leave a postmaster behind).

PostgreSQL refuses to run as root: as root, the folder is handed to the ``postgres``
OS user (Debian's ``postgresql`` package creates it) and ``initdb``/``pg_ctl`` run
through ``runuser -u postgres --``; as any other user they run as that user.

Reuse (the multi-instance end-to-end tests)::

    with temporary_cluster() as cluster:            # or PgCluster.start()
        url = cluster.create_gateway_database("e2e")  # migrated, as `gateway db upgrade` does
        # postgresql://postgres:<pw>@127.0.0.1:<port>/e2e: start two `gateway run`
        # processes with GATEWAY_DATABASE_URL=url (or database_url), own state_dirs
        cluster.stop_server(); cluster.start_server()   # a database outage, same data

In pytest, use the fixtures of ``tests/conftest.py`` instead: ``pg_cluster`` (one per
session), ``pg_url`` (a migrated database per test), ``pg_empty_url``.

The superuser ``postgres`` gets a random password (scram-sha-256 over TCP), so the
URLs carry a real secret and tests can check that no message ever names it.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PgCluster", "PgUnavailable", "find_pg_bindir", "temporary_cluster"]

_PG_USER = "postgres"


class PgUnavailable(RuntimeError):
    """No PostgreSQL server binaries here (or they cannot be run); the reason says which."""


def find_pg_bindir() -> Path | None:
    """The folder holding ``initdb``/``pg_ctl``/``postgres``, or None.

    ``$GATEWAY_PG_BINDIR`` when set (and only it: a folder without the binaries means
    none, e.g. to run the suite as on a machine without PostgreSQL), else
    ``pg_config --bindir``, else the newest ``/usr/lib/postgresql/*/bin`` (Debian puts
    the server binaries there, off PATH).
    """

    def usable(cand: Path) -> bool:
        return all((cand / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres"))

    if os.environ.get("GATEWAY_PG_BINDIR"):
        chosen = Path(os.environ["GATEWAY_PG_BINDIR"])
        return chosen if usable(chosen) else None
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out:
                candidates.append(Path(out))

    def version_key(path: str) -> tuple[int, ...]:
        part = Path(path).parent.name
        return tuple(int(x) for x in part.split(".") if x.isdigit()) or (0,)

    candidates += [
        Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version_key)[::-1]
    ]
    for cand in candidates:
        if usable(cand):
            return cand
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class PgCluster:
    """A running throw-away cluster; :meth:`stop` ends it and deletes its folder."""

    bindir: Path
    root: Path
    port: int
    password: str = field(repr=False)
    _as_postgres: bool = False
    _stopped: bool = False

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    def url(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URL for ``dbname`` as the superuser, over loopback TCP."""
        return f"postgresql://{_PG_USER}:{self.password}@127.0.0.1:{self.port}/{dbname}"

    @classmethod
    def start(cls, *, bindir: Path | None = None, timeout: float = 60.0) -> PgCluster:
        """initdb + pg_ctl start in a new temporary folder; raises :class:`PgUnavailable`."""
        found = bindir or find_pg_bindir()
        if found is None:
            raise PgUnavailable(
                "no PostgreSQL server binaries (initdb, pg_ctl, postgres): install Debian's "
                "`postgresql` package (`python3 dev.py setup` does, as root) or set GATEWAY_PG_BINDIR"
            )
        as_postgres = hasattr(os, "geteuid") and os.geteuid() == 0
        if as_postgres:
            import pwd

            try:
                pw = pwd.getpwnam(_PG_USER)
            except KeyError:
                raise PgUnavailable(
                    "running as root, and there is no `postgres` OS user to run the server as"
                ) from None
        root = Path(tempfile.mkdtemp(prefix="gateway-pg-"))
        cluster = cls(found, root, _free_port(), secrets.token_urlsafe(18), as_postgres)
        atexit.register(cluster.stop)
        try:
            cluster.socket_dir.mkdir()
            pwfile = root / "pw"
            pwfile.write_text(cluster.password + "\n")
            if as_postgres:
                for path in (root, cluster.socket_dir, pwfile):
                    os.chown(path, pw.pw_uid, pw.pw_gid)
            cluster._pg(
                "initdb",
                "-D",
                str(cluster.datadir),
                "-U",
                _PG_USER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                timeout=timeout,
            )
            pwfile.unlink()
            options = " ".join(
                [
                    f"-p {cluster.port}",
                    f"-k {cluster.socket_dir}",
                    "-c listen_addresses=127.0.0.1",
                    "-c fsync=off",
                    "-c synchronous_commit=off",
                    "-c full_page_writes=off",
                    "-c max_connections=200",
                    "-c shared_buffers=64MB",
                ]
            )
            cluster._pg(
                "pg_ctl",
                "-D",
                str(cluster.datadir),
                "-l",
                str(root / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                str(int(timeout)),
                "start",
                timeout=timeout + 5,
            )
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _pg(self, tool: str, *args: str, timeout: float) -> str:
        argv = [str(self.bindir / tool), *args]
        if self._as_postgres:
            runuser = shutil.which("runuser")
            argv = (
                [runuser, "-u", _PG_USER, "--", *argv]
                if runuser
                else ["su", _PG_USER, "-s", "/bin/sh", "-c", " ".join(_quote(a) for a in argv)]
            )
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.root,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            log = ""
            with contextlib.suppress(OSError):
                log = (self.root / "server.log").read_text()[-2000:]
            raise PgUnavailable(
                f"{tool} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}\n{log}"
            )
        return proc.stdout

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql)

    def create_database(self, name: str | None = None, *, template: str | None = None) -> str:
        """A new empty database (or a copy of ``template``); returns its URL."""
        name = name or "t_" + secrets.token_hex(6)
        if not name.replace("_", "").isalnum():
            raise ValueError("database names here are [A-Za-z0-9_]")
        tmpl = f' TEMPLATE "{template}"' if template else " TEMPLATE template0"
        self._admin(f'CREATE DATABASE "{name}"{tmpl}')
        return self.url(name)

    def create_gateway_database(self, name: str | None = None) -> str:
        """A new database at the gateway's current schema (what `gateway db upgrade`
        makes); returns its URL, ready for ``database_url`` / ``GATEWAY_DATABASE_URL``."""
        from gateway.store import open_store

        url = self.create_database(name)
        open_store(self.root, url, migrate=True).close()
        return url

    def drop_database(self, name: str) -> None:
        """Drop ``name``, closing whatever connections remain on it."""
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def restart(self, *, down_seconds: float = 0.0, timeout: float = 60.0) -> None:
        """Stop the server (fast: connections are cut), wait, start it again."""
        self.stop_server()
        time.sleep(down_seconds)
        self.start_server(timeout=timeout)

    def stop_server(self) -> None:
        """Stop the postmaster but keep the data (see :meth:`start_server`)."""
        self._pg("pg_ctl", "-D", str(self.datadir), "-m", "fast", "-w", "stop", timeout=60)

    def start_server(self, *, timeout: float = 60.0) -> None:
        options = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200 -c shared_buffers=64MB"
        )
        self._pg(
            "pg_ctl",
            "-D",
            str(self.datadir),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            str(int(timeout)),
            "start",
            timeout=timeout + 5,
        )

    def stop(self) -> None:
        """Stop the server (immediate) and delete the folder; idempotent, never raises."""
        if self._stopped:
            return
        self._stopped = True
        if (self.datadir / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._pg(
                    "pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop", timeout=60
                )
        shutil.rmtree(self.root, ignore_errors=True)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


@contextlib.contextmanager
def temporary_cluster(*, bindir: Path | None = None) -> Iterator[PgCluster]:
    """:meth:`PgCluster.start`, stopped and deleted on exit (also on failure)."""
    cluster = PgCluster.start(bindir=bindir)
    try:
        yield cluster
    finally:
        cluster.stop()
