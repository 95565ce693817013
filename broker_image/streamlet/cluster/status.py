"""``cluster status``: what runs now, from ``cluster.json`` checked against the processes and
ports themselves (each node's ports, metrics and management API ports and where its log is);
the replicated streams the placement driver keeps."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..client import connect
from ..replication.model import NO_LEADER
from .driver import RECORD, STATUS_FILE
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
    metrics_port: int = 0  # 0: off
    http_port: int = 0  # 0: off
    log: str = ""  # where its output goes
    stopped: bool = False  # kept down by cluster stop-node

    @property
    def alive(self) -> bool:
        return self.running and self.listening

    @property
    def condition(self) -> str:
        if self.alive:
            return "up"
        if self.stopped and not self.running:
            return "stopped"
        return "starting" if self.running else "down"


async def _node_status(host: str, node: NodeState) -> NodeStatus:
    running = node.pid is not None and pid_alive(node.pid)
    listening = running and await port_accepts(host, node.port, CONNECT_TIMEOUT_S)
    return NodeStatus(node.index, node.port, node.pid, running, listening, node.restarts,
                      node.started_at, node.metrics_port, node.http_port, node.log, node.stopped)


async def gather_nodes(state: ClusterState) -> list[NodeStatus]:
    return list(await asyncio.gather(*(_node_status(state.host, n) for n in state.nodes)))


async def gather_streams(state: ClusterState, nodes: list[NodeStatus], data_dir: Path,
                         credentials: tuple[str, str]) -> list[dict[str, Any]]:
    """The replicated streams the placement driver keeps (``driver.json``), each as
    ``{"name", "epoch", "leader", "members", "committed", "unclean", "in_sync", "changing"}``:
    the leader's member index (None while electing), its committed chunk id (None when it
    cannot be asked), whether it was elected without a majority (``cluster elect --force``),
    the members in sync at the driver's last look (the leader, and the followers holding the
    leader's last chunk of the look before) and the member change under way (``{"add": 3,
    "step": "..."}``, or None)."""
    try:
        records = json.loads((data_dir / RECORD).read_text())
    except (OSError, ValueError):
        return []
    try:
        shown = json.loads((data_dir / STATUS_FILE).read_text())
    except (OSError, ValueError):
        shown = {}
    alive = {n.index: n for n in nodes if n.alive}
    out = []
    for name, r in sorted(records.items()):
        leader = r["leader"] if r["leader"] != NO_LEADER else None
        committed = None
        if leader in alive:
            committed = await _committed(state.host, alive[leader].port, name, credentials)
        extra = shown.get(name) if isinstance(shown, dict) else None
        extra = extra if isinstance(extra, dict) else {}
        change = r.get("change")
        changing = extra.get("changing") if change is not None else None
        if change is not None and not isinstance(changing, dict):
            changing = {change["kind"]: change["member"], "step": "starting"}
        out.append({"name": name, "epoch": r["epoch"], "leader": leader,
                    "members": r["members"], "committed": committed,
                    "unclean": bool(r.get("unclean", False)),
                    "in_sync": list(extra.get("in_sync", [])), "changing": changing})
    return out


async def _committed(host: str, port: int, stream: str, credentials: tuple[str, str]) -> int | None:
    try:
        async with asyncio.timeout(3):
            client = await connect(host, port, *credentials, heartbeat=0,
                                   connection_name="cluster status")
            try:
                return (await client.stream_stats(stream))["committed_chunk_id"]
            finally:
                await client.close()
    except Exception:  # unreachable, refused: unknown
        return None


def to_json(nodes: list[NodeStatus], streams: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodes": [{"index": n.index, "pid": n.pid, "port": n.port, "alive": n.alive,
                       "metrics_port": n.metrics_port or None, "http_port": n.http_port or None,
                       "log": n.log or None} for n in nodes],
            "streams": streams}


def _uptime(seconds: float) -> str:
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def table(state: ClusterState, nodes: list[NodeStatus], now: float | None = None,
          streams: list[dict[str, Any]] | None = None) -> str:
    """The nodes as aligned text columns, under a line naming the supervisor; then the
    replicated streams, if any."""
    now = time.time() if now is None else now
    rows = [("node", "pid", "port", "metrics", "http", "state", "restarts", "up for", "log")]
    for n in nodes:
        up = _uptime(now - n.started_at) if n.running and n.started_at else "-"
        rows.append((str(n.index), "-" if n.pid is None else str(n.pid), str(n.port),
                     str(n.metrics_port or "-"), str(n.http_port or "-"), n.condition,
                     str(n.restarts), up, n.log or "-"))
    lines = [f"supervisor pid {state.supervisor_pid}, nodes on {state.host}"]
    lines += _columns(rows)
    if streams:
        srows = [("stream", "epoch", "leader", "members", "committed", "in sync", "changing")]
        srows += [(st["name"], str(st["epoch"]), "electing" if st["leader"] is None
                   else str(st["leader"]) + (" (unclean)" if st.get("unclean") else ""),
                   ",".join(map(str, st["members"])),
                   "-" if st["committed"] is None else str(st["committed"]),
                   ",".join(map(str, st.get("in_sync") or [])) or "-",
                   _changing(st.get("changing"))) for st in streams]
        lines += [""] + _columns(srows)
    return "\n".join(lines) + "\n"


def _changing(changing: Any) -> str:
    if not isinstance(changing, dict):
        return "-"
    what = " ".join(f"{k} {v}" for k, v in changing.items() if k != "step")
    return f"{what}: {changing.get('step', '')}"


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
