"""Internal: a workflow's graph checked before anything is written (pure: no ORM).

Names are unique, every dependency names a node, and there is no cycle:
Kahn's algorithm gives an order in which every node comes after its deps,
or the nodes of a cycle to name in the error.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping

from kathikon.exceptions import InvalidWorkflow

#: A step's name: what ``deps`` and ``dep_result`` use; the column holds 63 characters.
STEP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$")
#: A workflow's name (any text up to the column's 200 characters, no NUL).
MAX_WORKFLOW_NAME = 200
#: The most steps one insert writes: one transaction holds their rows' locks until it commits.
MAX_STEPS = 100_000


def check_name(name: object, what: str = "step") -> str:
    if not isinstance(name, str) or not STEP_NAME.match(name):
        raise InvalidWorkflow(f"{what} name must be 1-63 letters, digits, '_', '.', ':' or '-' "
                              f"(not starting with a punctuation mark), not {name!r:.80}",
                              step=name if isinstance(name, str) else None)
    return name


def check_workflow_name(name: object) -> str:
    if (not isinstance(name, str) or not name or len(name) > MAX_WORKFLOW_NAME
            or "\x00" in name or not name.isprintable()):
        raise InvalidWorkflow(f"a workflow's name is 1-{MAX_WORKFLOW_NAME} printable "
                              f"characters, not {name!r:.80}")
    return name


def order(deps: Mapping[str, Iterable[str]]) -> list[str]:
    """The nodes of ``deps`` (node → the nodes it waits for), each after its deps.

    Dependencies outside ``deps`` are not checked here (they are existing steps
    or workflows, looked up when inserting). ``InvalidWorkflow`` names a cycle.
    """
    waits = {node: [dep for dep in node_deps if dep in deps] for node, node_deps in deps.items()}
    count = {node: len(set(found)) for node, found in waits.items()}
    waiters: dict[str, list[str]] = {node: [] for node in deps}
    for node, found in waits.items():
        for dep in set(found):
            waiters[dep].append(node)
    ready = deque(node for node, n in count.items() if n == 0)
    done: list[str] = []
    while ready:
        node = ready.popleft()
        done.append(node)
        for waiter in waiters[node]:
            count[waiter] -= 1
            if count[waiter] == 0:
                ready.append(waiter)
    if len(done) < len(deps):
        raise InvalidWorkflow(f"the dependencies form a cycle: {' -> '.join(_cycle(waits, count))}",
                              step=_cycle(waits, count)[0])
    return done


def _cycle(waits: Mapping[str, list[str]], left: Mapping[str, int]) -> list[str]:
    """One cycle among the nodes Kahn's algorithm could not order, first node repeated."""
    stuck = {node for node, n in left.items() if n > 0}
    node = min(stuck)
    path: list[str] = []
    seen: dict[str, int] = {}
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = min(dep for dep in waits[node] if dep in stuck)
    return [*path[seen[node]:], node]
