"""Internal: the actions of a workflow's admin page — cancel the workflow (after a
confirmation page), retry a failed step, release a held one — each behind the view
permission and its own, reported as a message, never a 500."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import BadRequest, PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path

import kathikon
from kathikon import workflows
from kathikon.admin.common import ActionsMixin, reads_for, refuse_unreadable
from kathikon.admin.workflow_page import workflow_url
from kathikon.exceptions import JobNotFound, KathikonError, WorkflowFinished
from kathikon.ids import parse_id
from kathikon.models import Workflow
from kathikon.states import JobState
from kathikon.storage import workflows as store


class WorkflowActions(ActionsMixin):
    """``…/workflow/<id>/act/cancel/`` (GET: the confirmation page; POST: cancel),
    ``act/retry/`` and ``act/release/`` (POST; ``job``: the step's id)."""

    # -- permissions ---------------------------------------------------------------------

    def can(self, request: HttpRequest) -> dict[str, bool]:
        """Which of the page's actions the user may run (view + the action's own)."""
        return {"cancel": self.may(request, "cancel_workflow"),
                "retry": self.may(request, "retry_job"),
                "release": self.may(request, "release_workflow")}

    # -- the view ------------------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        urls = [path("<path:object_id>/act/<str:action>/",
                     self.admin_site.admin_view(self.workflow_action_view),
                     name="kathikon_workflow_action")]
        return [*urls, *super().get_urls()]

    def workflow_action_view(self, request: HttpRequest, object_id: str,
                             action: str) -> HttpResponse:
        """403 without the permission (or for an unknown action), 404 for an unknown
        workflow or a step of another one, 400 for a ``job`` that is no id."""
        allowed = ("GET", "POST") if action == "cancel" else ("POST",)
        if request.method not in allowed:
            return HttpResponseNotAllowed(list(allowed))
        refuse_unreadable(request, object_id, action)
        can = self.can(request)
        if action not in can:
            raise PermissionDenied(f"unknown action {action!r}")
        if not can[action]:
            raise PermissionDenied(f"you may not {action} here")
        with reads_for(request):  # POST: the primary, reports included
            row = get_object_or_404(self.get_queryset(request), pk=parse_id(object_id))
            if action == "cancel":
                if request.method == "GET":
                    return self.confirm_cancel(request, row)
                self.cancel(request, row)
            else:
                self.step_action(request, row, action)
        return HttpResponseRedirect(workflow_url(row.id))

    def confirm_cancel(self, request: HttpRequest, row: Workflow) -> HttpResponse:
        counts = store.count_steps([row.id]).get(row.id, {})
        pending = {state: counts[state] for state in (JobState.WAITING, JobState.HELD,
                                                      JobState.AVAILABLE, JobState.SCHEDULED,
                                                      JobState.RETRYABLE) if counts.get(state)}
        executing = counts.get(JobState.RUNNING, 0) + counts.get(JobState.CLAIMED, 0)
        context = {**self.admin_site.each_context(request), "opts": self.opts, "original": row,
                   "title": f"Cancel workflow “{row.name}”?", "pending": pending,
                   "pending_total": sum(pending.values()), "executing": executing,
                   "running": row.status == Workflow.Status.RUNNING and not row.cancelled_at,
                   "back": workflow_url(row.id)}
        return TemplateResponse(request, "admin/kathikon/workflow/confirm_cancel.html", context)

    def cancel(self, request: HttpRequest, row: Workflow) -> None:
        try:
            info = workflows.cancel(row.id, actor=actor(request))
        except WorkflowFinished as exc:
            self.message_user(request, f"Nothing cancelled: {exc}.", messages.WARNING)
            return
        left = ", ".join(f"{n} {state}" for state, n in sorted(info.counts.items()))
        self.message_user(request, f"Cancelled workflow “{row.name}”: every step that had not "
                          f"started is cancelled; running steps finish. Its steps now: "
                          f"{left or 'none'}.", messages.SUCCESS)

    def step_action(self, request: HttpRequest, row: Workflow, action: str) -> None:
        pk = parse_id(request.POST.get("job", ""))
        if pk is None:
            raise BadRequest("job: not a job id")
        try:
            job = kathikon.fetch(pk)
        except JobNotFound:
            job = None
        if job is None or job.workflow_id != row.id:
            raise Http404(f"no step {pk.hex} in workflow {row.id.hex}")
        try:
            if action == "retry":
                kathikon.retry(job.id)
            else:
                workflows.release(job.id, actor=actor(request))
        except KathikonError as exc:
            verb = "retry" if action == "retry" else "release"
            self.message_user(request, f"Could not {verb} step “{job.step}”: {exc}",
                              messages.WARNING)
            return
        if action == "retry":
            said = (f"Retried step “{job.step}”: it runs again now, and what its failure "
                    "cancelled waits for it again.")
        else:
            said = f"Released step “{job.step}”: it runs now despite its failed dependency."
        self.message_user(request, said, messages.SUCCESS)


def actor(request: HttpRequest) -> str:
    """Who did it, for the steps' history."""
    return f"admin:{request.user.get_username()}"
