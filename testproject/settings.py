"""Settings for the test and demo project.

SQLite by default; ``KATHIKON_DB=postgres`` or ``KATHIKON_DB=mariadb`` selects the
local servers (127.0.0.1, trust auth / root with no password).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "kathikon-testproject-not-secret"
DEBUG = os.environ.get("KATHIKON_DEBUG") == "1"
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "testproject.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "/static/"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rangefilter",
    "kathikon",
    "testproject.demo",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
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

DB = os.environ.get("KATHIKON_DB", "sqlite")
# Parallel test runs (two Python/Django versions) use separate database names.
SUFFIX = os.environ.get("KATHIKON_DB_SUFFIX", "")
DATABASES: dict[str, dict[str, Any]]
if DB in ("postgres", "postgresql"):
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("KATHIKON_DB_NAME", "kathikon" + SUFFIX),
        "USER": os.environ.get("KATHIKON_PG_USER", "postgres"),
        "HOST": os.environ.get("KATHIKON_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("KATHIKON_PG_PORT", "5432"),
        "CONN_MAX_AGE": None,
        "TEST": {"NAME": "test_kathikon" + SUFFIX},
    }}
    # Whole-process tests behind PgBouncer (tests/pgbouncer.py): ``default`` goes through
    # the pooler in transaction mode, ``direct`` reaches PostgreSQL for LISTEN.
    if os.environ.get("KATHIKON_PG_BOUNCER_PORT"):
        DATABASES["direct"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
        DATABASES["default"].update(PORT=os.environ["KATHIKON_PG_BOUNCER_PORT"],
                                    DISABLE_SERVER_SIDE_CURSORS=True)
elif DB in ("mariadb", "mysql"):
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": os.environ.get("KATHIKON_DB_NAME", "kathikon" + SUFFIX),
        "USER": os.environ.get("KATHIKON_MYSQL_USER", "root"),
        "PASSWORD": "",
        "HOST": os.environ.get("KATHIKON_MYSQL_HOST", "127.0.0.1"),
        "PORT": os.environ.get("KATHIKON_MYSQL_PORT", "3306"),
        "CONN_MAX_AGE": None,
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {"NAME": "test_kathikon" + SUFFIX, "CHARSET": "utf8mb4"},
    }}
else:
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("KATHIKON_DB_NAME", str(BASE_DIR / f"db{SUFFIX}.sqlite3")),
        # Claims are serialised by SQLite's single writer; IMMEDIATE avoids lock upgrades.
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20,
                    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
        "TEST": {"NAME": str(BASE_DIR / f"test_db{SUFFIX}.sqlite3")},
    }}

# A second database with Kathikon's tables, standing in for a replica that lags behind
# (tests/ops/test_read_database_op.py); its test database is made only for those tests.
_STRAIGHT = DATABASES.get("direct", DATABASES["default"])  # never through the test PgBouncer
DATABASES["replica"] = {**_STRAIGHT, "TEST": {
    **DATABASES["default"]["TEST"],
    "NAME": (str(BASE_DIR / f"test_replica{SUFFIX}.sqlite3")
             if DATABASES["default"]["ENGINE"].endswith("sqlite3")
             else "test_kathikon_replica" + SUFFIX)}}

# Another database of its own, for queues that live there (tests/runtime/test_databases.py,
# tests/test_routing.py); worker processes get its name (and a proxy's port) from the env.
DATABASES["second"] = {**_STRAIGHT, "TEST": {
    **DATABASES["default"]["TEST"],
    "NAME": (str(BASE_DIR / f"test_second{SUFFIX}.sqlite3")
             if DATABASES["default"]["ENGINE"].endswith("sqlite3")
             else "test_kathikon_second" + SUFFIX)}}
for _alias in ("replica", "second"):  # no file of their own outside the tests
    if DATABASES[_alias]["ENGINE"].endswith("sqlite3"):
        DATABASES[_alias]["NAME"] = ":memory:"
if os.environ.get("KATHIKON_SECOND_DB_NAME"):
    DATABASES["second"]["NAME"] = os.environ["KATHIKON_SECOND_DB_NAME"]
if os.environ.get("KATHIKON_SECOND_DB_PORT"):
    DATABASES["second"]["PORT"] = os.environ["KATHIKON_SECOND_DB_PORT"]

KATHIKON: dict[str, Any] = {
    "QUEUES": {"default": {"concurrency": 10}, "emails": {"concurrency": 5}},
}
# Django Tasks (django.tasks on Django 6, the django-tasks backport on 5.2) run on Kathikon.
TASKS = {"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                     "QUEUES": ["default", "emails"]}}
# Whole-process tests start workers with their own settings: a JSON object merged in.
if os.environ.get("KATHIKON_PG_BOUNCER_LISTEN") == "direct" and "direct" in DATABASES:
    KATHIKON["LISTEN_DATABASE"] = "direct"
KATHIKON.update(json.loads(os.environ.get("KATHIKON_SETTINGS_JSON", "{}")))
# Tracing tests (tests/tracing) read a worker process's spans from this file.
if os.environ.get("KATHIKON_TEST_TRACE_FILE"):
    from tests.tracing.file_exporter import install as _install_trace_file

    _install_trace_file(os.environ["KATHIKON_TEST_TRACE_FILE"])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"kathikon": {"handlers": ["console"], "level": "INFO", "propagate": False}},
}
