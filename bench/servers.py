"""Start and stop the two brokers under test, each in a private temporary directory.

RabbitMQ is Debian's package driven through its own scripts in /usr/lib/rabbitmq/bin (the
/usr/sbin wrappers ``su`` to the rabbitmq user and drop our environment), with every path,
port and the epmd port set by environment so nothing under /etc or /var/lib is used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
REPO = Path(__file__).resolve().parent.parent


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_port(port: int, timeout: float, alive: callable | None = None) -> None:  # type: ignore[valid-type]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port):
            return
        if alive is not None and not alive():
            raise ServerError(f"server exited before listening on {port}")
        time.sleep(0.1)
    raise ServerError(f"nothing listening on 127.0.0.1:{port} after {timeout:.0f} s")


def rss_bytes(pid: int) -> int:
    """Resident set size from /proc (VmRSS), 0 if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


@dataclass
class Server:
    """A running broker: where to connect and which process to measure."""

    name: str
    port: int
    pid: int = 0
    data_dir: Path = field(default_factory=Path)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# streamlet


@dataclass
class Streamlet(Server):
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    #: the other protocols' listeners on the same broker (the protocols workload): name -> port
    protocol_ports: dict[str, int] = field(default_factory=dict)

    @classmethod
    def start(cls, root: Path, port: int = 0) -> Streamlet:
        port = port or free_port()
        others = {"mega": free_port(), "rsio": free_port(), "sbp": free_port()}
        data = root / "streamlet-data"
        data.mkdir(parents=True, exist_ok=True)
        log = root / "streamlet.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "broker_image"), env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "streamlet", "serve", "--host", "127.0.0.1",
               "--port", str(port), "--data-dir", str(data),
               "--mega-port", str(others["mega"]), "--rsio-port", str(others["rsio"]),
               "--sbp-port", str(others["sbp"])]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=root, start_new_session=True)
        srv = cls("streamlet", port, proc.pid, data, proc, log, others)
        try:
            for p in (port, *others.values()):
                wait_port(p, 30, lambda: proc.poll() is None)
        except ServerError as e:
            srv.stop()
            raise ServerError(f"{e}; log: {log.read_text()[-2000:]}") from e
        return srv

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def streamlet_available() -> bool:
    """True once the broker package has a runnable ``serve``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "broker_image")
    r = subprocess.run([sys.executable, "-m", "streamlet", "serve", "--help"], env=env,
                       capture_output=True, timeout=60)
    return r.returncode == 0


# ---------------------------------------------------------------------------------------------
# RabbitMQ


def rabbitmq_installed() -> bool:
    return (RABBIT_BIN / "rabbitmq-server").exists()


def install_rabbitmq() -> None:
    """Debian's rabbitmq-server (3.10.8 on bookworm); the package does not start it."""
    if rabbitmq_installed():
        return
    if os.geteuid() != 0:
        raise ServerError("rabbitmq-server is not installed and installing it needs root")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    epmd_before = port_open(4369)
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", "rabbitmq-server"], check=True, env=env)
    if not epmd_before and port_open(4369):
        _kill_epmd(4369)  # the package's scripts may leave the default epmd behind


def _kill_epmd(port: int) -> None:
    """Stop the epmd on ``port`` if no Erlang node is registered with it any more."""
    epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        names = subprocess.run([epmd, "-port", str(port), "-names"], capture_output=True,
                               text=True, timeout=10)
        if names.returncode == 0 and "name " not in names.stdout:
            subprocess.run([epmd, "-port", str(port), "-kill"], capture_output=True, timeout=10)


_RABBIT_CONF = """\
listeners.tcp.default = 127.0.0.1:{amqp}
stream.listeners.tcp.1 = 127.0.0.1:{stream}
stream.advertised_host = 127.0.0.1
stream.advertised_port = {stream}
distribution.listener.interface = 127.0.0.1
management.tcp.port = {mgmt}
log.console = false
log.file.level = warning
loopback_users.guest = true
"""


@dataclass
class RabbitMQ(Server):
    env: dict[str, str] = field(default_factory=dict)
    nodename: str = "rabbit-bench@localhost"
    epmd_port: int = 4370

    @classmethod
    def start(cls, root: Path, stream_port: int = 5553, amqp_port: int = 5673,
              epmd_port: int = 4370, nodename: str = "rabbit-bench@localhost") -> RabbitMQ:
        install_rabbitmq()
        for p in (stream_port, amqp_port):
            if port_open(p):
                raise ServerError(f"port {p} is already in use: is another RabbitMQ running?")
        base = root / "rabbitmq"
        for sub in ("mnesia", "log", "home"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        conf = base / "rabbitmq.conf"
        conf.write_text(_RABBIT_CONF.format(amqp=amqp_port, stream=stream_port,
                                            mgmt=free_port()))
        plugins = base / "enabled_plugins"
        plugins.write_text("[rabbitmq_stream].\n")
        env_file = base / "rabbitmq-env.conf"
        env_file.write_text("")
        env = dict(os.environ)
        env.update({
            "HOME": str(base / "home"),  # the Erlang cookie goes here, not in /root
            "RABBITMQ_CONF_ENV_FILE": str(env_file),
            "RABBITMQ_CONFIG_FILE": str(conf),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
            "RABBITMQ_PID_FILE": str(base / "rabbit.pid"),
            "RABBITMQ_NODENAME": nodename,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(amqp_port),
            "RABBITMQ_DIST_PORT": str(amqp_port + 20000),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(epmd_port),
        })
        srv = cls("rabbitmq", stream_port, 0, base / "mnesia", env, nodename, epmd_port)
        with open(base / "log" / "server-stdout.log", "wb") as out:
            subprocess.run([str(RABBIT_BIN / "rabbitmq-server"), "-detached"], env=env,
                           cwd=base, stdout=out, stderr=subprocess.STDOUT, check=True)
        try:
            srv.pid = srv._find_beam()
            wait_port(stream_port, 90, lambda: rss_bytes(srv.pid) > 0)
        except ServerError:
            srv.stop()
            raise
        return srv

    def _find_beam(self) -> int:
        """The beam.smp process started with our private HOME."""
        return _find_beam(self.env["HOME"])

    def ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(RABBIT_BIN / "rabbitmqctl"), "-n", self.nodename, *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout)

    def stop(self) -> None:
        """Stop the node, then our private epmd (it outlives the node)."""
        if (self.pid and rss_bytes(self.pid)) or port_open(self.port):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.ctl("stop", timeout=60)
            deadline = time.monotonic() + 20
            while rss_bytes(self.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if self.pid and rss_bytes(self.pid):
                os.kill(self.pid, signal.SIGKILL)
        _kill_epmd(self.epmd_port)


# ---------------------------------------------------------------------------------------------
# three-member clusters (the replicated workload)


def _pid_of_port(nodes: list[tuple[int, int]], port: int) -> int:
    """The pid of the node listening on ``port`` among (port, pid) pairs; 0 if none."""
    return next((pid for p, pid in nodes if p == port), 0)


@dataclass
class ClusterServer(Server):
    """Three brokers on loopback. ``port`` is node 0's; ``ports`` every node's. ``rss`` and
    ``cpu`` are sums over the nodes' broker processes (the table's columns for the cluster)."""

    ports: list[int] = field(default_factory=list)

    def node_pids(self) -> list[int]:  # pragma: no cover - overridden
        raise NotImplementedError

    def pid_on_port(self, port: int) -> int:
        return _pid_of_port(list(zip(self.ports, self.node_pids(), strict=True)), port)

    def rss(self) -> int:
        return sum(rss_bytes(p) for p in self.node_pids() if p)

    def cpu(self) -> float:
        return sum(cpu_seconds(p) for p in self.node_pids() if p)

    def leader_port(self, stream: str) -> int | None:  # pragma: no cover - overridden
        raise NotImplementedError

    def ensure_up(self, timeout: float = 120) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def add_baseline(self, stream: str) -> int:  # pragma: no cover - overridden
        """What the new member must reach, looked at before the add (add-member)."""
        raise NotImplementedError

    def add_member(self, stream: str, port: int) -> None:  # pragma: no cover - overridden
        """Make the node on ``port`` a member of ``stream`` with the server's own tool."""
        raise NotImplementedError

    def member_in_sync(self, stream: str, port: int,
                       baseline: int) -> bool | None:  # pragma: no cover - overridden
        """Whether the server's own status says the member on ``port`` holds ``baseline``;
        None when its status does not say."""
        raise NotImplementedError


def consecutive_free_ports(n: int, tries: int = 50) -> int:
    """A port P with P .. P+n-1 all free on loopback."""
    for _ in range(tries):
        p = free_port()
        if p + n < 65536 and not any(port_open(p + i) for i in range(n)):
            return p
    raise ServerError(f"no {n} consecutive free ports found")


def leader_from_directory(doc: object, stream: str) -> int | None:
    """The leader's port in a ``cluster up`` stream directory (``directory.json``:
    ``{"streams": {name: {"leader": "host:port" | null, ...}}}``); None when absent."""
    try:
        leader = doc["streams"][stream]["leader"]  # type: ignore[index]
    except (KeyError, TypeError):
        return None
    if not isinstance(leader, str) or ":" not in leader:
        return None
    try:
        return int(leader.rpartition(":")[2])
    except ValueError:
        return None


def rabbit_in_sync(status: list[dict[str, Any]], node: str, last: int) -> bool:
    """Whether ``rabbitmq-streams stream_status --formatter json`` rows show ``node`` as a
    member whose log reaches offset ``last`` (its ``offset``: the last one it holds;
    ``committed_offset`` is the id of the committed chunk, the chunk's first offset)."""
    return any(r.get("node") == node and isinstance(r.get("offset"), int)
               and r["offset"] >= last >= 0 for r in status)


def rabbit_last(status: list[dict[str, Any]]) -> int:
    """The writer's last offset in ``stream_status`` rows; -1 when there is no writer."""
    return max((int(r.get("offset", -1)) for r in status if r.get("role") == "writer"),
               default=-1)


def streamlet_in_sync(doc: dict[str, Any], stream: str, member: int) -> bool | None:
    """Whether ``streamlet cluster status --json`` names ``member`` among the members and the
    in-sync members of ``stream``; None when the stream's entry names no in-sync members."""
    for s in doc.get("streams", []):
        if s.get("name") == stream:
            if "in_sync" not in s:
                return None
            return member in s.get("members", []) and member in s["in_sync"]
    return False


@dataclass
class StreamletCluster(ClusterServer):
    """``python -m streamlet cluster up --nodes 3``: the supervisor, three brokers and the
    placement driver, data in ``data_dir``."""

    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @classmethod
    def start(cls, root: Path, nodes: int = 3, timeout: float = 60,
              tries: int = 3) -> StreamletCluster:
        data = root / "streamlet-cluster"
        data.mkdir(parents=True, exist_ok=True)
        log = root / "streamlet-cluster.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "broker_image"), env.get("PYTHONPATH", "")) if p)
        for attempt in range(1, tries + 1):
            port = consecutive_free_ports(nodes)
            cmd = [sys.executable, "-m", "streamlet", "cluster", "up", "--nodes", str(nodes),
                   "--port", str(port), "--data-dir", str(data),
                   "--metrics-port", "0", "--http-port", "0"]  # measured: the stream ports only
            with open(log, "wb") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                        cwd=root, start_new_session=True)
            srv = cls("streamlet", port, proc.pid, data, [port + i for i in range(nodes)], proc,
                      log)
            try:
                srv.ensure_up(timeout)
                return srv
            except ServerError as e:
                srv.stop()
                said = log.read_text()
                if attempt < tries and "is busy" in said:
                    continue  # a port found free was taken before cluster up got it: others
                raise ServerError(f"{e}; log: {said[-2000:]}") from e
        raise AssertionError("unreachable")

    def node_pids(self) -> list[int]:
        """Each node's broker pid from cluster.json (0 when unknown: not started, restarting)."""
        import json

        try:
            nodes = json.loads((self.data_dir / "cluster.json").read_text())["nodes"]
            by_port = {int(n["port"]): int(n.get("pid") or 0) for n in nodes}
        except (OSError, ValueError, KeyError, TypeError):
            by_port = {}
        return [by_port.get(p, 0) for p in self.ports]

    def leader_port(self, stream: str) -> int | None:
        import json

        try:
            doc = json.loads((self.data_dir / "directory.json").read_text())
        except (OSError, ValueError):
            return None
        return leader_from_directory(doc, stream)

    def _cluster(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``python -m streamlet cluster ACTION ... --data-dir D`` on this cluster."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "broker_image"), env.get("PYTHONPATH", "")) if p)
        return subprocess.run([sys.executable, "-m", "streamlet", "cluster", *args,
                               "--data-dir", str(self.data_dir)], env=env, capture_output=True,
                              text=True, timeout=timeout)

    def add_baseline(self, stream: str) -> int:
        return 0  # cluster status says in_sync itself

    def add_member(self, stream: str, port: int) -> None:
        """``cluster members STREAM --add I``: exit 0 once the new member set is recorded."""
        r = self._cluster("members", stream, "--add", str(self.ports.index(port)), timeout=900)
        if r.returncode != 0:
            raise ServerError(f"cluster members {stream} --add: exit {r.returncode}: "
                              f"{(r.stdout + r.stderr)[-500:]}")

    def member_in_sync(self, stream: str, port: int, baseline: int) -> bool | None:
        """``cluster status --json`` names the node among ``stream``'s in-sync members."""
        import json

        r = self._cluster("status", "--json", timeout=30)
        try:
            return r.returncode == 0 and streamlet_in_sync(json.loads(r.stdout), stream,
                                                           self.ports.index(port))
        except ValueError:
            return False

    def ensure_up(self, timeout: float = 60) -> None:
        """Every node listening and named with a live pid in cluster.json."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerError(f"cluster up exited with {self.proc.returncode}")
            pids = self.node_pids()
            if all(pids) and all(rss_bytes(p) for p in pids) and all(map(port_open, self.ports)):
                return
            time.sleep(0.1)
        raise ServerError(f"streamlet cluster not up on {self.ports} after {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)  # the supervisor stops its brokers
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


_RABBIT_CLUSTER_CONF = _RABBIT_CONF + """\
distribution.listener.port_range.min = {dist}
distribution.listener.port_range.max = {dist}
"""


@dataclass
class RabbitNode:
    nodename: str
    stream_port: int
    env: dict[str, str]
    base: Path
    pid: int = 0


@dataclass
class RabbitCluster(ClusterServer):
    """Three RabbitMQ nodes (``r3bench1..3@localhost``) joined into one cluster, each with its
    own directory under ``root/rabbitmq-cluster``, all on a private epmd port (4371)."""

    nodes: list[RabbitNode] = field(default_factory=list)
    epmd_port: int = 4371

    @classmethod
    def start(cls, root: Path, stream_port: int = 5563, amqp_port: int = 5683,
              epmd_port: int = 4371, n: int = 3, timeout: float = 120) -> RabbitCluster:
        """Up and clustered within ``timeout`` seconds, or stopped and ServerError."""
        install_rabbitmq()
        deadline = time.monotonic() + timeout
        ports = [stream_port + i for i in range(n)]
        for p in ports + [amqp_port + i for i in range(n)]:
            if port_open(p):
                raise ServerError(f"port {p} is already in use: is another RabbitMQ running?")
        top = root / "rabbitmq-cluster"
        srv = cls("rabbitmq", ports[0], 0, top, ports, [], epmd_port)
        cookie = "STREAMLETBENCHCOOKIE"
        for i in range(n):
            base = top / f"node{i + 1}"
            for sub in ("mnesia", "log", "home"):
                (base / sub).mkdir(parents=True, exist_ok=True)
            ck = base / "home" / ".erlang.cookie"
            ck.write_text(cookie)
            ck.chmod(0o600)
            conf = base / "rabbitmq.conf"
            conf.write_text(_RABBIT_CLUSTER_CONF.format(
                amqp=amqp_port + i, stream=ports[i], mgmt=free_port(), dist=amqp_port + i + 20000))
            (base / "enabled_plugins").write_text("[rabbitmq_stream].\n")
            (base / "rabbitmq-env.conf").write_text("")
            env = dict(os.environ)
            env.update({
                "HOME": str(base / "home"),
                "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
                "RABBITMQ_CONFIG_FILE": str(conf),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
                "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
                "RABBITMQ_LOG_BASE": str(base / "log"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
                "RABBITMQ_PID_FILE": str(base / "rabbit.pid"),
                "RABBITMQ_NODENAME": f"r3bench{i + 1}@localhost",
                "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
                "RABBITMQ_NODE_PORT": str(amqp_port + i),
                "RABBITMQ_DIST_PORT": str(amqp_port + i + 20000),
                "ERL_EPMD_ADDRESS": "127.0.0.1",
                "ERL_EPMD_PORT": str(epmd_port),
            })
            srv.nodes.append(RabbitNode(env["RABBITMQ_NODENAME"], ports[i], env, base))
        try:
            for node in srv.nodes:
                srv._launch(node)
            for node in srv.nodes:
                srv._await(node, deadline)
            first = srv.nodes[0].nodename
            for node in srv.nodes[1:]:
                for args in (("stop_app",), ("join_cluster", first), ("start_app",)):
                    r = srv._ctl(node, *args, timeout=max(1.0, deadline - time.monotonic()))
                    if r.returncode != 0:
                        raise ServerError(f"{node.nodename} {' '.join(args)}: "
                                          f"{(r.stdout + r.stderr)[-500:]}")
            for node in srv.nodes:
                wait_port(node.stream_port, max(1.0, deadline - time.monotonic()))
        except (ServerError, subprocess.TimeoutExpired, OSError) as e:
            srv.stop()
            raise ServerError(f"RabbitMQ cluster not up within {timeout:.0f} s: {e}") from e
        srv.pid = srv.nodes[0].pid
        return srv

    def _launch(self, node: RabbitNode) -> None:
        with open(node.base / "log" / "server-stdout.log", "ab") as out:
            subprocess.run([str(RABBIT_BIN / "rabbitmq-server"), "-detached"], env=node.env,
                           cwd=node.base, stdout=out, stderr=subprocess.STDOUT, check=True)

    def _await(self, node: RabbitNode, deadline: float) -> None:
        """Registered (ping answers), then booted (await_startup); its beam.smp pid."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerError(f"{node.nodename} did not answer ping")
            r = subprocess.run([str(RABBIT_BIN / "rabbitmq-diagnostics"), "-q", "-n",
                                node.nodename, "ping"], env=node.env, capture_output=True,
                               text=True, timeout=max(1.0, left))
            if r.returncode == 0:
                break
            time.sleep(1.0)
        r = self._ctl(node, "await_startup", timeout=max(1.0, deadline - time.monotonic()))
        if r.returncode != 0:
            raise ServerError(f"{node.nodename} await_startup: {(r.stdout + r.stderr)[-500:]}")
        node.pid = _find_beam(node.env["HOME"])

    def _ctl(self, node: RabbitNode, *args: str,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(RABBIT_BIN / "rabbitmqctl"), "-n", node.nodename, *args],
                              env=node.env, capture_output=True, text=True, timeout=timeout)

    def node_pids(self) -> list[int]:
        return [n.pid for n in self.nodes]

    def leader_port(self, stream: str) -> int | None:
        """The writer's node, from ``rabbitmq-streams stream_status`` on a live node."""
        for node in self.nodes:
            if not rss_bytes(node.pid):
                continue
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                r = subprocess.run([str(RABBIT_BIN / "rabbitmq-streams"), "-q", "-n",
                                    node.nodename, "stream_status", stream],
                                   env=node.env, capture_output=True, text=True, timeout=30)
                for line in r.stdout.splitlines():
                    if "writer" in line:
                        for other in self.nodes:
                            if other.nodename in line:
                                return other.stream_port
        return None

    def _streams(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``rabbitmq-streams -n NODE ...`` on the first live node."""
        node = next((n for n in self.nodes if rss_bytes(n.pid)), self.nodes[0])
        return subprocess.run([str(RABBIT_BIN / "rabbitmq-streams"), "-q", "-n", node.nodename,
                               *args], env=node.env, capture_output=True, text=True,
                              timeout=timeout)

    def stream_status(self, stream: str) -> list[dict[str, Any]]:
        """``stream_status --formatter json``: a row per member; [] when it cannot be had."""
        import json

        with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
            r = self._streams("stream_status", stream, "--formatter", "json", timeout=30)
            rows = json.loads(r.stdout) if r.returncode == 0 else []
            return [x for x in rows if isinstance(x, dict)] if isinstance(rows, list) else []
        return []

    def add_baseline(self, stream: str) -> int:
        """The writer's last offset before the add (every message was confirmed: committed)."""
        return rabbit_last(self.stream_status(stream))

    def add_member(self, stream: str, port: int) -> None:
        """``rabbitmq-streams add_replica STREAM NODE``."""
        node = next(n.nodename for n in self.nodes if n.stream_port == port)
        r = self._streams("add_replica", stream, node, timeout=300)
        if r.returncode != 0:
            raise ServerError(f"add_replica {stream} {node}: exit {r.returncode}: "
                              f"{(r.stdout + r.stderr)[-500:]}")

    def member_in_sync(self, stream: str, port: int, baseline: int) -> bool:
        """``stream_status`` shows the node's log reaching the writer's last offset of before."""
        node = next(n.nodename for n in self.nodes if n.stream_port == port)
        return rabbit_in_sync(self.stream_status(stream), node, baseline)

    def ensure_up(self, timeout: float = 120) -> None:
        """Start again any node that is gone (a failover killed it); it rejoins by itself."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            if not rss_bytes(node.pid):
                self._launch(node)
                self._await(node, deadline)
                wait_port(node.stream_port, max(1.0, deadline - time.monotonic()))
        self.pid = self.nodes[0].pid

    def stop(self) -> None:
        """Stop every node (rabbitmqctl stop, SIGKILL after 20 s), then the private epmd."""
        for node in self.nodes:
            if not node.pid:
                with contextlib.suppress(ServerError):
                    node.pid = _find_beam(node.env["HOME"], timeout=0.5)
            if rss_bytes(node.pid) or port_open(node.stream_port):
                with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                    self._ctl(node, "stop", timeout=60)
        deadline = time.monotonic() + 20
        for node in self.nodes:
            while node.pid and rss_bytes(node.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if node.pid and rss_bytes(node.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGKILL)
        _kill_epmd(self.epmd_port)


def _find_beam(home: str, timeout: float = 30) -> int:
    """The beam.smp process started with HOME ``home`` (3.10 passes the node name by
    environment, not on the command line)."""
    key = home.encode()
    deadline = time.monotonic() + timeout
    while True:
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"beam.smp") and key in cmd:
                return int(d.name)
        if time.monotonic() >= deadline:
            raise ServerError(f"no beam.smp process found with HOME {home}")
        time.sleep(0.2)
