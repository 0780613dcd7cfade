"""Internal: validate a worker, args and options and turn them into an unsaved job row.

Shared by ``insert``, ``insert_many``, batches, cron and the testing helpers so every
path validates the same way and names the offending key.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from kathikon import conf
from kathikon.conf import QUEUE_NAME
from kathikon.exceptions import InvalidJob, shown
from kathikon.ids import new_id, parse_id
from kathikon.states import JobState
from kathikon.storable import MAX_INT, MAX_JSON_DEPTH, nests_too_deep
from kathikon.tracing.hooks import inject
from kathikon.unique import Unique, as_unique
from kathikon.workers import Worker, is_task, resolve_worker

if TYPE_CHECKING:
    import uuid

    from kathikon.models import Job

OPTION_KEYS = frozenset({
    "queue", "priority", "max_attempts", "schedule_in", "schedule_at", "meta",
    "batch_id", "parent_job_id", "cron_id", "scheduled_at", "unique",
})

_worker_cache: dict[str, type[Worker]] = {}
# Where a class typed into a script or a shell lives: ``python script.py`` and IPython
# (__main__), ``manage.py shell`` (builtins) and its ``-c`` / piped stdin (the command module).
_SHELL_MODULES = frozenset({"__main__", "__mp_main__", "builtins",
                            "django.core.management.commands.shell"})
_valid_queues: set[str] = set()  # names that passed QUEUE_NAME (insert_many checks each spec)
# One encoder for every job: ``json.dumps(obj, **options)`` builds a new one per call.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
# A flat dict of these (str keys) always survives the JSON round trip: no need to check.
_PLAIN_TYPES = frozenset({str, int, bool, float, type(None)})
#: The longest worker path: the ``max_length`` of ``Job.worker`` and ``CronSchedule.worker``.
MAX_WORKER_PATH = 255
# In the encoder's ASCII output, NUL and surrogates appear only as these escapes (or after a
# literal backslash, which the exact check then clears).
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|d[89a-f])")
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")


@dataclass(slots=True)
class JobRow:
    """The column values of one job about to be inserted."""

    id: uuid.UUID
    queue: str
    worker: str
    args: dict[str, Any]
    args_json: str
    state: str
    priority: int
    max_attempts: int
    scheduled_at: dt.datetime | None
    available_at: dt.datetime
    inserted_at: dt.datetime
    meta: dict[str, Any]
    batch_id: uuid.UUID | None = None
    parent_job_id: uuid.UUID | None = None
    cron_id: uuid.UUID | None = None
    unique_key: str | None = None
    unique_states: int | None = None
    replace: tuple[str, ...] = ()  # fields a clash overwrites on the job holding the key
    # workflow steps only (kathikon.workflows)
    workflow_id: uuid.UUID | None = None
    step: str | None = None
    deps_waiting: int | None = None
    deps_failed: int | None = None
    on_dep_failure: str | None = None

    def to_job(self) -> Job:
        """The unsaved Job; built without ``Model.__init__``'s per-field work when nothing
        listens to ``pre_init``/``post_init`` (``insert`` returns one per call)."""
        from django.db.models.base import ModelState
        from django.db.models.signals import post_init, pre_init

        from kathikon.models import Job

        given = {"id": self.id, "queue": self.queue, "worker": self.worker, "args": self.args,
                 "state": self.state, "priority": self.priority,
                 "max_attempts": self.max_attempts, "attempts": 0,
                 "scheduled_at": self.scheduled_at, "available_at": self.available_at,
                 "inserted_at": self.inserted_at, "errors": [], "meta": self.meta,
                 "batch_id": self.batch_id, "parent_job_id": self.parent_job_id,
                 "cron_id": self.cron_id, "unique_key": self.unique_key,
                 "unique_states": self.unique_states}
        if self.workflow_id is not None:
            given.update(workflow_id=self.workflow_id, step=self.step,
                         deps_waiting=self.deps_waiting, deps_failed=self.deps_failed,
                         on_dep_failure=self.on_dep_failure)
        if pre_init.has_listeners(Job) or post_init.has_listeners(Job):
            return Job(**given)
        job = Job.__new__(Job)
        values = job.__dict__
        values["_state"] = ModelState()
        for name, default in _column_defaults(Job):  # field order, as __init__ fills them
            if name in given:
                values[name] = given[name]
            else:
                values[name] = default() if callable(default) else default
        return job


@functools.cache
def _column_defaults(model: type[Job]) -> tuple[tuple[str, Any], ...]:
    """``(attname, default)`` of every column in field order: a callable default (a factory,
    called per job) or the value ``get_default()`` returns, which is the same every time."""
    return tuple(
        (column.attname,
         column.default if column.has_default() and callable(column.default)
         else column.get_default())
        for column in model._meta.concrete_fields)


@dataclass(frozen=True)
class InsertResult:
    """What ``insert_many`` did.

    ``inserted``: how many new jobs; ``ids``: one hex id per accepted spec, in
    order (a unique spec whose key was held gets the holder's id);
    ``conflicts``: the indexes of those unique specs; ``errors``: ``(index,
    message)`` of the specs refused.
    """

    inserted: int
    ids: list[str] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    conflicts: list[int] = field(default_factory=list)


def unpack_spec(spec: Any) -> tuple[Any, Any, dict[str, Any]]:
    """``(worker, args, options)`` of an ``insert_many`` or batch spec; ``InvalidJob`` if not."""
    if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
        raise InvalidJob("a spec is (worker, args) or (worker, args, options)", key="spec")
    options = spec[2] if len(spec) == 3 else {}
    if not isinstance(options, dict):
        raise InvalidJob("a spec's options must be a dict", key="options")
    return spec[0], spec[1], options


def worker_class(worker: Any) -> tuple[str, type[Worker]]:
    """The dotted path and class of ``worker`` (a Worker subclass, a Django Task or a
    dotted path; a Task's path resolves to the Tasks backend's worker).

    A class is accepted only if its dotted path imports back to that very class:
    the worker process knows nothing else, so a class defined in ``__main__``,
    ``manage.py shell`` or a function, or one that was redefined, is refused here,
    before anything is written.
    """
    if isinstance(worker, type) and issubclass(worker, Worker):
        path = worker.path()
        if _worker_cache.get(path) is not worker:
            _check_length(path)
            _check_importable(path, worker)
            _worker_cache[path] = worker
        return path, worker
    if is_task(worker):  # a Django Task: its job runs it by its import path
        return worker_class(worker.module_path)
    if isinstance(worker, str):
        cls = _worker_cache.get(worker)
        if cls is None:
            _check_length(worker)
            cls = resolve_worker(worker)
            _worker_cache[worker] = cls
        return worker, cls
    raise InvalidJob("worker must be a kathikon.Worker subclass or its dotted path, "
                     f"not {shown(worker)}", key="worker")


def _check_length(path: str) -> None:
    if len(path) > MAX_WORKER_PATH:
        raise InvalidJob(f"worker path {path[:60]!r}… is {len(path)} characters long; the "
                         f"database stores at most {MAX_WORKER_PATH}", key="worker")


def _check_importable(path: str, cls: type[Worker]) -> None:
    """``InvalidJob`` saying why a worker process could not import ``cls`` by ``path``."""
    if "<locals>" in cls.__qualname__:
        raise InvalidJob(f"worker {path} is defined inside a function; workers must be "
                         "importable by their dotted path", key="worker")
    if cls.__module__ in _SHELL_MODULES:
        raise InvalidJob(
            f"worker {cls.__qualname__} is defined in {cls.__module__} (a script run directly "
            "or an interactive shell such as manage.py shell), so a worker process cannot "
            f"import it as {path!r}; define it in a module of your project and import it "
            "from there", key="worker")
    try:
        found = resolve_worker(path)
    except InvalidJob as exc:
        raise InvalidJob(f"worker {cls.__qualname__} cannot be imported by its dotted path: "
                         f"{exc}", key="worker") from None
    if found is not cls:
        raise InvalidJob(
            f"worker {path!r} imports as a different class than the one given (the class was "
            "redefined or its module reloaded); a worker process would run the imported one",
            key="worker")


def dump_args(args: Any, key: str = "args") -> tuple[dict[str, Any], str]:
    """``args`` and its JSON text; ``InvalidJob`` naming the key that does not round-trip
    or that a database would refuse (NUL, a lone surrogate, too deep a nesting)."""
    if args is None:
        return {}, "{}"
    if not isinstance(args, dict):
        raise InvalidJob(f"{key} must be a dict (a JSON object), not {type(args).__name__}",
                         key=key)
    if not args:
        return args, "{}"
    try:
        text = _ENCODER.encode(args)
    except RecursionError:
        raise _too_deep(key) from None
    except (TypeError, ValueError):
        raise InvalidJob(_bad_arg_message(args, key), key=_bad_arg_key(args, key)) from None
    if _SUSPECT_ESCAPE.search(text):
        _check_text(args, key)
    if not _plain(args):
        if nests_too_deep(args, text):
            raise _too_deep(key)
        if json.loads(text) != args:
            raise InvalidJob(_bad_arg_message(args, key), key=_bad_arg_key(args, key))
    return args, text


def dump_value(value: Any, key: str) -> str:
    """The JSON text of any JSON value (a result, say), checked as ``dump_args`` checks args."""
    try:
        text = _ENCODER.encode(value)
    except RecursionError:
        raise _too_deep(key) from None
    except (TypeError, ValueError):
        raise InvalidJob(f"{key} must be JSON: str, int, float, bool, None, and lists or "
                         "dicts of them with string keys", key=key) from None
    if _SUSPECT_ESCAPE.search(text):
        _check_text(value, key)
    if nests_too_deep(value, text):
        raise _too_deep(key)
    if json.loads(text) != value:
        raise InvalidJob(f"{key} does not survive a JSON round trip (tuples, for one, come "
                         "back as lists)", key=key)
    return text


def _too_deep(key: str) -> InvalidJob:
    return InvalidJob(f"{key} is nested more than {MAX_JSON_DEPTH} levels deep (dicts and "
                      "lists; MariaDB refuses deeper JSON, so every database does)", key=key)


def _check_text(value: Any, key: str) -> None:
    """``InvalidJob`` for the first string (key or value) holding NUL or a surrogate.

    PostgreSQL refuses both in ``jsonb`` and MariaDB refuses a lone surrogate; a
    valid pair of surrogate code points would come back as one character.
    """
    stack = [(value, key)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            found = _BAD_CHAR.search(item)
            if found:
                what = "a NUL character" if found.group() == "\x00" else "a lone surrogate"
                raise InvalidJob(f"{where} contains {what} ({found.group()!a}), which the "
                                 "database cannot store", key=where)
        elif isinstance(item, dict):
            for name, child in item.items():
                stack.append((name, f"{where} key {name!a}"))
                stack.append((child, f"{where}[{name!a}]"))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))


def _plain(args: dict[str, Any]) -> bool:
    """True for a flat dict of str keys and str/int/bool/None/float values (exact types).

    Those survive ``dumps`` then ``loads`` unchanged (NaN and infinity were refused
    by the encoder; float repr round-trips; NUL and surrogates were checked), so the
    check can be skipped.
    """
    plain = _PLAIN_TYPES
    return all(type(key) is str and type(value) in plain for key, value in args.items())


def _bad_arg_key(args: dict[str, Any], key: str = "args") -> str:
    for name, value in args.items():
        if not isinstance(name, str):
            return f"{key}[{shown(name)}]"
        try:
            if json.loads(json.dumps({name: value}, allow_nan=False)) != {name: value}:
                return f"{key}[{shown(name)}]"
        except (TypeError, ValueError, RecursionError):
            return f"{key}[{shown(name)}]"
    return key


def _bad_arg_message(args: dict[str, Any], key: str = "args") -> str:
    bad = _bad_arg_key(args, key)
    if bad == key:
        return f"{key} must survive a JSON round trip"
    return (f"{bad} does not survive a JSON round trip (use str, int, float, bool, None, "
            "and lists or dicts of them with string keys)")


@dataclass(slots=True)
class RowPlan:
    """Everything ``build_row`` decides before it looks at the args: one plan serves every
    option-less spec of a worker in an ``insert_many`` call."""

    path: str
    queue: str
    priority: int
    max_attempts: int
    state: str
    available_at: dt.datetime
    scheduled_at: dt.datetime | None
    inserted_at: dt.datetime
    meta: dict[str, Any]
    batch_id: uuid.UUID | None
    parent_job_id: uuid.UUID | None
    cron_id: uuid.UUID | None
    unique: Unique | None

    def row(self, args: Any, job_id: uuid.UUID | None = None) -> JobRow:
        """The row for ``args`` (checked here); ``InvalidJob`` names the bad key."""
        args, args_json = dump_args(args)
        row = JobRow(
            id=job_id or new_id(), queue=self.queue, worker=self.path, args=args,
            args_json=args_json, state=self.state, priority=self.priority,
            max_attempts=self.max_attempts, scheduled_at=self.scheduled_at,
            available_at=self.available_at, inserted_at=self.inserted_at,
            meta=dict(self.meta),  # each job its own: a plan serves many
            batch_id=self.batch_id, parent_job_id=self.parent_job_id, cron_id=self.cron_id,
        )
        unique = self.unique
        if unique is not None and self.state in unique.states:  # else: nothing to hold
            row.unique_key = unique.key(self.path, self.queue, args, self.meta,
                                        self.inserted_at)
            row.unique_states = unique.state_bits
            row.replace = unique.replace
        return row


def build_row(worker: Any, args: Any, options: dict[str, Any],
              now: dt.datetime | None = None) -> JobRow:
    """Validate everything and return the row to insert; ``InvalidJob`` names the bad key."""
    return plan_row(worker, options, now).row(args)


def plan_row(worker: Any, options: dict[str, Any], now: dt.datetime | None = None) -> RowPlan:
    """Validate the worker and the options; ``InvalidJob`` names the bad key."""
    unknown = set(options) - OPTION_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise InvalidJob(f"unknown option {key!r}", key=key)
    path, cls = worker_class(worker)
    now = now or timezone.now()

    queue = _option(options, "queue", cls.queue)
    if not isinstance(queue, str) or queue not in _valid_queues:
        if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
            raise InvalidJob(f"queue must be 1-63 letters, digits, '_', '-' or '.', "
                             f"not {shown(queue)}", key="queue")
        if len(_valid_queues) < 10_000:
            _valid_queues.add(queue)
    priority = _option(options, "priority", cls.priority)
    if isinstance(priority, bool) or not isinstance(priority, int) or not -100 <= priority <= 100:
        raise InvalidJob(f"priority must be an int in -100..100, not {shown(priority)}",
                         key="priority")
    max_attempts = _option(options, "max_attempts", cls.max_attempts)
    if max_attempts is None:
        max_attempts = conf.max_attempts()
    if (isinstance(max_attempts, bool) or not isinstance(max_attempts, int)
            or not 1 <= max_attempts <= MAX_INT):
        raise InvalidJob(f"max_attempts must be an int in 1..{MAX_INT}, not {shown(max_attempts)}",
                         key="max_attempts")
    available_at, scheduled_at = _when(options, now)
    meta = options.get("meta") or {}
    if not isinstance(meta, dict):
        raise InvalidJob("meta must be a dict", key="meta")
    if meta:
        dump_args(meta, "meta")
    meta = inject(meta, queue=queue, worker=path)  # tracing on: the insert's span context
    return RowPlan(
        path=path, queue=queue, priority=priority, max_attempts=max_attempts,
        state=JobState.SCHEDULED if available_at > now else JobState.AVAILABLE,
        available_at=available_at, scheduled_at=scheduled_at, inserted_at=now, meta=meta,
        batch_id=_ref(options, "batch_id"), parent_job_id=_ref(options, "parent_job_id"),
        cron_id=_ref(options, "cron_id"),
        unique=as_unique(cls.unique if options.get("unique") is None else options["unique"]),
    )


def _option(options: dict[str, Any], key: str, default: Any) -> Any:
    value = options.get(key)
    return default if value is None else value


def _when(options: dict[str, Any], now: dt.datetime) -> tuple[dt.datetime, dt.datetime | None]:
    schedule_in = options.get("schedule_in")
    schedule_at = options.get("schedule_at")
    if schedule_in is not None and schedule_at is not None:
        raise InvalidJob("give schedule_in or schedule_at, not both", key="schedule_in")
    if schedule_in is not None:
        at = now + checked_delay(schedule_in, now, "schedule_in")
        return at, (at if at > now else _aware(options.get("scheduled_at"), "scheduled_at"))
    wanted = _aware(schedule_at, "schedule_at")
    if wanted is not None:
        return max(wanted, now), wanted
    return now, _aware(options.get("scheduled_at"), "scheduled_at")


def checked_delay(seconds: Any, now: dt.datetime, key: str) -> dt.timedelta:
    """``seconds`` (a number or a timedelta) as a timedelta that ``now`` plus it can store;
    ``InvalidJob`` for negatives, NaN, infinity, and moments past the year 9999."""
    if isinstance(seconds, dt.timedelta):
        seconds = seconds.total_seconds()
    if (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
            or (isinstance(seconds, float) and not math.isfinite(seconds)) or seconds < 0):
        raise InvalidJob(f"{key} must be a number of seconds >= 0, not {shown(seconds)}", key=key)
    try:  # an int past a float's range (10**400) overflows here too
        step = dt.timedelta(seconds=seconds)
        (now + step).astimezone(dt.timezone.utc)
    except OverflowError:
        raise InvalidJob(f"{key}={shown(seconds)} seconds from now is past the year 9999, the last "
                         "moment a database stores", key=key) from None
    return step


def _aware(value: Any, key: str) -> dt.datetime | None:
    """An aware datetime that stays within years 1..9999 in UTC (or None)."""
    if value is None:
        return None
    if not isinstance(value, dt.datetime) or timezone.is_naive(value):
        raise InvalidJob(f"{key} must be an aware datetime, not {value!r}", key=key)
    try:
        value.astimezone(dt.timezone.utc)
    except OverflowError:
        message = f"{key}={value!r} is outside the years 1..9999 in UTC"
        raise InvalidJob(message, key=key) from None
    return value


def _ref(options: dict[str, Any], key: str) -> uuid.UUID | None:
    value = options.get(key)
    if value is None:
        return None
    parsed = parse_id(getattr(value, "pk", value))
    if parsed is None:
        raise InvalidJob(f"{key} must be an id (hex string or UUID), not {shown(value)}", key=key)
    return parsed
