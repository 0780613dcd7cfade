"""Internal: the job admin — list, filters, read-only detail, retry/cancel/rerun/delete."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

import kathikon
from kathikon import conf, dashboard, routing
from kathikon.admin import bulk
from kathikon.admin.common import (
    ActionsMixin,
    DeclaredFiltersChangeList,
    KathikonMedia,
    breakable,
    pre,
    reads_for,
    refuse_unreadable,
    state_badge,
    time_field,
    when,
)
from kathikon.admin.filters import (
    DatabaseFilter,
    QueueFilter,
    StateFilter,
    WorkerFilter,
    WorkflowFilter,
    date_filters,
)
from kathikon.admin.pagination import EstimatedCountPaginator
from kathikon.ids import parse_id
from kathikon.models import Job
from kathikon.states import BLOCKED_STATES, EXECUTING_STATES, PENDING_STATES, JobState
from kathikon.storage import events, reports, search
from kathikon.storage import workflows as workflow_storage
from kathikon.timeline import job_history


class JobChangeList(DeclaredFiltersChangeList):
    """Always a LIMIT: Django reads a list that fits one page without one, and for a rare
    filter combination on a big table PostgreSQL then sorts every candidate row instead of
    walking an index newest first (measured: 1.8 s at 10M jobs, 1 ms with the LIMIT)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        if not self.multi_page:
            limit = self.list_max_show_all if self.show_all else self.list_per_page
            self.result_list = self.result_list[:limit]


# -- jobs ------------------------------------------------------------------------------------

@admin.register(Job)
class JobAdmin(ActionsMixin):
    list_display = ("job_id", "worker_name", "queue_name", "state_display", "priority",
                    "attempts_display", "inserted", "due", "finished")
    list_display_links = ("job_id",)
    list_filter = (DatabaseFilter, StateFilter, QueueFilter, WorkerFilter,
                   WorkflowFilter)  # + the date filters, see below
    search_fields = ("id", "worker", "args")
    search_help_text = ("A job id (hex); part of a worker path or of the arguments; "
                        "args.KEY=VALUE or meta.KEY=VALUE (a dotted KEY for nested values, "
                        "a JSON or text VALUE); error:TEXT for the last error's message.")
    ordering = ("-id",)
    sortable_by = ()
    list_per_page = 50
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    actions = ["retry_jobs", "cancel_jobs", "rerun_jobs", "delete_selected"]
    fieldsets = (
        (None, {"fields": ("job_id", "worker", "queue", "state_display", "priority",
                           "attempts_display", "attempted_by")}),
        ("Times", {"fields": ("inserted_at_shown", "scheduled", "available", "started")}),
        ("Arguments and result", {"fields": ("args_display", "result_display", "meta_display",
                                             "related")}),
        ("Errors", {"fields": ("errors_display",)}),
        ("History", {"fields": ("history_display",)}),
    )
    readonly_fields = ("job_id", "worker", "queue", "state_display", "priority",
                       "attempts_display", "attempted_by", "inserted_at_shown", "scheduled",
                       "available", "started", "completed", "dead_at", "cancelled",
                       "args_display", "result_display", "meta_display", "related",
                       "errors_display", "history_display", "workflow_step")
    Media = KathikonMedia
    # One date format on every page (see time_field); the finish time is labelled by state.
    inserted_at_shown = time_field("inserted_at", "inserted at")
    scheduled = time_field("scheduled_at", "scheduled at")
    available = time_field("available_at", "available at")
    started = time_field("started_at", "started at")
    completed = time_field("completed_at", "completed at")
    dead_at = time_field("completed_at", "dead at")
    cancelled = time_field("cancelled_at", "cancelled at")

    show_facets = admin.ShowFacets.NEVER  # facet counts would COUNT(*) per filter choice

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """The finish time labelled by how the job finished: a dead job did not complete; a
        workflow step's workflow and step name next to its state."""
        fields: dict[str, str] = {JobState.COMPLETED: "completed", JobState.DEAD: "dead_at",
                                  JobState.CANCELLED: "cancelled"}
        extra: dict[str | None, str | None] = {"Times": fields.get(str(getattr(obj, "state",
                                                                                "")))}
        if getattr(obj, "workflow_id", None) is not None:
            extra[None] = "workflow_step"
        return [(name, {"fields": (*options["fields"], extra[name])})
                if extra.get(name) else (name, options) for name, options in self.fieldsets]

    # Jobs are changed by actions only, never edited as free text.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.state in EXECUTING_STATES:
            return False
        return self.may(request, "delete_job")

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        # The "Delete" button of a job's page: same rules as the action (history goes too,
        # a job that started executing meanwhile is kept).
        self.report_result(request, dashboard.delete_jobs([obj.pk]), "Deleted", "delete")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self.report_result(request, dashboard.delete_jobs(_ids(queryset)), "Deleted", "delete")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return self.may(request, "retry_job")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return self.may(request, "cancel_job")

    def has_rerun_permission(self, request: HttpRequest) -> bool:
        return self.may(request, "rerun_job")

    def get_object(self, request: HttpRequest, object_id: str,
                   from_field: str | None = None) -> Job | None:
        found = super().get_object(request, object_id, from_field)
        if found is None and len(conf.databases()) > 1:  # a queue on another database
            with routing.for_job(object_id):
                found = super().get_object(request, object_id, from_field)
        return found

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        return [*self.list_filter, *date_filters()]

    def get_ordering(self, request: HttpRequest) -> tuple[str, ...]:
        # With a date filter on inserted_at/completed_at, walk that column's index (newest
        # first) instead of the primary key: PostgreSQL would otherwise scan ids backwards
        # through every newer job to find the range.
        for column in ("completed_at", "inserted_at"):
            if any(key.startswith(f"{column}__") and value
                   for key, value in request.GET.items()):
                return (f"-{column}", "-id")
        if request.GET.get("state") == JobState.COMPLETED:  # see StateFilter
            return ("-completed_at", "-id")
        return ("-id",)

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Job],
                           search_term: str) -> tuple[QuerySet[Job], bool]:
        term = search_term.strip()
        if not reports.comparable(term):  # the autocomplete view does not refuse NUL
            return queryset.none(), False
        if not term:
            return queryset, False
        pk = parse_id(term) if len(term.replace("-", "")) == 32 else None
        if pk is not None:
            return queryset.filter(pk=pk), False
        narrowed = search.structured(queryset, term)  # args.key=value, meta.key=…, error:…
        if narrowed is not None:
            return narrowed, False
        return queryset.filter(Q(worker__icontains=term) | Q(args__icontains=term)), False

    # -- actions -------------------------------------------------------------------------

    # Each action on more than BULK_CONFIRM jobs (or on every job a filter matches) first
    # shows what it will touch, then runs in chunks of BULK_CHUNK (kathikon.admin.bulk).

    @admin.action(description="Retry selected jobs now", permissions=["retry"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        if (page := bulk.confirmation(self, request, queryset, "retry", "retried")) is not None:
            return page
        result = bulk.run(request, queryset, "retry", lambda ids: dashboard.retry_jobs(
            ids, actor=bulk.actor(request)))
        self.report_result(request, result, "Retried", "retry")
        if result.changed:
            self.message_user(request, attempts_left(result.changed[:100]), messages.INFO)
        return None

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        if (page := bulk.confirmation(self, request, queryset, "cancel", "cancelled")) is not None:
            return page
        self.report_result(request, bulk.run(request, queryset, "cancel", dashboard.cancel_jobs),
                           "Cancelled", "cancel")
        return None

    @admin.action(description="Rerun selected jobs (as new jobs)", permissions=["rerun"])
    def rerun_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        if (page := bulk.confirmation(self, request, queryset, "rerun", "rerun")) is not None:
            return page
        self.report_result(request, bulk.run(request, queryset, "rerun", dashboard.rerun_jobs),
                           "Reran", "rerun")
        return None

    # Named like Django's site-wide action so it replaces it: ours refuses executing
    # jobs and deletes their history too.
    @admin.action(description="Delete selected jobs", permissions=["delete"])
    def delete_selected(self, request: HttpRequest,
                        queryset: QuerySet[Job]) -> HttpResponse | None:
        if (page := bulk.confirmation(self, request, queryset, "delete", "deleted")) is not None:
            return page
        self.report_result(request, bulk.run(request, queryset, "delete", dashboard.delete_jobs),
                           "Deleted", "delete")
        return None

    # -- one job's page: action buttons post here ----------------------------------------

    def get_urls(self) -> list[Any]:
        urls = [path("<path:object_id>/act/<str:action>/",
                     self.admin_site.admin_view(self.job_action_view),
                     name="kathikon_job_action")]
        return [*urls, *super().get_urls()]

    def job_action_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        refuse_unreadable(request, object_id, action)
        actions = self.get_actions(request)
        if action not in self.known_actions():
            raise PermissionDenied(f"unknown action {action!r}")
        if action not in actions:
            raise PermissionDenied(f"you may not run the action {action!r}")
        with routing.for_job(object_id), reads_for(request):  # POST: the primary
            job = get_object_or_404(self.get_queryset(request), pk=parse_id(object_id))
            getattr(self, action)(request, self.get_queryset(request).filter(pk=job.pk))
            gone = not self.get_queryset(request).filter(pk=job.pk).exists()
        if action == "delete_selected" and gone:
            return HttpResponseRedirect(reverse("admin:kathikon_job_changelist"))
        return HttpResponseRedirect(reverse("admin:kathikon_job_change", args=[job.pk]))

    def render_change_form(self, request: HttpRequest, context: dict[str, Any],
                           *args: Any, **kwargs: Any) -> Any:
        obj = context.get("original")
        if obj is not None:
            available = self.get_actions(request)
            context["kathikon_actions"] = [
                {"name": name, "label": label, "url": reverse(
                    "admin:kathikon_job_action", args=[obj.pk.hex, name])}
                for name, label in (("retry_jobs", retry_label(obj)), ("cancel_jobs", "Cancel"),
                                    ("rerun_jobs", "Rerun as a new job"),
                                    ("delete_selected", "Delete"))
                if name in available and _applies(name, obj)]
            context["kathikon_executing"] = obj.state in EXECUTING_STATES
        return super().render_change_form(request, context, *args, **kwargs)

    # -- columns -------------------------------------------------------------------------

    @admin.display(description="id", ordering="id")
    def job_id(self, job: Job) -> SafeString:
        return format_html('<code class="kathikon-id">{}</code>', job.id.hex)

    @admin.display(description="worker")
    def worker_name(self, job: Job) -> SafeString:
        shown = job.shown_worker
        return breakable(shown.rsplit(".", 1)[-1], shown)

    @admin.display(description="queue")
    def queue_name(self, job: Job) -> SafeString:
        return breakable(job.queue)

    @admin.display(description="state")
    def state_display(self, job: Job) -> SafeString:
        return state_badge(job.state)

    @admin.display(description="attempts")
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="inserted", ordering="inserted_at")
    def inserted(self, job: Job) -> str:
        return when(job.inserted_at)

    @admin.display(description="due")
    def due(self, job: Job) -> str:
        if job.state == JobState.SCHEDULED:
            return f"scheduled {when(job.available_at)}"
        if job.state in (JobState.AVAILABLE, JobState.RETRYABLE):
            return when(job.available_at)
        return "—"

    @admin.display(description="finished")
    def finished(self, job: Job) -> str:
        return when(job.completed_at)

    # -- detail sections -----------------------------------------------------------------

    @admin.display(description="arguments")
    def args_display(self, job: Job) -> SafeString:
        return pre(job.args)

    @admin.display(description="result")
    def result_display(self, job: Job) -> SafeString:
        return pre(job.result)

    @admin.display(description="meta")
    def meta_display(self, job: Job) -> SafeString:
        return pre(job.meta)

    @admin.display(description="related")
    def related(self, job: Job) -> SafeString:
        links = []
        for label, pk, name in (("parent job", job.parent_job_id, "kathikon_job_change"),
                                ("batch", job.batch_id, "kathikon_batch_change"),
                                ("cron schedule", job.cron_id, "kathikon_cronschedule_change")):
            if pk is not None:
                links.append(format_html('{}: <a href="{}">{}</a>', label,
                                         reverse(f"admin:{name}", args=[pk]), pk.hex))
        rerun_of = (job.meta or {}).get("rerun_of")
        if rerun_of:
            links.append(format_html('rerun of: <a href="{}">{}</a>',
                                     reverse("admin:kathikon_job_change", args=[rerun_of]),
                                     rerun_of))
        return format_html("{}", SafeString("<br>".join(links))) if links else SafeString("—")

    @admin.display(description="workflow step")
    def workflow_step(self, job: Job) -> SafeString:
        if job.workflow_id is None:
            return SafeString("—")
        row = workflow_storage.workflows().filter(pk=job.workflow_id).first()
        name = row.name if row is not None else job.workflow_id.hex
        return format_html(
            'step <code class="kathikon-step">{}</code> of workflow <a href="{}" '
            'class="kathikon-workflow-link">{}</a> (on a failed dependency: {})',
            job.step or "—", reverse("admin:kathikon_workflow_change", args=[job.workflow_id]),
            name, job.on_dep_failure or "cancel")

    @admin.display(description="errors")
    def errors_display(self, job: Job) -> SafeString:
        errors = [{**error, "at": _error_time(error.get("at"))}
                  for error in reversed(job.errors or []) if isinstance(error, dict)]
        return SafeString(render_to_string("admin/kathikon/job/errors.html", {"errors": errors}))

    @admin.display(description="history")
    def history_display(self, job: Job) -> SafeString:
        history = job_history(job, events.events_for(job.id, database=job._state.db))
        rows = [{"at": item["at"], "event": item["event"],
                 "details": ", ".join(f"{key}: {value}" for key, value in item.items()
                                      if key not in ("at", "event") and value not in (None, ""))}
                for item in history]
        return SafeString(render_to_string("admin/kathikon/job/history.html", {"rows": rows}))


def retry_label(job: Job) -> str:
    """The retry button says how many attempts the job gets (a spent job gets one more)."""
    left = max(job.max_attempts, job.attempts + 1) - job.attempts
    return f"Retry now ({left} attempt{'' if left == 1 else 's'} left)"


def attempts_left(ids: list[str]) -> str:
    """How many attempts the retried jobs have left, e.g. "It has 1 attempt left (4 of 4)"."""
    jobs = [kathikon.fetch(job_id) for job_id in ids[:MESSAGE_JOBS]]
    if len(ids) == 1:
        job = jobs[0]
        left = job.max_attempts - job.attempts
        return (f"It runs again now with {left} attempt{'' if left == 1 else 's'} left "
                f"(next: attempt {job.attempts + 1} of {job.max_attempts}).")
    counts = Counter(job.max_attempts - job.attempts for job in jobs)
    parts = [f"{n} with {left} attempt{'' if left == 1 else 's'} left"
             for left, n in sorted(counts.items())]
    more = f" (of the first {MESSAGE_JOBS})" if len(ids) > MESSAGE_JOBS else ""
    return f"They run again now: {', '.join(parts)}{more}."


#: The retry message reads at most this many jobs back to say their attempts left.
MESSAGE_JOBS = 20


def _error_time(value: Any) -> str:
    try:
        return when(dt.datetime.fromisoformat(str(value)))
    except ValueError:
        return str(value or "")


def _ids(queryset: QuerySet[Job]) -> list[Any]:
    return list(queryset.order_by().values_list("pk", flat=True))


def _applies(action: str, job: Job) -> bool:
    state = job.state
    return {
        "retry_jobs": state not in (*EXECUTING_STATES, JobState.AVAILABLE, *BLOCKED_STATES),
        "cancel_jobs": state in PENDING_STATES,
        "rerun_jobs": state in (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED),
        "delete_selected": state not in EXECUTING_STATES,
    }[action]
