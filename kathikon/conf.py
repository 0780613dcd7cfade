"""Kathikon's settings: one frozen, validated object built from ``settings.KATHIKON``.

Readers (``conf.queues()``, ``conf.concurrency("emails")``, …) return the
effective values; problems are reported by the system checks in
``kathikon.checks`` and make the readers raise ``ImproperlyConfigured``.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from kathikon.exceptions import InvalidQueue, shown
from kathikon.limits import LIMIT_KEYS
from kathikon.limits import parse as parse_limits
from kathikon.storable import MAX_INT

QUEUE_NAME = re.compile(r"\A[A-Za-z0-9_.-]{1,63}\Z")  # \Z: "default\n" is no queue name
# Jobs one node runs at once in one queue (each is an executor slot): settings, --queues
# and the admin's override all stop here; beyond it, run more processes or nodes.
MAX_CONCURRENCY = 1000
#: The longest duration a setting takes (about a century): a longer one overflows the OS's
#: timers (``threading.TIMEOUT_MAX``) or date arithmetic (``now - RETENTION_PERIOD``).
MAX_SECONDS = 100 * 365 * 86400

TASKS_BACKEND = "kathikon.backends.KathikonBackend"

DEFAULTS: dict[str, Any] = {
    "QUEUES": {"default": {"concurrency": 10}},
    "POLL_INTERVAL": 1.0,
    "SCHEDULER_INTERVAL": 1.0,
    "PRUNE_INTERVAL": 60,
    "RETENTION_PERIOD": 7 * 86400,
    "MAX_ATTEMPTS": 20,
    "TIMEZONE": None,
    "RESULT_STORAGE": "store",
    "DATABASE": "default",
    "HEARTBEAT_INTERVAL": 5,
    "RESCUE_AFTER": 60,
    "SHUTDOWN_GRACE_PERIOD": 30,
    "CRON": [],
    # A job whose worker class this process cannot import goes back to its queue for this
    # long after its insert (a rolling deploy: a newer worker knows it); 0: dead at once.
    "UNKNOWN_WORKER_GRACE": 600,
    # Beyond SPEC §2 (documented in docs/settings.md):
    "LISTEN_DATABASE": None,  # a direct (non-PgBouncer) alias for LISTEN; None = DATABASE
    "READ_DATABASE": None,  # a replica for the admin's and reports' reads; None = DATABASE
    "ALLOW_DESTRUCTIVE_ACTIONS": True,  # dashboard/ops retry, cancel, rerun, pause, prune
    "TESTING_MODE": None,  # None (normal), "inline" or "manual": see kathikon.testing
    "PREPARED_STATEMENTS": True,  # on connections straight to PostgreSQL: storage.prepared
    "TRACING": False,  # OpenTelemetry spans from insert to perform: kathikon.tracing
}
POSITIVE_NUMBERS = (
    "POLL_INTERVAL", "SCHEDULER_INTERVAL", "PRUNE_INTERVAL", "RETENTION_PERIOD",
    "HEARTBEAT_INTERVAL", "RESCUE_AFTER",
)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with ``settings.KATHIKON``; ``id`` is the system check id."""

    id: str
    message: str
    hint: str


@dataclass(frozen=True)
class Settings:
    """The effective configuration; build with :func:`load`."""

    values: dict[str, Any]
    problems: tuple[Problem, ...] = field(default=())

    def __getitem__(self, key: str) -> Any:
        return self.values[key]


def _problems(raw: Any) -> list[Problem]:
    if not isinstance(raw, dict):
        return [Problem("kathikon.E001", "settings.KATHIKON must be a dict.",
                        "Set KATHIKON = {...} with the keys listed in docs/settings.md.")]
    found: list[Problem] = []
    for key in raw:
        if key not in DEFAULTS:
            found.append(Problem("kathikon.E002", f"Unknown key KATHIKON[{key!r}].",
                                 "Check the spelling; docs/settings.md lists every key."))
    values = {**DEFAULTS, **raw}
    found += _queue_problems(values["QUEUES"])
    for key in POSITIVE_NUMBERS:
        if not _duration(values[key]) or not values[key] > 0:
            found.append(Problem("kathikon.E004", f"KATHIKON[{key!r}] must be a number of "
                                 f"seconds > 0 and at most {MAX_SECONDS} (about 100 years), "
                                 f"not {shown(values[key])}.", "Give a duration in seconds."))
    for key in ("SHUTDOWN_GRACE_PERIOD", "UNKNOWN_WORKER_GRACE"):
        if not _duration(values[key]):
            found.append(Problem("kathikon.E004", f"KATHIKON[{key!r}] must be a number of "
                                 f"seconds from 0 to {MAX_SECONDS} (about 100 years), "
                                 f"not {shown(values[key])}.", "Give a duration in seconds."))
    attempts = values["MAX_ATTEMPTS"]
    if (isinstance(attempts, bool) or not isinstance(attempts, int)
            or not 1 <= attempts <= MAX_INT):
        found.append(Problem("kathikon.E005", "KATHIKON['MAX_ATTEMPTS'] must be an int in "
                             f"1..{MAX_INT}, "
                             f"not {shown(attempts)}.", "Use 1 to never retry."))
    if values["RESULT_STORAGE"] not in ("store", "discard"):
        found.append(Problem("kathikon.E006", "KATHIKON['RESULT_STORAGE'] must be 'store' or "
                             f"'discard', not {shown(values['RESULT_STORAGE'])}.",
                             "'discard' keeps no return values."))
    found += _timezone_problems(values["TIMEZONE"])
    if not isinstance(values["DATABASE"], str):
        found.append(Problem("kathikon.E008", "KATHIKON['DATABASE'] must be a database alias.",
                             "Name a key of settings.DATABASES."))
    for key in ("LISTEN_DATABASE", "READ_DATABASE"):
        if values[key] is not None and not isinstance(values[key], str):
            found.append(Problem("kathikon.E008", f"KATHIKON[{key!r}] must be a database "
                                 "alias or None.", "Name a key of settings.DATABASES."))
    rescue, heartbeat = values["RESCUE_AFTER"], values["HEARTBEAT_INTERVAL"]
    if _duration(rescue) and _duration(heartbeat) and rescue <= heartbeat:
        found.append(Problem(
            "kathikon.E009", "KATHIKON['RESCUE_AFTER'] must be longer than "
            "HEARTBEAT_INTERVAL, or live nodes would be rescued.",
            "Use at least 3 heartbeats, e.g. RESCUE_AFTER = 60, HEARTBEAT_INTERVAL = 5."))
    if not isinstance(values["CRON"], (list, tuple)):
        found.append(Problem("kathikon.E010", "KATHIKON['CRON'] must be a list of dicts.",
                             "See docs/cron.md for static schedules."))
    if values["TESTING_MODE"] not in (None, "inline", "manual"):
        found.append(Problem("kathikon.E011", "KATHIKON['TESTING_MODE'] must be None, 'inline' "
                             f"or 'manual', not {shown(values['TESTING_MODE'])}.",
                             "See docs/testing.md."))
    if not isinstance(values["ALLOW_DESTRUCTIVE_ACTIONS"], bool):
        found.append(Problem("kathikon.E012", "KATHIKON['ALLOW_DESTRUCTIVE_ACTIONS'] must be "
                             "True or False.", "True lets the dashboard and CLI change jobs."))
    if not isinstance(values["PREPARED_STATEMENTS"], bool):
        found.append(Problem("kathikon.E014", "KATHIKON['PREPARED_STATEMENTS'] must be True or "
                             "False.", "False plans every statement anew (see docs/settings.md)."))
    if not isinstance(values["TRACING"], bool):
        found.append(Problem("kathikon.E015", "KATHIKON['TRACING'] must be True or False.",
                             "True traces every insert and perform (see docs/tracing.md)."))
    elif values["TRACING"] and not _importable("opentelemetry.trace"):
        found.append(Problem("kathikon.E016", "KATHIKON['TRACING'] is True but "
                             "opentelemetry-api is not installed.",
                             "pip install 'kathikon[otel]' (see docs/tracing.md)."))
    return found


def _importable(module: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except ImportError:
        return False


def _duration(value: Any) -> bool:
    """A number of seconds in ``0..MAX_SECONDS`` (not NaN, not infinite, not a bool)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and 0 <= value <= MAX_SECONDS)


def _queue_problems(queues: Any) -> list[Problem]:
    if not isinstance(queues, dict) or not queues:
        return [Problem("kathikon.E003", "KATHIKON['QUEUES'] must be a non-empty dict of "
                        "queue name → options.", 'Example: {"default": {"concurrency": 10}}.')]
    found = []
    for name, options in queues.items():
        if not isinstance(name, str) or not QUEUE_NAME.match(name):
            found.append(Problem("kathikon.E003", f"Bad queue name {shown(name)}.",
                                 "Use letters, digits, '_', '-' and '.', at most 63."))
            continue
        if not isinstance(options, dict) or set(options) - {"concurrency", "database",
                                                              *LIMIT_KEYS}:
            found.append(Problem("kathikon.E003", f"KATHIKON['QUEUES'][{name!r}] must be a dict "
                                 "with the keys 'concurrency', 'database', 'global_limit', "
                                 "'partition' and 'rate_limit' only.",
                                 'Example: {"concurrency": 5}. See docs/flow-control.md.'))
            continue
        if not isinstance(options.get("database", ""), str):
            found.append(Problem("kathikon.E003", f"Queue {name!r}: database must be an alias "
                                 f"of settings.DATABASES, not {shown(options['database'])}.",
                                 "Leave it out for KATHIKON['DATABASE']. See docs/scaling.md."))
        try:
            parse_limits(options)
        except InvalidQueue as exc:
            found.append(Problem("kathikon.E003", f"Queue {name!r}: {exc}",
                                 "See docs/flow-control.md."))
        concurrency = options.get("concurrency", 10)
        if (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                or not 1 <= concurrency <= MAX_CONCURRENCY):
            found.append(Problem("kathikon.E003", f"Queue {name!r}: concurrency must be an int "
                                 f"from 1 to {MAX_CONCURRENCY}, not {shown(concurrency)}.",
                                 "Pause a queue instead of 0; run more worker processes "
                                 "instead of a larger number."))
    return found


def _timezone_problems(tz: Any) -> list[Problem]:
    if tz is None:
        return []
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        # OSError: a name too long for a file name, or a directory ("Europe").
        return [Problem("kathikon.E007", f"KATHIKON['TIMEZONE'] {shown(tz)} is not an IANA "
                        "timezone.", "Example: 'Europe/Berlin'; None uses settings.TIME_ZONE.")]
    return []


def load() -> Settings:
    """Build the settings object from ``django.conf.settings`` (not cached)."""
    from django.conf import settings as django_settings

    raw = getattr(django_settings, "KATHIKON", {})
    problems = tuple(_problems(raw))
    values = {**DEFAULTS, **raw} if isinstance(raw, dict) else dict(DEFAULTS)
    return Settings(values=values, problems=problems)


_cached: Settings | None = None


def get() -> Settings:
    """The current settings; raises ``ImproperlyConfigured`` when they have problems."""
    global _cached
    if _cached is None:
        _cached = load()
    if _cached.problems:
        first = _cached.problems[0]
        raise ImproperlyConfigured(f"{first.id}: {first.message} {first.hint}")
    return _cached


def _reset(*, setting: str, **kwargs: Any) -> None:
    global _cached
    if setting in ("KATHIKON", "TIME_ZONE"):
        _cached = None


setting_changed.connect(_reset, dispatch_uid="kathikon.conf.reset")


def queues() -> dict[str, dict[str, Any]]:
    return {name: {"concurrency": 10, **opts} for name, opts in get()["QUEUES"].items()}


def queue_names() -> list[str]:
    return list(get()["QUEUES"])


def tasks_queue_names() -> list[str]:
    """Queues that ``TASKS`` declares for Kathikon's backend (Django's default: "default")."""
    from django.conf import settings as django_settings

    tasks = getattr(django_settings, "TASKS", None)
    names: list[str] = []
    for params in (tasks.values() if isinstance(tasks, dict) else ()):
        if not isinstance(params, dict) or params.get("BACKEND") != TASKS_BACKEND:
            continue
        declared = params.get("QUEUES", ["default"])
        for name in declared if isinstance(declared, (list, tuple, set, frozenset)) else ():
            if isinstance(name, str) and QUEUE_NAME.match(name) and name not in names:
                names.append(name)
    return names


def served_queue_names() -> list[str]:
    """What ``kathikon_worker`` runs without ``--queues`` (besides queue rows):
    ``KATHIKON["QUEUES"]``, then the queues ``TASKS`` declares for Kathikon's backend."""
    names = queue_names()
    return [*names, *(name for name in tasks_queue_names() if name not in names)]


def queue_database(name: str) -> str:
    """The alias that holds ``name``'s jobs: its ``database`` option, else ``DATABASE``."""
    options = get()["QUEUES"].get(name)
    chosen = options.get("database") if isinstance(options, dict) else None
    return str(chosen or get()["DATABASE"])


def databases() -> list[str]:
    """Every alias that holds jobs: ``DATABASE`` first, then the queues' own, in order."""
    found = [str(get()["DATABASE"])]
    for name in get()["QUEUES"]:
        alias = queue_database(name)
        if alias not in found:
            found.append(alias)
    return found


def queue_config(name: str) -> dict[str, Any]:
    return queues().get(name, {"concurrency": 10})


def concurrency(name: str) -> int:
    return int(queue_config(name)["concurrency"])


def poll_interval() -> float:
    return float(get()["POLL_INTERVAL"])


def scheduler_interval() -> float:
    return float(get()["SCHEDULER_INTERVAL"])


def prune_interval() -> float:
    return float(get()["PRUNE_INTERVAL"])


def retention_period() -> float:
    return float(get()["RETENTION_PERIOD"])


def max_attempts() -> int:
    return int(get()["MAX_ATTEMPTS"])


def timezone() -> str:
    from django.conf import settings as django_settings

    return get()["TIMEZONE"] or django_settings.TIME_ZONE or "UTC"


def result_storage() -> str:
    return str(get()["RESULT_STORAGE"])


def database() -> str:
    return str(get()["DATABASE"])


def listen_database() -> str:
    return str(get()["LISTEN_DATABASE"] or get()["DATABASE"])


def read_database() -> str:
    """Where the admin's pages and the reports read (a replica); writes never go there."""
    return str(get()["READ_DATABASE"] or get()["DATABASE"])


def heartbeat_interval() -> float:
    return float(get()["HEARTBEAT_INTERVAL"])


def rescue_after() -> float:
    return float(get()["RESCUE_AFTER"])


def shutdown_grace_period() -> float:
    return float(get()["SHUTDOWN_GRACE_PERIOD"])


def unknown_worker_grace() -> float:
    return float(get()["UNKNOWN_WORKER_GRACE"])


def cron() -> list[dict[str, Any]]:
    return list(get()["CRON"])


def allow_destructive_actions() -> bool:
    return bool(get()["ALLOW_DESTRUCTIVE_ACTIONS"])


def prepared_statements() -> bool:
    return bool(get()["PREPARED_STATEMENTS"])


def testing_mode() -> str | None:
    return get()["TESTING_MODE"]


def tracing() -> bool:
    return bool(get()["TRACING"])
