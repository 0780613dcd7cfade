"""Unique jobs: at most one job per uniqueness key while it is in the chosen states.

    class Sync(kathikon.Worker):
        unique = kathikon.Unique(keys=["account_id"], period=60)

    job = kathikon.insert(Sync, {"account_id": 7})
    job.conflict   # True when an equal job already held the key: that job is returned

The key is a hash of the worker, the queue and the chosen args and meta keys
(plus the period bucket). The database enforces it with a unique index on the
job's ``unique_key`` column, which is NULL once the job leaves ``states``.
This module is pure: it computes keys and state bits, and imports no ORM.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kathikon.exceptions import InvalidJob, shown
from kathikon.states import JobState

#: One bit per state: a job's ``unique_states`` column is the OR of its unique states.
STATE_BITS: dict[str, int] = {state: 1 << i for i, state in enumerate(JobState.values)}

#: Until the job finishes (completed, dead or cancelled): the default.
INCOMPLETE = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.CLAIMED, JobState.RUNNING,
              JobState.RETRYABLE, JobState.WAITING, JobState.HELD)
#: Until the job starts: a second copy may be inserted while the first one runs.
UNSTARTED = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.WAITING, JobState.HELD)
#: In any state but dead or cancelled: a completed job keeps blocking copies (Oban's default).
ALL_BUT_FAILED = (*INCOMPLETE, JobState.COMPLETED)
#: Every state: the key is taken until the job row is pruned.
ALL = tuple(JobState.values)

BY_FIELDS = frozenset({"worker", "queue", "args", "meta"})
#: The shortest ``period``: the finest time the databases store (a shorter one would only
#: give every job a bucket of its own, and 1e-320 overflows the bucket number).
MIN_PERIOD = 1e-6
#: Fields of the existing job a conflicting insert may overwrite (while it is pending).
REPLACEABLE = frozenset({"args", "meta", "priority", "max_attempts", "scheduled_at"})


@dataclass(frozen=True, slots=True)
class Unique:
    """How a job is unique.

    ``by``: which of worker, queue, args and meta make up the key (default:
    worker, queue and args). ``keys``: only these args keys (default: all).
    ``meta_keys``: these meta keys, when ``"meta"`` is in ``by``
    (default: all). ``period``: seconds; jobs inserted in the same period
    bucket (``floor(epoch / period)``) clash, ``None`` means for ever.
    ``states``: while the job is in one of these, it holds its key (default
    ``INCOMPLETE``); the first move to another state frees it for good.
    ``replace``: fields of the existing job to overwrite with the new
    insert's values on conflict (any of args, meta, priority, max_attempts,
    scheduled_at), applied only while that job is scheduled, available or
    retryable.
    """

    by: tuple[str, ...] = ("worker", "queue", "args")
    keys: tuple[str, ...] | None = None
    meta_keys: tuple[str, ...] | None = None
    period: float | None = None
    states: tuple[str, ...] = INCOMPLETE
    replace: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("by", "keys", "meta_keys", "states", "replace"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, _names(value, name))
        bad = set(self.by) - BY_FIELDS
        if bad or not self.by:
            raise InvalidJob(f"unique by must be some of {sorted(BY_FIELDS)}, not "
                             f"{sorted(bad) or list(self.by)}", key="unique")
        period = self.period
        # Comparisons, not math.isfinite (which overflows on an int like 10**400): the bucket
        # ``epoch / period`` must stay a finite float, so no tiny, huge, NaN or infinite period.
        if period is not None and (isinstance(period, bool)
                                   or not isinstance(period, (int, float))
                                   or not MIN_PERIOD <= period <= sys.float_info.max):
            raise InvalidJob(f"unique period must be a finite number of seconds >= {MIN_PERIOD} "
                             f"(a microsecond) or None, not {shown(period)}", key="unique")
        bad = set(self.states) - set(JobState.values)
        if bad or not self.states:
            raise InvalidJob(f"unique states must be some of {list(JobState.values)}, not "
                             f"{sorted(bad) or list(self.states)}", key="unique")
        bad = set(self.replace) - REPLACEABLE
        if bad:
            raise InvalidJob(f"unique replace takes {sorted(REPLACEABLE)}, not {sorted(bad)}",
                             key="unique")

    @property
    def state_bits(self) -> int:
        bits = 0
        for state in self.states:
            bits |= STATE_BITS[state]
        return bits

    def key(self, worker: str, queue: str, args: dict[str, Any], meta: dict[str, Any],
            now: dt.datetime) -> str:
        """The uniqueness key (64 hex digits) of a job inserted at ``now``."""
        parts: dict[str, Any] = {}
        if "worker" in self.by:
            parts["worker"] = worker
        if "queue" in self.by:
            parts["queue"] = queue
        if "args" in self.by:
            parts["args"] = _pick(args, self.keys)
        if "meta" in self.by:
            parts["meta"] = _pick(meta, self.meta_keys)
        if self.period is not None:
            parts["bucket"] = int(now.timestamp() // self.period)
        text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()


def as_unique(value: Any) -> Unique | None:
    """``Unique`` from an option: a Unique, True (the defaults), a dict of its fields, or None."""
    if value is None or value is False:
        return None
    if value is True:
        return _DEFAULT
    if isinstance(value, Unique):
        return value
    if isinstance(value, dict):
        try:
            return Unique(**value)
        except TypeError as exc:
            raise InvalidJob(f"unique: {exc}", key="unique") from None
    raise InvalidJob(f"unique must be a kathikon.Unique, a dict or True, not {shown(value)}",
                     key="unique")


_DEFAULT = Unique()


def holds(state_bits: int | None, state: str) -> bool:
    """Whether a job with these unique bits keeps its key in ``state``."""
    return bool(state_bits and state_bits & STATE_BITS[state])


def _names(value: Iterable[Any] | str, name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidJob(f"unique {name} must be a list of names, not {shown(value)}", key="unique")
    names = tuple(value)
    if not all(isinstance(item, str) for item in names):
        raise InvalidJob(f"unique {name} must be a list of names, not {shown(value)}", key="unique")
    return names


def _pick(values: dict[str, Any], keys: tuple[str, ...] | None) -> dict[str, Any]:
    if keys is None:
        return values
    return {key: values.get(key) for key in keys}
