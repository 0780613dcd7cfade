"""A PgBouncer of the tests' own: transaction pooling in front of the test PostgreSQL.

Debian's ``pgbouncer`` package (``scripts/bootstrap.sh`` installs it) is started
from a config in a temporary folder, on a free port of its own, with fewer server
connections (``pool_size``) than a worker has threads: every transaction of every
client shares them, as on a busy site. PgBouncer refuses to run as root; as root
it is started with ``-u postgres``.

Workers reach it through the test project's settings: ``KATHIKON_PG_BOUNCER_PORT``
makes ``default`` go through PgBouncer and adds a ``direct`` alias (PostgreSQL
itself) for ``LISTEN`` unless ``KATHIKON_PG_BOUNCER_LISTEN=pooled``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BINARY_PATHS = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def binary() -> str | None:
    """The pgbouncer executable, or None when it is not installed."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return next((path for path in BINARY_PATHS if os.access(path, os.X_OK)), None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """One pgbouncer process in transaction mode; ``start()``, then ``port``; ``stop()``."""

    def __init__(self, *, pool_size: int = 2, upstream_host: str | None = None,
                 upstream_port: int | None = None, user: str | None = None) -> None:
        self.pool_size = pool_size
        self.upstream_host = upstream_host or os.environ.get("KATHIKON_PG_HOST", "127.0.0.1")
        self.upstream_port = upstream_port or int(os.environ.get("KATHIKON_PG_PORT", "5432"))
        self.user = user or os.environ.get("KATHIKON_PG_USER", "postgres")
        self.port = 0
        self.folder = Path(tempfile.mkdtemp(prefix="kathikon-pgbouncer-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.folder / "pgbouncer.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, timeout: float = 10.0) -> PgBouncer:
        executable = binary()
        if executable is None:
            raise RuntimeError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        self.port = free_port()
        self._write_config()
        command = [executable, str(self.folder / "pgbouncer.ini")]
        if os.geteuid() == 0:  # pgbouncer will not run as root
            command[1:1] = ["-u", "postgres"]
            os.chmod(self.folder, 0o777)
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._listening():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer did not start on port {self.port}:\n{self.log()}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def worker_env(self, *, direct_listener: bool = True) -> dict[str, str]:
        """What a worker process's environment needs to reach the database through here."""
        return {"KATHIKON_PG_BOUNCER_PORT": str(self.port),
                "KATHIKON_PG_BOUNCER_LISTEN": "direct" if direct_listener else "pooled"}

    def transactions(self, database: str) -> int:
        """How many transactions PgBouncer has passed to ``database`` (``SHOW STATS``)."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=self.user,
                             dbname="pgbouncer", autocommit=True) as admin:
            cursor = admin.execute("SHOW STATS")
            columns = [column.name for column in cursor.description or []]
            for row in cursor.fetchall():
                stats = dict(zip(columns, row, strict=True))
                if stats["database"] == database:
                    return int(stats["total_xact_count"])
        return 0

    def _listening(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port),
                                                                     timeout=0.2):
            return True
        return False

    def _write_config(self) -> None:
        (self.folder / "userlist.txt").write_text(f'"{self.user}" ""\n')
        (self.folder / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={self.upstream_host} port={self.upstream_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.folder / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 1000\n"
            f"logfile = {self.log_path}\n"
            f"pidfile = {self.folder / 'pgbouncer.pid'}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            "server_reset_query =\n"
            f"admin_users = {self.user}\n")
        if os.geteuid() == 0:
            with contextlib.suppress(KeyError):
                entry = pwd.getpwnam("postgres")
                for path in self.folder.iterdir():
                    os.chown(path, entry.pw_uid, entry.pw_gid)
