"""Internal: the job list's filters — state, queue, worker, workflow, and the inserted/finished
dates."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from rangefilter.filters import DateRangeFilter, DateRangeFilterBuilder

from kathikon import conf
from kathikon.ids import parse_id
from kathikon.models import Job
from kathikon.states import JobState
from kathikon.storage import queues as queue_storage
from kathikon.storage import reports
from kathikon.storage import workflows as workflow_storage


class StateFilter(admin.SimpleListFilter):
    """Completed jobs are listed by ``completed_at`` (see ``JobAdmin.get_ordering``): on
    PostgreSQL the ``(state, id)`` index leaves them out, ``kathikon_job_completed`` holds
    them (its condition, ``completed_at IS NOT NULL``, is true of every completed job and is
    spelled out so the planner may use it)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(JobState.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value() == JobState.COMPLETED:
            return queryset.filter(state=JobState.COMPLETED, completed_at__isnull=False)
        return queryset.filter(state=self.value()) if self.value() else queryset


class QueueFilter(admin.SimpleListFilter):
    """Queue names from the settings, the queue rows and the jobs (an index skip-scan)."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = (set(conf.queue_names()) | set(queue_storage.queue_rows())
                 | set(reports.distinct_values("queue")))
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(reports.matching("queue", value)) if value else queryset


class DatabaseFilter(admin.SimpleListFilter):
    """Whose jobs the list shows when queues live in several databases (docs/scaling.md):
    ``KATHIKON["DATABASE"]``'s unless another is picked; the page then reads, and its
    actions write, that database (kathikon.admin.common.reads_for). Hidden with one."""

    title = "database"
    parameter_name = "database"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        databases = conf.databases()
        return [(alias, alias) for alias in databases] if len(databases) > 1 else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset  # the queryset is on the chosen database already

    def choices(self, changelist: Any) -> Iterator[Any]:
        current = self.value() or conf.database()  # no "All": one database at a time
        for alias, label in self.lookup_choices:
            yield {"selected": current == alias, "display": label,
                   "query_string": changelist.get_query_string({self.parameter_name: alias})}


class WorkerFilter(admin.SimpleListFilter):
    title = "worker"
    parameter_name = "worker"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name.rsplit(".", 1)[-1]) for name in reports.distinct_values("worker")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(reports.matching("worker", value)) if value else queryset


class WorkflowFilter(admin.SimpleListFilter):
    """The steps of one workflow: ``?workflow=<id>`` (hex or dashed), as the workflow's page
    links it. Shown only while set (a choice per workflow would list them all); a value
    that is no id answers 400."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # Django applies only a filter that has a choice: a bad value needs one too, to be
        # refused by queryset() rather than ignored.
        value = self.value()
        if not value:
            return []
        pk = parse_id(value)
        row = workflow_storage.workflows().filter(pk=pk).first() if pk else None
        return [(value, f"{row.name} ({pk.hex[:8]}…)" if row and pk else value)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if not value:
            return queryset
        pk = parse_id(value)
        if pk is None:
            raise IncorrectLookupParameters(f"workflow: not a workflow id: {value!r:.80}")
        return queryset.filter(id__in=workflow_storage.step_ids(pk, using=queryset.db))


# -- dates -----------------------------------------------------------------------------------

def utc_bound(value: dt.datetime) -> dt.datetime:
    """``value`` (naive: in the current time zone) in UTC. A time outside UTC's calendar
    (0001-01-01 east of UTC, 9999-12-31 west of it) becomes its first or last instant:
    converting it, SQLite's and MariaDB's adapters raise OverflowError (a 500)."""
    if timezone.is_naive(value):
        value = value.replace(tzinfo=timezone.get_current_timezone())
    try:
        return value.astimezone(dt.timezone.utc)
    except OverflowError:
        end = dt.datetime.min if value.year == dt.MINYEAR else dt.datetime.max
        return end.replace(tzinfo=dt.timezone.utc)


class DateRange(DateRangeFilter):
    """rangefilter's date range (either end may be left empty). A date that is not one
    lists no job, with the form saying why (rangefilter would list every job), and the
    first and last days of the calendar work in every time zone."""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.form.is_bound and not self.form.is_valid():
            return queryset.none()
        return super().queryset(request, queryset)

    @staticmethod
    def make_dt_aware(value: dt.datetime, tzname: Any) -> dt.datetime:
        return utc_bound(value.replace(tzinfo=tzname)) if settings.USE_TZ else value


class DateFilter(admin.DateFieldListFilter):
    """Django's date filter (any date, today, past 7 days, …), used when rangefilter is not
    installed; its bounds reach the database in UTC (see ``utc_bound``)."""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job] | None:
        bounds: dict[str, Any] = self.used_parameters  # {lookup: [values]}
        for key, values in bounds.items():
            if not key.endswith("__isnull"):
                try:
                    bounds[key] = [utc_bound(self.field.to_python(value)) for value in values]
                except ValidationError as exc:
                    raise IncorrectLookupParameters(exc) from exc
        return super().queryset(request, queryset)


class InsertedFilter(DateFilter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.title = "inserted"


class FinishedFilter(DateFilter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.title = "finished"


def date_filters() -> list[tuple[str, Any]]:
    """The *inserted* and *finished* filters: date ranges with rangefilter, else Django's."""
    # django-admin-rangefilter's date pickers need its templates, found only when
    # "rangefilter" is in INSTALLED_APPS.
    if not apps.is_installed("rangefilter"):
        return [("inserted_at", InsertedFilter), ("completed_at", FinishedFilter)]
    return [("inserted_at", date_range("inserted")), ("completed_at", date_range("finished"))]


def date_range(title: str) -> type[DateRange]:
    """A ``DateRange`` titled ``title``, built on rangefilter's builder (which sets it)."""
    return type("DateRange", (DateRange, DateRangeFilterBuilder(title=title)), {})
