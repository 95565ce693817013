"""What ``cluster up`` accepts and what each node runs: pure functions, tested with tables.

Node ``i`` of a cluster in ``D`` is a broker on ``host:port+i`` whose data is ``D/node-i``,
whose output goes to ``D/node-i/broker.log`` (``LOG_DIR/node-i.log`` with --log-dir) and whose
configuration is ``D/node-i/broker.toml``: the user's ``--config`` file (if any) with
``[cluster] directory_file`` set to ``D/directory.json``, the same file for every node. Its
metrics and management API listen on ``M+i`` and ``H+i`` (default 15692 and 15672; 0: off on
every node; a default port that is taken or used by another listener of the plan is off on
that node, with a note). The ports are flags, so they win over the file and the environment.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
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
#: ``up --replace-after``'s default: seconds a member's node is down before the member is
#: replaced
REPLACE_AFTER_S = 300.0
#: A member change (a learner catching up, a join waiting for members in sync) is given up
#: after this long: the learner drops its copy.
CHANGE_TIMEOUT_S = 120.0
STATE_FILE = "cluster.json"
LOCK_FILE = "cluster.lock"
DIRECTORY_FILE = "directory.json"
#: Sections of a --config file refused by ``cluster up``: each node would listen on the same
#: port, since they are not shifted per node (yet).
PER_NODE_PORT_SECTIONS = ("tls", "listeners")
#: Node i's metrics and management API ports by default: RabbitMQ's, plus i
DEFAULT_METRICS_PORT = 15692
DEFAULT_HTTP_PORT = 15672
#: the listeners a node has besides its stream port: the NodeSpec field and the flag's name
SIDE_LISTENERS = {"metrics_port": "metrics", "http_port": "management API"}


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
    metrics_port: int = 0  # /metrics; 0: off
    http_port: int = 0  # the management API; 0: off

    def ports(self) -> dict[str, int]:
        """Every port the node listens on, by what it serves (those turned off left out)."""
        named = {"stream": self.port, "sbp": self.sbp_port or 0,
                 "metrics": self.metrics_port, "management API": self.http_port}
        return {what: p for what, p in named.items() if p}

    def command(self, log_level: str = "INFO", python: str = sys.executable) -> list[str]:
        """The node's broker: ``python -m streamlet serve`` on its own ports and data."""
        return [python, "-m", "streamlet", "serve", "--host", self.host, "--port", str(self.port),
                "--data-dir", str(self.data_dir), "--config", str(self.config_file),
                "--advertised-host", self.host, "--advertised-port", str(self.port),
                "--log-level", log_level,
                *(["--sbp-port", str(self.sbp_port)] if self.sbp_port else []),
                "--metrics-port", str(self.metrics_port), "--http-port", str(self.http_port)]


def check_arguments(nodes: int, port: int, flag: str = "--port") -> None:
    """Refuse a node count outside 1..MAX_NODES, or ports outside 1..65535."""
    if not 1 <= nodes <= MAX_NODES:
        raise PlanError(f"--nodes must be in 1..{MAX_NODES}, got {nodes} (a local cluster on "
                        f"one machine; see 'streamlet cluster up --help')")
    last = port + nodes - 1
    if port < 1 or last > 65535:
        who = "" if flag == "--port" else f"{flag}: "
        raise PlanError(f"{who}ports {port}..{last} are not all in 1..65535")


def node_ports(nodes: int, port: int) -> list[int]:
    return [port + i for i in range(nodes)]


def plan_nodes(nodes: int, host: str, port: int, data_dir: Path,
               sbp_port: int | None = None, metrics_port: int = DEFAULT_METRICS_PORT,
               http_port: int = DEFAULT_HTTP_PORT, log_dir: Path | None = None) -> list[NodeSpec]:
    """The nodes of a cluster in ``data_dir`` (best absolute: the brokers are given it as is);
    with ``sbp_port``, node i serves SBP on ``sbp_port + i``; its metrics on ``metrics_port +
    i`` and its management API on ``http_port + i`` (0: none); its log in ``log_dir`` when
    given. Two listeners of the plan on one port are refused (:func:`check_distinct`)."""
    check_arguments(nodes, port)
    if sbp_port is not None:
        check_arguments(nodes, sbp_port, "--sbp-port")
    for flag, base in (("--metrics-port", metrics_port), ("--http-port", http_port)):
        if base:
            check_arguments(nodes, base, flag)
    specs = []
    for i, p in enumerate(node_ports(nodes, port)):
        d = data_dir / f"node-{i}"
        log = d / "broker.log" if log_dir is None else log_dir / f"node-{i}.log"
        specs.append(NodeSpec(i, host, p, d, log, d / "broker.toml",
                              None if sbp_port is None else sbp_port + i,
                              metrics_port + i if metrics_port else 0,
                              http_port + i if http_port else 0))
    return specs


def settle_defaults(specs: list[NodeSpec], defaults: set[str],
                    taken: set[int]) -> tuple[list[NodeSpec], list[str]]:
    """The nodes with each default side listener (``defaults``: names of SIDE_LISTENERS'
    fields the user did not give) turned off where its port is ``taken`` on the machine or by
    another listener of the plan, as a broker skips a taken default port; and a note for each
    one turned off."""
    notes: list[str] = []
    out: list[NodeSpec] = []
    for spec in specs:
        for field in sorted(defaults):
            p = getattr(spec, field)
            if not p:
                continue
            others = {q for s in specs for what, q in s.ports().items()
                      if (s.index, what) != (spec.index, SIDE_LISTENERS[field])}
            if p in taken or p in others:
                why = "is taken" if p in taken else "is another listener's of the cluster"
                flag = "--" + field.replace("_", "-")
                notes.append(f"node {spec.index}: port {p} {why}: no {SIDE_LISTENERS[field]} on "
                             f"node {spec.index} (cluster up {flag} P moves them, 0 turns them "
                             "off)")
                spec = (replace(spec, metrics_port=0) if field == "metrics_port"
                        else replace(spec, http_port=0))
        out.append(spec)
    return out, notes


def check_distinct(specs: list[NodeSpec]) -> None:
    """Refuse a plan where two listeners share a port (say which)."""
    seen: dict[int, str] = {}
    for spec in specs:
        for what, p in spec.ports().items():
            who = f"node {spec.index}'s {what} port"
            if p in seen:
                raise PlanError(f"port {p} would be both {seen[p]} and {who}: give the ranges "
                                "room (--port, --sbp-port, --metrics-port, --http-port)")
            seen[p] = who


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
