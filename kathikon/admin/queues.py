"""Internal: the queue admin — counts, pause/resume, concurrency and limits overrides."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from kathikon import conf, dashboard, report
from kathikon.admin.common import (
    COUNT_CAP,
    ActionsMixin,
    DeclaredFiltersChangeList,
    KathikonMedia,
    age,
    badge,
    breakable,
    refuse_unreadable,
)
from kathikon.conf import MAX_CONCURRENCY
from kathikon.exceptions import KathikonError
from kathikon.limits import LIMIT_KEYS, in_force
from kathikon.models import Queue
from kathikon.storage import vendor

# -- queues ----------------------------------------------------------------------------------

@admin.register(Queue)
class QueueAdmin(ActionsMixin):
    actions = ["pause_queues", "resume_queues"]
    list_display_links = ("queue_name",)
    fields = ("name", "paused", "concurrency_in_force", "concurrency", "limits_in_force",
              "limits")
    readonly_fields = ("name", "paused", "concurrency_in_force", "limits_in_force")
    Media = KathikonMedia

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # queues come from the settings and from jobs; rows appear by themselves

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return self.may(request, "pause_queue")

    def summaries(self, request: HttpRequest) -> dict[str, report.QueueSummary]:
        cached = getattr(request, "_kathikon_queue_summary", None)
        if cached is None:
            cached = {s.name: s for s in report.queue_summary(count_cap=COUNT_CAP)}
            request._kathikon_queue_summary = cached  # type: ignore[attr-defined]
        return cached

    def save_model(self, request: HttpRequest, obj: Queue, form: Any, change: bool) -> None:
        obj.save(using=conf.queue_database(obj.name))  # the database its workers read

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The concurrency override changes what every node runs: a destructive action.
        return self.may(request, "change_queue")

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        context = {"can_pause_all": self.has_pause_permission(request), **(extra_context or {})}
        return super().changelist_view(request, context)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return QueueChangeList

    def get_object(self, request: HttpRequest, object_id: str,
                   from_field: str | None = None) -> Queue | None:
        # A queue known only from the settings or its jobs has no row until it is changed
        # (a POST saves it): reading a page must write nothing, since workers serve rows.
        # A queue of another database (docs/scaling.md) has its row there.
        if object_id in conf.queues() and conf.queue_database(object_id) != conf.database():
            with vendor.using(conf.queue_database(object_id)):
                found = super().get_object(request, object_id, from_field)
            return found if found is not None else Queue(name=object_id)
        found = super().get_object(request, object_id, from_field)
        if found is None and object_id in self.summaries(request):
            found = Queue(name=object_id)
        return found

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "concurrency":
            kwargs.update(min_value=1, max_value=MAX_CONCURRENCY, help_text=(
                f"1 to {MAX_CONCURRENCY} jobs at once per node; overrides the settings for "
                "every node. Leave empty to use the settings. To stop a queue, pause it."))
        if db_field.name == "limits":
            kwargs.update(form_class=OverrideJSONField, help_text=(
                'Keys over the settings, e.g. {"global_limit": 5}; a key set to null means '
                "unlimited. Leave empty to use the settings' limits."))
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    @admin.display(description="concurrency in force")
    def concurrency_in_force(self, queue: Queue) -> SafeString:
        configured = conf.concurrency(queue.name)
        if queue.concurrency:
            return format_html(
                "<strong>{}</strong> jobs at once per node: the run-time override below. "
                "Clearing it goes back to the settings' {}.", queue.concurrency, configured)
        source = ("the settings" if queue.name in conf.queues()
                  else "the default: the queue is not in KATHIKON[\"QUEUES\"]")
        return format_html("<strong>{}</strong> jobs at once per node, from {}. A worker "
                           "started with <code>--queues {}:N</code> runs N.",
                           configured, source, queue.name)

    @admin.display(description="limits in force")
    def limits_in_force(self, queue: Queue) -> SafeString:
        return SafeString(render_to_string("admin/kathikon/queue/limits.html",
                                           {"rows": limits_in_force(queue)}))

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        summaries = self.summaries(request)

        def column(label: str, value: Callable[[report.QueueSummary], Any]) -> Callable[..., Any]:
            def show(queue: Queue) -> Any:
                summary = summaries.get(queue.name)
                return value(summary) if summary is not None else "—"
            show.short_description = label  # type: ignore[attr-defined]
            return show

        several = len(conf.databases()) > 1  # queues on several databases: say which
        return [
            "queue_name",
            *([column("database", lambda s: s.database)] if several else []),
            column("status", lambda s: badge("paused", "#cf222e") if s.paused
                   else badge("running", "#2da44e") if s.served
                   else badge("not served", "#d4761c", "not served by any live worker")),
            column("concurrency", lambda s: s.concurrency),
            column("limits (in use)", lambda s: s.limits_text or "—"),
            column("available", lambda s: s.count_text("available")),
            column("scheduled", lambda s: s.count_text("scheduled")),
            column("executing", lambda s: s.counts["claimed"] + s.counts["running"]),
            column("retryable", lambda s: s.count_text("retryable")),
            column("dead", lambda s: s.count_text("dead")),
            column("completed", lambda s: s.count_text("completed")),
            column("oldest waiting", lambda s: age(s.oldest_available_age)),
            column("done / failed (1 h)",
                   lambda s: f"{s.completed_last_hour} / {s.failed_last_hour}"),
        ]

    @admin.display(description="name", ordering="name")
    def queue_name(self, queue: Queue) -> SafeString:
        return breakable(queue.name)

    @admin.action(description="Pause selected queues", permissions=["pause"])
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        result = _each_queue(self.selected(request, queryset), dashboard.pause_queue)
        self.report_result(request, result, "Paused", "pause", "queue")

    @admin.action(description="Resume selected queues", permissions=["pause"])
    def resume_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        result = _each_queue(self.selected(request, queryset), dashboard.resume_queue)
        self.report_result(request, result, "Resumed", "resume", "queue")

    def selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> list[str]:
        """The queues ticked: rows, plus known queues that have no row yet."""
        names = set(queryset.values_list("name", flat=True))
        known = self.summaries(request)
        names |= {name for name in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
                  if name in known}
        return sorted(names)

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
        """GET: a confirmation page listing every queue it covers; POST: do it."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        refuse_unreadable(request)
        if not self.has_pause_permission(request):
            raise PermissionDenied("you may not pause or resume queues")
        verb = "Pause" if paused else "Resume"
        if request.method == "GET":
            context = {**self.admin_site.each_context(request), "opts": self.opts,
                       "title": f"{verb} all queues?", "verb": verb,
                       "queues": dashboard.all_queues(),
                       "changelist": reverse("admin:kathikon_queue_changelist")}
            return TemplateResponse(request, "admin/kathikon/queue/confirm_all.html", context)
        names = dashboard.pause_all() if paused else dashboard.resume_all()
        self.message_user(request, f"{verb}d {len(names)} queues: {', '.join(names)}.",
                          messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:kathikon_queue_changelist"))


class QueueChangeList(DeclaredFiltersChangeList):
    """The queue rows, plus an unsaved row for each queue known only from settings or jobs."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        have = {queue.name for queue in rows}
        summaries = self.model_admin.summaries(request)  # type: ignore[attr-defined]
        rows += [Queue(name=name) for name in summaries if name not in have]
        rows.sort(key=lambda queue: queue.name)
        self.result_list = rows
        self.result_count = len(rows)
        self.full_result_count = len(rows) if self.full_result_count is not None else None
        self.show_admin_actions = bool(rows)  # Django counted the rows alone


class OverrideJSONField(forms.JSONField):
    """An empty box for "no override", where Django's JSONField shows ``null``."""

    def prepare_value(self, value: Any) -> Any:
        return "" if value is None else super().prepare_value(value)


def limits_in_force(queue: Queue) -> list[dict[str, Any]]:
    """Each limit with the value in force, where it comes from and what clearing does."""
    settings = conf.queue_config(queue.name)
    override = queue.limits if isinstance(queue.limits, dict) else {}
    flow, ignored = in_force(settings, override)
    if ignored is not None:  # a bad stored override: the workers ignore it too
        override = {}
    effective = flow.as_options()
    configured = in_force(settings, None)[0].as_options()
    rows = []
    for key in LIMIT_KEYS:
        value, from_settings = effective[key], configured[key]
        rows.append({
            "key": key, "value": _shown(value),
            "source": "run-time override" if key in override
            else "settings" if from_settings is not None else "not set",
            "cleared": _shown(from_settings) if key in override else "",
        })
    return rows


def _shown(value: Any) -> str:
    return "unlimited" if value is None else json.dumps(value)


def _each_queue(names: Iterable[str], operation: Callable[[str], None]
                ) -> dashboard.ActionResult:
    changed, failed = [], []
    for name in names:
        try:
            operation(name)
            changed.append(name)
        except KathikonError as exc:
            failed.append((name, str(exc)))
    return dashboard.ActionResult(changed=changed, failed=failed)
