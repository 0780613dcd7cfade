"""Internal: what every Kathikon admin shares — badges, time formatting, action plumbing."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from kathikon import dashboard

# The admin counts each queue's jobs per state up to this many; above it the figure is the
# planner's estimate (PostgreSQL), marked "≈", so the pages cost the same at 10M jobs.
COUNT_CAP = 10_000
# The overview groups the newest this many dead (and retryable) jobs of the last day.
FAILURE_SAMPLE = 5_000

STATE_COLOURS = {
    "scheduled": "#6c757d", "available": "#1f6feb", "claimed": "#8250df",
    "running": "#bf8700", "completed": "#2da44e", "retryable": "#d4761c",
    "dead": "#cf222e", "cancelled": "#57606a",
}


def badge(text: str, colour: str, title: str = "") -> SafeString:
    return format_html('<span class="kathikon-badge" style="background:{}" title="{}">{}</span>',
                       colour, title or text, text)


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



def pre(value: Any) -> SafeString:
    if value is None or value == {}:
        return SafeString("—")
    return format_html('<pre class="kathikon-pre">{}</pre>',
                       json.dumps(value, indent=2, sort_keys=True, default=str))



class ReadOnlyAdmin(admin.ModelAdmin):
    Media = KathikonMedia

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False



def job_link(pk: Any) -> SafeString:
    if pk is None:
        return SafeString("—")
    return format_html('<a href="{}"><code>{}</code></a>',
                       reverse("admin:kathikon_job_change", args=[pk]), pk.hex[:12] + "…")
