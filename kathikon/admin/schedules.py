"""Internal: the cron schedule admin — next runs, the expression in words, pause/resume."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from kathikon import dashboard
from kathikon.admin.common import ActionsMixin, KathikonMedia, badge, time_field, when
from kathikon.admin.cronwords import describe
from kathikon.exceptions import KathikonError
from kathikon.models import CronSchedule

# -- cron schedules --------------------------------------------------------------------------

@admin.register(CronSchedule)
class CronScheduleAdmin(ActionsMixin):
    list_display = ("__str__", "worker_name", "expression_display", "timezone", "queue_name",
                    "status", "next_runs", "last_fire")
    list_filter = ("paused", "static")
    search_fields = ("name", "worker")
    actions = ["pause_schedules", "resume_schedules"]
    readonly_fields = ("name", "worker", "args", "expression", "timezone", "queue", "priority",
                       "max_attempts", "paused", "static", "last_fire", "next_fire",
                       "inserted", "updated", "next_runs")
    exclude = ("last_fire_at", "next_fire_at", "inserted_at", "updated_at")  # shown above
    last_fire = time_field("last_fire_at", "last fire at")
    next_fire = time_field("next_fire_at", "next fire at")
    inserted = time_field("inserted_at", "inserted at")
    updated = time_field("updated_at", "updated at")
    Media = KathikonMedia

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # schedules come from kathikon.cron.insert() and KATHIKON["CRON"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return self.may(request, "pause_cronschedule")

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
