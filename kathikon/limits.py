"""Queue limits: global concurrency, partitioned concurrency and rate limits.

    KATHIKON = {"QUEUES": {
        "exports": {"concurrency": 10, "global_limit": 3},
        "sync": {"concurrency": 20, "partition": {"by": "args.account_id", "limit": 1}},
        "api": {"concurrency": 5, "rate_limit": {"allowed": 60, "period": 60}},
    }}

``concurrency`` is per node; these hold across every node and process, enforced
in the claim (``kathikon.storage.limited``). A queue row may override them at
run time (``kathikon.set_queue_limits``). This module is pure: parsing and
validation only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kathikon.exceptions import InvalidQueue, shown
from kathikon.storable import MAX_INT

LIMIT_KEYS = ("global_limit", "partition", "rate_limit")
#: The largest limit: what an integer column (the queue's rate count) holds and every
#: database binds in the claim.
MAX_LIMIT = MAX_INT
_ARG_KEY = re.compile(r"\Aargs\.[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits of one queue; every field ``None`` means unlimited (the fast claim path)."""

    global_limit: int | None = None
    partition_by: str | None = None  # "worker" or "args.<key>"
    partition_limit: int | None = None
    rate_allowed: int | None = None
    rate_period: float | None = None
    rate_by: str | None = None  # the rate limit counts per partition key ("worker", "args.<key>")

    def __bool__(self) -> bool:
        return bool(self.global_limit or self.partition_by or self.rate_allowed)

    @property
    def key_by(self) -> str | None:
        """The partition key of the queue (concurrency or rate partitions), or None."""
        return self.partition_by or self.rate_by

    @property
    def partition_arg(self) -> str | None:
        """The args key partitions are read from, or None (by worker, or not partitioned)."""
        if self.key_by and self.key_by.startswith("args."):
            return self.key_by[5:]
        return None

    def as_options(self) -> dict[str, Any]:
        """The settings form (``global_limit``, ``partition``, ``rate_limit``) of these limits."""
        options: dict[str, Any] = {"global_limit": self.global_limit, "partition": None,
                                   "rate_limit": None}
        if self.partition_by:
            options["partition"] = {"by": self.partition_by, "limit": self.partition_limit}
        if self.rate_allowed:
            options["rate_limit"] = {"allowed": self.rate_allowed, "period": self.rate_period}
            if self.rate_by:
                options["rate_limit"]["by"] = self.rate_by
        return options


def parse(options: dict[str, Any]) -> Limits:
    """``Limits`` from a queue's options; ``InvalidQueue`` saying what is wrong."""
    global_limit = options.get("global_limit")
    if global_limit is not None and not _count(global_limit):
        raise InvalidQueue(f"global_limit must be an int in 1..{MAX_LIMIT} or None, "
                           f"not {shown(global_limit)}")
    partition = options.get("partition")
    by = limit = None
    if partition is not None:
        if not isinstance(partition, dict) or set(partition) - {"by", "limit"}:
            raise InvalidQueue('partition must be {"by": "worker" or "args.<key>", '
                               f'"limit": n}}, not {shown(partition)}')
        by, limit = partition.get("by"), partition.get("limit", 1)
        if not _key_by(by):
            raise InvalidQueue(f"partition by must be 'worker' or 'args.<key>' (a name of "
                               f"letters, digits and '_'), not {shown(by)}")
        if not _count(limit):
            raise InvalidQueue(f"partition limit must be an int in 1..{MAX_LIMIT}, "
                               f"not {shown(limit)}")
    rate = options.get("rate_limit")
    allowed = period = rate_by = None
    if rate is not None:
        if not isinstance(rate, dict) or set(rate) - {"allowed", "period", "by"}:
            raise InvalidQueue('rate_limit must be {"allowed": n, "period": seconds} (and '
                               f'optionally "by"), not {shown(rate)}')
        rate_by = rate.get("by")
        if rate_by is not None and not _key_by(rate_by):
            raise InvalidQueue(f"rate_limit by must be 'worker' or 'args.<key>' (a name of "
                               f"letters, digits and '_'), not {shown(rate_by)}")
        if rate_by is not None and by is not None and rate_by != by:
            raise InvalidQueue(f"rate_limit by {rate_by!r} and partition by {by!r} differ: a "
                               "queue has one partition key")
        allowed, period = rate.get("allowed"), rate.get("period", 1)
        if not _count(allowed):
            raise InvalidQueue(f"rate_limit allowed must be an int in 1..{MAX_LIMIT}, "
                               f"not {shown(allowed)}")
        # A comparison, not math.isfinite: that overflows on an int like 10**400.
        if (isinstance(period, bool) or not isinstance(period, (int, float))
                or not 0.01 <= period <= 86400):
            raise InvalidQueue(f"rate_limit period must be seconds in 0.01..86400, "
                               f"not {shown(period)}")
        period = float(period)
    return Limits(global_limit=global_limit, partition_by=by, partition_limit=limit,
                  rate_allowed=allowed, rate_period=period, rate_by=rate_by)


def merged(settings: dict[str, Any], override: dict[str, Any] | None) -> Limits:
    """The settings' limits with a queue row's run-time override on top (key by key)."""
    options = {key: settings.get(key) for key in LIMIT_KEYS}
    options.update({key: value for key, value in (override or {}).items() if key in LIMIT_KEYS})
    return parse(options)


def in_force(settings: dict[str, Any],
             override: dict[str, Any] | None) -> tuple[Limits, InvalidQueue | None]:
    """The limits workers apply: :func:`merged`, or the settings' alone when the stored
    override is bad (written before a check existed, or by hand), with the error that
    says why, so that workers, reports and the admin ignore it alike and can say so."""
    try:
        return merged(settings, override), None
    except InvalidQueue as exc:
        return merged(settings, None), exc


def _key_by(value: Any) -> bool:
    return value == "worker" or (isinstance(value, str) and bool(_ARG_KEY.match(value)))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LIMIT
