"""The workflow admin through django.test.Client: the list, a workflow's page with its graph
and steps, cancel / retry / release with their permissions, and bad input (400/404, no 500)."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.test import Client, override_settings
from django.urls import reverse

import kathikon
from kathikon import Workflow
from kathikon.admin.common import STATE_COLOURS
from kathikon.models import Job
from kathikon.models import Workflow as WorkflowRow
from kathikon.testing import drain_queue
from tests.ops.conftest import staff_user
from tests.workflows.steps import Fail, Plain

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/kathikon/workflow/"
NUL = "%00"


def page_url(wf: Workflow | WorkflowRow) -> str:
    return reverse("admin:kathikon_workflow_change", args=[wf.id])


def act_url(wf: Workflow | WorkflowRow, action: str) -> str:
    return reverse("admin:kathikon_workflow_action", args=[wf.id.hex, action])


def step(wf: Workflow, name: str) -> Job:
    return Job.objects.get(workflow_id=wf.id, step=name)


def states(wf: Workflow) -> dict[str, str]:
    return dict(Job.objects.filter(workflow_id=wf.id).values_list("step", "state"))


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def client_with(*codenames: str) -> Client:
    name = "+".join(codenames) or "nobody"
    staff_user(name, *codenames)
    client = Client()
    client.login(username=name, password="pw")
    return client


def svg_nodes(html: str) -> dict[str, str]:
    """``{step: state}`` of the graph's boxes."""
    return dict(re.findall(r'class="kathikon-wf-node" data-key="[^"]*" data-step="([^"]*)" '
                           r'data-state="([^"]*)"', html))


def svg_edges(html: str) -> int:
    return len(re.findall(r'class="kathikon-wf-edge"', html))


@pytest.fixture
def diamond(db) -> Workflow:
    """fetch → small, medium, large → publish; fetch has run, the middle is available."""
    wf = Workflow("publish-video")
    wf.add("fetch", Plain, {"value": 1})
    for size in ("small", "medium", "large"):
        wf.add(size, Plain, {"value": size}, deps=["fetch"])
    wf.add("publish", Plain, {}, deps=["small", "medium", "large"])
    wf.insert()
    drain_queue("default")  # one round: fetch runs and releases the middle
    assert states(wf) == {"fetch": "completed", "small": "available", "medium": "available",
                          "large": "available", "publish": "waiting"}
    return wf


@pytest.fixture
def failing(db) -> Workflow:
    """a fails (dead); b holds for a person, c is cancelled by its policy, d runs anyway."""
    wf = Workflow("nightly-report")
    wf.add("a", Fail, queue="nightly")
    wf.add("b", Plain, {}, deps=["a"], on_dep_failure="hold", queue="nightly")
    wf.add("c", Plain, {}, deps=["a"], queue="nightly")
    sub = Workflow("cleanup")
    sub.add("x", Plain, {}, queue="nightly")
    sub.add("y", Plain, {}, deps=["x"], queue="nightly")
    wf.add_workflow("cleanup", sub, deps=["a"])
    wf.add("d", Plain, {}, deps=["cleanup"], on_dep_failure="run", queue="nightly")
    wf.insert()
    drain_queue("nightly", with_recursion=True)  # the other fixture's steps stay put
    assert states(wf) == {"a": "dead", "b": "held", "c": "cancelled", "d": "completed"}
    return wf


# -- the list -------------------------------------------------------------------------------

def test_the_list_shows_status_progress_and_failures(admin_client_op, diamond, failing):
    response = admin_client_op.get(LIST)
    assert response.status_code == 200
    html = response.content.decode()
    assert "publish-video" in html and "nightly-report" in html and "cleanup" in html
    assert "1/5" in html  # the diamond: fetch done of five
    assert ">running</span>" in html
    assert "2 workflows" not in html  # three rows: the sub-workflow is listed too
    assert "3 workflows" in html
    assert html.index("cleanup") < html.index("publish-video")  # newest first


def test_the_list_filters_by_status_and_searches_names_and_ids(admin_client_op, diamond,
                                                              failing):
    kathikon.workflows.cancel(diamond.id)
    html = admin_client_op.get(LIST, {"status__exact": "cancelled"}).content.decode()
    assert "publish-video" in html and "nightly-report" not in html
    html = admin_client_op.get(LIST, {"q": "NIGHTLY"}).content.decode()
    assert "nightly-report" in html and "publish-video" not in html
    html = admin_client_op.get(LIST, {"q": diamond.id.hex}).content.decode()
    assert "publish-video" in html and "nightly-report" not in html


def test_the_list_costs_the_same_queries_for_1_or_30_workflows(admin_client_op,
                                                              django_assert_max_num_queries):
    def insert(n: int) -> None:
        for index in range(n):
            wf = Workflow(f"wf-{index}")
            wf.add("a", Plain, {})
            wf.add("b", Plain, {}, deps=["a"])
            wf.insert()

    insert(1)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as one:
        assert admin_client_op.get(LIST).status_code == 200
    insert(29)
    with django_assert_max_num_queries(len(one.captured_queries)):
        assert "wf-28" in admin_client_op.get(LIST).content.decode()


# -- a workflow's page ------------------------------------------------------------------------

def test_the_page_draws_every_step_with_its_state_and_edges(admin_client_op, diamond):
    response = admin_client_op.get(page_url(diamond))
    assert response.status_code == 200
    html = response.content.decode()
    assert svg_nodes(html) == states(diamond)
    assert svg_edges(html) == 6  # fetch → three sizes → publish
    colours = re.findall(r'data-step="fetch".*?<rect [^>]*fill="(#[0-9a-f]{6})"', html, re.S)
    assert colours[0] == STATE_COLOURS["completed"]
    assert reverse("admin:kathikon_job_change", args=[step(diamond, "publish").pk]) in html
    table = html[html.index('id="kathikon-wf-steps"'):]
    assert all(f'data-step="{name}"' in table for name in states(diamond))
    publish = re.search(r'<tr data-step="publish".*?</tr>', table, re.S).group(0)
    assert "small, medium, large" in publish  # what it waits for
    assert f"?workflow={diamond.id.hex}" in html  # the steps in the job list
    assert 'name="_save"' not in html  # read-only


def test_the_page_shows_sub_workflows_and_their_edges(admin_client_op, failing):
    html = admin_client_op.get(page_url(failing)).content.decode()
    sub = WorkflowRow.objects.get(parent_workflow_id=failing.id)
    assert page_url(sub) in html  # listed and drawn as a node, linking to its page
    assert 'data-kind="sub"' in html
    edges = re.findall(r'data-from="([^"]+)" data-to="([^"]+)"', html)
    a, d = step(failing, "a").id.hex, step(failing, "d").id.hex
    assert (a, f"wf:{sub.id.hex}") in edges and (f"wf:{sub.id.hex}", d) in edges
    sub_html = admin_client_op.get(page_url(sub)).content.decode()
    assert page_url(failing) in sub_html  # its parent
    assert 'data-kind="external"' in sub_html  # x waits on the parent's step a


def test_a_10000_step_fan_out_draws_a_few_boxes(admin_client_op, django_assert_max_num_queries):
    wf = Workflow("fan-out")
    wf.add("split", Plain, {})
    for index in range(10_000):
        wf.add(f"part-{index}", Plain, {}, deps=["split"])
    wf.add("join", Plain, {}, deps=[f"part-{index}" for index in range(10_000)])
    wf.insert()
    with django_assert_max_num_queries(40):
        response = admin_client_op.get(page_url(wf))
    html = response.content.decode()
    nodes = svg_nodes(html)
    assert len(nodes) <= 30 and "split" in nodes and "join" in nodes
    assert "+ 9,976 more" in html and "9,976 waiting" in html
    assert html.count("<tr data-step=") == 200
    assert "All 10002 steps in the job list" in html


# -- actions ----------------------------------------------------------------------------------

def test_cancel_asks_first_then_cancels_every_step_not_started(admin_client_op, diamond):
    html = admin_client_op.get(page_url(diamond)).content.decode()
    assert act_url(diamond, "cancel") in html
    confirm = admin_client_op.get(act_url(diamond, "cancel"))
    assert confirm.status_code == 200
    assert 'data-state="available"' in confirm.content.decode()
    assert states(diamond)["small"] == "available"  # asking changed nothing
    response = admin_client_op.post(act_url(diamond, "cancel"))
    assert response.status_code == 302 and response.url == page_url(diamond)
    assert any(text.startswith("Cancelled workflow “publish-video”")
               for text in messages_of(response))
    assert states(diamond) == {"fetch": "completed", "small": "cancelled",
                               "medium": "cancelled", "large": "cancelled",
                               "publish": "cancelled"}
    assert WorkflowRow.objects.get(pk=diamond.id).status == "cancelled"
    again = admin_client_op.post(act_url(diamond, "cancel"))
    assert again.status_code == 302
    assert any(text.startswith("Nothing cancelled") for text in messages_of(again))
    html = admin_client_op.get(page_url(diamond)).content.decode()
    assert 'id="kathikon-cancel-workflow"' not in html


def test_retry_a_dead_step_and_release_a_held_one(admin_client_op, failing):
    html = admin_client_op.get(page_url(failing)).content.decode()
    assert html.count('class="kathikon-step-button kathikon-retry-step"') == 2  # a and c
    assert html.count('class="kathikon-step-button kathikon-release-step"') == 1  # b
    response = admin_client_op.post(act_url(failing, "release"),
                                    {"job": step(failing, "b").id.hex})
    assert response.status_code == 302
    assert any(text.startswith("Released step “b”") for text in messages_of(response))
    assert states(failing)["b"] == "available"
    response = admin_client_op.post(act_url(failing, "retry"), {"job": step(failing, "a").id.hex})
    assert any(text.startswith("Retried step “a”") for text in messages_of(response))
    assert states(failing)["a"] == "available" and states(failing)["c"] == "waiting"


def test_an_action_the_step_is_not_in_the_state_for_is_a_message(admin_client_op, failing):
    response = admin_client_op.post(act_url(failing, "release"),
                                    {"job": step(failing, "d").id.hex})
    assert response.status_code == 302
    assert any("Could not release step “d”" in text and "only a held step" in text
               for text in messages_of(response))
    response = admin_client_op.post(act_url(failing, "retry"), {"job": step(failing, "d").id.hex})
    assert response.status_code == 302  # a completed step may be retried: it runs again
    response = admin_client_op.post(act_url(failing, "retry"), {"job": step(failing, "d").id.hex})
    assert any("Could not retry step “d”" in text and "already available" in text
               for text in messages_of(response))


# -- permissions ------------------------------------------------------------------------------

def test_a_viewer_sees_the_page_but_no_action_and_gets_403(db, diamond, failing):
    client = client_with("view_workflow")
    html = client.get(page_url(failing)).content.decode()
    assert "kathikon-wf-graph" in html
    assert "kathikon-retry-step" not in html and "kathikon-release-step" not in html
    assert 'id="kathikon-cancel-workflow"' not in html
    assert client.get(act_url(diamond, "cancel")).status_code == 403
    assert client.post(act_url(diamond, "cancel")).status_code == 403
    for action, name in (("retry", "a"), ("release", "b")):
        assert client.post(act_url(failing, action),
                           {"job": step(failing, name).id.hex}).status_code == 403
    assert states(diamond)["small"] == "available"
    assert states(failing) == {"a": "dead", "b": "held", "c": "cancelled", "d": "completed"}


@pytest.mark.parametrize("permission, action, name", [
    ("cancel_workflow", "cancel", None), ("retry_job", "retry", "a"),
    ("release_workflow", "release", "b"),
])
def test_each_action_needs_the_view_permission_and_its_own(db, failing, permission, action,
                                                           name):
    data = {"job": step(failing, name).id.hex} if name else {}
    before = states(failing)
    assert client_with(permission).post(act_url(failing, action), data).status_code == 403
    others = [p for p in ("cancel_workflow", "retry_job", "release_workflow") if p != permission]
    assert client_with("view_workflow", *others).post(act_url(failing, action),
                                                      data).status_code == 403
    assert states(failing) == before
    response = client_with("view_workflow", permission).post(act_url(failing, action), data)
    assert response.status_code == 302 and states(failing) != before


@override_settings(KATHIKON={"QUEUES": {"default": {}}, "ALLOW_DESTRUCTIVE_ACTIONS": False})
def test_the_destructive_switch_hides_and_refuses_the_actions(admin_client_op, failing):
    html = admin_client_op.get(page_url(failing)).content.decode()
    assert "kathikon-retry-step" not in html and 'id="kathikon-cancel-workflow"' not in html
    assert admin_client_op.post(act_url(failing, "cancel")).status_code == 403
    assert WorkflowRow.objects.get(pk=failing.id).status == "running"


# -- bad input --------------------------------------------------------------------------------

def test_bad_ids_and_input_answer_400_404_or_405(admin_client_op, diamond, failing):
    zero = "0" * 32
    assert admin_client_op.get(f"{LIST}nope/change/").status_code == 302  # Django's redirect
    assert admin_client_op.get(f"{LIST}{zero}/change/").status_code == 302
    assert admin_client_op.get(f"{LIST}a{NUL}/change/").status_code == 400
    assert admin_client_op.get(f"{LIST}a{NUL}/history/").status_code == 400
    assert admin_client_op.get(f"{LIST}{diamond.id.hex}/history/").status_code == 200
    assert admin_client_op.post(f"{LIST}{diamond.id.hex}/delete/").status_code == 403
    assert admin_client_op.get(f"{LIST}add/").status_code == 403
    assert admin_client_op.post(f"{LIST}nope/act/cancel/").status_code == 404
    assert admin_client_op.post(f"{LIST}{zero}/act/cancel/").status_code == 404
    assert admin_client_op.post(f"{LIST}{diamond.id.hex}{NUL}/act/cancel/").status_code == 400
    assert admin_client_op.post(act_url(diamond, "explode")).status_code == 403
    assert admin_client_op.get(act_url(failing, "retry")).status_code == 405
    for job in ("", "zz", "x" * 5000):
        assert admin_client_op.post(act_url(failing, "retry"), {"job": job}).status_code == 400
    assert admin_client_op.post(act_url(failing, "retry"), {"job": "a\x00"}).status_code == 400
    other = step(diamond, "small").id.hex  # a step, of another workflow
    assert admin_client_op.post(act_url(failing, "retry"), {"job": other}).status_code == 404
    for query in (f"?status__exact={NUL}", "?steps_total=1", "?name__regex=("):
        assert admin_client_op.get(f"{LIST}{query}").status_code == 400, query
    assert admin_client_op.get(LIST, {"status__exact": "bogus"}).status_code == 200
    assert states(diamond)["small"] == "available" and states(failing)["a"] == "dead"


# -- the job admin knows workflows -----------------------------------------------------------

def test_a_step_page_links_its_workflow_and_names_its_step(admin_client_op, diamond):
    html = admin_client_op.get(reverse("admin:kathikon_job_change",
                                       args=[step(diamond, "medium").pk])).content.decode()
    assert 'class="kathikon-step">medium</code>' in html
    assert f'href="{page_url(diamond)}" class="kathikon-workflow-link">publish-video</a>' in html
    plain = kathikon.insert(Plain, {})
    html = admin_client_op.get(reverse("admin:kathikon_job_change",
                                       args=[plain.pk])).content.decode()
    assert "kathikon-workflow-link" not in html


def test_the_job_list_filters_by_workflow_and_knows_waiting_and_held(admin_client_op, diamond,
                                                                     failing):
    jobs = reverse("admin:kathikon_job_changelist")
    html = admin_client_op.get(jobs, {"workflow": diamond.id.hex}).content.decode()
    shown = set(re.findall(r'class="kathikon-id">([0-9a-f]{32})<', html))
    assert shown == {job.id.hex for job in Job.objects.filter(workflow_id=diamond.id)}
    assert "publish-video" in html  # the filter names the workflow
    dashed = str(diamond.id)
    assert admin_client_op.get(jobs, {"workflow": dashed}).status_code == 200
    assert admin_client_op.get(jobs, {"workflow": "nope"}).status_code == 400
    html = admin_client_op.get(jobs).content.decode()
    assert "?state=waiting" in html and "?state=held" in html
    html = admin_client_op.get(jobs, {"state": "held"}).content.decode()
    assert f'background:{STATE_COLOURS["held"]}' in html
    assert step(failing, "b").id.hex in html
    html = admin_client_op.get(jobs, {"state": "waiting"}).content.decode()
    assert f'background:{STATE_COLOURS["waiting"]}' in html
    assert step(diamond, "publish").id.hex in html
