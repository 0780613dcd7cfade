"""Queue limits in the claim: global concurrency, partitions and rate windows (in-process)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

import kathikon
from kathikon import storage
from kathikon.executor import run_job, settle
from kathikon.limits import MAX_LIMIT, Limits, merged, parse
from kathikon.models import Job
from kathikon.storage.limited import claim_limited_jobs, queue_usage, window_start
from tests import workers
from tests.concurrency import run_at_once

pytestmark = pytest.mark.django_db

GLOBAL3 = Limits(global_limit=3)
BY_ACCOUNT = parse({"partition": {"by": "args.account", "limit": 1}})


def _insert(count: int, **args: object) -> None:
    kathikon.insert_many([(workers.ReturnsNothing, {"i": i, **args}) for i in range(count)])


def test_a_global_limit_counts_every_nodes_executing_jobs():
    _insert(10)
    first = claim_limited_jobs("default", 10, "n1", GLOBAL3)
    assert (len(first.jobs), first.held_by) == (3, "global_limit")
    second = claim_limited_jobs("default", 10, "n2", GLOBAL3)
    assert (second.jobs, second.held_by) == ([], "global_limit")
    settle([run_job(first.jobs[0])])
    third = claim_limited_jobs("default", 10, "n2", GLOBAL3)
    assert len(third.jobs) == 1 and third.jobs[0].attempted_by == "n2"
    assert Job.objects.filter(state="running").count() == 3


def test_an_unreached_limit_claims_like_the_plain_claim_and_an_empty_queue_is_not_held():
    _insert(2)
    claimed = claim_limited_jobs("default", 10, "n1", GLOBAL3)
    assert (len(claimed.jobs), claimed.held_by) == (2, None)
    assert all(job.state == "running" and job.lease == 1 for job in claimed.jobs)
    assert claim_limited_jobs("default", 10, "n1", GLOBAL3).held_by is None
    assert claim_limited_jobs("default", 10, "n1", Limits(global_limit=1)).held_by is None


def test_a_paused_queue_is_never_claimed():
    _insert(2)
    kathikon.pause_queue("default")
    assert claim_limited_jobs("default", 10, "n1", GLOBAL3).jobs == []


def test_partitions_take_one_each_and_a_full_partition_blocks_nobody():
    kathikon.insert_many([(workers.ReturnsNothing, {"account": "a", "i": i}) for i in range(50)]
                         + [(workers.ReturnsNothing, {"account": "b"}),
                            (workers.ReturnsNothing, {"account": 7}),
                            (workers.ReturnsNothing, {})])
    first = claim_limited_jobs("default", 10, "n1", BY_ACCOUNT)
    assert sorted(str(job.args.get("account")) for job in first.jobs) == ["7", "None", "a", "b"]
    again = claim_limited_jobs("default", 10, "n1", BY_ACCOUNT)
    assert (again.jobs, again.held_by) == ([], "partition")
    a_job = next(job for job in first.jobs if job.args.get("account") == "a")
    settle([run_job(a_job)])
    after = claim_limited_jobs("default", 10, "n2", BY_ACCOUNT)
    assert [job.args["account"] for job in after.jobs] == ["a"]
    usage = queue_usage("default", BY_ACCOUNT)
    assert usage.executing == 4 and usage.partitions["a"] == 1 and usage.partitions[""] == 1


def test_partitions_by_worker_and_a_limit_of_two():
    kathikon.insert_many([(workers.ReturnsNothing, {"i": i}) for i in range(5)]
                         + [(workers.Succeed, {"i": i}) for i in range(5)])
    limits = parse({"partition": {"by": "worker", "limit": 2}})
    claimed = claim_limited_jobs("default", 10, "n1", limits)
    assert sorted(job.worker.rsplit(".", 1)[1] for job in claimed.jobs) == [
        "ReturnsNothing", "ReturnsNothing", "Succeed", "Succeed"]


def test_partitions_with_a_global_limit_take_the_smaller():
    kathikon.insert_many([(workers.ReturnsNothing, {"account": str(i)}) for i in range(10)])
    limits = parse({"global_limit": 2, "partition": {"by": "args.account", "limit": 1}})
    claimed = claim_limited_jobs("default", 10, "n1", limits)
    assert (len(claimed.jobs), claimed.held_by) == (2, "global_limit")


def test_a_rate_limit_is_a_fixed_window_shared_through_the_queue_row():
    _insert(12)
    limits = parse({"rate_limit": {"allowed": 5, "period": 60}})
    start = window_start(timezone.now(), 60) + dt.timedelta(seconds=60)  # every job is due
    first = claim_limited_jobs("default", 10, "n1", limits, now=start + dt.timedelta(seconds=1))
    assert (len(first.jobs), first.held_by) == (5, "rate_limit")
    settle([run_job(job) for job in first.jobs])  # finishing frees no rate budget
    more = claim_limited_jobs("default", 10, "n2", limits, now=start + dt.timedelta(seconds=59))
    assert (more.jobs, more.held_by) == ([], "rate_limit")
    assert queue_usage("default", limits, now=start + dt.timedelta(seconds=30)).rate_used == 5
    next_window = claim_limited_jobs("default", 10, "n2", limits,
                                     now=start + dt.timedelta(seconds=61))
    assert len(next_window.jobs) == 5


def test_window_starts_are_aligned_to_the_epoch():
    at = dt.datetime(2026, 1, 1, 12, 0, 7, 500000, tzinfo=dt.timezone.utc)
    assert window_start(at, 10) == dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    assert window_start(at, 0.5) == dt.datetime(2026, 1, 1, 12, 0, 7, 500000,
                                                tzinfo=dt.timezone.utc)


def test_a_limited_claim_frees_unique_keys_like_the_plain_one():
    job = kathikon.insert(workers.Succeed, {}, unique=kathikon.Unique(
        states=kathikon.unique.UNSTARTED))
    claimed = claim_limited_jobs("default", 1, "n1", GLOBAL3)
    assert claimed.jobs[0].unique_key is None
    assert Job.objects.get(pk=job.id).unique_key is None


@pytest.mark.parametrize(("options", "message"), [
    ({"global_limit": 0}, "global_limit"),
    ({"global_limit": True}, "global_limit"),
    ({"partition": {"by": "args.a-b"}}, "partition by"),
    ({"partition": {"by": "args.x'; DROP"}}, "partition by"),
    ({"partition": {"by": "worker", "limit": 0}}, "partition limit"),
    ({"partition": "worker"}, "partition must be"),
    ({"rate_limit": {"allowed": 0, "period": 1}}, "allowed"),
    ({"rate_limit": {"allowed": 1, "period": 0}}, "period"),
    ({"rate_limit": {"allowed": 1, "every": 1}}, "rate_limit must be"),
    # Past what a column holds or SQLite binds (OverflowError in every claim): refused alike.
    ({"global_limit": 2**31}, "global_limit must be an int in 1..2147483647"),
    ({"global_limit": 2**63}, "global_limit"),
    ({"global_limit": 10**400}, "global_limit"),
    ({"partition": {"by": "worker", "limit": 10**30}}, "partition limit"),
    ({"rate_limit": {"allowed": 10**30, "period": 1}}, "allowed"),
    ({"rate_limit": {"allowed": 1, "period": 10**400}}, "period"),  # math.isfinite overflowed
    ({"global_limit": 10**5000}, "an int of 16610 bits"),  # past what repr() prints
])
def test_bad_limits_are_typed_errors(options, message):
    with pytest.raises(kathikon.InvalidQueue, match=message):
        parse(options)


def test_the_largest_limits_are_accepted():
    limits = parse({"global_limit": MAX_LIMIT, "partition": {"by": "worker", "limit": MAX_LIMIT},
                    "rate_limit": {"allowed": MAX_LIMIT, "period": 1}})
    assert limits.global_limit == limits.partition_limit == limits.rate_allowed == 2**31 - 1
    _insert(2)
    assert len(claim_limited_jobs("default", 10, "n1", limits).jobs) == 2  # every database binds it


def test_settings_are_checked_and_a_row_overrides_them_key_by_key(settings):
    from kathikon import conf

    settings.KATHIKON = {"QUEUES": {"q": {"concurrency": 2, "global_limit": 0}}}
    assert [p.id for p in conf.load().problems] == ["kathikon.E003"]
    settings.KATHIKON = {"QUEUES": {"q": {"concurrency": 2, "colour": 1}}}
    assert [p.id for p in conf.load().problems] == ["kathikon.E003"]
    settings.KATHIKON = {"QUEUES": {"q": {"partition": {"by": "worker", "limit": 10**30}}}}
    [problem] = conf.load().problems
    assert problem.id == "kathikon.E003" and "1..2147483647" in problem.message
    assert "flow-control" in problem.hint
    base = {"global_limit": 3, "rate_limit": {"allowed": 10, "period": 1}}
    assert merged(base, {"global_limit": 5}) == Limits(global_limit=5, rate_allowed=10,
                                                        rate_period=1.0)
    assert merged(base, {"global_limit": None}).global_limit is None
    assert not merged({}, None)


@pytest.mark.django_db(transaction=True)
def test_concurrent_limited_claims_never_exceed_the_global_limit(concurrent_db):
    _insert(60)
    peak: list[int] = []

    def claimer(slot: int) -> None:
        for _ in range(15):
            claimed = claim_limited_jobs("default", 4, f"n{slot}", Limits(global_limit=5))
            peak.append(Job.objects.filter(state="running").count())
            if claimed.jobs:
                settle([run_job(job) for job in claimed.jobs[:1]])

    run_at_once(claimer, 6, timeout=120)
    assert max(peak) <= 5
    assert Job.objects.filter(state="running").count() <= 5
    assert storage.count_by_state()["completed"] > 0


def test_a_rate_limit_per_partition_counts_each_key_in_its_own_window():
    kathikon.insert_many([(workers.ReturnsNothing, {"api_key": key, "i": i})
                          for i in range(5) for key in ("a", "b")])
    limits = parse({"rate_limit": {"allowed": 2, "period": 60, "by": "args.api_key"}})
    start = window_start(timezone.now(), 60) + dt.timedelta(seconds=60)
    first = claim_limited_jobs("default", 10, "n1", limits, now=start + dt.timedelta(seconds=1))
    assert sorted(job.args["api_key"] for job in first.jobs) == ["a", "a", "b", "b"]
    assert first.held_by == "rate_limit"
    settle([run_job(job) for job in first.jobs])  # finishing frees no budget
    again = claim_limited_jobs("default", 10, "n2", limits, now=start + dt.timedelta(seconds=30))
    assert (again.jobs, again.held_by) == ([], "rate_limit")
    later = claim_limited_jobs("default", 10, "n2", limits, now=start + dt.timedelta(seconds=61))
    assert sorted(job.args["api_key"] for job in later.jobs) == ["a", "a", "b", "b"]
    from kathikon.models import RateWindow
    assert sorted((w.partition_key, w.starts) for w in RateWindow.objects.all()) == [
        ("a", 2), ("b", 2)]


def test_a_rate_partition_and_a_concurrency_partition_share_one_key():
    with pytest.raises(kathikon.InvalidQueue, match="one partition key"):
        parse({"partition": {"by": "worker"}, "rate_limit": {"allowed": 1, "by": "args.k"}})
    both = parse({"partition": {"by": "args.k", "limit": 1},
                  "rate_limit": {"allowed": 5, "period": 1, "by": "args.k"}})
    assert both.key_by == "args.k" and both.as_options()["rate_limit"]["by"] == "args.k"
