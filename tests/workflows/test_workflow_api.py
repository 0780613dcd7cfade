"""Workflows run in-process (kathikon.testing.drain_queue): release, policies, retry, append."""

from __future__ import annotations

import pytest

import kathikon
from kathikon import Workflow
from kathikon.models import Workflow as WorkflowRow
from kathikon.testing import drain_queue
from tests.workflows.steps import Fail, FailOnce, Plain, Record

pytestmark = pytest.mark.django_db(transaction=True)


def states(wf: Workflow) -> dict[str, str]:
    return {job.step: job.state for job in kathikon.Job.objects.filter(workflow_id=wf.id)}


def status(wf: Workflow) -> str:
    return WorkflowRow.objects.get(pk=wf.id).status


def test_a_chain_runs_in_order_and_passes_results():
    wf = Workflow("chain")
    wf.add("a", Plain, {"value": 1})
    wf.add("b", Plain, {"value": 2}, deps=["a"])
    wf.add("c", Record, {}, deps=["a", "b"])
    wf.insert()
    assert states(wf) == {"a": "available", "b": "waiting", "c": "waiting"}
    drain_queue("default", with_recursion=True)
    assert states(wf) == {"a": "completed", "b": "completed", "c": "completed"}
    c = kathikon.Job.objects.get(workflow_id=wf.id, step="c")
    assert c.result["deps"] == {"a": 1, "b": 2}
    assert status(wf) == "completed"


def test_a_failed_dep_cancels_down_the_graph_and_a_retry_continues_it():
    wf = Workflow("retry")
    wf.add("a", FailOnce)
    wf.add("b", Plain, {"value": 2}, deps=["a"])
    wf.add("c", Plain, {"value": 3}, deps=["b"])
    wf.insert()
    drain_queue("default", with_recursion=True)
    assert states(wf) == {"a": "dead", "b": "cancelled", "c": "cancelled"}
    assert status(wf) == "failed"
    a = kathikon.Job.objects.get(workflow_id=wf.id, step="a")
    kathikon.retry(a.id)
    assert states(wf) == {"a": "available", "b": "waiting", "c": "waiting"}
    assert status(wf) == "running"
    drain_queue("default", with_recursion=True)
    assert states(wf) == {"a": "completed", "b": "completed", "c": "completed"}
    assert status(wf) == "completed"


def test_run_and_hold_policies():
    wf = Workflow("policies")
    wf.add("a", Fail)
    wf.add("ok", Plain, {"value": 1})
    wf.add("run", Record, {}, deps=["a", "ok"], on_dep_failure="run")
    wf.add("hold", Record, {}, deps=["a"], on_dep_failure="hold")
    wf.insert()
    drain_queue("default", with_recursion=True)
    assert states(wf) == {"a": "dead", "ok": "completed", "run": "completed", "hold": "held"}
    assert status(wf) == "running"
    held = kathikon.Job.objects.get(workflow_id=wf.id, step="hold")
    kathikon.workflows.release(held.id)
    drain_queue("default", with_recursion=True)
    assert states(wf)["hold"] == "completed"
    assert status(wf) == "failed"


def test_cancel_and_append():
    wf = Workflow("cancel")
    wf.add("a", Plain, {"value": 1})
    wf.add("b", Plain, {}, deps=["a"])
    wf.insert()
    drain_queue("default", with_recursion=True)
    assert status(wf) == "completed"
    other = Workflow("running")
    other.add("a", Plain, {"value": 1})
    other.add("b", Plain, {}, deps=["a"])
    other.insert()
    other.append("c", Record, {}, deps=["a", wf.step("a")])
    assert states(other)["c"] == "waiting"
    kathikon.workflows.cancel(other.id)
    assert states(other) == {"a": "cancelled", "b": "cancelled", "c": "cancelled"}
    assert status(other) == "cancelled"
    with pytest.raises(kathikon.WorkflowFinished):
        other.append("d", Plain, {})


@pytest.mark.parametrize("build, message", [
    (lambda wf: (wf.add("a", Plain, deps=["b"]), wf.add("b", Plain, deps=["a"])), "cycle"),
    (lambda wf: wf.add("a", Plain, deps=["nope"]), "no step"),
    (lambda wf: (wf.add("a", Plain), wf.add("a", Plain)), "used twice"),
])
def test_bad_graphs_write_nothing(build, message):
    wf = Workflow("bad")
    with pytest.raises(kathikon.InvalidWorkflow, match=message):
        build(wf)
        wf.insert()
    assert not kathikon.Job.objects.exists()
    assert not WorkflowRow.objects.exists()


def test_append_by_sub_workflow_name_and_names_already_taken():
    sub = Workflow("encode-all")
    sub.add("small", Plain, {"value": "s"})
    sub.add("large", Plain, {"value": "l"})
    wf = Workflow("parent")
    wf.add("fetch", Plain, {"value": "f"})
    wf.add_workflow("encode", sub, deps=["fetch"])
    wf.insert()
    loaded = Workflow.load(wf.id)
    after = loaded.append("publish", Record, {}, deps=["encode"])
    assert after.state == "waiting"
    with pytest.raises(kathikon.InvalidWorkflow, match="used twice"):
        loaded.append("fetch", Plain, {})
    drain_queue("default", with_recursion=True)
    published = kathikon.Job.objects.get(pk=after.pk)
    assert published.result["deps"] == {"encode": {"small": "s", "large": "l"}}
    assert status(wf) == "completed"


def test_an_unfinished_step_cannot_be_deleted_a_finished_one_can():
    from kathikon import dashboard

    wf = Workflow("delete")
    wf.add("a", Plain, {"value": 1})
    wf.add("b", Plain, {}, deps=["a"])
    wf.insert()
    a, b = (kathikon.Job.objects.get(workflow_id=wf.id, step=s) for s in ("a", "b"))
    result = dashboard.delete_jobs([b.id], allow_destructive=True)
    assert result.changed == [] and "workflow step" in result.failed[0][1]
    drain_queue("default", with_recursion=True)
    assert dashboard.delete_jobs([a.id], allow_destructive=True).changed == [a.id.hex]


def test_steps_cancelled_by_a_policy_send_job_cancelled():
    from kathikon import signals

    seen = []

    def receiver(sender, job, **kwargs):
        seen.append(job.step)

    signals.job_cancelled.connect(receiver)
    try:
        wf = Workflow("signals")
        wf.add("a", Fail)
        wf.add("b", Plain, {}, deps=["a"])
        wf.add("c", Plain, {}, deps=["b"])
        wf.insert()
        drain_queue("default", with_recursion=True)
    finally:
        signals.job_cancelled.disconnect(receiver)
    assert sorted(seen) == ["b", "c"]


def test_a_retry_in_a_cancelled_workflow_takes_the_cancel_back():
    wf = Workflow("revived")
    wf.add("a", Fail)
    wf.add("b", Plain, {}, deps=["a"], on_dep_failure="hold")
    wf.insert()
    drain_queue("default", with_recursion=True)
    kathikon.workflows.cancel(wf.id)
    assert status(wf) == "cancelled"
    b = kathikon.Job.objects.get(workflow_id=wf.id, step="b")
    kathikon.retry(b.id)  # a person runs it anyway
    drain_queue("default", with_recursion=True)
    assert states(wf) == {"a": "dead", "b": "completed"}
    assert status(wf) == "failed"  # not cancelled: the person's retry took the cancel back


def test_too_many_steps_is_a_clear_error_and_writes_nothing(monkeypatch):
    from kathikon.workflows import builder

    monkeypatch.setattr(builder, "MAX_STEPS", 50)
    wf = Workflow("huge")
    for i in range(50):
        wf.add(f"s{i}", Plain, {})
    with pytest.raises(kathikon.InvalidWorkflow, match="at most 50 steps"):
        wf.add("one-more", Plain, {})
    assert not kathikon.Job.objects.exists()


def test_a_dependency_takes_at_most_max_dependents_over_every_insert_and_append(monkeypatch):
    """Its dependents are released in the transaction of its ack, so their number is bounded
    (kathikon.workflows.MAX_DEPENDENTS): an insert or append past it writes nothing."""
    from kathikon.storage import workflows as store

    monkeypatch.setattr(store, "MAX_DEPENDENTS", 3)
    with pytest.raises(kathikon.InvalidWorkflow, match="would have 4 steps waiting on it"):
        too_wide = Workflow("too-wide")
        too_wide.add("root", Plain, {})
        for i in range(4):
            too_wide.add(f"s{i}", Plain, {}, deps=["root"])
        too_wide.insert()
    assert not WorkflowRow.objects.exists()
    wf = Workflow("wide")
    wf.add("root", Plain, {"value": 1})
    wf.add("a", Plain, {}, deps=["root"])
    wf.add("b", Plain, {}, deps=["root"])
    wf.insert()
    wf.append("c", Plain, {}, deps=["root"])  # the third: still allowed
    for attempt in (lambda: wf.append("d", Plain, {}, deps=["root"]),
                    lambda: _depending_on(wf.step("root"), "other")):
        with pytest.raises(kathikon.InvalidWorkflow, match=r"root' .* would have 4 steps"):
            attempt()
    assert sorted(states(wf)) == ["a", "b", "c", "root"]
    assert WorkflowRow.objects.get(pk=wf.id).steps_total == 4
    assert not WorkflowRow.objects.filter(name="other").exists()
    for i in range(3):  # a whole workflow as the dependency: the same bound
        _depending_on(wf, f"after-{i}")
    with pytest.raises(kathikon.InvalidWorkflow, match="would have 4 steps"):
        _depending_on(wf, "after-3")
    drain_queue("default", with_recursion=True)
    assert set(states(wf).values()) == {"completed"}
    assert WorkflowRow.objects.filter(name__startswith="after-", status="completed").count() == 3


def _depending_on(dep: object, name: str) -> Workflow:
    other = Workflow(name)
    other.add("x", Plain, {}, deps=[dep])
    other.insert()
    return other


def test_a_django_task_is_a_step():
    from tests.ecosystem.tasks import add

    wf = Workflow("task")
    wf.add("sum", add, {"a": 2, "b": 3}, meta={"mine": 1})
    wf.add("after", Record, {}, deps=["sum"])
    wf.insert()
    step = kathikon.Job.objects.get(workflow_id=wf.id, step="sum")
    assert step.meta["mine"] == 1 and step.meta["task_backend"] == "default"
    drain_queue(with_recursion=True)
    after = kathikon.Job.objects.get(workflow_id=wf.id, step="after")
    assert after.result["deps"] == {"sum": 5}


@pytest.mark.slow
@pytest.mark.usefixtures("postgres_only")
def test_100000_steps_insert_cleanly_in_one_transaction():
    """MAX_STEPS in one insert (PostgreSQL: ~10 s here; SQLite ~30 s, MariaDB ~45 s, the
    same code, so run once), and one more is refused before anything is written."""
    wf = Workflow("huge")
    wf.add("root", Plain, {})
    middle = [wf.add(f"s{i}", Plain, {}, deps=["root"]) for i in range(99_998)]
    wf.add("end", Plain, {}, deps=middle)
    wf.insert()
    assert kathikon.Job.objects.filter(workflow_id=wf.id).count() == 100_000
    assert kathikon.Job.objects.get(workflow_id=wf.id, step="end").deps_waiting == 99_998
    assert WorkflowRow.objects.get(pk=wf.id).steps_unfinished == 100_000
    more = Workflow("one-too-many")
    for i in range(100_000):
        more.add(f"s{i}", Plain, {})
    with pytest.raises(kathikon.InvalidWorkflow, match="at most 100000 steps"):
        more.add("last", Plain, {})
    assert not WorkflowRow.objects.filter(name="one-too-many").exists()


def test_a_unique_step_whose_key_is_held_refuses_the_whole_insert():
    kathikon.insert(Plain, {"video": 7}, unique=kathikon.Unique())
    wf = Workflow("unique")
    wf.add("first", Plain, {"other": 1})
    wf.add("publish", Plain, {"video": 7}, deps=["first"], unique=kathikon.Unique())
    with pytest.raises(kathikon.InvalidWorkflow, match="unique key is held"):
        wf.insert()
    assert not WorkflowRow.objects.exists()
    assert kathikon.Job.objects.count() == 1
    fresh = Workflow("unique-ok")
    fresh.add("first", Plain, {"other": 1})
    fresh.add("publish", Plain, {"video": 8}, deps=["first"], unique=kathikon.Unique())
    fresh.insert()
    publish = kathikon.Job.objects.get(workflow_id=fresh.id, step="publish")
    assert publish.state == "waiting" and publish.unique_key is not None
    drain_queue("default", with_recursion=True)
    assert states(fresh) == {"first": "completed", "publish": "completed"}


def test_a_task_step_cancelled_by_its_policy_sends_task_finished_once():
    from kathikon import compat
    from tests.ecosystem.tasks import add

    finished = []

    def receiver(sender, task_result, **kwargs):
        finished.append(str(task_result.status))

    compat.task_finished.connect(receiver)
    try:
        wf = Workflow("task-cancelled")
        wf.add("bad", Fail)
        wf.add("sum", add, {"a": 1, "b": 2}, deps=["bad"])
        wf.insert()
        drain_queue(with_recursion=True)
    finally:
        compat.task_finished.disconnect(receiver)
    assert states(wf) == {"bad": "dead", "sum": "cancelled"}
    assert len(finished) == 1 and finished[0].endswith("FAILED")


def test_a_step_completed_in_its_own_transaction_releases_and_signals():
    from kathikon import signals
    from tests.workflows.steps import CompletesItself

    released = []

    def receiver(sender, workflow_id, steps, **kwargs):
        released.extend(step for _, step in steps)

    signals.step_released.connect(receiver)
    try:
        wf = Workflow("in-transaction")
        wf.add("a", CompletesItself)
        wf.add("b", Record, {}, deps=["a"])
        wf.insert()
        drain_queue("default", with_recursion=True)
    finally:
        signals.step_released.disconnect(receiver)
    assert states(wf) == {"a": "completed", "b": "completed"}
    assert released == ["b"]
    b = kathikon.Job.objects.get(workflow_id=wf.id, step="b")
    assert b.result["deps"] == {"a": {"self": True}}
