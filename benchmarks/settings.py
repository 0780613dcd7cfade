"""Django settings for benchmark runs: ``BENCH_DB`` = postgres | mariadb | sqlite.

The database name comes from ``BENCH_DB_NAME`` (default ``kathikon_bench``);
the servers are the local ones the test suite uses (override host/port/user
with the same ``KATHIKON_PG_*`` / ``KATHIKON_MYSQL_*`` variables). Kathikon
runs with its default settings: ``KATHIKON = {}``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SECRET_KEY = "kathikon-benchmarks-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rangefilter",
    "kathikon",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
ROOT_URLCONF = "benchmarks.urls"
STATIC_URL = "/static/"

DB = os.environ.get("BENCH_DB", "postgres")
NAME = os.environ.get("BENCH_DB_NAME", "kathikon_bench")

if DB in ("postgres", "postgresql"):
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": NAME,
        "USER": os.environ.get("KATHIKON_PG_USER", "postgres"),
        "HOST": os.environ.get("KATHIKON_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("KATHIKON_PG_PORT", "5432"),
        "CONN_MAX_AGE": None,
    }}
    # The pgbouncer phase (benchmarks/pgbouncer_drain.py): ``default`` through PgBouncer in
    # transaction mode, ``direct`` to PostgreSQL for LISTEN.
    if os.environ.get("KATHIKON_PG_BOUNCER_PORT"):
        DATABASES["direct"] = dict(DATABASES["default"])
        DATABASES["default"].update(PORT=os.environ["KATHIKON_PG_BOUNCER_PORT"],
                                    DISABLE_SERVER_SIDE_CURSORS=True)
elif DB in ("mariadb", "mysql"):
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": NAME,
        "USER": os.environ.get("KATHIKON_MYSQL_USER", "root"),
        "PASSWORD": os.environ.get("KATHIKON_MYSQL_PASSWORD", ""),
        "HOST": os.environ.get("KATHIKON_MYSQL_HOST", "127.0.0.1"),
        "PORT": os.environ.get("KATHIKON_MYSQL_PORT", "3306"),
        "CONN_MAX_AGE": None,
        "OPTIONS": {"charset": "utf8mb4"},
    }}
else:
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(Path(tempfile.gettempdir()) / f"{NAME}.sqlite3"),
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20,
                    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
    }}

KATHIKON: dict[str, object] = {}
if os.environ.get("KATHIKON_PG_BOUNCER_LISTEN") == "direct" and "direct" in DATABASES:
    KATHIKON["LISTEN_DATABASE"] = "direct"

# The tracing phase (benchmarks/tracing_drain.py): a worker with tracing on and the SDK.
if os.environ.get("BENCH_TRACING"):
    KATHIKON["TRACING"] = True
    from benchmarks.tracing_sdk import install as _install_tracing

    _install_tracing()
