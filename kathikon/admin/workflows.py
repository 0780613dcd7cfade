"""Internal: the workflow admin — the list, and a read-only page with the graph and the
steps (its actions: kathikon.admin.workflow_actions)."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from kathikon.admin.common import (
    DeclaredFiltersChangeList,
    KathikonMedia,
    badge,
    breakable,
    pre,
    time_field,
)
from kathikon.admin.pagination import EstimatedCountPaginator
from kathikon.admin.workflow_actions import WorkflowActions
from kathikon.admin.workflow_page import (
    RETRYABLE,
    STATUS_COLOURS,
    WorkflowPage,
    load,
    shown_workflows,
    steps_url,
    workflow_url,
)
from kathikon.ids import parse_id
from kathikon.models import Workflow
from kathikon.states import JobState
from kathikon.storage import reports


class CountedPaginator(EstimatedCountPaginator):
    """Counts up to ``CAP`` workflows (the job table's estimate would be the wrong table)."""

    @cached_property
    def total(self) -> tuple[int, bool]:
        counted = reports.capped_count(self.object_list, self.CAP)
        return counted, counted <= self.CAP


class WorkflowChangeList(DeclaredFiltersChangeList):
    """Each listed workflow learns how many of its sub-workflows still run (one query for
    the page): its counters count them as unfinished members, not as steps."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        running = running_subs([row.id for row in rows])
        for row in rows:
            row.running_subs = running.get(row.id, 0)  # type: ignore[attr-defined]
        self.result_list = rows


def running_subs(ids: list[Any]) -> dict[Any, int]:
    found: dict[Any, int] = {}
    for parent in (shown_workflows().filter(parent_workflow_id__in=ids,
                                             status=Workflow.Status.RUNNING)
                   .values_list("parent_workflow_id", flat=True)):
        found[parent] = found.get(parent, 0) + 1
    return found


@admin.register(Workflow)
class WorkflowAdmin(WorkflowActions):
    list_display = ("workflow_name", "status_display", "steps_done", "failed", "inserted",
                    "finished")
    list_display_links = ("workflow_name",)
    list_filter = ("status",)
    search_fields = ("name",)
    search_help_text = "A workflow id (hex), or part of its name."
    sortable_by = ()
    list_per_page = 50
    paginator = CountedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions: list[Any] = []
    # One short block of fields, then the graph and the steps (the template); the meta
    # only when there is one.
    fields = ("workflow_id", "name", "status_display", "parent", "progress", "step_states",
              "sub_workflows", "inserted", "finished", "cancelled", "meta_display")
    readonly_fields = ("workflow_id", "name", "status_display", "parent", "progress",
                       "step_states", "sub_workflows", "inserted", "finished", "cancelled",
                       "meta_display")
    inserted = time_field("inserted_at", "inserted at")
    finished = time_field("finished_at", "finished at")
    cancelled = time_field("cancelled_at", "cancelled at")
    Media = KathikonMedia

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # workflows come from kathikon.Workflow(...).insert()

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the pruner deletes finished workflows with their steps

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WorkflowChangeList

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """The fields that have something to say (no "finished at: —" on a running one)."""
        page = self.attach(request, obj)
        shown = {"parent": getattr(obj, "parent_workflow_id", None),
                 "sub_workflows": page is not None and page.subs,
                 "finished": getattr(obj, "finished_at", None),
                 "cancelled": getattr(obj, "cancelled_at", None),
                 "meta_display": getattr(obj, "meta", None)}
        return [name for name in self.fields if shown.get(name, True)]

    def get_ordering(self, request: HttpRequest) -> tuple[str, ...]:
        # Ids are time-ordered: newest first on the primary key; a status filter walks
        # the (status, inserted_at) index instead.
        return ("-inserted_at", "-id") if request.GET.get("status__exact") else ("-id",)

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Workflow],
                           search_term: str) -> tuple[QuerySet[Workflow], bool]:
        term = search_term.strip()
        pk = parse_id(term) if len(term.replace("-", "")) == 32 else None
        if pk is not None:
            return queryset.filter(pk=pk), False
        return super().get_search_results(request, queryset, search_term)

    # -- the page ------------------------------------------------------------------------

    def page(self, request: HttpRequest, row: Workflow) -> WorkflowPage:
        cached = getattr(request, "_kathikon_workflow_page", None)
        if cached is None or cached.row.pk != row.pk:
            cached = load(row)
            request._kathikon_workflow_page = cached  # type: ignore[attr-defined]
        return cached

    def render_change_form(self, request: HttpRequest, context: dict[str, Any],
                           *args: Any, **kwargs: Any) -> Any:
        row = context.get("original")
        if row is not None:
            page = self.page(request, row)
            can = self.can(request)
            context.update(
                kathikon_page=page, kathikon_can=can,
                kathikon_running=row.status == Workflow.Status.RUNNING and not row.cancelled_at,
                kathikon_retryable=RETRYABLE, kathikon_held=JobState.HELD,
                kathikon_steps_url=steps_url(row.id),
                kathikon_act={name: reverse("admin:kathikon_workflow_action",
                                            args=[row.id.hex, name])
                              for name in ("cancel", "retry", "release")})
        return super().render_change_form(request, context, *args, **kwargs)

    # -- columns and fields --------------------------------------------------------------

    @admin.display(description="id")
    def workflow_id(self, row: Workflow) -> SafeString:
        return format_html('<code class="kathikon-id">{}</code>', row.id.hex)

    @admin.display(description="name", ordering="name")
    def workflow_name(self, row: Workflow) -> SafeString:
        if row.parent_workflow_id is None:
            return breakable(row.name)  # 200 characters without a space would not wrap
        return format_html('{}<br><small class="kathikon-sub-of">sub-workflow</small>',
                           breakable(row.name))

    @admin.display(description="status")
    def status_display(self, row: Workflow) -> SafeString:
        if row.status == Workflow.Status.RUNNING and row.cancelled_at:
            return badge("cancelling", STATUS_COLOURS["cancelled"],
                         "cancelled; steps still running finish")
        return badge(row.status, STATUS_COLOURS.get(row.status, "#57606a"))

    @admin.display(description="steps done")
    def steps_done(self, row: Workflow) -> str:
        unfinished = max(0, row.steps_unfinished - getattr(row, "running_subs", 0))
        return f"{max(0, row.steps_total - unfinished)}/{row.steps_total}"

    @admin.display(description="failed")
    def failed(self, row: Workflow) -> SafeString | str:
        if not row.steps_failed:
            return "0"
        return format_html('<span title="steps (and sub-workflows) that ended dead or '
                           'cancelled">{}</span>', badge(str(row.steps_failed),
                                                         STATUS_COLOURS["dead"]))

    @admin.display(description="parent workflow")
    def parent(self, row: Workflow) -> SafeString:
        if row.parent_workflow_id is None:
            return SafeString("—")
        return format_html('<a href="{}"><code>{}</code></a>',
                           workflow_url(row.parent_workflow_id), row.parent_workflow_id.hex)

    @admin.display(description="steps")
    def progress(self, row: Workflow) -> str:
        page = loaded(row)
        counts = page.counts if page is not None else {}
        done = sum(counts.get(state, 0) for state in (JobState.COMPLETED, JobState.DEAD,
                                                       JobState.CANCELLED))
        failed = counts.get(JobState.DEAD, 0) + counts.get(JobState.CANCELLED, 0)
        return f"{done} of {row.steps_total} finished, {failed} dead or cancelled"

    @admin.display(description="steps by state")
    def step_states(self, row: Workflow) -> SafeString:
        page = loaded(row)
        if page is None:
            return SafeString("—")
        return format_html_join(
            " ", '<a href="{}" class="kathikon-state-link" data-state="{}">{} {}</a>',
            ((steps_url(row.id, state), state, badge(state, STATUS_COLOURS.get(state, "")), n)
             for state, n in page.counts.items())) or SafeString("—")

    @admin.display(description="sub-workflows")
    def sub_workflows(self, row: Workflow) -> SafeString:
        page = loaded(row)
        if page is None or not page.subs:
            return SafeString("—")
        return format_html_join(
            "<br>", '<a href="{}">{}</a> {}',
            ((workflow_url(sub.id), sub.name, badge(sub.status, STATUS_COLOURS.get(sub.status,
                                                                                  "")))
             for sub in page.subs))

    @admin.display(description="meta")
    def meta_display(self, row: Workflow) -> SafeString:
        return pre(row.meta)

    def attach(self, request: HttpRequest, obj: Workflow | None) -> WorkflowPage | None:
        """The page's data for the fields, loaded once per request and kept on the row (the
        form's instance), never on this admin, which serves every request."""
        if obj is None:
            return None
        obj._kathikon_page = self.page(request, obj)  # type: ignore[attr-defined]
        return obj._kathikon_page  # type: ignore[attr-defined,no-any-return]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        self.attach(request, obj)
        return super().get_readonly_fields(request, obj)


def loaded(row: Workflow) -> WorkflowPage | None:
    return getattr(row, "_kathikon_page", None)
