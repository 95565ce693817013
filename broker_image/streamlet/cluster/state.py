"""``<data dir>/cluster.json``: what the supervisor of ``cluster up`` tells ``status`` and ``down``.

    {"supervisor_pid": 4242, "host": "127.0.0.1",
     "nodes": [{"index": 0, "pid": 4250, "port": 5552, "alive": true, "restarts": 0,
                "started_at": 1767225600.0, "metrics_port": 15692, "http_port": 15672,
                "log": "/home/me/cluster/node-0/broker.log"}, ...]}

``alive``: the supervisor's view; ``stopped``: kept down by ``stop-node``; ``started_at``: the
current process's wall-clock start; ports 0 when off. Written whole and atomically.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


class StateUnreadable(ValueError):
    """cluster.json exists but is not a supervisor's state."""


@dataclass
class NodeState:
    index: int
    port: int
    pid: int | None = None
    alive: bool = False
    restarts: int = 0
    started_at: float = 0.0
    metrics_port: int = 0
    http_port: int = 0
    log: str = ""
    stopped: bool = False


@dataclass
class ClusterState:
    supervisor_pid: int
    host: str
    nodes: list[NodeState] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"supervisor_pid": self.supervisor_pid, "host": self.host,
                "nodes": [asdict(n) for n in self.nodes]}

    @classmethod
    def from_json(cls, doc: Any) -> ClusterState:
        try:
            nodes = [NodeState(index=int(n["index"]), port=int(n["port"]),
                               pid=None if n.get("pid") is None else int(n["pid"]),
                               alive=bool(n["alive"]), restarts=int(n.get("restarts", 0)),
                               started_at=float(n.get("started_at", 0.0)),
                               metrics_port=int(n.get("metrics_port", 0)),
                               http_port=int(n.get("http_port", 0)), log=str(n.get("log", "")),
                               stopped=bool(n.get("stopped", False)))
                     for n in doc["nodes"]]
            return cls(int(doc["supervisor_pid"]), str(doc["host"]), nodes)
        except (KeyError, TypeError, ValueError) as e:
            raise StateUnreadable(f"not a cluster state: {e!r}") from e


def write(path: Path, state: ClusterState) -> None:
    """Replace ``path`` with ``state``: a temporary file in the same directory, renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=1) + "\n")
    os.replace(tmp, path)


def read(path: Path) -> ClusterState | None:
    """The state in ``path``, or None when there is none; StateUnreadable when malformed."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise StateUnreadable(f"{path} is not JSON: {e}") from e
    return ClusterState.from_json(doc)
