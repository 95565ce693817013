"""`streamlet cluster up|status|down|elect|transfer|members|rebalance|stop-node|start-node`: a local cluster of brokers on one host,
without Kubernetes. This module is the commands' parser and their dispatch; what they do is
streamlet/cluster/'s (control.py: one-line messages and exit codes)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cluster.plan import CHANGE_TIMEOUT_S, DOWN_TIMEOUT_S, GRACE_S, MAX_NODES, REPLACE_AFTER_S
from .parser import CONNECTION_DEFAULTS, LOG_LEVELS, Commands, refuse_connection_options
from .values import Parser
from .values import port as port_number


def add_parser(sub: Commands[Parser], conn: Parser) -> None:
    cluster = sub.add_parser("cluster", help="run a local cluster of brokers (no Kubernetes)",
                             description=(
        "A local cluster: N brokers on consecutive ports of one host, each restarted when it "
        "exits, as a kubelet would. 'up' runs it in the foreground; 'status' and 'down' find "
        "it by its data directory (DATA_DIR/cluster.json); 'elect', 'transfer', 'members' and "
        "'rebalance' are requests to its placement driver, 'stop-node' and 'start-node' to its "
        "supervisor."))
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = csub.add_parser("up", help="run N brokers, restarting any that exits", description=(
        "Run N brokers in the foreground: node i serves on HOST:PORT+i (its metrics on "
        "15692+i and its management API on 15672+i by default) with its data in "
        "DATA_DIR/node-i, its output in DATA_DIR/node-i/broker.log (or --log-dir), and "
        "cluster.directory_file = DATA_DIR/directory.json; node i is member i of replicated "
        "streams (a Create with initial-cluster-size places members among the nodes). A node "
        "that exits is restarted after 0.5 s, doubling up to 10 s while it keeps failing (reset "
        "once it has run 30 s); if it led replicated streams, a placement driver elects new "
        "leaders at once. "
        f"SIGINT or SIGTERM stops every node (SIGTERM, SIGKILL after {GRACE_S:.0f} s) and "
        "exits 0. Refused (exit 2) when a port is busy or a cluster already runs in DATA_DIR."))
    up.add_argument("--nodes", type=int, default=3, help=(
        f"how many brokers, 1..{MAX_NODES} (default 3): a development cluster on one machine, "
        "where each node is a whole broker process"))
    up.add_argument("--host", default=argparse.SUPPRESS,
                    help="listen (and advertised) address of every node (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=argparse.SUPPRESS,
                    help="node i listens on PORT+i (default 5552)")
    up.add_argument("--data-dir", required=True, help="the cluster's directory (made if missing)")
    up.add_argument("--sbp-port", type=int, default=None, metavar="P", help=(
        "node i also serves the Streaming Batch Protocol on P+i (docs/protocols/sbp.md; "
        "default: off)"))
    up.add_argument("--metrics-port", type=port_number, default=None, metavar="P", help=(
        "node i serves Prometheus metrics on P+i; 0 turns them off on every node (default: "
        "15692+i, off on a node whose port is taken)"))
    up.add_argument("--http-port", type=port_number, default=None, metavar="P", help=(
        "node i serves the management API on P+i (what 'streamlet streams list --port PORT+i' "
        "finds); 0 turns it off on every node (default: 15672+i, off on a node whose port is "
        "taken)"))
    up.add_argument("--log-dir", type=Path, default=None, metavar="DIR", help=(
        "write node i's output to DIR/node-i.log, e.g. on another disk than the data, so a "
        "full data disk does not also swallow the lines saying so (default: "
        "DATA_DIR/node-i/broker.log)"))
    up.add_argument("--config", type=Path, help=(
        "TOML configuration given to every broker (docs/configuration.md; no [tls] or "
        "[listeners], and cluster.directory_file is set by up)"))
    up.add_argument("--replace-after", type=float, default=REPLACE_AFTER_S, metavar="S", help=(
        "a replicated stream's member whose node has been down (exited, stopped, or not "
        "answering the driver) for S seconds is replaced by a node that holds no member of "
        "the stream, if one is up: the new member catches up, then the lost one is removed "
        f"(default {REPLACE_AFTER_S:.0f}; 0: never)"))
    up.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                    help="DEBUG, INFO, WARNING: the supervisor's and every broker's (default INFO)")
    status = csub.add_parser("status", help="show the nodes and replicated streams of a running cluster", description=(
        "Show each node's pid, port, metrics and management API ports, whether it is alive "
        "(its process runs and its port accepts a connection) and where its log is, then each "
        "replicated stream's epoch, leader (marked unclean "
        "when elected by 'elect --force'), members and committed chunk id. Exit 1 when no "
        "cluster runs in DATA_DIR."))
    status.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    status.add_argument("--json", action="store_true", help=(
        'print {"nodes": [{"index", "pid", "port", "alive", "metrics_port", "http_port", '
        '"log"}, ...], "streams": [...]}'))
    down = csub.add_parser("down", help="stop a running cluster", description=(
        "Send SIGTERM to the cluster's supervisor and wait until it has stopped every node and "
        "exited. Exit 1 when no cluster runs in DATA_DIR, or it is still running after --timeout."))
    down.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    down.add_argument("--timeout", type=float, default=DOWN_TIMEOUT_S,
                      help=f"seconds to wait (default {DOWN_TIMEOUT_S:.0f})")
    elect = csub.add_parser("elect", help="allow an unclean election of a stream without a leader",
                            description=(
        "Ask the running placement driver to elect a leader for STREAM, which has none because "
        "no majority of its members can be fenced, among the members that answer: the one "
        "with the highest (epoch, chunk id). UNCLEAN: messages confirmed by the members that "
        "do not answer may be lost (truncated when they come back). Without a majority's "
        "answer nothing is ever elected otherwise. A stream that has a leader is left alone. "
        "Waits until the driver has acted, then prints the stream's leader (recorded as "
        "unclean in 'cluster status'). Exit 1 when no cluster runs in DATA_DIR, the driver "
        "does not act within --timeout, or no member answered."))
    elect.add_argument("stream")
    elect.add_argument("--force", action="store_true", required=True,
                       help="required: the election may lose confirmed messages")
    elect.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    elect.add_argument("--timeout", type=float, default=30.0,
                       help="seconds to wait for the driver (default 30)")
    transfer = csub.add_parser("transfer", help="move a stream's leadership to another member",
                               description=(
        "Ask the running placement driver to make member MEMBER lead STREAM, losing no "
        "confirmed message: the leader stops taking publishes (its publishers are told to look "
        "the leader up again; what it took is still replicated and confirmed), the driver waits "
        "until MEMBER holds the leader's whole log (at most 10 s; otherwise the leader takes "
        "publishes again and nothing changes), then elects in a new epoch with MEMBER "
        "preferred. Waits until the driver has acted and prints the leader. Exit 1 when no "
        "cluster runs in DATA_DIR, the driver does not act within --timeout, or another member "
        "leads."))
    transfer.add_argument("stream")
    transfer.add_argument("--to", type=int, required=True, metavar="MEMBER",
                          help="the member (node index) to lead")
    transfer.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    transfer.add_argument("--timeout", type=float, default=30.0,
                          help="seconds to wait for the driver (default 30)")
    members = csub.add_parser("members", help="add or remove one member of a replicated stream",
                              description=(
        "Ask the running placement driver to change STREAM's member set online, one member at "
        "a time. --add N: node N becomes a learner (fed by the leader, not counted), and once "
        "it holds what the leader held at the driver's previous look, the next epoch is "
        "recorded with N a member and assigned, the leader kept. --remove N: the next epoch "
        "without N, then N drops its copy. A stream of one copy (created without "
        "initial-cluster-size) is made a one-member replicated stream first. Refused when a "
        "change is under way, the stream has no leader or fewer than a majority of its "
        "members in sync, N leads (transfer it first), or N is the last member. Waits until "
        "the new member set is recorded and assigned and prints it. Exit 1 with the reason "
        "on stderr when refused or given up (a learner that does not catch up within "
        f"{CHANGE_TIMEOUT_S:.0f} s), or when the driver does not act within --timeout."))
    members.add_argument("stream")
    which = members.add_mutually_exclusive_group(required=True)
    which.add_argument("--add", type=int, metavar="N", help="make node N a member")
    which.add_argument("--remove", type=int, metavar="N", help="remove member N")
    members.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    members.add_argument("--timeout", type=float, default=CHANGE_TIMEOUT_S + 30, help=(
        f"seconds to wait for the change (default {CHANGE_TIMEOUT_S + 30:.0f})"))
    balance = csub.add_parser("rebalance", help="spread the streams' leaders evenly",
                              description=(
        "Ask the running placement driver to spread the replicated streams' leaders over the "
        "running nodes: while a node leads two more streams than an in-sync member of one of "
        "them, that stream's leadership moves there by a planned transfer (as 'transfer', "
        "one stream at a time, each at most once). Prints each move and its outcome."))
    balance.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    balance.add_argument("--timeout", type=float, default=120.0,
                         help="seconds to wait for the driver (default 120)")
    stop_node = csub.add_parser("stop-node", help="stop a node and keep it down", description=(
        "Stop node N (SIGTERM, SIGKILL after the grace) and keep it down: the supervisor does "
        "not restart it until 'start-node N'. With --wipe its data is deleted too (its "
        "configuration and log are kept), as if its volume were lost: its members are "
        "replaced after 'up --replace-after' seconds."))
    stop_node.add_argument("node", type=int, metavar="N", help="the node (0-based: port PORT+N)")
    stop_node.add_argument("--wipe", action="store_true", help="delete the node's data")
    stop_node.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    stop_node.add_argument("--timeout", type=float, default=DOWN_TIMEOUT_S,
                           help=f"seconds to wait (default {DOWN_TIMEOUT_S:.0f})")
    start_node = csub.add_parser("start-node", help="run a node stopped by stop-node again",
                                 description=(
        "Run node N again after 'stop-node N' and wait until its broker runs."))
    start_node.add_argument("node", type=int, metavar="N", help="the node (0-based: port PORT+N)")
    start_node.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    start_node.add_argument("--timeout", type=float, default=30.0,
                            help="seconds to wait (default 30)")


def check(args: argparse.Namespace, parser: Parser) -> None:
    """Only cluster up takes connection options: --host and --port, its nodes' address."""
    up = args.action == "up"
    refuse_connection_options(args, parser, ("host", "port") if up else (),
                              f"cluster {args.action}")
    if up:
        for key in ("host", "port"):
            if not hasattr(args, key):
                setattr(args, key, CONNECTION_DEFAULTS[key])


def run(args: argparse.Namespace) -> int:
    import asyncio

    from ..cluster import control
    from ..cluster.requests import ELECT, MEMBERS, START_NODE, STOP_NODE, TRANSFER, Request

    data_dir = Path(args.data_dir).absolute()
    try:
        if args.action == "up":
            return control.up(data_dir, nodes=args.nodes, host=args.host, port=args.port,
                              sbp_port=args.sbp_port, metrics_port=args.metrics_port,
                              http_port=args.http_port, log_dir=args.log_dir,
                              config=args.config, log_level=args.log_level,
                              replace_after=args.replace_after)
        if args.action == "status":
            return asyncio.run(control.status(data_dir, as_json=args.json))
        if args.action == "elect":
            return control.ask(data_dir, Request(ELECT, args.stream, force=args.force),
                               args.timeout)
        if args.action == "transfer":
            return control.ask(data_dir, Request(TRANSFER, args.stream, to=args.to),
                               args.timeout)
        if args.action == "members":
            add = args.add is not None
            return control.members(data_dir, Request(
                MEMBERS, args.stream, to=args.add if add else args.remove,
                change="add" if add else "remove"), args.timeout)
        if args.action == "rebalance":
            return control.rebalance(data_dir, args.timeout)
        if args.action in ("stop-node", "start-node"):
            kind = STOP_NODE if args.action == "stop-node" else START_NODE
            return control.node(data_dir, Request(kind, to=args.node,
                                                  wipe=getattr(args, "wipe", False)),
                                args.timeout)
        return control.down(data_dir, args.timeout)
    except KeyboardInterrupt:
        return 130
