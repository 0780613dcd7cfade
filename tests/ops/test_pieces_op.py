"""Pure pieces of the dashboard: cron in words, the SVG chart, the capped paginator."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import translation

from kathikon.admin.chart import throughput_svg
from kathikon.admin.cronwords import describe, locale_for
from kathikon.admin.pagination import EstimatedCountPaginator
from kathikon.report import ThroughputPoint


@pytest.mark.parametrize("expression, words", [
    ("* * * * *", "Every minute"),
    ("*/5 * * * *", "Every 5 minutes"),
    ("15 */6 * * *", "At 15 minutes past the hour, every 6 hours"),
    ("0 9 * * *", "At 09:00 AM"),  # en_US reads a 12-hour clock
    ("30 17 * * *", "At 05:30 PM"),
    ("0 0 1 * *", "At 12:00 AM, on day 1 of the month"),
    ("@daily", "At 12:00 AM"),  # nicknames are expanded first
    (" @Hourly ", "Every hour"),
    ("not cron", "not cron"),  # not describable: shown as written
    ("0 0 * * * *", "0 0 * * * *"),  # six fields are not Kathikon cron
])
def test_cron_in_words_in_english(expression, words):
    with translation.override("en"):
        assert describe(expression) == words


@pytest.mark.parametrize("expression, words", [
    ("* * * * *", "Jede Minute"),
    ("*/15 * * * *", "Alle 15 Minuten"),
    ("0 9 * * *", "Um 09:00"),
    ("30 17 * * *", "Um 17:30"),  # de_DE reads a 24-hour clock
    ("0 0 1 * *", "Um 00:00, am 1 Tag des Monats"),
])
def test_cron_in_words_follows_the_active_language(expression, words):
    with translation.override("de"):
        assert describe(expression) == words
    assert describe(expression, "de-at") == words  # a regional variant reads the same
    assert describe(expression, "en") != words


@pytest.mark.parametrize("language, locale_code", [
    ("en", "en_US"), ("en-gb", "en_US"), ("de", "de_DE"), ("es", "es_ES"),
    ("es-mx", "es_MX"), ("pt-br", "pt_PT"), ("zh-hans", "zh_CN"), ("zh-hant", "zh_TW"),
    ("nb", "nb_NO"), ("fr-ca", "fr_FR"),
    ("sr-latn", "en_US"), ("ga", "en_US"), (None, "en_US"),  # no such locale: English
])
def test_django_language_maps_to_a_cron_descriptor_locale(language, locale_code):
    assert locale_for(language) == locale_code


def test_cron_in_words_without_an_active_language_is_english():
    with translation.override(None):
        assert describe("*/5 * * * *") == "Every 5 minutes"


def test_chart_has_a_bar_per_busy_minute_and_totals():
    start = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
    points = [ThroughputPoint(start + dt.timedelta(minutes=i), i % 3, 1 if i == 5 else 0)
              for i in range(60)]
    svg = str(throughput_svg(points))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert 'data-completed="60"' in svg and 'data-failed="1"' in svg
    assert svg.count('fill="#3b8f4e"') == 40 + 1  # 40 busy minutes + the legend
    assert "12:05 UTC: 2 completed, 1 failed" in svg
    assert "<script" not in svg


def test_chart_of_a_quiet_hour():
    start = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
    svg = str(throughput_svg([ThroughputPoint(start, 0, 0)]))
    assert 'data-completed="0"' in svg and "<rect" not in svg


@pytest.mark.django_db
def test_paginator_caps_filtered_counts(job_factory, monkeypatch):
    from kathikon.models import Job

    for _ in range(5):
        job_factory()
    monkeypatch.setattr(EstimatedCountPaginator, "CAP", 3)
    filtered = EstimatedCountPaginator(Job.objects.filter(queue="default"), 2)
    assert filtered.count == 3 and filtered.num_pages == 2
    assert filtered.display_count == "more than 3"
    exact = EstimatedCountPaginator(Job.objects.filter(queue="emails"), 2)
    assert exact.count == 0 and exact.display_count == "0"


@pytest.mark.django_db
def test_paginator_uses_the_estimate_for_unfiltered_lists(job_factory, monkeypatch):
    from kathikon.models import Job
    from kathikon.storage import reports

    job_factory()
    monkeypatch.setattr(reports, "estimated_job_count", lambda: 1_234_567)
    paginator = EstimatedCountPaginator(Job.objects.order_by("-id"), 50)
    assert paginator.display_count == "about 1,234,567"
    assert paginator.count == EstimatedCountPaginator.CAP  # navigation stops at the cap
    small = EstimatedCountPaginator(Job.objects.filter(state="dead"), 50)
    assert small.display_count == "0"


@pytest.mark.django_db
def test_estimated_count_on_postgres(postgres_only, job_factory):
    from django.db import connection

    from kathikon.storage import reports

    job_factory()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE kathikon_job")
    assert reports.estimated_job_count() in (0, 1)


@pytest.mark.django_db
def test_estimated_count_shown_in_the_admin(admin_client_op, job_factory, monkeypatch):
    from kathikon.storage import reports

    job_factory()
    monkeypatch.setattr(reports, "estimated_job_count", lambda: 2_000_000)
    html = admin_client_op.get(reverse("admin:kathikon_job_changelist")).content.decode()
    assert "about 2,000,000 jobs" in html and "counts are estimated" in html


@pytest.mark.django_db
def test_distinct_values(job_factory):
    from kathikon.storage import reports
    from tests import workers

    job_factory(queue="b")
    job_factory(queue="a", worker=workers.Emails)
    job_factory(queue="b")
    assert reports.distinct_values("queue") == ["a", "b"]
    assert reports.distinct_values("worker") == ["tests.workers.Emails", "tests.workers.Succeed"]
    assert reports.distinct_values("queue", limit=1) == ["a"]
    with pytest.raises(ValueError):
        reports.distinct_values("args")
