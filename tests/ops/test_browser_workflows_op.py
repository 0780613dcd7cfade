"""A workflow's admin page in a real browser: the graph as Chromium draws it, a click through
to a step, and cancelling the workflow through its confirmation page.

Run with ``-m browser`` (fixtures, SQLite only and skips: see test_browser_op.py);
``KATHIKON_UPDATE_SCREENSHOTS=1`` writes docs/img/admin-workflow.png. The page's queries,
actions and permissions are tested on every database in test_admin_workflows_op.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from kathikon import Workflow
from kathikon.admin.common import STATE_COLOURS
from kathikon.models import Job
from kathikon.models import Workflow as WorkflowRow
from kathikon.testing import drain_queue
from tests.ops import test_browser_op as base
from tests.workflows.steps import Plain

pytestmark = pytest.mark.browser

browser = base.browser  # the module-scoped Chromium (skips off SQLite or without it)
shots = base.shots


@pytest.fixture
def diamond(transactional_db: Any, settings: Any) -> Workflow:
    """fetch → small, medium, large → publish, run in part: fetch and small completed,
    medium and large available (their queue not drained), publish waiting."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from django.contrib.auth.models import User

    User.objects.create_superuser("root", "root@example.com", "pw")
    wf = Workflow("publish-video")
    wf.add("fetch", Plain, {"value": "https://example.com/v/42"})
    wf.add("small", Plain, {"value": "360p"}, deps=["fetch"])
    wf.add("medium", Plain, {"value": "720p"}, deps=["fetch"], queue="video")
    wf.add("large", Plain, {"value": "1080p"}, deps=["fetch"], queue="video")
    wf.add("publish", Plain, {}, deps=["small", "medium", "large"])
    wf.insert()
    drain_queue("default", with_recursion=True)  # fetch, then small; "video" is not drained
    return wf


def steps(wf: Workflow) -> dict[str, str]:
    return dict(Job.objects.filter(workflow_id=wf.id).values_list("step", "state"))


def graph_nodes(page: Any) -> dict[str, dict[str, str]]:
    """``{step: {state, fill, text}}`` of the boxes Chromium drew."""
    return {node["step"]: node for node in page.locator("svg.kathikon-wf-graph g.kathikon-wf-node")
            .evaluate_all("""nodes => nodes.map(node => ({
                step: node.dataset.step, state: node.dataset.state,
                fill: node.querySelector('rect').getAttribute('fill'),
                text: node.textContent}))""")}


def test_the_graph_shows_each_step_and_cancel_cancels_the_rest(browser, live_server, diamond,
                                                                shots):
    expected = {"fetch": "completed", "small": "completed", "medium": "available",
                "large": "available", "publish": "waiting"}
    assert steps(diamond) == expected
    page = base.login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/workflow/")
    page.click("text=publish-video")
    page.wait_for_selector("svg.kathikon-wf-graph")
    nodes = graph_nodes(page)
    assert {step: node["state"] for step, node in nodes.items()} == expected
    for step, node in nodes.items():
        assert node["fill"] == STATE_COLOURS[node["state"]], step
        assert step in node["text"] and node["state"] in node["text"]
    edges = page.locator("path.kathikon-wf-edge").evaluate_all(
        "paths => paths.map(p => [p.dataset.from, p.dataset.to])")
    ids = {job.step: job.id.hex for job in Job.objects.filter(workflow_id=diamond.id)}
    assert sorted(map(tuple, edges)) == sorted(
        [(ids["fetch"], ids[size]) for size in ("small", "medium", "large")]
        + [(ids[size], ids["publish"]) for size in ("small", "medium", "large")])
    # Laid out left to right: fetch, the three sizes in one column, publish.
    xs = {step: page.locator(f"g.kathikon-wf-node[data-step='{step}']").bounding_box()["x"]
          for step in expected}
    assert xs["fetch"] < xs["small"] == xs["medium"] == xs["large"] < xs["publish"]
    page.screenshot(path=str(shots / "admin-workflow.png"), full_page=True)

    page.click("#kathikon-cancel-workflow")
    assert page.locator("#kathikon-cancel-pending tr[data-state=available] td").inner_text() == "2"
    assert steps(diamond) == expected  # the confirmation page changed nothing
    page.click("#kathikon-confirm-cancel")
    page.wait_for_selector("ul.messagelist")
    assert "Cancelled workflow “publish-video”" in page.locator("ul.messagelist").inner_text()
    cancelled = {**expected, "medium": "cancelled", "large": "cancelled",
                 "publish": "cancelled"}
    assert steps(diamond) == cancelled
    assert {step: node["state"] for step, node in graph_nodes(page).items()} == cancelled
    assert page.locator("#kathikon-cancel-workflow").count() == 0
    assert WorkflowRow.objects.get(pk=diamond.id).status == "cancelled"


def test_a_box_opens_its_step_which_links_back(browser, live_server, diamond):
    page = base.login(browser, live_server, "root")
    page.goto(f"{live_server.url}/admin/kathikon/workflow/{diamond.id.hex}/change/")
    page.click("g.kathikon-wf-node[data-step='publish']")
    page.wait_for_selector(".kathikon-workflow-link")
    assert page.locator("code.kathikon-step").inner_text() == "publish"
    page.click(".kathikon-workflow-link")
    page.wait_for_selector("svg.kathikon-wf-graph")
    assert page.locator("#kathikon-wf-steps tbody tr").count() == 5


def test_the_workflow_list_fits_a_1400px_window(browser, live_server, diamond):
    """A 200-character name without a space wraps instead of widening the list."""
    wide = Workflow("nightly-" + "x" * 192)
    wide.add("a", Plain, {}, queue="elsewhere")
    wide.insert()
    page = base.login(browser, live_server, "root")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_server.url}/admin/kathikon/workflow/")
    sizes = page.evaluate("""() => {
        const box = document.querySelector('#changelist .results');
        const table = document.querySelector('#result_list');
        const filter = document.querySelector('#changelist-filter');
        return {viewport: window.innerWidth, page: document.documentElement.scrollWidth,
                overflow: box.scrollWidth - box.clientWidth,
                table: table.getBoundingClientRect().right,
                filter: filter.getBoundingClientRect().left};
    }""")
    assert sizes["page"] <= sizes["viewport"], sizes
    assert sizes["overflow"] <= 0 and sizes["table"] <= sizes["filter"], sizes
