"""Internal: the queue admin — counts, pause/resume, concurrency overrides."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse

from kathikon import dashboard, report
from kathikon.admin.common import ActionsMixin, KathikonMedia, age, badge
from kathikon.exceptions import KathikonError
from kathikon.models import Queue
from kathikon.storage import queues as queue_storage

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
