"""The Django admin is Kathikon's dashboard: jobs, queues, cron schedules, batches and nodes.

Every action has its own permission (``kathikon.retry_job``, ``cancel_job``,
``rerun_job``, ``delete_job``, ``pause_queue``, ``pause_cronschedule``) and goes
through ``kathikon.dashboard`` / the public API, never a raw ``.update()``.
When ``KATHIKON["ALLOW_DESTRUCTIVE_ACTIONS"]`` is False every changing action
is hidden. A POST for an action the user may not run gets 403. The overview
(queue summary and throughput chart) is the app's page, ``/admin/kathikon/``.
See docs/admin.md.
"""

from kathikon.admin import batches, jobs, nodes, queues, schedules  # noqa: F401 (registers)
from kathikon.admin.common import age, badge, state_badge

__all__ = ["age", "badge", "state_badge"]
