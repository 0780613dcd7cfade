"""Internal: the node admin (read-only) — who runs, heartbeats, queues."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone
from django.utils.safestring import SafeString

from kathikon import conf
from kathikon.admin.common import ReadOnlyAdmin, ago, badge, time_field
from kathikon.models import Node


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ("name", "hostname", "pid", "status_display", "queue_list", "started",
                    "heartbeat")
    list_filter = ("status",)
    started = time_field("started_at", "started at")

    @admin.display(description="status")
    def status_display(self, node: Node) -> SafeString:
        if node.status == Node.Status.RUNNING and self.stale(node):
            return badge("silent", "#cf222e")
        colours = {"running": "#2da44e", "stopping": "#bf8700", "stopped": "#57606a",
                   "crashed": "#cf222e"}
        return badge(node.status, colours.get(node.status, "#57606a"))

    @admin.display(description="queues")
    def queue_list(self, node: Node) -> str:
        queues = node.queues
        if isinstance(queues, dict):
            return ", ".join(f"{name}:{limit}" for name, limit in sorted(queues.items())) or "—"
        return ", ".join(map(str, queues or [])) or "—"

    @admin.display(description="last heartbeat", ordering="heartbeat_at")
    def heartbeat(self, node: Node) -> str:
        return ago(node.heartbeat_at)

    def stale(self, node: Node) -> bool:
        return (timezone.now() - node.heartbeat_at).total_seconds() > conf.rescue_after()
