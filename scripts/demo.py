#!/usr/bin/env python3
"""`make demo`: migrate the SQLite testproject, enqueue example jobs, run a real worker, show them.

The jobs: one that succeeds, one that fails twice then succeeds, one that
always fails (and goes dead), one that snoozes, one scheduled for later; then a
batch whose callback gets its children's counts, a cron schedule whose due
tick the worker fires, and a workflow (fetch → three transcodes in parallel →
publish, each step reading its dependencies' results).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ.setdefault("KATHIKON_DB", "sqlite")


def main() -> int:
    import django

    django.setup()
    from django.core.management import call_command

    import kathikon
    from kathikon import storage
    from testproject.demo import workers

    print("== migrating the SQLite demo database")
    call_command("migrate", verbosity=0, interactive=False)
    storage.clear_jobs()

    print("== enqueueing example jobs")
    jobs = {
        "succeeds": kathikon.insert(workers.Greet, {"name": "newcomer"}),
        "fails twice, then succeeds": kathikon.insert(workers.Flaky, {"failures": 2}),
        "always fails": kathikon.insert(workers.AlwaysFails, {"order": 1234}),
        "snoozes once": kathikon.insert(workers.Sleepy, {"seconds": 0}),
        "scheduled in an hour": kathikon.insert(workers.Greet, {"name": "later"},
                                                schedule_in=3600),
    }
    for label, job in jobs.items():
        print(f"   {job.id.hex}  {label:<28} {job.worker}")
    batch, schedule = _scheduling_examples(workers)
    workflow = _workflow_example(workers)

    print("== running `manage.py kathikon_worker --burst` until nothing is due", flush=True)
    import subprocess

    code = subprocess.call([sys.executable, str(ROOT / "testproject" / "manage.py"),
                            "kathikon_worker", "--burst"], cwd=str(ROOT))
    if code:
        print(f"   the worker exited with {code}")
        return code

    print("== where every job ended up")
    print(f"   {'job':<28} {'state':<10} {'attempts':>8}  last error / result")
    for label, job in jobs.items():
        job = kathikon.fetch(job.id)
        detail = job.errors[-1]["message"] if job.errors and job.state != "completed" else (
            job.result if job.result is not None else "")
        if job.state == "scheduled":
            detail = f"due at {job.available_at:%H:%M:%S} UTC"
        print(f"   {label:<28} {job.state:<10} {job.attempts:>4}/{job.max_attempts:<3}  {detail}")
    _show_scheduling_examples(kathikon, batch, schedule)
    _show_workflow(workflow)
    print("\nNext: `make test`, the docs in docs/, and the admin "
          "(testproject/manage.py runserver).")
    return 0


def _scheduling_examples(workers: Any) -> tuple[Any, Any]:
    """A batch whose callback gets the children's counts, and a cron schedule (docs/cron.md)."""
    import datetime as dt

    from kathikon import Batch, cron
    from kathikon.models import CronSchedule

    children = [(workers.Greet, {"name": f"child {n}"}) for n in range(3)]
    batch = Batch.start(None, [*children, (workers.Reject, {})],
                        on_complete=(workers.Greet, {"name": "batch callback"}))
    print(f"   {batch.id}  batch of {batch.total} children     then Greet once, with their counts")
    CronSchedule.objects.all().delete()
    schedule = cron.insert(workers.Greet, {"name": "cron"}, cron="* * * * *",
                           timezone="Europe/Berlin", name="demo-every-minute")
    # As if it had been created a minute ago, so its tick for this minute is due now.
    assert schedule.next_fire_at is not None
    tick = schedule.next_fire_at - dt.timedelta(minutes=1)
    CronSchedule.objects.filter(pk=schedule.pk).update(next_fire_at=tick)
    print(f"   {schedule.id.hex}  cron '* * * * *' (Berlin)   tick {tick:%H:%M} UTC is due")
    return batch, schedule


def _workflow_example(workers: Any) -> Any:
    """fetch → small, medium, large (in parallel) → publish (docs/workflows.md)."""
    from kathikon import Workflow

    wf = Workflow("publish-video")
    wf.add("fetch", workers.FetchVideo, {"video": "intro.mp4"})
    sizes = [wf.add(name, workers.Transcode, {"height": height}, deps=["fetch"])
             for name, height in (("small", 360), ("medium", 720), ("large", 1080))]
    wf.add("publish", workers.Publish, {}, deps=sizes)
    wf.insert()
    print(f"   {wf.id}  workflow publish-video      fetch → 3 transcodes → publish")
    return wf


def _show_workflow(wf: Any) -> None:
    import kathikon
    from kathikon import workflows

    info = workflows.fetch(wf.id)
    print(f"== the workflow: {info.status}; steps in order of their start:")
    for step in sorted(info.steps, key=lambda s: (s.started_at is None, s.started_at)):
        print(f"   {step.name:<8} {step.state:<10} {kathikon.fetch(step.id).result}")
    print("   see the admin's workflow page (its graph) and `kathikon_ops workflow <id>`")


def _show_scheduling_examples(kathikon: Any, batch: Any, schedule: Any) -> None:
    from zoneinfo import ZoneInfo

    from kathikon import Batch, cron

    info = Batch.fetch(batch.id)
    print(f"== the batch: {info.status}; children {info.counts['completed']} completed, "
          f"{info.counts['dead']} dead")
    if info.callback_job_id:
        callback = kathikon.fetch(info.callback_job_id)
        print(f"   its callback ran once ({callback.state}) with args {callback.args}")
    schedule = cron.fetch(schedule.id)
    for job in schedule.jobs.order_by("scheduled_at"):
        print(f"== the cron schedule enqueued job {job.id.hex} for its {job.scheduled_at:%H:%M} "
              f"UTC tick: {job.state}")
    local = schedule.next_fire_at.astimezone(ZoneInfo(schedule.timezone))
    print(f"   next tick {local:%H:%M %Z}; see `kathikon.cron.list()` and the admin")


if __name__ == "__main__":
    sys.exit(main())
