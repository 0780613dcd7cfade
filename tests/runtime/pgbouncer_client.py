"""Run as a process whose ``default`` database goes through PgBouncer (transaction mode):
what a web process does with Kathikon — insert in its own transaction, use the admin —
and print what it saw as JSON for tests/runtime/test_pgbouncer_processes.py.

    python -m tests.runtime.pgbouncer_client DEAD_JOB_ID...
"""

from __future__ import annotations

import json
import sys


def main(dead_ids: list[str]) -> dict[str, object]:
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import transaction
    from django.test import Client

    import kathikon
    from kathikon.models import Job
    from kathikon.storage import prepared

    seen: dict[str, object] = {"through_pooler": not prepared.reaches_postgres("default")}
    with transaction.atomic():  # the caller's transaction: the job commits with it
        kept = kathikon.insert("testproject.demo.workers.Record", {"n": "kept"})
    try:
        with transaction.atomic():
            kathikon.insert("testproject.demo.workers.Record", {"n": "rolled back"})
            raise LookupError("the caller's own error")
    except LookupError:
        pass
    seen["kept"] = kept.id.hex
    seen["rolled_back_found"] = Job.objects.filter(args__n="rolled back").exists()
    user = User.objects.create_superuser("bouncer-admin", "a@example.com", "x")
    client = Client()
    client.force_login(user)
    pages = {"jobs": "/admin/kathikon/job/",
             "dead": "/admin/kathikon/job/?state=dead&q=args.n%3D1",
             "queues": "/admin/kathikon/queue/",
             "job": f"/admin/kathikon/job/{kept.id.hex}/change/",
             "workflows": "/admin/kathikon/workflow/"}
    seen["pages"] = {name: client.get(url).status_code for name, url in pages.items()}
    response = client.post("/admin/kathikon/job/", {
        "action": "retry_jobs", "index": "0", "_selected_action": dead_ids}, follow=True)
    seen["retry_status"] = response.status_code
    seen["states_after_retry"] = sorted(set(Job.objects.filter(id__in=dead_ids)
                                            .values_list("state", flat=True)))
    return seen


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
