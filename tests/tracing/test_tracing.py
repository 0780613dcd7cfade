"""OpenTelemetry tracing from insert to perform (kathikon.tracing), with the real SDK.

- A request span → ``insert`` (producer span ``send <queue>``) → ``perform`` (consumer
  span ``process <queue>``) is one trace, each span the child of the one before, in this
  process and in a real worker process.
- A retried job's attempts are one trace; the second attempt links to the first.
- A job inserted outside any span: its send span is a trace's root; a job that carries
  no context at all (inserted while tracing was off): its process span is a root.
- Off (the default), nothing is written into ``meta`` and no span is made.
"""

from __future__ import annotations

import pytest
from django.core import checks

import kathikon
from kathikon.models import Job
from kathikon.testing import drain_queue
from tests import workers
from tests.runtime.conftest import wait_until
from tests.tracing import file_exporter
from tests.tracing.workers import FailsFirst, OpensASpan

trace = pytest.importorskip("opentelemetry.trace")


def by_name(finished, name):
    found = [span for span in finished if span.name == name]
    assert found, f"no span {name!r} among {[span.name for span in finished]}"
    return found


def test_request_insert_and_perform_are_one_trace(db, spans):
    with trace.get_tracer("web").start_as_current_span("POST /signup",
                                                       kind=trace.SpanKind.SERVER) as request:
        job = kathikon.insert(OpensASpan, {"plan": "pro"})
    assert job.meta["traceparent"].split("-")[1] == f"{request.get_span_context().trace_id:032x}"
    assert drain_queue().completed == 1
    finished = spans.get_finished_spans()
    [send] = by_name(finished, "send default")
    [process] = by_name(finished, "process default")
    [inner] = by_name(finished, "charge card")
    assert send.kind == trace.SpanKind.PRODUCER and process.kind == trace.SpanKind.CONSUMER
    assert send.parent.span_id == request.get_span_context().span_id
    assert process.parent.span_id == send.context.span_id
    assert inner.parent.span_id == process.context.span_id  # perform runs inside the span
    trace_ids = {span.context.trace_id for span in (send, process, inner)}
    assert trace_ids == {request.get_span_context().trace_id}
    assert send.attributes["messaging.system"] == "kathikon"
    assert send.attributes["messaging.destination.name"] == "default"
    assert send.attributes["messaging.operation.name"] == "publish"
    assert dict(process.attributes) == {
        "messaging.system": "kathikon", "messaging.destination.name": "default",
        "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.message.id": job.id.hex, "kathikon.job.attempt": 1,
        "kathikon.job.worker": OpensASpan.path(), "kathikon.job.outcome": "completed"}
    assert process.status.status_code == trace.StatusCode.UNSET


def test_a_retried_jobs_attempts_are_one_trace_the_second_linked_to_the_first(db, spans):
    job = kathikon.insert(FailsFirst, {})
    assert drain_queue().failed == 1
    assert drain_queue(with_scheduled=True).completed == 1
    first, second = sorted(by_name(spans.get_finished_spans(), "process default"),
                           key=lambda span: span.attributes["kathikon.job.attempt"])
    assert (first.attributes["kathikon.job.attempt"], second.attributes["kathikon.job.attempt"]
            ) == (1, 2)
    assert first.context.trace_id == second.context.trace_id
    assert first.parent.span_id == second.parent.span_id  # both children of the send span
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    assert first.status.status_code == trace.StatusCode.ERROR
    assert first.status.description == "upstream down"
    assert first.attributes["error.type"] == "builtins.ConnectionError"
    assert [event.name for event in first.events] == ["exception", "retry scheduled"]
    assert second.status.status_code == trace.StatusCode.UNSET
    assert Job.objects.get(pk=job.pk).errors[0]["span"].split("-")[2] == \
        f"{first.context.span_id:016x}"


def test_a_discarded_and_a_snoozed_attempt_say_so(db, spans):
    kathikon.insert(workers.RaiseDiscard, {})
    kathikon.insert(workers.SnoozeTen, {})
    drain_queue()
    finished = {span.attributes["kathikon.job.worker"]: span
                for span in by_name(spans.get_finished_spans(), "process default")}
    discarded = finished[workers.RaiseDiscard.path()]
    assert discarded.attributes["kathikon.job.outcome"] == "discarded"
    assert discarded.status.status_code == trace.StatusCode.ERROR
    snoozed = finished[workers.SnoozeTen.path()]
    assert snoozed.attributes["kathikon.job.outcome"] == "snoozed"
    assert [event.name for event in snoozed.events] == ["snoozed"]


def test_without_a_context_the_send_span_is_a_root_and_without_one_in_meta_process_is(
        db, spans, settings):
    kathikon.insert(workers.Succeed, {})  # no span around: the send span starts a trace
    settings.KATHIKON = {**settings.KATHIKON, "TRACING": False}
    untraced = kathikon.insert(workers.Succeed, {})  # tracing off: no context in meta
    assert "traceparent" not in untraced.meta
    settings.KATHIKON = {**settings.KATHIKON, "TRACING": True}
    with trace.get_tracer("test").start_as_current_span("drain"):  # not the jobs' parent
        assert drain_queue().completed == 2
    finished = spans.get_finished_spans()
    [send] = by_name(finished, "send default")
    assert send.parent is None
    processes = by_name(finished, "process default")
    parents = sorted((span.parent.span_id if span.parent else None) is None
                     for span in processes)
    assert parents == [False, True]
    [child] = [span for span in processes if span.parent is not None]
    assert child.parent.span_id == send.context.span_id


def test_off_by_default_no_meta_and_no_span(db, _provider):
    _provider.clear()
    job = kathikon.insert(workers.Succeed, {})
    assert job.meta == {}
    drain_queue()
    assert _provider.get_finished_spans() == ()


def test_bad_tracing_settings_are_system_check_errors(db, settings):
    settings.KATHIKON = {**settings.KATHIKON, "TRACING": "yes"}
    found = [message.id for message in checks.run_checks() if message.id.startswith("kathikon")]
    assert "kathikon.E015" in found


@pytest.mark.slow
def test_a_real_worker_process_continues_the_trace(worker_processes, spans, tmp_path):
    path = tmp_path / "spans.jsonl"
    with trace.get_tracer("web").start_as_current_span("POST /checkout") as request:
        job = kathikon.insert(FailsFirst, {})
    worker_processes.start(settings={"TRACING": True, "POLL_INTERVAL": 0.1},
                           env={"KATHIKON_TEST_TRACE_FILE": str(path)})
    wait_until(lambda: Job.objects.get(pk=job.pk).state == "completed", timeout=30,
               message="the job to complete on its second attempt")
    wait_until(lambda: len(file_exporter.read(path)) >= 2, timeout=10,
               message="the worker's spans")
    first, second = sorted((span for span in file_exporter.read(path)
                            if span["name"] == "process default"),
                           key=lambda span: span["attributes"]["kathikon.job.attempt"])
    [send] = by_name(spans.get_finished_spans(), "send default")
    request_trace = f"{request.get_span_context().trace_id:032x}"
    assert first["trace_id"] == second["trace_id"] == request_trace
    assert first["parent_id"] == second["parent_id"] == f"{send.context.span_id:016x}"
    assert second["links"] == [first["span_id"]]
    assert (first["status"], first["kind"]) == ("ERROR", "CONSUMER")
    assert first["attributes"]["messaging.message.id"] == job.id.hex


@pytest.mark.browser
def test_a_trace_drawn_from_the_sdks_spans(db, spans, tmp_path):
    """docs/img/trace.png (KATHIKON_UPDATE_SCREENSHOTS=1): a request whose job fails once
    and then completes, as the SDK recorded it, drawn as a waterfall in Chromium."""
    import os
    from pathlib import Path

    from tests.ops.test_browser_op import CHROMIUM, unavailable
    from tests.tracing import waterfall

    if connection_vendor() != "sqlite":
        pytest.skip("browser tests run on SQLite only (KATHIKON_DB=sqlite)")
    if not Path(CHROMIUM).exists():
        unavailable(f"needs Chromium at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    with trace.get_tracer("web").start_as_current_span("POST /checkout",
                                                       kind=trace.SpanKind.SERVER):
        kathikon.insert(FailsFirst, {"order": 1234})
    drain_queue()
    drain_queue(with_scheduled=True)
    finished = list(spans.get_finished_spans())
    assert len({span.context.trace_id for span in finished}) == 1
    page_html = tmp_path / "trace.html"
    page_html.write_text(waterfall.html(finished))
    out = (Path(__file__).resolve().parents[2] / "docs" / "img"
           if os.environ.get("KATHIKON_UPDATE_SCREENSHOTS") == "1" else tmp_path)
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = browser.new_page(viewport={"width": 1100, "height": 220})
            page.goto(page_html.as_uri())
            assert page.locator(".row").count() == 4  # request, send, two attempts
            assert page.locator(".bar.error").count() == 1
            page.screenshot(path=str(out / "trace.png"), full_page=True)
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def connection_vendor() -> str:
    from django.db import connection

    return connection.vendor


def test_every_kind_of_insert_carries_the_context(db, spans):
    """insert_many, a batch, a workflow's steps, a Django Task's enqueue and a cron tick."""
    from kathikon import Batch, Workflow, cron
    from kathikon.runtime.scheduler import CronScheduler

    tasks = pytest.importorskip("tests.ecosystem.tasks")
    with trace.get_tracer("web").start_as_current_span("POST /import") as request:
        kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(3)])
        Batch.start(None, [(workers.Succeed, {"child": 1})])
        wf = Workflow("traced")
        wf.add("a", workers.Succeed, {})
        wf.add("b", workers.Succeed, {}, deps=["a"])
        wf.insert()
        result = tasks.add.enqueue(1, 2)
    trace_id = f"{request.get_span_context().trace_id:032x}"
    carried = [job.meta.get("traceparent", "") for job in Job.objects.all()]
    assert len(carried) == 7 and all(tp.split("-")[1] == trace_id for tp in carried)
    assert Job.objects.get(pk=result.id).meta["traceparent"]
    schedule = cron.insert(workers.Succeed, {}, cron="* * * * *")
    tick = schedule.next_fire_at
    job = CronScheduler("n").fire(schedule.id, tick)
    assert job is not None and job.meta["traceparent"]  # a root: the scheduler has no span
    [send] = [span for span in spans.get_finished_spans()
              if span.context.span_id == int(job.meta["traceparent"].split("-")[2], 16)]
    assert send.parent is None


@pytest.mark.slow
def test_a_sync_timeout_is_on_the_attempts_span(worker_processes, spans, tmp_path):
    """The pool fails an overrunning attempt on its own thread: the span says timeout, not
    what perform returned once it finally did."""
    from tests.tracing.workers import Overruns

    path = tmp_path / "spans.jsonl"
    job = kathikon.insert(Overruns, {"seconds": 1.0})
    worker_processes.start(settings={"TRACING": True, "POLL_INTERVAL": 0.1},
                           env={"KATHIKON_TEST_TRACE_FILE": str(path)})
    wait_until(lambda: Job.objects.get(pk=job.pk).state == "dead", timeout=30,
               message="the job to time out")
    wait_until(lambda: any(span["name"] == "process default"
                           for span in file_exporter.read(path)), timeout=10,
               message="the attempt's span (it ends when perform returns)")
    [span] = [span for span in file_exporter.read(path) if span["name"] == "process default"]
    assert span["status"] == "ERROR"
    assert span["attributes"]["kathikon.job.outcome"] == "failed"
    assert span["attributes"]["error.type"] == "kathikon.JobTimeout"
    assert "exception" in span["events"]
