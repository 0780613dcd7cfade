"""benchmarks.workflow_drain and its report rows: the workflow drain against plain jobs."""

from __future__ import annotations

import pytest

from benchmarks import drains, report, workflow_drain
from kathikon.models import Job, Workflow
from kathikon.testing import drain_queue
from tests.bench_runs import bench_vendor, report_line, run_bench

ROW_1 = "| workflow: 1 → N-2 → 1 steps vs N plain jobs, 1 `kathikon_worker` (jobs/s) |"
ROW_2 = "| workflow: 1 → N-2 → 1 steps vs N plain jobs, 2 `kathikon_worker` (jobs/s) |"


def _run(kind: str, rate: float, timed_out: bool = False) -> dict:
    return {"kind": kind, "rate": rate, "timed_out": timed_out}


def _results(phase: dict) -> dict:
    return {"vendors": {"postgres": {"phases": {"workflow": phase}}}}



def test_summary_takes_the_median_of_each_kind_and_their_ratio():
    summary = workflow_drain.summarise({
        "plain": [_run("plain", 10_000), _run("plain", 14_000), _run("plain", 12_000)],
        "workflow": [_run("workflow", 9_000), _run("workflow", 3_000), _run("workflow", 8_400)],
    })
    assert summary["plain"]["rate"] == 12_000
    assert summary["workflow"]["rate"] == 8_400
    assert summary["ratio"] == pytest.approx(0.70)
    assert not summary["plain"]["timed_out"]


def test_summary_says_where_the_workflow_time_went_against_the_plain_drain():
    def timed(kind: str, seconds: float, **phases: float) -> dict:
        return _run(kind, 10_000 / seconds) | {"seconds": seconds, **phases}

    summary = workflow_drain.summarise({
        "plain": [timed("plain", 0.40), timed("plain", 0.30), timed("plain", 0.35)],
        "workflow": [timed("workflow", 0.6, root_s=0.01, release_s=0.12, middle_s=0.45,
                           fan_in_s=0.02),
                     timed("workflow", 0.7, root_s=0.03, release_s=0.14, middle_s=0.50,
                           fan_in_s=0.03),
                     timed("workflow", 0.5, root_s=0.02, release_s=0.10, middle_s=0.36,
                           fan_in_s=0.02)]})
    assert summary["workflow"]["release_s"] == pytest.approx(0.12)
    assert summary["workflow"]["middle_s"] == pytest.approx(0.45)
    assert summary["plain"]["seconds"] == pytest.approx(0.35)
    assert workflow_drain._where(summary) == ("root 0.02 s, release 0.12 s, middle 0.45 s, "
                                              "fan-in 0.02 s, plain jobs 0.35 s")


def test_summary_of_plain_jobs_alone_has_no_ratio():
    # what a checkout from before workflows measures
    summary = workflow_drain.summarise({"plain": [_run("plain", 10_000)]})
    assert summary["plain"]["rate"] == 10_000
    assert summary["ratio"] is None
    assert workflow_drain.ratio(0, 5_000) is None


def test_kinds_alternate_so_drift_hits_both():
    assert drains.order(4, workflow_drain.KINDS) == ["plain", "workflow", "workflow", "plain",
                                                     "plain", "workflow", "workflow", "plain"]
    assert drains.order(3, ("plain",)) == ["plain", "plain", "plain"]


def test_report_rows_and_target_give_rates_and_ratio():
    p1 = workflow_drain.summarise({"plain": [_run("plain", 10_000)],
                                   "workflow": [_run("workflow", 6_500)]})
    p2 = workflow_drain.summarise({"plain": [_run("plain", 12_000)],
                                   "workflow": [_run("workflow", 9_000, timed_out=True)]})
    results = _results({"n": 10_000, "p1": p1, "p2": p2})
    table = report.table(results)
    assert report_line(table, ROW_1) == f"{ROW_1} 6,500 vs 10,000 (65%, N=10k) |"
    assert report_line(table, ROW_2) == f"{ROW_2} 9,000 vs 12,000 (75%, N=10k) workflow TIMED OUT |"
    target = report_line(report.targets(results), "| workflow drain |")
    assert target is not None and target.endswith("| 65% | **no** |")
    p1["workflow"]["rate"], p1["ratio"] = 7_000, 0.70
    target = report_line(report.targets(_results({"n": 10_000, "p1": p1})), "| workflow drain |")
    assert target is not None and target.endswith("| 70% | yes |")


def test_rows_are_left_out_without_a_workflow_figure():
    plain_only = workflow_drain.summarise({"plain": [_run("plain", 10_000)]})
    table = report.table(_results({"n": 10_000, "p1": plain_only}))
    assert report_line(table, ROW_1) is None
    assert report_line(table, ROW_2) is None


@pytest.mark.django_db(transaction=True)
def test_the_benchmark_workflow_fans_out_and_in():
    built = workflow_drain.fan_out_fan_in(5)
    committed = workflow_drain._insert("workflow", 5, built)
    steps = dict(Job.objects.filter(workflow_id=built.id).values_list("step", "state"))
    assert steps == {"root": "available", "s1": "waiting", "s2": "waiting", "s3": "waiting",
                     "final": "waiting"}
    assert Job.objects.get(workflow_id=built.id, step="final").deps_waiting == 3
    assert not workflow_drain._finished(built.id)
    left = workflow_drain._left(built.id)  # what a timed-out drain reports
    assert left["states"] == {"available": 1, "waiting": 4}
    assert left["root"]["state"] == "available"
    assert left["final"] == {"state": "waiting", "attempts": 0, "node": "", "deps_waiting": 3,
                             "error": ""}

    drain_queue("default", with_recursion=True)

    assert workflow_drain._finished(built.id)
    timings = workflow_drain._timings("workflow", 5, committed, built.id)
    assert Workflow.objects.get(pk=built.id).status == "completed"
    assert timings["status"] == "completed"
    assert timings["completed"] == 5
    final = Job.objects.get(workflow_id=built.id, step="final").completed_at.timestamp()
    assert timings["seconds"] == pytest.approx(final - committed)
    assert timings["rate"] == pytest.approx(5 / timings["seconds"])
    assert timings["root_s"] + timings["release_s"] + timings["middle_s"] + timings[
        "fan_in_s"] == pytest.approx(timings["seconds"])


def test_a_workflow_needs_three_steps():
    with pytest.raises(ValueError):
        workflow_drain.fan_out_fan_in(2)


@pytest.mark.slow
def test_workflow_phase_runs_with_real_workers(tmp_path):
    result = run_bench(tmp_path, bench_vendor(), "wf", "--only", "workflow",
                       "--size", "workflow=12", "--size", "workflow_rounds=1",
                       "--size", "workflow_processes=1", timeout=150)
    phase = result["phases"]["workflow"]
    assert "p2" not in phase  # workflow_processes=1
    for kind in ("plain", "workflow"):
        runs = phase["p1"][kind]["runs"]
        assert len(runs) == 2  # plain, workflow, workflow, plain
        assert all(run["completed"] == 12 and not run["timed_out"] for run in runs)
    assert all(run["status"] == "completed" for run in phase["p1"]["workflow"]["runs"])
    assert phase["p1"]["ratio"] > 0
