"""System checks: bad ``settings.KATHIKON`` is reported at deploy time with a hint."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks

from kathikon import conf
from kathikon.exceptions import InvalidJob
from kathikon.known_queues import close_match
from kathikon.workers import Worker, resolve_worker


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = [
        checks.Error(problem.message, hint=problem.hint, id=problem.id)
        for problem in conf.load().problems
    ]
    alias = getattr(settings, "KATHIKON", {}) if isinstance(
        getattr(settings, "KATHIKON", {}), dict) else {}
    for key in ("DATABASE", "LISTEN_DATABASE", "READ_DATABASE"):
        name = alias.get(key)
        if isinstance(name, str) and name not in settings.DATABASES:
            messages.append(checks.Error(
                f"KATHIKON[{key!r}] names the database {name!r}, which is not in DATABASES.",
                hint=f"Known aliases: {', '.join(settings.DATABASES)}.", id="kathikon.E008"))
    queues = alias.get("QUEUES")
    for queue, options in (queues.items() if isinstance(queues, dict) else ()):
        name = options.get("database") if isinstance(options, dict) else None
        if isinstance(name, str) and name not in settings.DATABASES:
            messages.append(checks.Error(
                f"KATHIKON['QUEUES'][{queue!r}]['database'] names the database {name!r}, "
                "which is not in DATABASES.",
                hint=f"Known aliases: {', '.join(settings.DATABASES)}.", id="kathikon.E008"))
    return messages + read_database_problems(alias, settings.DATABASES)


def read_database_problems(values: dict[str, Any],
                           databases: dict[str, Any]) -> list[checks.CheckMessage]:
    """The replica must speak the primary's SQL: the reports are written per vendor."""
    primary, replica = values.get("DATABASE", "default"), values.get("READ_DATABASE")
    if not isinstance(replica, str) or replica == primary:
        return []
    engines = [databases.get(name, {}).get("ENGINE", "") if isinstance(name, str)
               else "" for name in (primary, replica)]
    if not all(engines) or _vendor(engines[0]) == _vendor(engines[1]):
        return []
    return [checks.Error(
        f"KATHIKON['READ_DATABASE'] ({replica!r}, {engines[1]}) is not the same kind of "
        f"database as KATHIKON['DATABASE'] ({primary!r}, {engines[0]}).",
        hint="Point READ_DATABASE at a replica of DATABASE, or leave it None.",
        id="kathikon.E017")]


def _vendor(engine: str) -> str:
    name = engine.rsplit(".", 1)[-1]
    return {"postgis": "postgresql", "mysql": "mysql", "spatialite": "sqlite3"}.get(name, name)


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


@checks.register(checks.Tags.compatibility)
def check_worker_queues(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Queue names, seen without running anything, that no ``kathikon_worker`` serves by default.

    Their jobs would wait forever, silently. Known statically: the ``queue`` of
    the Worker subclasses imported by now, after importing each installed app's
    ``workers`` module (where docs/workers.md puts them), and the queue of each
    ``KATHIKON["CRON"]`` entry (its ``queue``, else its worker's). Inserts into
    other queues are checked when they happen (``kathikon.known_queues``).
    """
    loaded = conf.load()
    if loaded.problems:
        return []  # kathikon.E00x say what to fix first
    served = set(conf.served_queue_names())
    messages: list[checks.CheckMessage] = []
    for cls in sorted(_worker_classes(), key=lambda cls: cls.path()):
        queue = getattr(cls, "queue", None)
        if isinstance(queue, str) and queue not in served:
            messages.append(_unserved(f"Worker {cls.path()} uses", queue, served, cls))
    for index, entry, queue in _cron_queues(loaded["CRON"]):
        if queue not in served:
            messages.append(_unserved(f"KATHIKON['CRON'][{index}] ({entry['name']!r}) enqueues "
                                      "into", queue, served, None))
    return messages


def _unserved(who: str, queue: str, served: set[str], obj: Any) -> checks.Warning:
    guess = close_match(queue, served)
    return checks.Warning(
        f"{who} the queue {queue!r}, which is not in KATHIKON['QUEUES']: no kathikon_worker "
        "runs its jobs by default, so they wait forever."
        + (f" Did you mean {guess!r}?" if guess else ""),
        hint=f"Add {queue!r} to KATHIKON['QUEUES'], run a worker with --queues {queue}, "
             f"or call kathikon.start_queue({queue!r}) once.",
        obj=obj, id="kathikon.W001")


def _cron_queues(entries: Any) -> list[tuple[int, dict[str, Any], str]]:
    """``(index, entry, queue)`` of the usable static schedules (E013 reports the others)."""
    from kathikon.cron import static_problems

    bad = dict(static_problems(entries))
    found = []
    for index, entry in enumerate(entries):
        if index in bad:
            continue
        queue = entry.get("queue")
        if queue is None:
            try:
                queue = resolve_worker(entry["worker"]).queue
            except InvalidJob:  # the scheduler logs it; the jobs would be dead, not waiting
                continue
        if isinstance(queue, str):
            found.append((index, entry, queue))
    return found


def _worker_classes() -> list[type[Worker]]:
    for app in apps.get_app_configs():
        module = f"{app.name}.workers"
        with contextlib.suppress(Exception):  # a broken module fails loudly where it is used
            if importlib.util.find_spec(module) is not None:
                importlib.import_module(module)
    found: list[type[Worker]] = []
    todo = list(Worker.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if not cls.__module__.startswith("kathikon.") and "<locals>" not in cls.__qualname__:
            found.append(cls)
    return found


def _register_tasks_checks() -> None:
    """When ``TASKS`` uses Kathikon's backend, load the Tasks framework's check.

    Django runs ``backend.check()`` (``kathikon.E101``, ``E102``) only
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
