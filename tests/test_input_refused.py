"""Input a worker process or the database would refuse is refused first, alike everywhere.

Workers that cannot be imported back by their dotted path, strings with NUL or a
lone surrogate, integers and moments outside the columns, too deep a nesting:
each is an ``InvalidJob`` naming the key, before anything is written, so the
caller's transaction goes on (PostgreSQL aborts a transaction on a refused
statement) and ``insert_many`` lists the spec in ``errors``.
"""

from __future__ import annotations

import datetime as dt
import math
import subprocess
import sys
import textwrap

import pytest
from django.db import transaction

import kathikon
from kathikon.jobspec import MAX_JSON_DEPTH
from kathikon.models import Batch as BatchRow
from kathikon.models import CronSchedule, Job
from tests import workers
from tests.runtime.conftest import ROOT, WorkerProcesses

pytestmark = pytest.mark.django_db


def _perform(self, job):
    return None


def _shell_class(module: str) -> type[kathikon.Worker]:
    """A worker class as ``manage.py shell`` (module ``builtins``) or a script (``__main__``)
    defines it."""
    return type("Resize", (kathikon.Worker,), {"__module__": module, "perform": _perform})


def _nested(depth: int) -> dict:
    args: dict = {"leaf": 1}
    for _ in range(depth - 1):
        args = {"a": args}
    return args


# -- workers that a worker process could not import -------------------------------------------


@pytest.mark.parametrize(("module", "why"), [
    ("builtins", "defined in builtins"),
    ("__main__", "defined in __main__"),
    ("tests.workers", "cannot be imported by its dotted path"),  # no such attribute there
])
def test_insert_refuses_a_worker_that_does_not_import_back(module, why):
    with pytest.raises(kathikon.InvalidJob, match=why) as info:
        kathikon.insert(_shell_class(module), {})
    assert info.value.key == "worker"
    assert Job.objects.count() == 0


def test_a_redefined_worker_class_is_refused_with_the_reason():
    impostor = type("Succeed", (kathikon.Worker,), {"__module__": "tests.workers",
                                                    "perform": _perform})
    with pytest.raises(kathikon.InvalidJob, match="imports as a different class"):
        kathikon.insert(impostor, {})
    assert Job.objects.count() == 0
    assert kathikon.insert(workers.Succeed, {}).worker == "tests.workers.Succeed"


def test_insert_many_lists_unimportable_workers_and_inserts_the_rest():
    result = kathikon.insert_many([(workers.Succeed, {"i": 0}), (_shell_class("builtins"), {}),
                                   (workers.Succeed, {"i": 2}), (_shell_class("__main__"), {})])
    assert result.inserted == 2
    assert [index for index, _ in result.errors] == [1, 3]
    assert "manage.py shell" in result.errors[0][1]
    assert sorted(job.args["i"] for job in Job.objects.all()) == [0, 2]


def test_schedule_and_cron_refuse_unimportable_workers():
    with pytest.raises(kathikon.InvalidJob, match="defined in builtins"):
        kathikon.schedule(_shell_class("builtins"), {}, in_seconds=60)
    with pytest.raises(kathikon.InvalidJob, match="defined in __main__"):
        kathikon.schedule(_shell_class("__main__"), {}, cron="* * * * *")
    assert Job.objects.count() == 0
    assert CronSchedule.objects.count() == 0


def test_batches_refuse_unimportable_children_and_callbacks():
    shell = _shell_class("builtins")
    with pytest.raises(kathikon.InvalidJob, match="child spec 1: worker Resize is defined"):
        kathikon.Batch.start(None, [(workers.Succeed, {}), (shell, {})])
    with pytest.raises(kathikon.InvalidJob, match="defined in builtins"):
        kathikon.Batch.start(None, [(workers.Succeed, {})], on_complete=(shell, {}))
    with pytest.raises(kathikon.InvalidJob, match="has no such name"):
        kathikon.Batch.open(None, on_complete=("tests.workers.Nowhere", {}))
    assert (Job.objects.count(), BatchRow.objects.count()) == (0, 0)
    batch = kathikon.Batch.open(None)
    with pytest.raises(kathikon.InvalidJob, match="child spec 0"):
        kathikon.Batch.append(batch.id, [(_shell_class("__main__"), {})])
    assert Job.objects.count() == 0


@pytest.mark.parametrize("path", ["..relative", ".a.b", "te\x00sts.workers.X",
                                  "tests.workers.Succ\x00eed", "tests.wor\ud800kers.X"])
def test_worker_paths_that_cannot_import_are_invalid_jobs(path):
    with pytest.raises(kathikon.InvalidJob, match="unknown worker") as info:
        kathikon.insert(path, {})
    assert info.value.key == "worker"
    assert Job.objects.count() == 0


def test_batch_start_without_on_complete_means_no_callback():
    batch = kathikon.Batch.start(None, [(workers.Succeed, {})])
    assert (batch.status, batch.on_complete, batch.total) == ("closed", "", 1)


def test_the_dead_job_of_an_unknown_worker_says_unknown_worker_once(insert_job):
    from kathikon.executor import execute_job

    job = insert_job()
    Job.objects.filter(id=job.id).update(worker="tests.workers.Renamed")
    claimed = kathikon.claim(job.id)
    execution = execute_job(claimed)
    message = kathikon.fetch(job.id).errors[-1]["message"]
    assert execution.kind == "discarded"
    assert message.count("unknown worker") == 1
    assert "tests.workers.Renamed" in message


@pytest.mark.django_db(transaction=True)
def test_a_script_run_as_main_gets_the_reason_and_nothing_is_committed(tmp_path):
    """The real thing: ``python script.py`` defining its worker in ``__main__``."""
    script = tmp_path / "enqueue.py"
    script.write_text(textwrap.dedent("""
        import django
        django.setup()
        import kathikon

        class Resize(kathikon.Worker):
            def perform(self, job):
                return None

        try:
            kathikon.insert(Resize, {"image": 1})
        except kathikon.InvalidJob as exc:
            print("refused:", exc)
    """))
    env = WorkerProcesses(tmp_path).environment()
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "refused: worker Resize is defined in __main__" in done.stdout
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_manage_py_shell_gets_the_reason_and_nothing_is_committed(tmp_path):
    """The real thing: ``manage.py shell -c`` (piped stdin runs the same way)."""
    command = textwrap.dedent("""
        import kathikon

        class Resize(kathikon.Worker):
            def perform(self, job):
                return None

        try:
            kathikon.insert(Resize, {"image": 1})
        except kathikon.InvalidJob as exc:
            print("refused:", exc)
    """)
    env = WorkerProcesses(tmp_path).environment()
    done = subprocess.run([sys.executable, "testproject/manage.py", "shell", "-c", command],
                          env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "refused: worker Resize is defined in django.core.management.commands.shell" in (
        done.stdout)
    assert "manage.py shell" in done.stdout
    assert Job.objects.count() == 0


# -- values the database would refuse ----------------------------------------------------------


@pytest.mark.parametrize(("args", "options", "key", "problem"), [
    ({"name": "a\x00b"}, {}, "args['name']", "NUL"),
    ({"name": "\ud800"}, {}, "args['name']", "lone surrogate"),
    ({"deep": [{"x": "ok"}, {"y": "\udfff"}]}, {}, "args['deep'][1]['y']", "lone surrogate"),
    ({"a\x00": 1}, {}, "args key 'a\\x00'", "NUL"),
    ({}, {"meta": {"trace": "\x00"}}, "meta['trace']", "NUL"),
    ({}, {"meta": {"n": {"\ud83d": 1}}}, "meta['n'] key '\\ud83d'", "lone surrogate"),
    (_nested(MAX_JSON_DEPTH + 1), {}, "args", "nested more than"),
    (_nested(100_000), {}, "args", "nested more than"),
    ({}, {"meta": _nested(MAX_JSON_DEPTH + 1)}, "meta", "nested more than"),
    ({}, {"max_attempts": 2**31}, "max_attempts", "1..2147483647"),
    ({}, {"priority": 2**40}, "priority", "-100..100"),
    ({}, {"schedule_in": 1e12}, "schedule_in", "past the year 9999"),
    ({}, {"schedule_in": dt.timedelta.max}, "schedule_in", "past the year 9999"),
    ({}, {"schedule_in": 10**400}, "schedule_in", "past the year 9999"),  # past a float
    ({}, {"schedule_in": 10**5000}, "schedule_in", "past the year 9999"),  # past int's repr
    ({}, {"priority": 10**5000}, "priority", "-100..100"),
    ({}, {"max_attempts": 10**5000}, "max_attempts", "1..2147483647"),
    ({}, {"unique": {"period": 1e-320}}, "unique", "unique period"),
    ({}, {"schedule_in": math.nan}, "schedule_in", "nan"),
    ({}, {"schedule_in": -math.inf}, "schedule_in", ">= 0"),
    ({}, {"schedule_at": dt.datetime.max.replace(tzinfo=dt.timezone(dt.timedelta(hours=-5)))},
     "schedule_at", "outside the years 1..9999"),
    ({}, {"schedule_at": dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(hours=5)))},
     "schedule_at", "outside the years 1..9999"),
])
def test_values_a_database_refuses_are_invalid_jobs(args, options, key, problem):
    with pytest.raises(kathikon.InvalidJob) as info:
        kathikon.insert(workers.Succeed, args, **options)
    assert info.value.key == key
    assert problem in str(info.value)
    assert Job.objects.count() == 0


def test_what_databases_store_alike_is_accepted():
    deepest = _nested(MAX_JSON_DEPTH)
    text = {"emoji": "😀", "hangul": "한국어", "escape": "\\u0000 is six characters"}
    job = kathikon.insert(workers.Succeed, {"deep": deepest["a"], **text},
                          max_attempts=2**31 - 1, meta={"emoji": "😀"},
                          schedule_at=dt.datetime(9999, 12, 30, tzinfo=dt.timezone.utc))
    stored = kathikon.fetch(job.id)
    assert stored.args == {"deep": deepest["a"], **text}
    assert (stored.max_attempts, stored.meta) == (2**31 - 1, {"emoji": "😀"})
    assert stored.available_at.year == 9999


@pytest.mark.parametrize("in_seconds", [1e300, 10**400, math.nan, math.inf, -1, "soon"])
def test_schedule_in_seconds_out_of_range_is_refused(in_seconds):
    with pytest.raises(kathikon.InvalidJob) as info:
        kathikon.schedule(workers.Succeed, {}, in_seconds=in_seconds)
    assert info.value.key == "in_seconds"
    assert Job.objects.count() == 0


def test_a_worker_path_longer_than_the_column_is_refused():
    long = type("W" * 250, (workers.Succeed,), {"__module__": __name__})
    globals()[long.__name__] = long  # importable by its dotted path, which is too long
    try:
        for worker in (long, long.path()):
            with pytest.raises(kathikon.InvalidJob, match="at most 255") as info:
                kathikon.insert(worker, {})
            assert info.value.key == "worker"
        with pytest.raises(kathikon.InvalidJob, match="at most 255"):
            kathikon.cron.insert(long, {}, cron="@daily")
    finally:
        del globals()[long.__name__]
    assert Job.objects.count() == 0 and CronSchedule.objects.count() == 0


def test_the_worker_path_bound_is_the_columns():
    from kathikon.jobspec import MAX_WORKER_PATH

    assert Job._meta.get_field("worker").max_length == MAX_WORKER_PATH
    assert CronSchedule._meta.get_field("worker").max_length == MAX_WORKER_PATH


def test_cron_args_and_names_a_database_refuses_are_refused():
    with pytest.raises(kathikon.InvalidJob, match="NUL"):
        kathikon.cron.insert(workers.Succeed, {"x": "\x00"}, cron="* * * * *")
    with pytest.raises(kathikon.InvalidJob, match="lone surrogate"):
        kathikon.schedule(workers.Succeed, {"x": "\udc00"}, cron="* * * * *")
    with pytest.raises(kathikon.InvalidSchedule, match="printable"):
        kathikon.cron.insert(workers.Succeed, {}, cron="* * * * *", name="nightly\x00")
    with pytest.raises(kathikon.InvalidJob, match="max_attempts"):
        kathikon.cron.insert(workers.Succeed, {}, cron="* * * * *", max_attempts=2**31)
    assert CronSchedule.objects.count() == 0


def test_insert_many_lists_refused_values_and_inserts_the_rest():
    result = kathikon.insert_many([
        (workers.Succeed, {"i": 0}),
        (workers.Succeed, {"i": "\x00"}),
        (workers.Succeed, {"i": 2}, {"max_attempts": 2**31}),
        (workers.Succeed, _nested(100_000)),
        (workers.Succeed, {"i": 4}, {"schedule_in": 1e12}),
        (workers.Succeed, {"i": 5}, {"schedule_in": 10**400}),
        (workers.Succeed, {"i": 6}, {"unique": {"period": 1e-320}}),
        (workers.Succeed, {"i": 7}),
    ])
    assert [index for index, _ in result.errors] == [1, 2, 3, 4, 5, 6]
    assert "NUL" in result.errors[0][1]
    assert "unique period" in result.errors[5][1]
    assert sorted(job.args["i"] for job in Job.objects.all()) == [0, 7]


@pytest.mark.django_db(transaction=True)
def test_the_callers_transaction_survives_refused_values():
    """On PostgreSQL a refused statement would abort the whole transaction: nothing is sent."""
    with transaction.atomic():
        kathikon.insert(workers.Succeed, {"step": "before"})
        for args, options in [({"s": "\x00"}, {}), ({"s": "\ud800"}, {}),
                              ({}, {"max_attempts": 2**31}), ({}, {"schedule_in": 1e12}),
                              ({}, {"schedule_in": 10**400}),
                              ({}, {"unique": {"period": 1e-320}}), (_nested(100_000), {})]:
            with pytest.raises(kathikon.InvalidJob):
                kathikon.insert(workers.Succeed, args, **options)
        result = kathikon.insert_many([(workers.Succeed, {"s": "\x00"}),
                                       (workers.Succeed, {"step": "many"})])
        assert result.inserted == 1
        kathikon.insert(workers.Succeed, {"step": "after"})
    assert sorted(job.args["step"] for job in Job.objects.all()) == ["after", "before", "many"]


# -- queue names -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default\n", "emails\n", "\ndefault", "a\x00"])
def test_queue_names_must_match_as_a_whole(name):
    with pytest.raises(kathikon.InvalidJob) as info:
        kathikon.insert(workers.Succeed, {}, queue=name)
    assert info.value.key == "queue"
    with pytest.raises(kathikon.InvalidQueue):
        kathikon.pause_queue(name)
    with pytest.raises(kathikon.InvalidQueue):
        kathikon.claim_available(name)
    assert Job.objects.count() == 0


def test_settings_queue_keys_must_match_as_a_whole(settings):
    from django.core import checks

    settings.KATHIKON = {"QUEUES": {"default\n": {"concurrency": 2}}}
    errors = [message for message in checks.run_checks() if message.id == "kathikon.E003"]
    assert errors and "'default\\n'" in errors[0].msg


def test_settings_bounds_match_the_columns(settings):
    from django.core import checks

    settings.KATHIKON = {"MAX_ATTEMPTS": 2**31}
    assert any(message.id == "kathikon.E005" and "1..2147483647" in message.msg
               for message in checks.run_checks())
    settings.KATHIKON = {"CRON": [
        {"name": "nul", "cron": "* * * * *", "worker": "tests.workers.Succeed",
         "args": {"x": "\x00"}},
        {"name": "shell", "cron": "* * * * *", "worker": "builtins.Resize"},
    ]}
    cron = [message.msg for message in checks.run_checks() if message.id == "kathikon.E013"]
    assert any("CRON'][0]" in text and "NUL" in text for text in cron)
    assert any("CRON'][1]" in text and "unknown worker" in text for text in cron)
