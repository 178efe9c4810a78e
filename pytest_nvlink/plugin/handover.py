"""Handing one session's node and measurements from the pytest-xdist controller to its workers.

Under ``-n`` the controller probes and measures once and every worker judges that same node: two
probes could disagree, and two measurement campaigns contending for the same GPUs would invalidate
each other's figures. The node travels as snapshot JSON text (never pickle), so a worker judges
exactly what ``--nvlink-save`` writes.
"""

from __future__ import annotations

import json

from pytest_nvlink.model import Node
from pytest_nvlink.model.document import SnapshotError, node_from_document, snapshot_document

# The key in xdist's ``workerinput`` dictionary that carries the node.
WORKERINPUT_KEY = "pytest_nvlink_node"
ORIGIN = "node handed over by the pytest-xdist controller"


def node_text(node: Node) -> str:
    return json.dumps(snapshot_document(node))


def node_from_text(text: object) -> Node:
    """The controller's node, with its source (live, replay, evidence) as the controller saw it."""
    if not isinstance(text, str):
        raise SnapshotError(f"{ORIGIN}: missing (controller and worker run different pytest-nvlink versions?)")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{ORIGIN}: not JSON ({exc})") from None
    return node_from_document(document, ORIGIN)
