"""Internal: the batch admin (read-only) with child counts."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from kathikon.admin.common import ReadOnlyAdmin, badge, job_link, time_field
from kathikon.models import Batch
from kathikon.states import JobState


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    list_display = ("batch_id", "status_display", "parent", "children", "on_complete",
                    "callback", "inserted", "closed", "completed")
    list_filter = ("status",)
    inserted = time_field("inserted_at", "inserted at")
    closed = time_field("closed_at", "closed at")
    completed = time_field("completed_at", "completed at")
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
        return job_link(batch.parent_job_id)

    @admin.display(description="callback job")
    def callback(self, batch: Batch) -> SafeString:
        return job_link(batch.callback_job_id)

    @admin.display(description="on complete")
    def on_complete(self, batch: Batch) -> str:
        return batch.on_complete_worker.rsplit(".", 1)[-1] or "—"
