"""The job list's structured search (kathikon.storage.search) on every database: a JSON key
and value in args or meta, and the text of the last error."""

from __future__ import annotations

import pytest
from django.db import connection
from django.urls import reverse

from kathikon.states import JobState
from tests import workers
from tests.ops.conftest import error, make_job

URL = reverse("admin:kathikon_job_changelist")


def found(client, term: str, **filters: str) -> set[str]:
    response = client.get(URL, {"q": term, **filters})
    assert response.status_code == 200
    return {job.args.get("name", "?") for job in response.context["cl"].result_list}


@pytest.fixture
def searchable(db):
    make_job(args={"name": "ada", "user_id": 42, "customer": {"id": 7, "plan": "pro"}},
             meta={"tenant": "acme"}, state=JobState.DEAD,
             errors=[error(message="connection reset"), error(message="Read TIMEOUT after 30s",
                                                              attempt=2)])
    make_job(args={"name": "bob", "user_id": 43, "customer": {"id": 8, "plan": "pro"}},
             meta={"tenant": "globex"}, state=JobState.DEAD,
             errors=[error(message="timeout"), error(message="refused", attempt=2)])
    make_job(args={"name": "cy", "user_id": "42", "flag": True}, worker=workers.Succeed)


def test_a_key_and_value_in_args_or_meta(admin_client_op, searchable):
    assert found(admin_client_op, "args.user_id=42") == {"ada"}  # 42, not "42"
    assert found(admin_client_op, 'args.user_id="42"') == {"cy"}
    assert found(admin_client_op, "args.customer.id=8") == {"bob"}
    assert found(admin_client_op, "args.customer.plan=pro") == {"ada", "bob"}
    assert found(admin_client_op, "args.flag=true") == {"cy"}
    assert found(admin_client_op, "meta.tenant=acme") == {"ada"}
    assert found(admin_client_op, "args.user_id=42", state="dead") == {"ada"}
    assert found(admin_client_op, "args.nobody=1") == set()
    assert found(admin_client_op, "ada") == {"ada"}  # plain text still searches args


def test_the_text_of_the_last_error(admin_client_op, searchable):
    assert found(admin_client_op, "error:timeout") == {"ada"}  # bob's timeout was not last
    assert found(admin_client_op, "error:REFUSED") == {"bob"}
    assert found(admin_client_op, "error:nothing like it") == set()


def test_postgresql_has_the_partial_gin_index(db):
    if connection.vendor != "postgresql":
        pytest.skip("the GIN index is PostgreSQL's (MariaDB and SQLite read the rows)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s",
                       ["kathikon_job_failed_args"])
        [(definition,)] = cursor.fetchall()
    assert "USING gin (args jsonb_path_ops)" in definition
    assert "'dead'" in definition and "'retryable'" in definition


def test_an_error_search_reads_only_the_newest_matches_of_the_filters(admin_client_op,
                                                                       searchable, monkeypatch):
    from kathikon.storage import search

    monkeypatch.setattr(search, "ERROR_SCAN", 1)  # only the newest dead job: bob's
    assert found(admin_client_op, "error:timeout", state="dead") == set()  # ada's is older
    assert found(admin_client_op, "error:refused", state="dead") == {"bob"}
    monkeypatch.setattr(search, "ERROR_SCAN", 2)
    assert found(admin_client_op, "error:timeout", state="dead") == {"ada"}
