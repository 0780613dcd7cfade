"""pytest plugin for users' test suites: fixtures around ``kathikon.testing``.

Loaded automatically (entry point ``pytest11``) when Kathikon is installed.
Importing it has no side effects; Kathikon and Django load when a fixture runs.

    def test_signup(db, kathikon_inline):       # inserts run their jobs at once
        signup("ada@example.com")
        assert Mail.objects.count() == 1

    def test_signup_enqueues(db, kathikon_manual, kathikon_testing):
        signup("ada@example.com")
        kathikon_testing.assert_enqueued(worker=SendWelcome)
        assert kathikon_testing.drain_queue().completed == 1

Database access still comes from pytest-django (``db``, ``transactional_db``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def kathikon_testing() -> Any:
    """The ``kathikon.testing`` module: perform_job, drain_queue, assert_enqueued, …"""
    from kathikon import testing

    return testing


@pytest.fixture
def kathikon_inline() -> Iterator[None]:
    """``TESTING_MODE = "inline"`` for this test: each due job runs when it is inserted."""
    from kathikon.testing import testing_mode

    with testing_mode("inline"):
        yield


@pytest.fixture
def kathikon_manual() -> Iterator[None]:
    """``TESTING_MODE = "manual"`` for this test: jobs are only inserted; drain them yourself."""
    from kathikon.testing import testing_mode

    with testing_mode("manual"):
        yield
