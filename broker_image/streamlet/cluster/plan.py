"""What ``cluster up`` accepts and what each node runs: pure functions, tested with tables.

Node ``i`` of a cluster in ``D`` is a broker on ``host:port+i`` whose data is ``D/node-i``,
whose output goes to ``D/node-i/broker.log`` and whose configuration is ``D/node-i/broker.toml``:
the user's ``--config`` file (if any) with ``[cluster] directory_file`` set to ``D/directory.json``,
the same file for every node, where a placement driver will later publish where streams live.
The listen and advertised address are flags, so they win over the file and the environment.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: At most 9 nodes. This is a development cluster on one machine: every node is a whole broker
#: process (an interpreter and its event loop, some 30 MB) competing for the same few cores, so
#: more would measure the machine rather than the cluster; replicated streams want 3, 5 or 7
#: members (as RabbitMQ advises); and one digit keeps ``node-0..node-8`` in order wherever they
#: are listed.
MAX_NODES = 9
#: Seconds a node has to stop after SIGTERM before it gets SIGKILL.
GRACE_S = 10.0
#: ``down``'s default bound: the nodes' grace, and twice as long again for the supervisor.
DOWN_TIMEOUT_S = 3 * GRACE_S
STATE_FILE = "cluster.json"
LOCK_FILE = "cluster.lock"
DIRECTORY_FILE = "directory.json"
#: Sections of a --config file refused by ``cluster up``: each node would listen on the same
#: port, since they are not shifted per node (yet).
PER_NODE_PORT_SECTIONS = ("tls", "listeners")


class PlanError(ValueError):
    """An argument or a --config file ``cluster up`` cannot use; the message says why."""


@dataclass(frozen=True)
class NodeSpec:
    index: int
    host: str
    port: int
    data_dir: Path
    log_file: Path
    config_file: Path
    sbp_port: int | None = None  # cluster up --sbp-port P: P + index

    def command(self, log_level: str = "INFO", python: str = sys.executable) -> list[str]:
        """The node's broker: ``python -m streamlet serve`` on its own port and data."""
        return [python, "-m", "streamlet", "serve", "--host", self.host, "--port", str(self.port),
                "--data-dir", str(self.data_dir), "--config", str(self.config_file),
                "--advertised-host", self.host, "--advertised-port", str(self.port),
                "--log-level", log_level,
                *(["--sbp-port", str(self.sbp_port)] if self.sbp_port else [])]


def check_arguments(nodes: int, port: int) -> None:
    """Refuse a node count outside 1..MAX_NODES, or ports outside 1..65535."""
    if not 1 <= nodes <= MAX_NODES:
        raise PlanError(f"--nodes must be in 1..{MAX_NODES}, got {nodes} (a local cluster on "
                        f"one machine; see 'streamlet cluster up --help')")
    last = port + nodes - 1
    if port < 1 or last > 65535:
        raise PlanError(f"ports {port}..{last} are not all in 1..65535")


def node_ports(nodes: int, port: int) -> list[int]:
    return [port + i for i in range(nodes)]


def plan_nodes(nodes: int, host: str, port: int, data_dir: Path,
               sbp_port: int | None = None) -> list[NodeSpec]:
    """The nodes of a cluster in ``data_dir`` (best absolute: the brokers are given it as is);
    with ``sbp_port``, node i serves SBP on ``sbp_port + i``."""
    check_arguments(nodes, port)
    if sbp_port is not None:
        check_arguments(nodes, sbp_port)
    specs = []
    for i, p in enumerate(node_ports(nodes, port)):
        d = data_dir / f"node-{i}"
        specs.append(NodeSpec(i, host, p, d, d / "broker.log", d / "broker.toml",
                              None if sbp_port is None else sbp_port + i))
    return specs


def node_config(user: Mapping[str, Any], directory_file: Path) -> dict[str, Any]:
    """A node's configuration document: the user's (a parsed --config file, or ``{}``) with
    ``[cluster] directory_file`` set. Refuses what cannot hold for N brokers on one host."""
    shared = [s for s in PER_NODE_PORT_SECTIONS if s in user]
    if shared:
        raise PlanError(f"a --config file for cluster up cannot have "
                        f"{', '.join(f'[{s}]' for s in shared)}: every node would listen on "
                        f"the same port")
    cluster = user.get("cluster", {})
    if not isinstance(cluster, Mapping):
        raise PlanError("[cluster] in the --config file must be a table")
    if "directory_file" in cluster:
        raise PlanError("a --config file for cluster up cannot set cluster.directory_file: "
                        f"cluster up sets it to <data dir>/{DIRECTORY_FILE}")
    for key in ("member", "peers"):
        if key in cluster:
            raise PlanError(f"a --config file for cluster up cannot set cluster.{key}: "
                            "cluster up sets it (node i is member i)")
    return {**user, "cluster": {**cluster, "directory_file": str(directory_file)}}


def node_member(doc: Mapping[str, Any], index: int, peers: list[str] | None = None) -> dict[str, Any]:
    """Node ``index``'s configuration: the nodes' shared one with ``[cluster] member = index``
    (its id in replicated streams' member sets) and ``peers``, every node's address by index
    (where a Create with initial-cluster-size places members)."""
    cluster = {**doc.get("cluster", {}), "member": index}
    if peers is not None:
        cluster["peers"] = peers
    return {**doc, "cluster": cluster}
