"""System checks: bad ``settings.KATHIKON`` is reported at deploy time with a hint."""

from __future__ import annotations

import contextlib
from typing import Any

from django.conf import settings
from django.core import checks

from kathikon import conf


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = [
        checks.Error(problem.message, hint=problem.hint, id=problem.id)
        for problem in conf.load().problems
    ]
    alias = getattr(settings, "KATHIKON", {}) if isinstance(
        getattr(settings, "KATHIKON", {}), dict) else {}
    for key in ("DATABASE", "LISTEN_DATABASE"):
        name = alias.get(key)
        if isinstance(name, str) and name not in settings.DATABASES:
            messages.append(checks.Error(
                f"KATHIKON[{key!r}] names the database {name!r}, which is not in DATABASES.",
                hint=f"Known aliases: {', '.join(settings.DATABASES)}.", id="kathikon.E008"))
    return messages


@checks.register(checks.Tags.compatibility)
def check_cron(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Static schedules in ``KATHIKON["CRON"]`` that the scheduler would have to skip."""
    raw = getattr(settings, "KATHIKON", {})
    entries = raw.get("CRON", []) if isinstance(raw, dict) else []
    if not isinstance(entries, (list, tuple)):
        return []  # kathikon.E010 reports it
    from kathikon.cron import static_problems

    return [checks.Error(f"KATHIKON['CRON'][{index}]: {message}.",
                         hint="Fix or remove the entry; see docs/cron.md. Workers skip it.",
                         id="kathikon.E013")
            for index, message in static_problems(entries)]


def _register_tasks_checks() -> None:
    """When ``TASKS`` uses Kathikon's backend, load the Tasks framework's check.

    Django runs ``backend.check()`` (``kathikon.E101``, ``E102``, ``W101``) only
    once ``django.tasks`` (or the backport's checks) has been imported.
    """
    ours = "kathikon.backends.KathikonBackend"
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, dict) or not any(
            isinstance(params, dict) and params.get("BACKEND") == ours
            for params in tasks.values()):
        return
    try:
        import django.tasks  # noqa: F401  (registers django.tasks.checks)
    except ImportError:
        # Without the backport kathikon.backends raises a clear ImportError when used.
        with contextlib.suppress(ImportError):
            import django_tasks.checks  # noqa: F401


_register_tasks_checks()
