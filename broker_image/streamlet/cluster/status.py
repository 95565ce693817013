"""``cluster status``: what runs now, from ``cluster.json`` checked against the processes and
ports themselves; the streams the nodes hold (to come with replication)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from .probe import pid_alive, port_accepts
from .state import ClusterState, NodeState

#: How long a node's port has to accept a connection to count as alive.
CONNECT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class NodeStatus:
    index: int
    port: int
    pid: int | None
    #: the process exists
    running: bool
    #: its port accepts a connection
    listening: bool
    restarts: int
    started_at: float

    @property
    def alive(self) -> bool:
        return self.running and self.listening

    @property
    def condition(self) -> str:
        if self.alive:
            return "up"
        return "starting" if self.running else "down"


async def _node_status(host: str, node: NodeState) -> NodeStatus:
    running = node.pid is not None and pid_alive(node.pid)
    listening = running and await port_accepts(host, node.port, CONNECT_TIMEOUT_S)
    return NodeStatus(node.index, node.port, node.pid, running, listening, node.restarts,
                      node.started_at)


async def gather_nodes(state: ClusterState) -> list[NodeStatus]:
    return list(await asyncio.gather(*(_node_status(state.host, n) for n in state.nodes)))


async def gather_streams(state: ClusterState, nodes: list[NodeStatus]) -> list[dict[str, Any]]:
    """The replicated streams of the cluster, each as ``{"name", "epoch", "leader", "members",
    "committed"}``. None yet: replication (issue 12) fills this in, asking the nodes alive."""
    return []


def to_json(nodes: list[NodeStatus], streams: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodes": [{"index": n.index, "pid": n.pid, "port": n.port, "alive": n.alive}
                      for n in nodes],
            "streams": streams}


def _uptime(seconds: float) -> str:
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def table(state: ClusterState, nodes: list[NodeStatus], now: float | None = None) -> str:
    """The nodes as aligned text columns, under a line naming the supervisor."""
    now = time.time() if now is None else now
    rows = [("node", "pid", "port", "state", "restarts", "up for")]
    for n in nodes:
        up = _uptime(now - n.started_at) if n.running and n.started_at else "-"
        rows.append((str(n.index), "-" if n.pid is None else str(n.pid), str(n.port),
                     n.condition, str(n.restarts), up))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"supervisor pid {state.supervisor_pid}, nodes on {state.host}"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    return "\n".join(lines) + "\n"
