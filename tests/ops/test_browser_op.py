"""The admin dashboard in a real browser: Playwright driving Debian's Chromium.

Run with ``-m browser``; skipped when /usr/bin/chromium or playwright is
missing (failed when ``CI=true``). ``KATHIKON_UPDATE_SCREENSHOTS=1`` writes the
screenshots used by docs/admin.md into docs/img/ (otherwise they go to a
temporary directory).

SQLite only (the database ``make demo`` opens the admin on): what the browser adds is
Chromium's rendering, layout and clicks. Every page and action it drives is also tested
on SQLite, PostgreSQL and MariaDB through Django's test client (test_admin_op.py: lists,
filters, date ranges, detail pages, actions, permissions, the overview's numbers). A
browser run is about 30 s and the most CPU of any module; three would prove no more.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

import kathikon
from kathikon import report, storage
from kathikon.models import Job, Queue
from kathikon.states import JobState
from tests import workers
from tests.ops.conftest import VIEW_ALL, error, make_job, staff_user
from tests.runtime.conftest import worker_processes  # noqa: F401

CHROMIUM = "/usr/bin/chromium"
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"

pytestmark = pytest.mark.browser


def unavailable(why: str) -> None:
    """Skip on a laptop without a browser; fail in CI, where these tests must run."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if connection.vendor != "sqlite":
        pytest.skip("browser tests run on SQLite only (KATHIKON_DB=sqlite); the admin's "
                    "queries are tested on every database in test_admin_op.py")
    if not Path(CHROMIUM).exists():
        unavailable(f"browser tests need Chromium at {CHROMIUM} (Debian: apt-get install "
                    "chromium)")
    try:
        from playwright import sync_api
    except ImportError:
        unavailable("browser tests need playwright (pip install playwright; never run "
                    "'playwright install': the tests use Debian's Chromium)")
    # Playwright's sync API keeps an event loop in this thread; Django's ORM would
    # refuse to run next to it. Only for this module, restored afterwards.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_api.sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield chromium
        chromium.close()
    finally:
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    if os.environ.get("KATHIKON_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        return DOCS_IMG
    return tmp_path


@pytest.fixture
def jobs(transactional_db: Any, settings: Any) -> dict[str, Job]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from django.contrib.auth.models import User

    User.objects.create_superuser("root", "root@example.com", "pw")
    staff_user("viewer", *VIEW_ALL)
    now = timezone.now()
    # A busy last hour for the chart: completions every minute, a few failures.
    for minute in range(0, 60, 2):
        for _ in range(1 + minute % 5):
            make_job(state=JobState.COMPLETED, attempts=1, finished_ago=minute * 60 + 5,
                     args={"minute": minute})
    for minute in (7, 23, 41):
        make_job(worker=workers.Emails, queue="emails", state=JobState.DEAD, attempts=4,
                 errors=[error(kind="smtplib.SMTPServerDisconnected",
                               message="Connection unexpectedly closed")],
                 finished_ago=minute * 60)
    dead = make_job(worker=workers.Explode, args={"order": 1234}, state=JobState.DEAD,
                    attempts=3)
    started = now - dt.timedelta(minutes=2)
    Job.objects.filter(pk=dead.pk).update(
        inserted_at=started, started_at=started + dt.timedelta(seconds=61),
        completed_at=started + dt.timedelta(seconds=62), attempted_by="web-1:4242",
        errors=[error(message=f"boom {n}", attempt=n,
                      at=started + dt.timedelta(seconds=1 + 20 * (n - 1) * n // 2))
                for n in (1, 2, 3)])
    old = make_job(args={"legacy": True}, state=JobState.COMPLETED, attempts=1,
                   finished_ago=3 * 86400)
    Job.objects.filter(pk=old.pk).update(inserted_at=now - dt.timedelta(days=3))
    waiting = make_job(queue="emails", worker=workers.Emails,
                       available_at=now - dt.timedelta(minutes=3))
    running = make_job(state=JobState.RUNNING, attempts=1)
    make_job(state=JobState.SCHEDULED, available_at=now + dt.timedelta(hours=2))
    return {"dead": dead, "old": old, "waiting": waiting, "running": running}


def login(browser: Any, live_server: Any, username: str) -> Any:
    page = browser.new_page(viewport={"width": 1600, "height": 900})
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    return page


def test_overview_shows_the_right_numbers(browser, live_server, jobs, shots):
    page = login(browser, live_server, "root")
    page.click("a[href='/admin/kathikon/']")  # the app's caption on the admin index
    row = page.locator("tr[data-queue='default']")
    expected = {s.name: s for s in report.queue_summary()}
    assert row.locator("td[data-state='completed']").inner_text() == str(
        expected["default"].counts["completed"])
    assert row.locator("td[data-state='dead']").inner_text() == "1"
    emails = page.locator("tr[data-queue='emails']")
    assert emails.locator("td[data-state='dead']").inner_text() == "3"
    assert emails.locator("td[data-state='available']").inner_text() == "1"
    chart = page.locator("svg.kathikon-chart")
    completed_hour = sum(s.completed_last_hour for s in expected.values())
    assert chart.get_attribute("data-completed") == str(completed_hour)
    assert chart.get_attribute("data-failed") == "4"
    assert "smtplib.SMTPServerDisconnected" in page.locator("#kathikon-failures").inner_text()
    page.screenshot(path=str(shots / "admin-overview.png"), full_page=True)


def test_filter_by_state_and_date_range(browser, live_server, jobs, shots):
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/job/")
    page.click("#changelist-filter a[href='?state=dead']")
    page.wait_for_url(re.compile(r"state=dead"))
    ids = page.locator("#result_list code.kathikon-id").all_inner_texts()
    assert len(ids) == 4 and jobs["dead"].id.hex in ids
    page.click("#toggle-nav-sidebar")  # more room for the columns in the screenshot
    page.screenshot(path=str(shots / "admin-jobs.png"), full_page=True)

    day = (timezone.now() - dt.timedelta(days=3)).date().isoformat()
    page.goto(f"{live_server.url}/admin/kathikon/job/")
    page.fill("input[name='inserted_at__range__gte']", day)
    page.fill("input[name='inserted_at__range__lte']", day)
    page.click("#inserted-form input[type=submit]")
    page.wait_for_url(re.compile(r"inserted_at__range__gte="))
    ids = page.locator("#result_list code.kathikon-id").all_inner_texts()
    assert ids == [jobs["old"].id.hex]


def test_open_a_dead_job_see_its_traceback_and_retry_it(browser, live_server, jobs, shots):
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/job/?state=dead&worker=tests.workers.Explode")
    page.click(f"text={jobs['dead'].id.hex}")
    page.wait_for_selector(".kathikon-traceback")
    traceback = page.locator(".kathikon-traceback").first.inner_text()
    assert "Traceback (most recent call last)" in traceback
    assert "boom 3" in page.content()
    page.screenshot(path=str(shots / "admin-job-detail.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/kathikon/job/?state=dead&worker=tests.workers.Explode")
    page.check(f"input.action-select[value='{jobs['dead'].pk}']")
    page.select_option("select[name=action]", "retry_jobs")
    page.click("button[name=index]")
    page.wait_for_selector("ul.messagelist")
    assert "Retried 1 job." in page.locator("ul.messagelist").inner_text()
    assert kathikon.fetch(jobs["dead"].id).state == JobState.AVAILABLE


def test_cancel_of_an_executing_job_is_reported(browser, live_server, jobs):
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/job/?state=running")
    page.check(f"input.action-select[value='{jobs['running'].pk}']")
    page.select_option("select[name=action]", "cancel_jobs")
    page.click("button[name=index]")
    text = page.locator("ul.messagelist").inner_text()
    assert "Could not cancel 1 job" in text and "cannot be cancelled now" in text


def test_pause_and_resume_a_queue(browser, live_server, jobs):
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/queue/")
    page.check("input.action-select[value='emails']")
    page.select_option("select[name=action]", "pause_queues")
    page.click("button[name=index]")
    assert "Paused 1 queue." in page.locator("ul.messagelist").inner_text()
    assert Queue.objects.get(name="emails").paused
    row = page.locator("#result_list tr", has_text="emails")
    assert "paused" in row.inner_text()
    page.check("input.action-select[value='emails']")
    page.select_option("select[name=action]", "resume_queues")
    page.click("button[name=index]")
    assert "Resumed 1 queue." in page.locator("ul.messagelist").inner_text()
    assert not Queue.objects.get(name="emails").paused


def test_view_only_staff_cannot_retry(browser, live_server, jobs):
    page = login(browser, live_server, "viewer")
    page.goto(f"{live_server.url}/admin/kathikon/job/?state=dead")
    assert page.locator("select[name=action]").count() == 0
    page.goto(f"{live_server.url}/admin/kathikon/job/{jobs['dead'].pk}/change/")
    assert "Traceback" in page.content()
    assert page.locator("button.kathikon-retry_jobs").count() == 0
    # A forged POST from the viewer's session is refused.
    token = page.context.cookies()
    csrf = next(c["value"] for c in token if c["name"] == "csrftoken")
    response = page.request.post(
        f"{live_server.url}/admin/kathikon/job/{jobs['dead'].id.hex}/act/retry_jobs/",
        headers={"X-CSRFToken": csrf, "Referer": f"{live_server.url}/admin/"})
    assert response.status == 403
    assert kathikon.fetch(jobs["dead"].id).state == JobState.DEAD


CHANGE_LISTS = ("job", "queue", "cronschedule", "batch", "node")


@pytest.mark.parametrize("model", CHANGE_LISTS)
def test_change_lists_fit_a_1400px_window(browser, live_server, jobs, shots, model):
    """With the navigation sidebar open, nothing is cut off on the right at 1400 px."""
    storage.register_node("web-1:4242", queues={"default": 10, "emails": 5})
    kathikon.schedule(workers.Succeed, {"report": "daily"}, cron="0 9 * * 1-5")
    make_job(queue="reports")  # a queue no live worker serves: the widest status badge
    # Long names as real projects have them: a 63-character queue, a long worker class.
    wide = make_job(queue="transactional-notifications-for-enterprise-customers-eu-west-1a",
                    state=JobState.SCHEDULED, available_at=timezone.now() + dt.timedelta(days=1))
    Job.objects.filter(pk=wide.pk).update(
        worker="billing.workers.SendMonthlyInvoiceReminderToOverdueEnterpriseAccounts")
    page = login(browser, live_server, "root")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_server.url}/admin/kathikon/{model}/")
    page.wait_for_selector("#changelist")
    # Django wraps the table in a box that scrolls sideways: what does not fit is hidden
    # behind the filter panel, so measure the box, not the page.
    sizes = page.evaluate("""() => {
        const box = document.querySelector('#changelist .results');
        const table = document.querySelector('#result_list');
        const filter = document.querySelector('#changelist-filter');
        return {viewport: window.innerWidth, page: document.documentElement.scrollWidth,
                overflow: box ? box.scrollWidth - box.clientWidth : 0,
                table: table ? table.getBoundingClientRect().right : 0,
                filter: filter ? filter.getBoundingClientRect().left : window.innerWidth};
    }""")
    page.screenshot(path=str(shots / f"admin-{model}-1400.png"))  # the window, as seen
    assert sizes["page"] <= sizes["viewport"], sizes
    assert sizes["overflow"] <= 0 and sizes["table"] <= sizes["filter"], str(sizes)


def test_pause_all_confirmation_lists_every_queue(browser, live_server, jobs, settings):
    """The queues a worker serves without the settings naming them are listed and paused."""
    settings.TASKS = {"default": {"BACKEND": "kathikon.backends.KathikonBackend",
                                  "QUEUES": ["default", "tasks_only"]}}
    make_job(queue="adhoc")  # jobs, no row
    storage.register_node("web-1:4242", queues={"default": 10, "node_only": 2})
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/queue/")
    page.click("#kathikon-pause-all")
    listed = page.locator("#kathikon-all-queues tbody tr").evaluate_all(
        "rows => rows.map(row => row.dataset.queue)")
    assert listed == ["adhoc", "default", "emails", "node_only", "tasks_only"]
    assert "TASKS" in page.locator("tr[data-queue=tasks_only]").inner_text()
    assert not Queue.objects.filter(paused=True).exists()  # showing it changed nothing
    page.click("#kathikon-confirm-all")
    assert "Paused 5 queues" in page.locator("ul.messagelist").inner_text()
    assert set(Queue.objects.filter(paused=True).values_list("name", flat=True)) == set(listed)
    page.click("#kathikon-resume-all")
    assert page.locator("#kathikon-all-queues tbody tr").count() == 5
    page.click("#kathikon-confirm-all")
    assert not Queue.objects.filter(paused=True).exists()


def test_queue_form_shows_the_limits_in_force(browser, live_server, jobs, settings):
    """Settings' values are shown as in force, with their source and what clearing does."""
    settings.KATHIKON = {"QUEUES": {"default": {}, "emails": {"concurrency": 5},
                                    "exports": {"concurrency": 4, "global_limit": 3}}}
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/queue/exports/change/")

    def in_force(key: str) -> str:
        return page.locator(f"#kathikon-limits-in-force tr[data-limit={key}]").inner_text()

    def concurrency() -> str:
        return page.locator(".field-concurrency_in_force .readonly").inner_text()

    assert page.input_value("textarea[name=limits]") == ""  # no override, not "null"
    assert "(null: unlimited)" not in page.locator(".field-limits").inner_text()
    assert re.search(r"global_limit\s+3\s+settings", in_force("global_limit"))
    assert re.search(r"rate_limit\s+unlimited\s+not set", in_force("rate_limit"))
    assert "4 jobs at once per node, from the settings" in concurrency()

    page.fill("textarea[name=limits]", '{"global_limit": 5}')
    page.fill("input[name=concurrency]", "2")
    page.click("input[name=_continue]")
    assert re.search(r"global_limit\s+5\s+run-time override\s+goes back to the settings' 3",
                     in_force("global_limit"))
    assert "2 jobs at once per node: the run-time override" in concurrency()
    assert "Clearing it goes back to the settings' 4" in concurrency()

    page.fill("textarea[name=limits]", "")
    page.fill("input[name=concurrency]", "")
    page.click("input[name=_continue]")
    row = Queue.objects.get(name="exports")
    assert (row.limits, row.concurrency) == (None, None)
    assert re.search(r"global_limit\s+3\s+settings", in_force("global_limit"))
    assert page.input_value("textarea[name=limits]") == ""


DATE = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b")
OTHER_DATES = re.compile(r"\b[A-Z][a-z]{2,8}\.? \d{1,2}, \d{4}|\d{4}-\d\d-\d\dT\d\d:\d\d")


def test_a_dead_job_page_tells_the_truth(browser, live_server, jobs):
    """Dead at, not completed at; one date format; the retry says how many attempts."""
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/job/{jobs['dead'].pk}/change/")
    labels = page.locator("fieldset label").all_inner_texts()
    assert "Dead at:" in labels and "Completed at:" not in labels
    text = page.locator("#content").inner_text()
    assert DATE.search(text) and not OTHER_DATES.search(text), OTHER_DATES.findall(text)
    page.click("button.kathikon-retry_jobs", timeout=5000)
    said = page.locator("ul.messagelist").inner_text()
    assert "Retried 1 job." in said
    assert "It runs again now with 1 attempt left (next: attempt 4 of 4)." in said
    page.goto(f"{live_server.url}/admin/kathikon/job/")
    text = page.locator("#result_list").inner_text()
    assert DATE.search(text) and not OTHER_DATES.search(text)


def test_a_running_job_page_says_why_there_is_no_cancel(browser, live_server, jobs):
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/job/{jobs['running'].pk}/change/")
    assert page.locator("button.kathikon-cancel_jobs").count() == 0
    note = page.locator("#kathikon-no-cancel")
    assert note.is_visible()
    assert "There is no Cancel button" in note.inner_text()
    assert "pause the queue default" in note.inner_text() and "SIGTERM" in note.inner_text()
    note.locator("a", has_text="default").click()
    assert page.url.endswith("/admin/kathikon/queue/default/change/")


def test_a_tasks_jobs_show_and_filter_by_the_task(browser, live_server, jobs):
    """Issue 25 item 3: the job list names a Django Task's job by its task, and the worker
    filter offers the task; a job enqueued before (worker TaskWorker) shows its task too."""
    backends = pytest.importorskip("kathikon.backends")
    from tests.ecosystem import tasks

    tasks.send_email.enqueue("ada@example.com")
    tasks.add.enqueue(1, 2)
    make_job(worker=backends.TaskWorker, args={"task": "tests.ecosystem.tasks.add",
                                               "args": [3, 4], "kwargs": {}})
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/job/")
    cells = page.locator("#result_list td.field-worker_name span[title]")
    titles = cells.evaluate_all("spans => spans.map(s => s.title)")
    assert titles.count("tests.ecosystem.tasks.add") == 2
    assert "tests.ecosystem.tasks.send_email" in titles
    assert "kathikon.backends.TaskWorker" not in titles
    page.click("#changelist-filter a[href='?worker=tests.ecosystem.tasks.send_email']")
    page.wait_for_url(re.compile(r"worker=tests.ecosystem.tasks.send_email"))
    shown = page.locator("#result_list td.field-worker_name").all_inner_texts()
    assert [text.strip() for text in shown] == ["send_email"]


def test_the_overview_updates_in_place_while_a_worker_drains(browser, live_server, jobs, shots,
                                                             worker_processes):  # noqa: F811
    """Issue 24: the overview is live (kathikon/live.js): a real worker drains 300 jobs and
    the queue's counts follow on the page, which is never reloaded."""
    kathikon.insert_many([(workers.Succeed, {"i": i}) for i in range(300)])
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/")
    row = "tr[data-queue='default']"
    assert page.locator(f"{row} td[data-state='available']").inner_text() == "300"
    before = int(page.locator(f"{row} td[data-state='completed']").inner_text())
    page.evaluate("window.kathikonMarker = 'the same page'")  # gone if the page reloads
    worker_processes.start("--queues", "default", settings={"POLL_INTERVAL": 0.1})
    page.wait_for_function(
        f"document.querySelector(\"{row} td[data-state='available']\").textContent.trim()"
        " === '0' && Number(document.querySelector(\""
        f"{row} td[data-state='completed']\").textContent) === {before + 300}",
        timeout=60_000)
    assert page.evaluate("window.kathikonMarker") == "the same page"
    assert page.locator("#kathikon-live-stamp").inner_text().startswith("updated ")
    assert page.locator("#kathikon-overview").get_attribute("data-updated")
    page.screenshot(path=str(shots / "admin-live-overview.png"), full_page=True)


def test_a_bulk_retry_of_10000_dead_jobs_asks_first_and_runs_in_chunks(browser, live_server,
                                                                       jobs):
    """Issue 24: an action on everything a filter matches shows what it will touch, runs
    in chunks, and is not offered to staff without the permission."""
    kathikon.insert_many([(workers.Explode, {"n": n}) for n in range(10_000)])
    Job.objects.filter(worker=workers.Explode.path(), state=JobState.AVAILABLE).update(
        state=JobState.DEAD, attempts=3)
    dead = Job.objects.filter(state=JobState.DEAD).count()
    assert dead == 10_004  # and the fixture's dead jobs
    viewer = login(browser, live_server, "viewer")
    viewer.goto(f"{live_server.url}/admin/kathikon/job/?state=dead")
    assert viewer.locator("select[name=action]").count() == 0
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/job/?state=dead")
    page.check("#action-toggle")
    page.click("#changelist-form .actions .question a")  # "Select all 10,004 jobs"
    page.select_option("select[name=action]", "retry_jobs")
    page.click("button[name=index]")
    page.wait_for_selector("#kathikon-bulk-confirm")
    assert page.locator("#kathikon-bulk-count").inner_text() == "10,004"
    assert "state=dead" in page.locator("#kathikon-bulk-confirm").inner_text()
    assert Job.objects.filter(state=JobState.DEAD).count() == dead  # asked, not done
    page.click("#kathikon-bulk-yes")
    page.wait_for_selector("ul.messagelist")
    said = page.locator("ul.messagelist").inner_text()
    assert "Retried 10004 jobs." in said and "Ran in 11 chunks of up to 1,000 jobs." in said
    assert Job.objects.filter(state=JobState.DEAD).count() == 0


def test_a_search_by_an_args_key_finds_the_job(browser, live_server, jobs):
    """Issue 24: structured search — a JSON key and value in args, and the last error."""
    page = login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/job/")
    page.fill("#searchbar", "args.order=1234")
    page.press("#searchbar", "Enter")
    page.wait_for_url(re.compile(r"q=args.order"))
    assert page.locator("#result_list code.kathikon-id").all_inner_texts() == [
        jobs["dead"].id.hex]
    page.fill("#searchbar", "error:BOOM 3")
    page.press("#searchbar", "Enter")
    page.wait_for_url(re.compile(r"q=error"))
    assert page.locator("#result_list code.kathikon-id").all_inner_texts() == [
        jobs["dead"].id.hex]
