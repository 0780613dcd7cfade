"""The Django admin is Kathikon's dashboard: jobs, queues, cron schedules, batches and nodes.

Every action has its own permission (``kathikon.retry_job``, ``cancel_job``,
``rerun_job``, ``delete_job``, ``pause_queue``, ``pause_cronschedule``) and goes
through ``kathikon.dashboard`` / the public API, never a raw ``.update()``.
When ``KATHIKON["ALLOW_DESTRUCTIVE_ACTIONS"]`` is False every changing action
is hidden. A POST for an action the user may not run gets 403. The overview
(queue summary and throughput chart) is the app's page, ``/admin/kathikon/``.
See docs/admin.md.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from rangefilter.filters import DateRangeFilterBuilder

from kathikon import conf, dashboard, report
from kathikon.cronwords import describe
from kathikon.exceptions import KathikonError
from kathikon.ids import parse_id
from kathikon.models import Batch, CronSchedule, Job, Node, Queue
from kathikon.pagination import EstimatedCountPaginator
from kathikon.states import EXECUTING_STATES, JobState
from kathikon.storage import events, reports
from kathikon.storage import queues as queue_storage
from kathikon.timeline import job_history

STATE_COLOURS = {
    "scheduled": "#6c757d", "available": "#1f6feb", "claimed": "#8250df",
    "running": "#bf8700", "completed": "#2da44e", "retryable": "#d4761c",
    "dead": "#cf222e", "cancelled": "#57606a",
}


def badge(text: str, colour: str) -> SafeString:
    return format_html('<span class="kathikon-badge" style="background:{}">{}</span>',
                       colour, text)


def state_badge(state: str) -> SafeString:
    return badge(state, STATE_COLOURS.get(state, "#57606a"))


def when(value: dt.datetime | None) -> str:
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S") if value else "—"


def ago(value: dt.datetime | None) -> str:
    if value is None:
        return "—"
    seconds = (timezone.now() - value).total_seconds()
    return f"{age(abs(seconds))} ago" if seconds >= 0 else f"in {age(-seconds)}"


def age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


class KathikonMedia:
    css = {"all": ["kathikon/admin.css"]}


class ActionsMixin(admin.ModelAdmin):
    """Action plumbing shared by the admins: destructive switch, 403s, result messages."""

    def destructive(self) -> bool:
        return dashboard.destructive_allowed()

    def known_actions(self) -> set[str]:
        return {getattr(action, "__name__", str(action)) for action in self.actions or ()}

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        # Django answers an action the user may not run with "No action selected";
        # a forged POST deserves a clear 403 instead.
        name = request.POST.get("action") if request.method == "POST" else None
        if name and name in self.known_actions() and name not in self.get_actions(request):
            raise PermissionDenied(f"you may not run the action {name!r}")
        return super().changelist_view(request, extra_context)

    def report_result(self, request: HttpRequest, result: dashboard.ActionResult, done: str,
                      todo: str, noun: str = "job") -> None:
        """One message for what changed, one for what could not, with the reasons."""
        def many(n: int) -> str:
            return f"{n} {noun}{'' if n == 1 else 's'}"

        say = self.message_user
        if result.changed:
            say(request, f"{done} {many(len(result.changed))}.", messages.SUCCESS)
        if result.failed:
            details = "; ".join(f"{item}: {why}" for item, why in result.failed[:20])
            more = f" (and {len(result.failed) - 20} more)" if len(result.failed) > 20 else ""
            say(request, f"Could not {todo} {many(len(result.failed))}: {details}{more}",
                messages.WARNING)
        if not result.changed and not result.failed:
            say(request, f"No {noun}s changed.", messages.INFO)


# -- filters ---------------------------------------------------------------------------------

class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(JobState.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
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
        return queryset.filter(queue=self.value()) if self.value() else queryset


class WorkerFilter(admin.SimpleListFilter):
    title = "worker"
    parameter_name = "worker"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name.rsplit(".", 1)[-1]) for name in reports.distinct_values("worker")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(worker=self.value()) if self.value() else queryset


# -- jobs ------------------------------------------------------------------------------------

@admin.register(Job)
class JobAdmin(ActionsMixin):
    list_display = ("job_id", "worker_name", "queue", "state_display", "priority",
                    "attempts_display", "inserted", "due", "finished")
    list_display_links = ("job_id",)
    list_filter = (StateFilter, QueueFilter, WorkerFilter,
                   ("inserted_at", DateRangeFilterBuilder(title="inserted")),
                   ("completed_at", DateRangeFilterBuilder(title="finished")))
    search_fields = ("id", "worker", "args")
    search_help_text = "A job id (hex), or part of a worker path or of the arguments."
    ordering = ("-id",)
    sortable_by = ()
    list_per_page = 50
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    actions = ["retry_jobs", "cancel_jobs", "rerun_jobs", "delete_selected"]
    fieldsets = (
        (None, {"fields": ("job_id", "worker", "queue", "state_display", "priority",
                           "attempts_display", "attempted_by")}),
        ("Times", {"fields": ("inserted_at", "scheduled_at", "available_at", "started_at",
                              "completed_at", "cancelled_at")}),
        ("Arguments and result", {"fields": ("args_display", "result_display", "meta_display",
                                             "related")}),
        ("Errors", {"fields": ("errors_display",)}),
        ("History", {"fields": ("history_display",)}),
    )
    readonly_fields = ("job_id", "worker", "queue", "state_display", "priority",
                       "attempts_display", "attempted_by", "inserted_at", "scheduled_at",
                       "available_at", "started_at", "completed_at", "cancelled_at",
                       "args_display", "result_display", "meta_display", "related",
                       "errors_display", "history_display")
    Media = KathikonMedia

    show_facets = admin.ShowFacets.NEVER  # facet counts would COUNT(*) per filter choice

    # Jobs are changed by actions only, never edited as free text.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.state in EXECUTING_STATES:
            return False
        return self.destructive() and super().has_delete_permission(request, obj)

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        # The "Delete" button of a job's page: same rules as the action (history goes too,
        # a job that started executing meanwhile is kept).
        self.report_result(request, dashboard.delete_jobs([obj.pk]), "Deleted", "delete")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self.report_result(request, dashboard.delete_jobs(_ids(queryset)), "Deleted", "delete")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return self.destructive() and request.user.has_perm("kathikon.retry_job")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return self.destructive() and request.user.has_perm("kathikon.cancel_job")

    def has_rerun_permission(self, request: HttpRequest) -> bool:
        return self.destructive() and request.user.has_perm("kathikon.rerun_job")

    def get_ordering(self, request: HttpRequest) -> tuple[str, ...]:
        # With a date range on inserted_at/completed_at, walk that column's index (newest
        # first) instead of the primary key: PostgreSQL would otherwise scan ids backwards
        # through every newer job to find the range.
        for column in ("completed_at", "inserted_at"):
            if any(key.startswith(f"{column}__range") and value
                   for key, value in request.GET.items()):
                return (f"-{column}", "-id")
        return ("-id",)

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Job],
                           search_term: str) -> tuple[QuerySet[Job], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        pk = parse_id(term) if len(term.replace("-", "")) == 32 else None
        if pk is not None:
            return queryset.filter(pk=pk), False
        return queryset.filter(Q(worker__icontains=term) | Q(args__icontains=term)), False

    # -- actions -------------------------------------------------------------------------

    @admin.action(description="Retry selected jobs now", permissions=["retry"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self.report_result(request, dashboard.retry_jobs(_ids(queryset)), "Retried", "retry")

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self.report_result(request, dashboard.cancel_jobs(_ids(queryset)), "Cancelled", "cancel")

    @admin.action(description="Rerun selected jobs (as new jobs)", permissions=["rerun"])
    def rerun_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self.report_result(request, dashboard.rerun_jobs(_ids(queryset)), "Reran", "rerun")

    # Named like Django's site-wide action so it replaces it: ours refuses executing
    # jobs and deletes their history too.
    @admin.action(description="Delete selected jobs", permissions=["delete"])
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self.report_result(request, dashboard.delete_jobs(_ids(queryset)), "Deleted", "delete")

    # -- one job's page: action buttons post here ----------------------------------------

    def get_urls(self) -> list[Any]:
        urls = [path("<path:object_id>/act/<str:action>/",
                     self.admin_site.admin_view(self.job_action_view),
                     name="kathikon_job_action")]
        return [*urls, *super().get_urls()]

    def job_action_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        actions = self.get_actions(request)
        if action not in self.known_actions():
            raise PermissionDenied(f"unknown action {action!r}")
        if action not in actions:
            raise PermissionDenied(f"you may not run the action {action!r}")
        job = get_object_or_404(self.get_queryset(request), pk=parse_id(object_id))
        getattr(self, action)(request, self.get_queryset(request).filter(pk=job.pk))
        if action == "delete_selected" and not Job.objects.filter(pk=job.pk).exists():
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
                for name, label in (("retry_jobs", "Retry now"), ("cancel_jobs", "Cancel"),
                                    ("rerun_jobs", "Rerun as a new job"),
                                    ("delete_selected", "Delete"))
                if name in available and _applies(name, obj)]
        return super().render_change_form(request, context, *args, **kwargs)

    # -- columns -------------------------------------------------------------------------

    @admin.display(description="id", ordering="id")
    def job_id(self, job: Job) -> SafeString:
        return format_html('<code class="kathikon-id">{}</code>', job.id.hex)

    @admin.display(description="worker")
    def worker_name(self, job: Job) -> SafeString:
        return format_html('<span title="{}">{}</span>', job.worker,
                           job.worker.rsplit(".", 1)[-1])

    @admin.display(description="state")
    def state_display(self, job: Job) -> SafeString:
        return state_badge(job.state)

    @admin.display(description="attempts")
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="inserted")
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
        return _pre(job.args)

    @admin.display(description="result")
    def result_display(self, job: Job) -> SafeString:
        return _pre(job.result)

    @admin.display(description="meta")
    def meta_display(self, job: Job) -> SafeString:
        return _pre(job.meta)

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

    @admin.display(description="errors")
    def errors_display(self, job: Job) -> SafeString:
        return SafeString(render_to_string("admin/kathikon/job/errors.html",
                                           {"errors": list(reversed(job.errors or []))}))

    @admin.display(description="history")
    def history_display(self, job: Job) -> SafeString:
        history = job_history(job, events.events_for(job.id))
        rows = [{"at": item["at"], "event": item["event"],
                 "details": ", ".join(f"{key}: {value}" for key, value in item.items()
                                      if key not in ("at", "event") and value not in (None, ""))}
                for item in history]
        return SafeString(render_to_string("admin/kathikon/job/history.html", {"rows": rows}))


def _ids(queryset: QuerySet[Job]) -> list[Any]:
    return list(queryset.order_by().values_list("pk", flat=True))


def _applies(action: str, job: Job) -> bool:
    state = job.state
    return {
        "retry_jobs": state not in (*EXECUTING_STATES, JobState.AVAILABLE),
        "cancel_jobs": state in (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE),
        "rerun_jobs": state in (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED),
        "delete_selected": state not in EXECUTING_STATES,
    }[action]


def _pre(value: Any) -> SafeString:
    if value is None or value == {}:
        return SafeString("—")
    return format_html('<pre class="kathikon-pre">{}</pre>',
                       json.dumps(value, indent=2, sort_keys=True, default=str))


# -- queues ----------------------------------------------------------------------------------

@admin.register(Queue)
class QueueAdmin(ActionsMixin):
    actions = ["pause_queues", "resume_queues"]
    fields = ("name", "paused", "concurrency")
    readonly_fields = ("name", "paused")
    Media = KathikonMedia

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # queues come from the settings and from jobs; rows appear by themselves

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return self.destructive() and request.user.has_perm("kathikon.pause_queue")

    def summaries(self, request: HttpRequest) -> dict[str, report.QueueSummary]:
        cached = getattr(request, "_kathikon_queue_summary", None)
        if cached is None:
            cached = {s.name: s for s in report.queue_summary()}
            request._kathikon_queue_summary = cached  # type: ignore[attr-defined]
        return cached

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        # Queues that exist only in the settings or in jobs get their row lazily.
        summaries = self.summaries(request)
        for name in set(summaries) - set(queue_storage.queue_rows()):
            queue_storage.ensure_queue(name)
        context = {"can_pause_all": self.has_pause_permission(request), **(extra_context or {})}
        return super().changelist_view(request, context)

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        summaries = self.summaries(request)

        def column(label: str, value: Callable[[report.QueueSummary], Any]) -> Callable[..., Any]:
            def show(queue: Queue) -> Any:
                summary = summaries.get(queue.name)
                return value(summary) if summary is not None else "—"
            show.short_description = label  # type: ignore[attr-defined]
            return show

        return [
            "name",
            column("status", lambda s: badge("paused", "#cf222e") if s.paused
                   else badge("running", "#2da44e")),
            column("concurrency", lambda s: s.concurrency),
            column("available", lambda s: s.counts["available"]),
            column("scheduled", lambda s: s.counts["scheduled"]),
            column("executing", lambda s: s.counts["claimed"] + s.counts["running"]),
            column("retryable", lambda s: s.counts["retryable"]),
            column("dead", lambda s: s.counts["dead"]),
            column("completed", lambda s: s.counts["completed"]),
            column("oldest waiting", lambda s: age(s.oldest_available_age)),
            column("done / failed (1 h)",
                   lambda s: f"{s.completed_last_hour} / {s.failed_last_hour}"),
        ]

    @admin.action(description="Pause selected queues", permissions=["pause"])
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        result = _each_queue(queryset, dashboard.pause_queue)
        self.report_result(request, result, "Paused", "pause", "queue")

    @admin.action(description="Resume selected queues", permissions=["pause"])
    def resume_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        result = _each_queue(queryset, dashboard.resume_queue)
        self.report_result(request, result, "Resumed", "resume", "queue")

    def get_urls(self) -> list[Any]:
        return [
            path("pause-all/", self.admin_site.admin_view(self.pause_all_view),
                 name="kathikon_queue_pause_all"),
            path("resume-all/", self.admin_site.admin_view(self.resume_all_view),
                 name="kathikon_queue_resume_all"),
            *super().get_urls(),
        ]

    def pause_all_view(self, request: HttpRequest) -> HttpResponse:
        return self._all_view(request, paused=True)

    def resume_all_view(self, request: HttpRequest) -> HttpResponse:
        return self._all_view(request, paused=False)

    def _all_view(self, request: HttpRequest, *, paused: bool) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_pause_permission(request):
            raise PermissionDenied("you may not pause or resume queues")
        names = dashboard.pause_all() if paused else dashboard.resume_all()
        self.message_user(request, f"{'Paused' if paused else 'Resumed'} {len(names)} queues: "
                          f"{', '.join(names)}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:kathikon_queue_changelist"))


def _each_queue(queryset: Iterable[Queue], operation: Callable[[str], None]
                ) -> dashboard.ActionResult:
    changed, failed = [], []
    for queue in queryset:
        try:
            operation(queue.name)
            changed.append(queue.name)
        except KathikonError as exc:
            failed.append((queue.name, str(exc)))
    return dashboard.ActionResult(changed=changed, failed=failed)


# -- cron schedules --------------------------------------------------------------------------

@admin.register(CronSchedule)
class CronScheduleAdmin(ActionsMixin):
    list_display = ("__str__", "worker_name", "expression_display", "timezone", "queue_name",
                    "status", "next_runs", "last_fire_at")
    list_filter = ("paused", "static")
    search_fields = ("name", "worker")
    actions = ["pause_schedules", "resume_schedules"]
    readonly_fields = ("name", "worker", "args", "expression", "timezone", "queue", "priority",
                       "max_attempts", "paused", "static", "last_fire_at", "next_fire_at",
                       "inserted_at", "updated_at", "next_runs")
    Media = KathikonMedia

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # schedules come from kathikon.cron.insert() and KATHIKON["CRON"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return self.destructive() and request.user.has_perm("kathikon.pause_cronschedule")

    @admin.display(description="worker")
    def worker_name(self, schedule: CronSchedule) -> SafeString:
        return format_html('<span title="{}">{}</span>', schedule.worker,
                           schedule.worker.rsplit(".", 1)[-1])

    @admin.display(description="schedule")
    def expression_display(self, schedule: CronSchedule) -> SafeString:
        return format_html("<code>{}</code><br><small>{}</small>", schedule.expression,
                           describe(schedule.expression))

    @admin.display(description="queue")
    def queue_name(self, schedule: CronSchedule) -> str:
        return schedule.queue or "(worker's)"

    @admin.display(description="status")
    def status(self, schedule: CronSchedule) -> SafeString:
        return badge("paused", "#cf222e") if schedule.paused else badge("active", "#2da44e")

    @admin.display(description="next runs")
    def next_runs(self, schedule: CronSchedule) -> SafeString:
        if schedule.paused:
            return SafeString("— (paused)")
        ticks = _next_ticks(schedule, 3)
        if not ticks:
            return SafeString("—")
        return format_html("{}", SafeString("<br>".join(
            format_html('<span title="{}">{}</span>', tick.isoformat(), when(tick))
            for tick in ticks)))

    @admin.action(description="Pause selected schedules", permissions=["pause"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        result = _each_schedule(queryset, "pause")
        self.report_result(request, result, "Paused", "pause", "schedule")

    @admin.action(description="Resume selected schedules", permissions=["pause"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        result = _each_schedule(queryset, "resume")
        self.report_result(request, result, "Resumed", "resume", "schedule")


def _next_ticks(schedule: CronSchedule, count: int) -> list[dt.datetime]:
    try:
        from kathikon import cron

        return cron.next_fire_times(schedule.expression, count=count,
                                    timezone=schedule.timezone)
    except (ImportError, AttributeError, KathikonError, ValueError, KeyError):
        return [schedule.next_fire_at] if schedule.next_fire_at else []


def _each_schedule(queryset: Iterable[CronSchedule], verb: str) -> dashboard.ActionResult:
    from kathikon import cron

    operation = getattr(cron, verb)
    changed, failed = [], []
    for schedule in queryset:
        try:
            operation(schedule.pk)
            changed.append(str(schedule))
        except KathikonError as exc:
            failed.append((str(schedule), str(exc)))
    return dashboard.ActionResult(changed=changed, failed=failed)


# -- batches and nodes -----------------------------------------------------------------------

class ReadOnlyAdmin(admin.ModelAdmin):
    Media = KathikonMedia

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    list_display = ("batch_id", "status_display", "parent", "children", "on_complete",
                    "callback", "inserted_at", "closed_at", "completed_at")
    list_filter = ("status",)
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Batch]:
        done = (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED)
        return super().get_queryset(request).annotate(
            n_children=Count("jobs"),
            n_finished=Count("jobs", filter=Q(jobs__state__in=done)),
            n_dead=Count("jobs", filter=Q(jobs__state=JobState.DEAD)))

    @admin.display(description="id", ordering="id")
    def batch_id(self, batch: Batch) -> SafeString:
        return format_html('<code class="kathikon-id">{}</code>', batch.id.hex)

    @admin.display(description="status")
    def status_display(self, batch: Batch) -> SafeString:
        colours = {"open": "#1f6feb", "closed": "#bf8700", "completed": "#2da44e"}
        return badge(batch.status, colours.get(batch.status, "#57606a"))

    @admin.display(description="children (finished / dead)")
    def children(self, batch: Batch) -> str:
        return f"{batch.n_children} ({batch.n_finished} / {batch.n_dead})"  # type: ignore[attr-defined]

    @admin.display(description="parent job")
    def parent(self, batch: Batch) -> SafeString:
        return _job_link(batch.parent_job_id)

    @admin.display(description="callback job")
    def callback(self, batch: Batch) -> SafeString:
        return _job_link(batch.callback_job_id)

    @admin.display(description="on complete")
    def on_complete(self, batch: Batch) -> str:
        return batch.on_complete_worker.rsplit(".", 1)[-1] or "—"


def _job_link(pk: Any) -> SafeString:
    if pk is None:
        return SafeString("—")
    return format_html('<a href="{}"><code>{}</code></a>',
                       reverse("admin:kathikon_job_change", args=[pk]), pk.hex[:12] + "…")


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ("name", "hostname", "pid", "status_display", "queue_list", "started_at",
                    "heartbeat")
    list_filter = ("status",)

    @admin.display(description="status")
    def status_display(self, node: Node) -> SafeString:
        if node.status == Node.Status.RUNNING and self.stale(node):
            return badge("silent", "#cf222e")
        colours = {"running": "#2da44e", "stopping": "#bf8700", "stopped": "#57606a"}
        return badge(node.status, colours.get(node.status, "#57606a"))

    @admin.display(description="queues")
    def queue_list(self, node: Node) -> str:
        queues = node.queues
        if isinstance(queues, dict):
            return ", ".join(f"{name}:{limit}" for name, limit in sorted(queues.items())) or "—"
        return ", ".join(map(str, queues or [])) or "—"

    @admin.display(description="last heartbeat", ordering="heartbeat_at")
    def heartbeat(self, node: Node) -> str:
        return ago(node.heartbeat_at)

    def stale(self, node: Node) -> bool:
        return (timezone.now() - node.heartbeat_at).total_seconds() > conf.rescue_after()
