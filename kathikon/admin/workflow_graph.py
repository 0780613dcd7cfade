"""Internal: a workflow's graph drawn on the server as an SVG (pure: no ORM, no JavaScript).

Layered left to right: a node's column is the longest path to it from a node
with no dependencies, so every edge points right (what the workflow waits for in
other workflows sits just before its first waiter); within a column the nodes
sit near the average row of what they wait for (one barycentre pass). Each
node is a rounded box coloured by its state, with its name and state, linking
to its page.

Big graphs stay small: a column of more than ``LAYER_LIMIT`` nodes shows
``LAYER_SHOWN`` of them (failed, held and running ones first) and one
"+ N more" node with their states; past ``NODE_BUDGET`` drawn nodes the
remaining columns become one "+ N more" node. A 10,000-step fan-out draws
about 30 boxes.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

#: A column with more nodes than this is cut down to ``LAYER_SHOWN`` plus one "more" node.
LAYER_LIMIT = 40
LAYER_SHOWN = 24
#: Columns are drawn until this many nodes are; the rest becomes one "more" node.
NODE_BUDGET = 400
#: At most this many edges are drawn (a dense graph between capped columns).
EDGE_LIMIT = 3000

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 168, 40, 56, 12, 16
NAME_CHARS = 22
#: Kinds of node: a step of this workflow; a sub-workflow; another workflow or another
#: workflow's step this one waits for; a stand-in for nodes not drawn.
KINDS = ("step", "sub", "workflow", "external", "more")
#: Shown first when a column is cut down: what a person looks for.
ATTENTION = ("dead", "held", "failed", "running", "claimed", "retryable", "cancelled")
MORE_COLOUR = "#d0d7de"


@dataclass(frozen=True)
class Node:
    """One box: ``key`` is unique in the graph, ``state`` picks its colour."""

    key: str
    label: str
    state: str
    kind: str = "step"
    href: str = ""
    title: str = ""


@dataclass(frozen=True)
class Placed:
    node: Node
    x: float
    y: float
    counts: Mapping[str, int] = field(default_factory=dict)  # a "more" node's states


@dataclass(frozen=True)
class Layout:
    """Boxes with positions, edges as ``(from key, to key)``, and what was left out."""

    nodes: list[Placed]
    edges: list[tuple[str, str]]
    width: float
    height: float
    hidden: int = 0  # nodes folded into "more" nodes
    hidden_edges: int = 0


def layers(keys: Sequence[str], edges: Sequence[tuple[str, str]]) -> dict[str, int]:
    """Each node's column: the longest path to it from a node that waits for nothing.

    ``edges`` are ``(dependency, dependent)``; edges naming unknown nodes are ignored,
    and nodes on a cycle (none should be) go after the rest.
    """
    known = set(keys)
    waits: dict[str, set[str]] = defaultdict(set)
    for dep, node in edges:
        if dep in known and node in known and dep != node:
            waits[node].add(dep)
    waiters: dict[str, list[str]] = defaultdict(list)
    for node, deps in waits.items():
        for dep in deps:
            waiters[dep].append(node)
    left = {key: len(waits[key]) for key in keys}
    column = dict.fromkeys(keys, 0)
    ready = deque(key for key in keys if left[key] == 0)
    placed = 0
    while ready:
        node = ready.popleft()
        placed += 1
        for waiter in waiters[node]:
            column[waiter] = max(column[waiter], column[node] + 1)
            left[waiter] -= 1
            if left[waiter] == 0:
                ready.append(waiter)
    if placed < len(keys):
        last = max(column.values(), default=0) + 1
        for key in keys:
            if left[key] > 0:
                column[key] = last
    return column


def layout(nodes: Sequence[Node], edges: Sequence[tuple[str, str]], *,
           more_href: str = "") -> Layout:
    """Columns, the cut-down of wide columns and long graphs, and positions; the "more"
    boxes link to ``more_href`` (where every node is listed)."""
    by_key = {node.key: node for node in nodes}
    column = layers(list(by_key), edges)
    _pull_outside(by_key, edges, column)
    columns: list[list[Node]] = [[] for _ in range(max(column.values(), default=-1) + 1)]
    for node in by_key.values():
        columns[column[node.key]].append(node)
    shown: list[list[Node]] = []
    counts: dict[str, Counter[str]] = {}
    stand_in: dict[str, str] = {}  # a node not drawn → the "more" node drawn for it
    drawn = 0
    for index, members in enumerate(columns):
        if drawn >= NODE_BUDGET:
            rest = [member for later in columns[index:] for member in later]
            more = _more(f"more:rest:{index}", rest, counts, stand_in, more_href)
            shown.append([more])
            break
        keep = members
        if len(members) > LAYER_LIMIT:
            ranked = sorted(range(len(members)), key=lambda i: (_rank(members[i].state), i))
            chosen = sorted(ranked[:LAYER_SHOWN])
            keep = [members[i] for i in chosen]
            kept = {node.key for node in keep}
            keep.append(_more(f"more:{index}", [member for member in members
                                                if member.key not in kept], counts, stand_in,
                              more_href))
        shown.append(keep)
        drawn += len(keep)
    drawn_edges: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for dep, waiter in edges:
        if dep not in by_key or waiter not in by_key:
            continue
        pair = (stand_in.get(dep, dep), stand_in.get(waiter, waiter))
        if pair[0] != pair[1] and pair not in seen:
            seen.add(pair)
            drawn_edges.append(pair)
    hidden_edges = max(0, len(drawn_edges) - EDGE_LIMIT)
    drawn_edges = drawn_edges[:EDGE_LIMIT]
    _order(shown, drawn_edges)
    return _place(shown, drawn_edges, counts, hidden=len(stand_in), hidden_edges=hidden_edges)


def render(graph: Layout, colours: Mapping[str, str], *, default: str = "#57606a") -> SafeString:
    """The SVG of a layout: boxes coloured by ``colours[state]``, edges with arrowheads."""
    parts = [format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="kathikon-wf-graph" role="img" '
        'width="{}" height="{}" viewBox="0 0 {} {}" data-nodes="{}" data-edges="{}" '
        'data-hidden="{}" font-family="-apple-system, Segoe UI, Helvetica, Arial, sans-serif">'
        "<title>The workflow's steps and what each waits for</title>"
        '<defs><marker id="kathikon-wf-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#8c959f"/></marker></defs>',
        _n(graph.width), _n(graph.height), _n(graph.width), _n(graph.height),
        len(graph.nodes), len(graph.edges), graph.hidden)]
    where = {placed.node.key: placed for placed in graph.nodes}
    for dep, node in graph.edges:
        a, b = where[dep], where[node]
        x1, y1, x2, y2 = a.x + NODE_W, a.y + NODE_H / 2, b.x, b.y + NODE_H / 2
        bend = max((x2 - x1) / 2, 20)
        parts.append(format_html(
            '<path class="kathikon-wf-edge" data-from="{}" data-to="{}" d="M{},{} C{},{} {},{} '
            '{},{}" fill="none" stroke="#8c959f" stroke-width="1.3" '
            'marker-end="url(#kathikon-wf-arrow)"/>',
            dep, node, _n(x1), _n(y1), _n(x1 + bend), _n(y1), _n(x2 - bend), _n(y2),
            _n(x2 - 1), _n(y2)))
    for placed in graph.nodes:
        parts.append(_box(placed, colours.get(placed.node.state, default)))
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(parts))  # every part went through format_html


# -- internals ------------------------------------------------------------------------------

def _pull_outside(by_key: Mapping[str, Node], edges: Sequence[tuple[str, str]],
                  column: dict[str, int]) -> None:
    """What this workflow waits for elsewhere sits just before its first waiter, not in
    the first column with edges across the whole graph."""
    waiters: dict[str, list[int]] = defaultdict(list)
    waits: set[str] = set()
    for dep, waiter in edges:
        if dep in column and waiter in column:
            waiters[dep].append(column[waiter])
            waits.add(waiter)
    for key, node in by_key.items():
        if node.kind in ("external", "workflow") and key not in waits and waiters[key]:
            column[key] = max(min(waiters[key]) - 1, 0)


def _rank(state: str) -> int:
    return ATTENTION.index(state) if state in ATTENTION else len(ATTENTION)


def _more(key: str, folded: list[Node], counts: dict[str, Counter[str]],
          stand_in: dict[str, str], href: str) -> Node:
    tally = Counter(node.state for node in folded)
    counts[key] = tally
    for node in folded:
        stand_in[node.key] = key
    states = ", ".join(f"{n:,} {state}" for state, n in tally.most_common())
    return Node(key, f"+ {len(folded):,} more", "more", kind="more", href=href,
                title=f"{len(folded):,} more not drawn: {states}")


def _order(columns: list[list[Node]], edges: Sequence[tuple[str, str]]) -> None:
    """Sort each column by the average row of its nodes' dependencies (barycentre), the
    column's "more" node last; nodes keep their order among equals."""
    deps: dict[str, list[str]] = defaultdict(list)
    for dep, waiter in edges:
        deps[waiter].append(dep)
    row: dict[str, float] = {}  # rows counted from each column's middle: columns are centred
    for members in columns:
        def centre(index: int, members: list[Node] = members) -> tuple[bool, float, int]:
            node = members[index]
            rows = [row[dep] for dep in deps[node.key] if dep in row]
            return (node.kind == "more", sum(rows) / len(rows) if rows else 0.0, index)

        members[:] = [members[i] for i in sorted(range(len(members)), key=centre)]
        middle = (len(members) - 1) / 2
        for index, node in enumerate(members):
            row[node.key] = index - middle


def _place(columns: list[list[Node]], edges: list[tuple[str, str]],
           counts: Mapping[str, Counter[str]], *, hidden: int, hidden_edges: int) -> Layout:
    tallest = max((len(members) for members in columns), default=0)
    height = PAD * 2 + tallest * NODE_H + max(tallest - 1, 0) * GAP_Y
    placed: list[Placed] = []
    for index, members in enumerate(columns):
        used = len(members) * NODE_H + max(len(members) - 1, 0) * GAP_Y
        top = (height - used) / 2
        for row, node in enumerate(members):
            placed.append(Placed(node, PAD + index * (NODE_W + GAP_X),
                                 top + row * (NODE_H + GAP_Y), counts.get(node.key, {})))
    width = PAD * 2 + len(columns) * NODE_W + max(len(columns) - 1, 0) * GAP_X
    return Layout(placed, edges, width, height, hidden=hidden, hidden_edges=hidden_edges)


def _box(placed: Placed, colour: str) -> SafeString:
    node = placed.node
    more = node.kind == "more"
    dashed = node.kind in ("sub", "workflow", "external")
    name = node.label if len(node.label) <= NAME_CHARS else node.label[:NAME_CHARS - 1] + "…"
    if more:
        second = ", ".join(f"{n:,} {state}" for state, n in placed.counts.items())
        second = second if len(second) <= 28 else second[:27] + "…"
    else:
        prefix = {"sub": "sub-workflow · ", "workflow": "workflow · ",
                  "external": "other workflow · "}.get(node.kind, "")
        second = prefix + node.state
    ink = "#24292f" if more else "#ffffff"
    box = format_html(
        '<g class="kathikon-wf-node" data-key="{}" data-step="{}" data-state="{}" '
        'data-kind="{}" transform="translate({},{})"><title>{}</title>'
        '<rect width="{}" height="{}" rx="8" ry="8" fill="{}" stroke="{}" stroke-width="{}"{}/>'
        '<text x="10" y="17" font-size="12" font-weight="600" fill="{}">{}</text>'
        '<text x="10" y="32" font-size="11" fill="{}" fill-opacity="0.9">{}</text></g>',
        node.key, node.label, node.state, node.kind, _n(placed.x), _n(placed.y),
        node.title or f"{node.label}: {node.state}", NODE_W, NODE_H,
        MORE_COLOUR if more else colour, "#24292f" if dashed else "none",
        "1.5" if dashed else "0", mark_safe(' stroke-dasharray="5 3"') if dashed else "",
        ink, name, ink, second)
    if node.href:
        return format_html('<a href="{}" class="kathikon-wf-link">{}</a>', node.href, box)
    return box


def _n(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")
