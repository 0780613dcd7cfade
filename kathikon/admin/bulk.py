"""Internal: the job list's actions on many jobs — shown before they run, run in chunks.

An action on more than :data:`CONFIRM_OVER` selected jobs, or on every job the list's
filters match ("Select all N jobs"), first renders a page that says how many jobs it
will touch, which filter picked them and the first few, and runs only once that page
is confirmed. It then walks the matches by id in chunks of :data:`CHUNK` (one
transaction each, never the whole id list in memory), up to the newest match when it
started, so a rerun's new jobs are never picked up by the same action. Django's action
permissions apply as to any action; each job's history records who did it, and one log
line (logger ``kathikon.admin``) the whole action.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from kathikon.dashboard import ActionResult
from kathikon.models import Job

logger = logging.getLogger("kathikon.admin")

CONFIRM_OVER = 100  # selected jobs an action runs on without asking first
CHUNK = 1_000  # jobs per transaction
COUNT_CAP = 1_000_000  # the confirmation counts up to this many ("over …" beyond)
SAMPLE = 10  # jobs listed on the confirmation page


def actor(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    return f"admin:{user.get_username()}" if user is not None else "admin"


def confirmation(model_admin: Any, request: HttpRequest, queryset: QuerySet[Job], verb: str,
                 done_word: str) -> HttpResponse | None:
    """The page that asks first, or None when the action may run now."""
    if request.POST.get("kathikon_confirmed") == "yes":
        return None
    across = request.POST.get("select_across") == "1"
    count = queryset.order_by()[:COUNT_CAP + 1].count()
    if not across and count <= CONFIRM_OVER:
        return None
    post = [(name, value) for name in request.POST if name != "csrfmiddlewaretoken"
            for value in request.POST.getlist(name)]
    shown = f"over {COUNT_CAP:,}" if count > COUNT_CAP else f"{count:,}"
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"{verb.capitalize()} {shown} jobs?", "verb": verb, "done_word": done_word,
        "count": shown, "filters": _filters(request) if across else "", "chunk": f"{CHUNK:,}",
        "sample": list(queryset.order_by("-id")[:SAMPLE]), "post": post,
        "back": request.get_full_path(), "opts": Job._meta,
    }
    return TemplateResponse(request, "admin/kathikon/job/bulk_confirm.html", context)


def run(request: HttpRequest, queryset: QuerySet[Job], what: str,
        operation: Callable[[Sequence[Any]], ActionResult]) -> ActionResult:
    """``operation`` on every job of ``queryset``, a chunk of ids at a time (keyset by id,
    up to the newest match now); one log line, and a message when it took several chunks."""
    ordered = queryset.order_by("pk")
    newest = ordered.values_list("pk", flat=True).last()
    changed: list[str] = []
    failed: list[tuple[str, str]] = []
    chunks, last = 0, None
    while newest is not None:
        page = ordered.filter(pk__lte=newest)
        if last is not None:
            page = page.filter(pk__gt=last)
        ids = list(page.values_list("pk", flat=True)[:CHUNK])
        if not ids:
            break
        result = operation(ids)
        changed += result.changed
        failed += result.failed
        chunks, last = chunks + 1, ids[-1]
    total = ActionResult(changed=changed, failed=failed)
    logger.info("kathikon admin: %s ran %s on %d job(s) in %d chunk(s), %d refused (filter: %s)",
                actor(request), what, len(total.changed), chunks, len(total.failed),
                _filters(request) or "selected jobs")
    if chunks > 1:
        messages.info(request, f"Ran in {chunks} chunks of up to {CHUNK:,} jobs.")
    return total


def _filters(request: HttpRequest) -> str:
    """The list's filters, as its address says them (``state=dead&queue=emails``)."""
    return request.GET.urlencode()
