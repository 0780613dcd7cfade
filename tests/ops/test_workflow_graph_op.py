"""The workflow page's graph drawing (kathikon.admin.workflow_graph): pure, no database."""

from __future__ import annotations

import re
import time

from kathikon.admin import workflow_graph as graph
from kathikon.admin.common import STATE_COLOURS
from kathikon.admin.workflow_graph import Node, layers, layout, render


def nodes(*keys: str, state: str = "waiting") -> list[Node]:
    return [Node(key, key, state) for key in keys]


def diamond() -> tuple[list[Node], list[tuple[str, str]]]:
    edges = [("fetch", size) for size in ("small", "medium", "large")]
    edges += [(size, "publish") for size in ("small", "medium", "large")]
    return nodes("fetch", "small", "medium", "large", "publish"), edges


def test_a_column_is_the_longest_path_from_a_root():
    assert layers(["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")]) == {
        "a": 0, "b": 1, "c": 2, "d": 3}
    # Edges to unknown nodes are ignored; a cycle (none should exist) goes last.
    assert layers(["a", "b"], [("x", "a"), ("a", "b")]) == {"a": 0, "b": 1}
    assert layers(["a", "b", "c"], [("b", "c"), ("c", "b")]) == {"a": 0, "b": 1, "c": 1}


def test_a_diamond_is_three_columns_with_the_middle_centred():
    drawn = layout(*diamond())
    where = {placed.node.key: (placed.x, placed.y) for placed in drawn.nodes}
    assert where["fetch"][0] < where["small"][0] == where["large"][0] < where["publish"][0]
    assert where["fetch"][1] == where["medium"][1] == where["publish"][1]
    assert where["small"][1] < where["medium"][1] < where["large"][1]
    assert len(drawn.edges) == 6 and drawn.hidden == 0


def test_what_the_workflow_waits_for_elsewhere_sits_before_its_first_waiter():
    items = [*nodes("a", "b", "c"), Node("wf:x", "other", "completed", "workflow")]
    drawn = layout(items, [("a", "b"), ("b", "c"), ("wf:x", "c")])
    x = {placed.node.key: placed.x for placed in drawn.nodes}
    assert x["wf:x"] == x["b"]


def test_a_10000_wide_fan_out_draws_a_few_boxes_fast():
    parts = [Node(f"p{i}", f"part-{i}", "completed" if i < 9000 else "waiting")
             for i in range(10_000)]
    parts[7777] = Node("p7777", "part-7777", "dead")  # a failure is never folded away
    items = [Node("split", "split", "completed"), *parts, Node("join", "join", "waiting")]
    edges = [("split", node.key) for node in parts] + [(node.key, "join") for node in parts]
    started = time.perf_counter()
    svg = render(layout(items, edges), STATE_COLOURS)
    assert time.perf_counter() - started < 1.0
    drawn = re.findall(r'data-step="([^"]+)"', svg)
    assert len(drawn) == graph.LAYER_SHOWN + 3  # split, 24 parts, "+ more", join
    assert "part-7777" in drawn and "split" in drawn and "join" in drawn
    assert "+ 9,976 more" in svg and "8,976 completed, 1,000 waiting" in svg
    assert len(svg) < 40_000
    assert 'data-hidden="9976"' in svg


def test_past_the_node_budget_the_rest_is_one_box():
    items = [Node(f"n{i}", f"n{i}", "waiting") for i in range(1000)]
    chain = [(f"n{i}", f"n{i + 1}") for i in range(999)]
    drawn = layout(items, chain)
    assert len(drawn.nodes) == graph.NODE_BUDGET + 1
    assert drawn.nodes[-1].node.label == f"+ {1000 - graph.NODE_BUDGET} more"
    assert (f"n{graph.NODE_BUDGET - 1}", drawn.nodes[-1].node.key) in drawn.edges


def test_the_svg_escapes_names_links_boxes_and_draws_arrowheads():
    items = [Node("a", '<script>alert("x")</script>', "dead", href="/admin/x/?a=1&b=2"),
             Node("wf:s", "sub", "failed", "sub")]
    svg = render(layout(items, [("a", "wf:s")]), {"dead": "#cf222e", "failed": "#cf222e"})
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert 'href="/admin/x/?a=1&amp;b=2"' in svg
    assert 'marker-end="url(#kathikon-wf-arrow)"' in svg and 'id="kathikon-wf-arrow"' in svg
    assert 'data-from="a" data-to="wf:s"' in svg
    assert 'data-kind="sub"' in svg and 'stroke-dasharray="5 3"' in svg
    assert svg.count('fill="#cf222e"') == 2
