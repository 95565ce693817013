"""What ``streamlet cluster up|status|down|elect|transfer|members|rebalance|stop-node|start-node``
do (cli/cluster.py parses them): values in, one-line messages and exit codes out.

Exit codes: 0 done; 1 no cluster runs there (every command but up), it would not stop (down),
or the request did not come to pass (elect: no leader; transfer: another leader; members: the
change refused or given up; stop-node, start-node: no such node; with the driver's or the
supervisor's reason on stderr; or the request was not taken up in time); 2 ``up`` refused
before starting anything (bad arguments or --config, a busy port, a data directory that cannot
be made, a cluster already running there)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from ..broker.config.environment import absolute_paths
from ..dirlock import AlreadyRunning, DirectoryLock
from ..dirlock import holders as lock_holders
from ..replication.model import NO_LEADER
from . import requests
from . import state as state_file
from . import status as cluster_status
from .driver import RECORD, LocalDriver
from .plan import (
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    DIRECTORY_FILE,
    LOCK_FILE,
    REPLACE_AFTER_S,
    STATE_FILE,
    NodeSpec,
    PlanError,
    check_distinct,
    node_config,
    node_member,
    plan_nodes,
    settle_defaults,
)
from .probe import bind_error, pid_alive
from .requests import ELECT, START_NODE, TRANSFER, Request
from .state import ClusterState, StateUnreadable
from .supervisor import Supervisor
from .tomlwrite import dumps


def _error(message: str) -> None:
    print(f"streamlet: {message}", file=sys.stderr)


def _user_config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:  # relative paths in it are relative to its folder, not to the nodes' config files
        return absolute_paths(tomllib.loads(path.read_text()), path.parent)
    except OSError as e:
        raise PlanError(f"cannot read config file {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise PlanError(f"config file {path} is not valid TOML: {e}") from e


def up(data_dir: Path, *, nodes: int, host: str, port: int, sbp_port: int | None,
       metrics_port: int | None, http_port: int | None, log_dir: Path | None,
       config: Path | None, log_level: str, replace_after: float = REPLACE_AFTER_S) -> int:
    """Run the cluster in the foreground until SIGINT or SIGTERM (cli/cluster.py: what each
    value is); a port None: its default, skipped on a node where it is taken."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    given = {"metrics_port": metrics_port, "http_port": http_port}
    log_dir = None if log_dir is None else Path(log_dir).absolute()
    try:
        if not replace_after >= 0:
            raise PlanError(f"--replace-after must be 0 (never) or more seconds, got "
                            f"{replace_after:g}")
        specs = plan_nodes(nodes, host, port, data_dir, sbp_port,
                           metrics_port=_or(given["metrics_port"], DEFAULT_METRICS_PORT),
                           http_port=_or(given["http_port"], DEFAULT_HTTP_PORT), log_dir=log_dir)
        defaults = {field for field, port in given.items() if port is None}
        check_distinct(settle_defaults(specs, defaults, set())[0])  # the ports given collide
        doc = node_config(_user_config(config), data_dir / DIRECTORY_FILE)
        dumps(doc)  # refuses what TOML cannot say, before anything starts
    except (PlanError, ValueError) as e:
        _error(str(e))
        return 2
    for folder, what in ((data_dir, "data directory"), (log_dir, "log directory")):
        try:
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            _error(f"cannot create {what} {folder}: {e.strerror}")
            return 2
    lock = DirectoryLock(data_dir / LOCK_FILE)
    try:
        lock.acquire()
    except AlreadyRunning as e:
        pid = f" (supervisor pid {e.pid})" if e.pid else ""
        _error(f"a cluster is already running in {data_dir}{pid}; "
               f"'streamlet cluster down --data-dir {data_dir}' stops it")
        return 2
    except OSError as e:
        _error(f"cannot lock {data_dir / LOCK_FILE}: {e.strerror}")
        return 2
    try:
        taken = {p for s in specs for field in defaults
                 if (p := getattr(s, field)) and bind_error(s.host, p) is not None}
        specs, notes = settle_defaults(specs, defaults, taken)
        for note in notes:
            _error(note)
        busy = [why for s in specs for p in s.ports().values()
                if (why := bind_error(s.host, p)) is not None]
        if busy:
            for why in busy:
                _error(why)
            return 2
        problem = _prepare(specs, doc, data_dir)
        if problem is not None:
            _error(problem)
            return 2
        from ..broker.protocols import load

        credentials = load(specs[0].config_file).replication_credentials
        driver = LocalDriver(data_dir, host, [s.port for s in specs], credentials,
                             replace_after=replace_after)
        supervisor = Supervisor(specs, data_dir, host, log_level=log_level,
                                directory_file=data_dir / DIRECTORY_FILE, drivers=[driver],
                                optional_ports=defaults)
        return asyncio.run(supervisor.run())
    finally:
        lock.release()


def _or(port: int | None, default: int) -> int:
    return default if port is None else port


def _prepare(specs: list[NodeSpec], doc: dict[str, Any], data_dir: Path) -> str | None:
    """Write each node's directory and configuration, and the (empty) stream directory; check
    the configuration as a broker will. Why not, or None."""
    from ..broker.config.model import ConfigError
    from ..broker.protocols import load

    directory = data_dir / DIRECTORY_FILE
    peers = [f"{s.host}:{s.port}" for s in specs]
    try:
        if not directory.exists():
            directory.write_text('{"streams": {}}\n')
        for s in specs:
            s.data_dir.mkdir(parents=True, exist_ok=True)
            s.config_file.write_text(dumps(node_member(doc, s.index, peers)))
    except OSError as e:
        return f"cannot write in {data_dir}: {e}"
    first = specs[0]
    try:
        load(first.config_file, host=first.host, port=first.port, data_dir=first.data_dir)
    except ConfigError as e:
        return str(e)
    return None


def _running(data_dir: Path) -> ClusterState | None:
    """The state of the cluster running in ``data_dir``, or None (after saying so)."""
    try:
        state = state_file.read(data_dir / STATE_FILE)
    except (StateUnreadable, OSError) as e:
        _error(f"no cluster running in {data_dir}: cannot read {STATE_FILE}: {e}")
        return None
    if state is None or not pid_alive(state.supervisor_pid):
        _error(f"no cluster running in {data_dir}")
        return None
    locked_by = lock_holders(data_dir / LOCK_FILE)
    if locked_by is not None and state.supervisor_pid not in locked_by:
        # a stale cluster.json (its supervisor was killed) whose pid now names another process
        _error(f"no cluster running in {data_dir} (pid {state.supervisor_pid} of "
               f"{STATE_FILE} does not hold {LOCK_FILE})")
        return None
    return state


async def status(data_dir: Path, as_json: bool) -> int:
    state = _running(data_dir)
    if state is None:
        return 1
    nodes = await cluster_status.gather_nodes(state)
    streams = await cluster_status.gather_streams(state, nodes, data_dir, _credentials(data_dir))
    if as_json:
        print(json.dumps(cluster_status.to_json(nodes, streams)))
    else:
        sys.stdout.write(cluster_status.table(state, nodes, streams=streams))
    return 0


def _credentials(data_dir: Path) -> tuple[str, str]:
    """The replication user's, from node 0's configuration (what the driver logs in with)."""
    from ..broker.config.model import ConfigError
    from ..broker.protocols import load

    try:
        return load(data_dir / "node-0" / "broker.toml").replication_credentials
    except (ConfigError, OSError):
        return "guest", "guest"


def down(data_dir: Path, timeout: float) -> int:
    state = _running(data_dir)
    if state is None:
        return 1
    pid = state.supervisor_pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            _error(f"the supervisor (pid {pid}) of the cluster in {data_dir} is still running "
                   f"after {timeout:.0f} s")
            return 1
        time.sleep(0.1)
    print(f"stopped the cluster in {data_dir} (supervisor pid {pid})")
    return 0


def _request(data_dir: Path, request: Request, timeout: float,
             who: str = "the placement driver") -> tuple[bool, str | None]:
    """Leave ``request``, wait until it has been acted on: (taken up in time, the outcome)."""
    requests.outcome(data_dir, request)  # an earlier request's, not taken up: not this one's
    target = requests.write(data_dir, request)
    deadline = time.monotonic() + timeout
    while target.exists():
        if time.monotonic() > deadline:
            target.unlink(missing_ok=True)
            _error(f"{who} did not take the request up in {timeout:.0f} s")
            return False, None
        time.sleep(0.1)
    return True, requests.outcome(data_dir, request)


def _record(data_dir: Path, stream: str) -> dict[str, Any] | None:
    try:
        record = json.loads((data_dir / RECORD).read_text()).get(stream)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def ask(data_dir: Path, request: Request, timeout: float) -> int:
    """Leave ``request`` for the running driver, wait until it has acted on it, and say what
    the stream's record is then, and why the driver did not do it when it did not."""
    if _running(data_dir) is None:
        return 1
    taken, why_not = _request(data_dir, request, timeout)
    if not taken:
        return 1
    record = _record(data_dir, request.stream)
    if record is None:
        _error(f"no replicated stream {request.stream} in {data_dir}")
        return 1
    if why_not is not None and request.kind == TRANSFER:
        _error(f"{request.stream} not moved to member {request.to}: {why_not}")
    elif why_not is not None and record["leader"] == NO_LEADER:
        _error(f"{request.stream}: {why_not}")
    leader, epoch = record["leader"], record["epoch"]
    if leader == NO_LEADER:
        print(f"stream {request.stream}: no leader in epoch {epoch}")
        return 1
    unclean = " (unclean election: messages confirmed without it may be lost)" if record.get(
        "unclean") else ""
    print(f"stream {request.stream}: member {leader} leads epoch {epoch}{unclean}")
    return 0 if request.kind == ELECT or leader == request.to else 1


def members(data_dir: Path, request: Request, timeout: float) -> int:
    """``cluster members STREAM --add|--remove N``: 0 once the new member set is recorded and
    assigned (printed); 1 with the driver's reason when it refused or gave the change up."""
    if _running(data_dir) is None:
        return 1
    taken, why_not = _request(data_dir, request, timeout)
    if not taken:
        return 1
    if why_not is not None:
        _error(f"{request.stream}: {request.change} member {request.to} not done: {why_not}")
        return 1
    record = _record(data_dir, request.stream)
    if record is None:
        _error(f"no replicated stream {request.stream} in {data_dir}")
        return 1
    print(f"stream {request.stream}: members {record['members']} in epoch {record['epoch']}, "
          f"led by member {record['leader']}")
    return 0


def rebalance(data_dir: Path, timeout: float) -> int:
    """``cluster rebalance``: the driver's moves, printed."""
    if _running(data_dir) is None:
        return 1
    taken, moves = _request(data_dir, Request(requests.REBALANCE), timeout)
    if not taken:
        return 1
    print(moves or "nothing moved")
    return 0


def node(data_dir: Path, request: Request, timeout: float) -> int:
    """``cluster stop-node N [--wipe]``, ``start-node N``: done by the supervisor; start-node
    waits until the node runs again."""
    if _running(data_dir) is None:
        return 1
    deadline = time.monotonic() + timeout
    taken, why_not = _request(data_dir, request, timeout, who="the supervisor")
    if not taken:
        return 1
    if why_not is not None:
        _error(why_not)
        return 1
    if request.kind == START_NODE:
        while True:
            state = _running(data_dir)
            if state is None:
                return 1
            if request.to is not None and state.nodes[request.to].alive:
                break
            if time.monotonic() > deadline:
                _error(f"node {request.to} is not running after {timeout:.0f} s")
                return 1
            time.sleep(0.1)
        print(f"node {request.to} started")
    else:
        print(f"node {request.to} stopped" + (", its data deleted" if request.wipe else "")
              + f": kept down until 'streamlet cluster start-node {request.to}'")
    return 0
