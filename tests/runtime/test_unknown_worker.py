"""A job whose worker class this process cannot import yet: a rolling deploy, not a dead job.

A newer web release enqueues jobs of a class that the older worker processes still
running do not have. Within ``UNKNOWN_WORKER_GRACE`` of its insert such a job goes back
to its queue, its attempt not counted, for a worker that knows the class; the process
says so once per worker path. Past the grace (a class renamed or removed) it is dead
with ``kathikon.UnknownWorker`` as before, and in-process runs (tests, ``execute_job``)
keep that at once.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import kathikon
from kathikon import signals, storage
from kathikon.executor import UNKNOWN_WORKER_RETRY, Executor, settle
from kathikon.models import Job, Node
from tests import workers
from tests.runtime.conftest import ROOT, wait_until
from tests.runtime.lifeline_workers import executions
from tests.runtime.test_faults_nodes import SETTINGS

RELEASE_TWO = Path(__file__).resolve().parent / "release_two"



def claimed_unknown(**age: float) -> Job:
    """A claimed job whose worker path cannot be imported, inserted ``age`` ago."""
    job = kathikon.insert(workers.Succeed, {})
    inserted = storage.vendor.now() - dt.timedelta(**age)
    Job.objects.filter(id=job.id).update(worker="tests.workers.NotYetDeployed",
                                         inserted_at=inserted)
    (claimed,) = storage.claim_jobs("default", 1, "old-node")
    return claimed


@pytest.mark.django_db
def test_a_young_job_of_an_unknown_class_goes_back_without_using_an_attempt():
    job = claimed_unknown(seconds=10)
    sent: list[Any] = []

    def receiver(signal: Any, **kwargs: Any) -> None:
        sent.append(signal)

    for outcome in (signals.job_completed, signals.job_failed, signals.job_discarded,
                    signals.job_snoozed):
        outcome.connect(receiver, weak=False)
    try:
        (execution,) = settle([Executor(unknown_worker_grace=600).run(job)])
    finally:
        for outcome in (signals.job_completed, signals.job_failed, signals.job_discarded,
                        signals.job_snoozed):
            outcome.disconnect(receiver)
    assert execution.kind == "deferred" and execution.written
    row = Job.objects.get(id=job.id)
    assert (row.state, row.attempts, row.errors) == ("available", 0, [])
    wait = (row.available_at - storage.vendor.now()).total_seconds()
    assert 0 < wait <= UNKNOWN_WORKER_RETRY
    assert sent == []  # no outcome: nothing happened to the job yet


@pytest.mark.django_db
def test_past_the_grace_the_job_is_dead_with_today_s_clear_error():
    job = claimed_unknown(seconds=601)
    (execution,) = settle([Executor(unknown_worker_grace=600).run(job)])
    row = Job.objects.get(id=job.id)
    assert (execution.kind, row.state, row.attempts) == ("discarded", "dead", 1)
    assert row.errors[-1]["kind"] == "kathikon.UnknownWorker"
    assert "tests.workers.NotYetDeployed" in row.errors[-1]["message"]


@pytest.mark.django_db
def test_the_last_look_comes_no_later_than_the_grace():
    job = claimed_unknown(seconds=598)
    settle([Executor(unknown_worker_grace=600).run(job)])
    row = Job.objects.get(id=job.id)
    assert (row.available_at - storage.vendor.now()).total_seconds() <= 2.5


@pytest.mark.django_db
def test_without_a_grace_in_process_runs_stay_dead_at_once():
    job = claimed_unknown(seconds=1)
    (execution,) = settle([Executor().run(job)])
    assert execution.kind == "discarded" and Job.objects.get(id=job.id).state == "dead"


def test_the_grace_is_a_checked_setting(settings):
    from kathikon import conf

    assert conf.unknown_worker_grace() == 600
    settings.KATHIKON = {**settings.KATHIKON, "UNKNOWN_WORKER_GRACE": 0}
    assert conf.unknown_worker_grace() == 0
    for bad in (-1, "10 minutes", float("nan"), True):
        settings.KATHIKON = {**settings.KATHIKON, "UNKNOWN_WORKER_GRACE": bad}
        problems = [p for p in conf.load().problems if "UNKNOWN_WORKER_GRACE" in p.message]
        assert problems and problems[0].id == "kathikon.E004"


@pytest.mark.slow
@pytest.mark.usefixtures("postgres_only")
def test_jobs_of_a_class_only_a_newer_worker_knows_wait_for_it(worker_processes: Any,
                                                              tmp_path: Path, monkeypatch):
    monkeypatch.syspath_prepend(str(RELEASE_TWO))
    from kathikon_release_two import AddedInRelease

    log = tmp_path / "runs.log"
    old = worker_processes.start("--node", "old", settings=SETTINGS)
    old.wait_for_log("kathikon worker old running", timeout=30)
    result = kathikon.insert_many([(AddedInRelease, {"log": str(log), "i": i})
                                   for i in range(12)])
    assert result.inserted == 12 and not result.errors
    ids = [getattr(job_id, "hex", job_id) for job_id in result.ids]
    said = "cannot run jobs of kathikon_release_two.AddedInRelease"
    old.wait_for_log(said, timeout=20)
    # Two rounds of looks: the old process claims them again and again, says so once.
    time.sleep(UNKNOWN_WORKER_RETRY * 2 + 1)
    assert old.log().count(said) == 1
    rows = Job.objects.filter(id__in=ids)
    assert {row.state for row in rows} <= {"available", "running", "claimed"}
    assert all(row.attempts <= 1 and row.errors == [] for row in rows)
    assert executions(log) == []  # nobody ran them yet
    recorded = Node.objects.get(name="old").unknown_workers
    assert list(recorded) == ["kathikon_release_two.AddedInRelease"]  # for the overview

    path = os.pathsep.join([str(ROOT), str(RELEASE_TWO)])
    new = worker_processes.start("--node", "new", settings=SETTINGS, env={"PYTHONPATH": path})
    # The new process's start-up counts too: seconds alone, more on a loaded CI machine.
    wait_until(lambda: Job.objects.filter(id__in=ids, state="completed").count() == len(ids),
               timeout=60, message="every job of the new class to complete")
    for row in Job.objects.filter(id__in=ids):
        assert (row.attempted_by, row.attempts, row.errors) == ("new", 1, [])
        assert row.result == {"node": "new"}
    assert sorted(r[0] for r in executions(log)) == sorted(ids)  # each ran once
    for process in (old, new):
        process.signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
