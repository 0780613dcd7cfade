"""Internal: what every Kathikon admin shares — badges, time formatting, input guards, and
the action plumbing with its one permission rule."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest, PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from kathikon import conf, dashboard
from kathikon.storage import reports, vendor

# The admin counts each queue's jobs per state up to this many; above it the figure is the
# planner's estimate (PostgreSQL), marked "≈", so the pages cost the same at 10M jobs.
COUNT_CAP = 10_000
# The overview groups the newest this many dead (and retryable) jobs of the last day.
FAILURE_SAMPLE = 5_000

STATE_COLOURS = {
    "scheduled": "#6c757d", "available": "#1f6feb", "claimed": "#8250df",
    "running": "#bf8700", "completed": "#2da44e", "retryable": "#d4761c",
    "dead": "#cf222e", "cancelled": "#57606a",
    # workflow steps: waiting for their dependencies, held for a person
    "waiting": "#1b7c83", "held": "#bf3989",
}


def badge(text: str, colour: str, title: str = "") -> SafeString:
    return format_html('<span class="kathikon-badge" style="background:{}" title="{}">{}</span>',
                       colour, title or text, text)


def breakable(text: str, title: str = "") -> SafeString:
    """``text`` that may wrap anywhere: a 63-character queue name or a long worker class
    would otherwise widen its column past a 1400 px window."""
    return format_html('<span class="kathikon-breakable" style="overflow-wrap:anywhere" '
                       'title="{}">{}</span>', title or text, text)


def state_badge(state: str) -> SafeString:
    return badge(state, STATE_COLOURS.get(state, "#57606a"))


def when(value: dt.datetime | None) -> str:
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S") if value else "—"


def time_field(name: str, label: str | None = None) -> Any:
    """An admin display of the datetime field ``name`` in the one format of ``when``.

    Django would render a bare field as "Dec. 3, 2026, 1:05 p.m.", next to Kathikon's
    own columns in "2026-12-03 13:05:00": two formats on one page. Use it as a class
    attribute (``inserted = time_field("inserted_at")``) in ``list_display`` or
    ``readonly_fields``; it sorts by the field.
    """
    def show(model_admin: Any, obj: Any) -> str:
        return when(getattr(obj, name))

    show.__name__ = f"{name}_shown"
    show.short_description = label or name.replace("_", " ")  # type: ignore[attr-defined]
    show.admin_order_field = name  # type: ignore[attr-defined]
    return show


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


def refuse_unreadable(request: HttpRequest, *path_values: str | None) -> None:
    """Answer 400 to a NUL byte (or a lone surrogate) anywhere in the request — the URL's
    ids, the query string, the form — before anything reaches the database: no stored
    value holds one, and PostgreSQL refuses NUL in text with an error (a 500)."""
    values = [value for value in path_values if value is not None]
    for data in [request.GET, request.POST] if request.method == "POST" else [request.GET]:
        for key, items in data.lists():
            values += [key, *items]
    for value in values:
        if not reports.comparable(value):
            raise BadRequest(f"the request holds a NUL byte or a lone surrogate: {value!r:.80}")


class DeclaredFiltersChangeList(ChangeList):
    """A list filtered by its own filters only. Django also takes any lookup on any field
    from the query string (``?args__contains=``, ``?worker__regex=(``), each a way to a
    database error; a parameter no filter of the list reads answers 400."""

    def get_filters(self, request: HttpRequest) -> Any:
        filters = super().get_filters(request)
        unknown = sorted(filters[2])  # the lookups left over once every filter took its own
        if unknown:
            raise DisallowedModelAdminLookup(
                f"Filtering by {', '.join(unknown)} not allowed: use the list's filters")
        return filters


READING_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def page_database(request: HttpRequest) -> str | None:
    """The database a job list shows (``?database=``, when queues live in several);
    400 for an alias that holds no queue."""
    value = request.GET.get("database")
    if value is None:
        return None
    if value not in conf.databases():
        raise BadRequest(f"no queue lives in the database {value!r:.80}")
    return value


def read_alias(request: HttpRequest) -> str:
    """Where a page reads: a page that only shows reads ``READ_DATABASE`` (a replica, when
    set); a request that changes something (an action, a form) reads and writes the
    primary, so it decides on fresh rows. A job list of another database reads that one."""
    with reads_for(request):
        return vendor.read_alias()


@contextmanager
def reads_for(request: HttpRequest) -> Iterator[None]:
    """Storage works on the page's database inside; and a request that changes something
    reads the primary, reports included."""
    database = page_database(request)
    with (vendor.using(database) if database else nullcontext()), \
            (nullcontext() if request.method in READING_METHODS else vendor.primary_reads()):
        yield


class KathikonAdmin(admin.ModelAdmin):
    """What every Kathikon admin page shares: bad input is answered 400, never a 500.

    A NUL byte anywhere in a request, a lookup that is not one of the list's filters, a
    filter value or page Django cannot read: each answers 400 Bad Request and changes
    nothing (Django itself redirects to a "Database error" page for the last).

    Pages read Kathikon's database (``KATHIKON["DATABASE"]``, or ``READ_DATABASE`` for a
    page that only shows); see :func:`read_alias`."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(read_alias(request))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return DeclaredFiltersChangeList

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        try:
            return super().get_changelist_instance(request)
        except IncorrectLookupParameters as exc:
            raise BadRequest(f"bad filter value or page: {exc}") from exc

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Any],
                           search_term: str) -> tuple[QuerySet[Any], bool]:
        # The list's search form refuses NUL itself; the autocomplete view does not.
        if not reports.comparable(search_term):
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        refuse_unreadable(request)
        with reads_for(request):
            return super().changelist_view(request, extra_context)

    def changeform_view(self, request: HttpRequest, object_id: str | None = None,
                        form_url: str = "", extra_context: Any = None) -> HttpResponse:
        refuse_unreadable(request, object_id)
        with reads_for(request):
            return super().changeform_view(request, object_id, form_url, extra_context)

    def delete_view(self, request: HttpRequest, object_id: str,
                    extra_context: Any = None) -> HttpResponse:
        refuse_unreadable(request, object_id)
        with reads_for(request):
            return super().delete_view(request, object_id, extra_context)

    def history_view(self, request: HttpRequest, object_id: str,
                     extra_context: Any = None) -> HttpResponse:
        refuse_unreadable(request, object_id)
        return super().history_view(request, object_id, extra_context)


class ActionsMixin(KathikonAdmin):
    """Action plumbing shared by the admins: one permission rule, 403s, result messages."""

    def destructive(self) -> bool:
        return dashboard.destructive_allowed()

    def may(self, request: HttpRequest, permission: str) -> bool:
        """The rule for every action, whether a list action, a button or its own view:
        destructive actions allowed, the model's view permission (Django's: ``view_<model>``
        or ``change_<model>``) and the action's own ``kathikon.<permission>``. Without the
        view permission the list's actions answer 403, so every other way in does too."""
        return (self.destructive() and self.has_view_permission(request)
                and request.user.has_perm(f"kathikon.{permission}"))

    def known_actions(self) -> set[str]:
        return {getattr(action, "__name__", str(action)) for action in self.actions or ()}

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        # Django answers an action the user may not run with "No action selected";
        # a forged POST deserves a clear 403 instead.
        name = request.POST.get("action") if request.method == "POST" else None
        if name and name in self.known_actions() and name not in self.get_actions(request):
            raise PermissionDenied(f"you may not run the action {name!r}")
        if name:
            self.refuse_bad_selection(request)
        return super().changelist_view(request, extra_context)

    def refuse_bad_selection(self, request: HttpRequest) -> None:
        """400 for a ticked id that is not one (Django's filter on it raises a 500)."""
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                self.opts.pk.to_python(value)
            except ValidationError:
                raise BadRequest(f"not a {self.opts.verbose_name} id: {value!r:.80}") from None

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



class ReadOnlyAdmin(KathikonAdmin):
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
