"""The Django admin is Kathikon's dashboard: jobs, queues, cron schedules, batches, nodes
and workflows (with a graph of their steps).

Every action needs the view permission of its page and its own permission
(``kathikon.retry_job``, ``cancel_job``, ``rerun_job``, ``delete_job``,
``pause_queue``, ``change_queue``, ``pause_cronschedule``, ``cancel_workflow``,
``release_workflow``; a workflow step's retry is ``retry_job``), the same for a list
action, a button and a view of its own, and goes through ``kathikon.dashboard``
/ the public API, never a raw ``.update()``. When
``KATHIKON["ALLOW_DESTRUCTIVE_ACTIONS"]`` is False every changing action is
hidden. A POST for an action the user may not run gets 403; bad input (a NUL
byte, a lookup that is no filter of the list, a malformed id) gets 400. The
overview (queue summary and throughput chart) is the app's page,
``/admin/kathikon/``. See docs/admin.md.
"""

from kathikon.admin import (  # noqa: F401 (registers)
    batches,
    jobs,
    nodes,
    queues,
    schedules,
    workflows,
)
from kathikon.admin.common import age, badge, state_badge

__all__ = ["age", "badge", "state_badge"]
