"""Shared fixtures: database selection, job factories and vendor markers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

import kathikon
from tests import workers
from tests.pgbouncer import PgBouncer, binary

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_report_header(config: pytest.Config) -> str:
    import django

    from testproject.settings import DB

    return f"kathikon: database={DB} django={django.get_version()}"


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: Any, django_db_blocker: Any) -> None:
    """After pytest-django's: ask each SQLite alias (``replica``, ``second``) once whether
    it supports JSON. Django's system checks ask every alias (a query on SQLite), and a
    test that runs them but may use ``default`` only would be refused that query."""
    from django.db import connections

    with django_db_blocker.unblock():
        for alias in connections:
            if connections[alias].vendor == "sqlite":
                assert connections[alias].features.supports_json_field
        if PARTITIONED:
            partition_test_databases()


#: ``KATHIKON_PARTITIONED=1``: the suite runs on a partitioned job table (PostgreSQL;
#: docs/partitioning.md), as one lane of the test matrix does.
PARTITIONED = os.environ.get("KATHIKON_PARTITIONED", "") == "1"


def partition_test_databases() -> None:
    """Partition the job table of each PostgreSQL test database (not mirrors)."""
    from django.db import connections

    from kathikon.storage import partitions, vendor

    for alias in connections:
        settings = connections[alias].settings_dict
        if (connections[alias].vendor != "postgresql" or settings["TEST"].get("MIRROR")
                or settings["NAME"] != settings["TEST"].get("NAME")):
            continue  # a mirror, or a database this session did not set up
        with vendor.using(alias):
            if not partitions.is_partitioned():
                partitions.enable()


@pytest.fixture
def vendor() -> str:
    return connection.vendor


@pytest.fixture
def postgres_only(vendor: str) -> None:
    if vendor != "postgresql":
        pytest.skip("PostgreSQL only (run with KATHIKON_DB=postgres)")


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode (2 server connections) in front of the test
    PostgreSQL, for the whole session (tests/pgbouncer.py)."""
    from testproject.settings import DB

    if DB not in ("postgres", "postgresql"):
        pytest.skip("PgBouncer fronts PostgreSQL only (run with KATHIKON_DB=postgres)")
    if binary() is None:
        message = "pgbouncer is not installed (scripts/bootstrap.sh installs it)"
        if CI:
            pytest.fail(message)
        pytest.skip(message)
    bouncer = PgBouncer(pool_size=2).start()
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture
def concurrent_db(vendor: str) -> None:
    """Row-locking databases: claims from several connections run truly in parallel."""
    if vendor == "sqlite":
        pytest.skip("SQLite serialises writers; concurrency is tested on PostgreSQL and MariaDB")


@pytest.fixture
def insert_job(db: Any) -> Any:
    """``insert_job(worker=Succeed, args={}, **options)``: insert through the public API."""

    def insert(worker: Any = workers.Succeed, args: dict[str, Any] | None = None,
               **options: Any) -> kathikon.Job:
        return kathikon.insert(worker, args if args is not None else {}, **options)

    return insert
