"""Internal: validate a worker, args and options and turn them into an unsaved job row.

Shared by ``insert``, ``insert_many``, batches, cron and the testing helpers so every
path validates the same way and names the offending key.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from kathikon import conf
from kathikon.conf import QUEUE_NAME
from kathikon.exceptions import InvalidJob
from kathikon.ids import new_id, parse_id
from kathikon.states import JobState
from kathikon.workers import Worker, resolve_worker

if TYPE_CHECKING:
    import uuid

    from kathikon.models import Job

OPTION_KEYS = frozenset({
    "queue", "priority", "max_attempts", "schedule_in", "schedule_at", "meta",
    "batch_id", "parent_job_id", "cron_id", "scheduled_at",
})

_worker_cache: dict[str, type[Worker]] = {}
_valid_queues: set[str] = set()  # names that passed QUEUE_NAME (insert_many checks each spec)
# One encoder for every job: ``json.dumps(obj, **options)`` builds a new one per call.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
# A flat dict of these (str keys) always survives the JSON round trip: no need to check.
_PLAIN_TYPES = frozenset({str, int, bool, float, type(None)})


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
                 "cron_id": self.cron_id}
        if pre_init.has_listeners(Job) or post_init.has_listeners(Job):
            return Job(**given)
        job = Job.__new__(Job)
        values = job.__dict__
        values["_state"] = ModelState()
        for column in Job._meta.concrete_fields:  # field order, defaults as __init__ applies
            name = column.attname
            values[name] = given[name] if name in given else column.get_default()
        return job


@dataclass(frozen=True)
class InsertResult:
    """What ``insert_many`` did: how many jobs, their ids (hex), and the specs it refused."""

    inserted: int
    ids: list[str] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)


def unpack_spec(spec: Any) -> tuple[Any, Any, dict[str, Any]]:
    """``(worker, args, options)`` of an ``insert_many`` or batch spec; ``InvalidJob`` if not."""
    if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
        raise InvalidJob("a spec is (worker, args) or (worker, args, options)", key="spec")
    options = spec[2] if len(spec) == 3 else {}
    if not isinstance(options, dict):
        raise InvalidJob("a spec's options must be a dict", key="options")
    return spec[0], spec[1], options


def worker_class(worker: Any) -> tuple[str, type[Worker]]:
    """The dotted path and class of ``worker`` (a Worker subclass or a dotted path)."""
    if isinstance(worker, type) and issubclass(worker, Worker):
        path = worker.path()
        if "<locals>" in path:
            raise InvalidJob(f"worker {path} is defined inside a function; workers must be "
                             "importable by their dotted path", key="worker")
        return path, worker
    if isinstance(worker, str):
        cls = _worker_cache.get(worker)
        if cls is None:
            cls = resolve_worker(worker)
            _worker_cache[worker] = cls
        return worker, cls
    raise InvalidJob("worker must be a kathikon.Worker subclass or its dotted path, "
                     f"not {worker!r}", key="worker")


def dump_args(args: Any) -> tuple[dict[str, Any], str]:
    """``args`` and its JSON text; ``InvalidJob`` naming the key that does not round-trip."""
    if args is None:
        return {}, "{}"
    if not isinstance(args, dict):
        raise InvalidJob(f"args must be a dict (a JSON object), not {type(args).__name__}",
                         key="args")
    if not args:
        return args, "{}"
    try:
        text = _ENCODER.encode(args)
    except (TypeError, ValueError):
        raise InvalidJob(_bad_arg_message(args), key=_bad_arg_key(args)) from None
    if not _plain(args) and json.loads(text) != args:
        raise InvalidJob(_bad_arg_message(args), key=_bad_arg_key(args))
    return args, text


def _plain(args: dict[str, Any]) -> bool:
    """True for a flat dict of str keys and str/int/bool/None/float values (exact types).

    Those survive ``dumps`` then ``loads`` unchanged (NaN and infinity were refused
    by the encoder; float repr round-trips), so the check can be skipped.
    """
    plain = _PLAIN_TYPES
    return all(type(key) is str and type(value) in plain for key, value in args.items())


def _bad_arg_key(args: dict[str, Any]) -> str:
    for key, value in args.items():
        if not isinstance(key, str):
            return f"args[{key!r}]"
        try:
            if json.loads(json.dumps({key: value}, allow_nan=False)) != {key: value}:
                return f"args[{key!r}]"
        except (TypeError, ValueError):
            return f"args[{key!r}]"
    return "args"


def _bad_arg_message(args: dict[str, Any]) -> str:
    key = _bad_arg_key(args)
    if key == "args":
        return "args must survive a JSON round trip"
    return (f"{key} does not survive a JSON round trip (use str, int, float, bool, None, "
            "and lists or dicts of them with string keys)")


def build_row(worker: Any, args: Any, options: dict[str, Any],
              now: dt.datetime | None = None) -> JobRow:
    """Validate everything and return the row to insert; ``InvalidJob`` names the bad key."""
    unknown = set(options) - OPTION_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise InvalidJob(f"unknown option {key!r}", key=key)
    path, cls = worker_class(worker)
    args, args_json = dump_args(args)
    now = now or timezone.now()

    queue = _option(options, "queue", cls.queue)
    if not isinstance(queue, str) or queue not in _valid_queues:
        if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
            raise InvalidJob(f"queue must be 1-63 letters, digits, '_', '-' or '.', "
                             f"not {queue!r}", key="queue")
        if len(_valid_queues) < 10_000:
            _valid_queues.add(queue)
    priority = _option(options, "priority", cls.priority)
    if isinstance(priority, bool) or not isinstance(priority, int) or not -100 <= priority <= 100:
        raise InvalidJob(f"priority must be an int in -100..100, not {priority!r}",
                         key="priority")
    max_attempts = _option(options, "max_attempts", cls.max_attempts)
    if max_attempts is None:
        max_attempts = conf.max_attempts()
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise InvalidJob(f"max_attempts must be an int >= 1, not {max_attempts!r}",
                         key="max_attempts")
    available_at, scheduled_at = _when(options, now)
    meta = options.get("meta") or {}
    if not isinstance(meta, dict):
        raise InvalidJob("meta must be a dict", key="meta")
    dump_args(meta)
    return JobRow(
        id=new_id(), queue=queue, worker=path, args=args, args_json=args_json,
        state=JobState.SCHEDULED if available_at > now else JobState.AVAILABLE,
        priority=priority, max_attempts=max_attempts, scheduled_at=scheduled_at,
        available_at=available_at, inserted_at=now, meta=meta,
        batch_id=_ref(options, "batch_id"), parent_job_id=_ref(options, "parent_job_id"),
        cron_id=_ref(options, "cron_id"),
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
        if isinstance(schedule_in, dt.timedelta):
            schedule_in = schedule_in.total_seconds()
        if (isinstance(schedule_in, bool) or not isinstance(schedule_in, (int, float))
                or not math.isfinite(schedule_in) or schedule_in < 0):
            raise InvalidJob(f"schedule_in must be a number of seconds >= 0, not {schedule_in!r}",
                             key="schedule_in")
        at = now + dt.timedelta(seconds=schedule_in)
        return at, (at if schedule_in > 0 else options.get("scheduled_at"))
    if schedule_at is not None:
        if not isinstance(schedule_at, dt.datetime) or timezone.is_naive(schedule_at):
            raise InvalidJob(f"schedule_at must be an aware datetime, not {schedule_at!r}",
                             key="schedule_at")
        return max(schedule_at, now), schedule_at
    scheduled_at = options.get("scheduled_at")
    if scheduled_at is not None and (not isinstance(scheduled_at, dt.datetime)
                                     or timezone.is_naive(scheduled_at)):
        raise InvalidJob("scheduled_at must be an aware datetime", key="scheduled_at")
    return now, scheduled_at


def _ref(options: dict[str, Any], key: str) -> uuid.UUID | None:
    value = options.get(key)
    if value is None:
        return None
    parsed = parse_id(getattr(value, "pk", value))
    if parsed is None:
        raise InvalidJob(f"{key} must be an id (hex string or UUID), not {value!r}", key=key)
    return parsed
