"""The outage of a worker's database said once each way (kathikon.runtime.outage)."""

from __future__ import annotations

import logging

from django.db import OperationalError

from kathikon.runtime.outage import Outage, quiet_during


def test_an_outage_is_said_once_and_its_end_once(caplog):
    now = [100.0]
    outage = Outage("node-1", "second", clock=lambda: now[0])
    parts = logging.getLogger("kathikon")
    with caplog.at_level(logging.INFO, logger="kathikon"), quiet_during(outage):
        for _ in range(20):  # every poll of every part fails
            outage.failed("reading its queues", OperationalError("connection refused\nmore"))
            parts.warning("kathikon: claim on queue reports failed (%s: %s)",
                          "OperationalError", "connection refused")
            parts.error("kathikon: promoter failed", exc_info=(
                OperationalError, OperationalError("refused"), None))
        parts.warning("kathikon: something else went wrong (%s)", "ValueError")  # not quieted
        now[0] = 104.5
        outage.recovered()
        outage.recovered()
        parts.warning("kathikon: claim on queue reports failed (%s: %s)",
                      "OperationalError", "refused again")  # after the outage: said
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "kathikon worker node-1: database 'second' unavailable (reading its queues: "
        "OperationalError: connection refused); its queues wait while every part of this "
        "worker keeps retrying; said again when it is back",
        "kathikon: something else went wrong (ValueError)",
        "kathikon worker node-1: database 'second' is back after 4.5s",
        "kathikon: claim on queue reports failed (OperationalError: refused again)",
    ]


def test_the_filter_is_gone_after_the_worker(caplog):
    outage = Outage("node-1", "default")
    with quiet_during(outage):
        outage.failed("reading its queues", OperationalError("down"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kathikon"):
        logging.getLogger("kathikon").warning("kathikon: x (%s)", "OperationalError")
    assert [r.getMessage() for r in caplog.records] == ["kathikon: x (OperationalError)"]
