#!/usr/bin/env python3
"""`make demo`: migrate the SQLite testproject, enqueue example jobs, run a real worker, show them.

The jobs: one that succeeds, one that fails twice then succeeds, one that
always fails (and goes dead), one that snoozes, one scheduled for later.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
    print("\nNext: `make test`, the docs in docs/, and the admin "
          "(testproject/manage.py runserver).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
