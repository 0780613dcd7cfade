"""Internal: queue rows — pause state and concurrency overrides shared by every node."""

from __future__ import annotations

from typing import Any

from kathikon.conf import QUEUE_NAME
from kathikon.exceptions import InvalidQueue
from kathikon.models import Queue
from kathikon.storage import notify, vendor
from kathikon.storage.reports import live_node_queues


def validate_name(name: object) -> str:
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise InvalidQueue(f"bad queue name {name!r}: use 1-63 letters, digits, '_', '-', '.'")
    return name


def set_paused(name: str, paused: bool) -> bool:
    """Pause or resume ``name`` (creating its row); True if the state changed."""
    validate_name(name)
    using = vendor.alias()
    with vendor.atomic():
        queue, created = Queue.objects.using(using).select_for_update().get_or_create(
            name=name, defaults={"paused": paused})
        changed = (created and paused) or queue.paused != paused
        if not created and queue.paused != paused:
            queue.paused = paused
            queue.save(update_fields=["paused", "updated_at"])
        notify.notify(notify.PAUSE if paused else notify.RESUME, [name])
    return changed


def set_all_paused(paused: bool, names: list[str]) -> list[str]:
    """Pause or resume every queue in ``names`` and every queue with a row; returns their names."""
    using = vendor.alias()
    with vendor.atomic():
        known = set(Queue.objects.using(using).values_list("name", flat=True))
        for name in set(names) - known:
            Queue.objects.using(using).create(name=validate_name(name), paused=paused)
        Queue.objects.using(using).exclude(paused=paused).update(paused=paused)
        everything = sorted(known | set(names))
        notify.notify(notify.PAUSE if paused else notify.RESUME, everything)
    return everything


def set_limits(name: str, override: dict[str, Any] | None) -> None:
    """Store ``name``'s run-time limits override (creating its row); None clears it.

    Workers pick it up at their next queue refresh (every ``POLL_INTERVAL``).
    """
    validate_name(name)
    with vendor.atomic():
        queue, _ = Queue.objects.using(vendor.alias()).select_for_update().get_or_create(
            name=name)
        queue.limits = override
        queue.save(update_fields=["limits", "updated_at"])


def ensure_queue(name: str) -> Queue:
    validate_name(name)
    queue, _ = Queue.objects.using(vendor.alias()).get_or_create(name=name)
    return queue


def queue_rows() -> dict[str, Queue]:
    return {queue.name: queue for queue in Queue.objects.using(vendor.alias()).all()}


def paused_queues() -> set[str]:
    return set(Queue.objects.using(vendor.alias()).filter(paused=True)
               .values_list("name", flat=True))


def known_queue_names(live_within: float) -> set[str]:
    """Queues with a row, or run by a node whose heartbeat is at most ``live_within`` s old.

    Two queries. With the settings' queues these are the queues some worker
    serves or will serve: anything else is a typo or a forgotten setting.
    """
    rows = set(Queue.objects.using(vendor.alias()).order_by().values_list("name", flat=True))
    return rows | live_node_queues(live_within)


def known_queue_names_safely(live_within: float) -> set[str]:
    """:func:`known_queue_names`, in a savepoint when called inside the caller's
    transaction: a failed lookup raises ``DatabaseError`` but leaves that transaction
    (which holds the job just inserted) usable."""
    if not vendor.connection().in_atomic_block:
        return known_queue_names(live_within)
    with vendor.atomic():
        return known_queue_names(live_within)
