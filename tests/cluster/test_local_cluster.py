"""`streamlet cluster up|status|down` as a user runs them: real supervisors and brokers on
loopback, every wait a bounded poll."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamlet.cluster.plan import plan_nodes
from streamlet.cluster.probe import bind_error, pid_alive, port_accepts
from streamlet.cluster.supervisor import Supervisor
from tests.support.raw import RawPeer

pytestmark = pytest.mark.process

HOST = "127.0.0.1"
# generous: brokers start on 2 shared cores, beside whatever else runs
START_S = 120.0
STOP_S = 60.0


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamlet", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something truthy (returned); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout} s; last seen: {last!r}")


def free_base(nodes: int) -> int:
    """A port P with P..P+nodes-1 all free, below Linux's ephemeral range (32768 and up), so
    no outgoing connection takes one of them while a node restarts."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - nodes)
        if all(bind_error(HOST, base + i) is None for i in range(nodes)):
            return base
    raise AssertionError("no free run of ports found")


def handshake(port: int) -> None:
    with RawPeer(HOST, port) as peer:
        peer.handshake()


def free_bases(nodes: int, count: int) -> list[int]:
    """``count`` bases of runs of ``nodes`` free ports, the runs apart."""
    bases: list[int] = []
    while len(bases) < count:
        base = free_base(nodes)
        if all(abs(base - b) >= nodes for b in bases):
            bases.append(base)
    return bases


class Cluster:
    """`streamlet cluster up` in the background, with its supervisor's stderr in a file. Its
    nodes serve no metrics or management API unless ``extra`` asks (up's defaults, 15692+i and
    15672+i, are contended for by every broker the tests start)."""

    def __init__(self, data_dir: Path, nodes: int, extra: list[str] | None = None) -> None:
        self.data_dir, self.nodes, self.extra = data_dir, nodes, list(extra or [])
        for flag in ("--metrics-port", "--http-port"):
            if flag not in self.extra:
                self.extra += [flag, "0"]
        self.log = data_dir.parent / f"{data_dir.name}-supervisor.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = 0

    def start(self) -> Cluster:
        for _ in range(5):  # a port taken between our look and up's: another base
            self.base = free_base(self.nodes)
            with open(self.log, "wb") as err:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "streamlet", "cluster", "up", "--nodes",
                     str(self.nodes), "--port", str(self.base), "--data-dir", str(self.data_dir),
                     *self.extra], stdout=subprocess.DEVNULL, stderr=err)
            try:
                wait_until(lambda: self.proc is not None and (self.proc.poll() is not None
                                                              or self.all_listening()),
                           START_S, "every node listening")
            except AssertionError:
                self.stop()
                raise
            if self.proc.returncode is None:
                return self
            if self.proc.returncode != 2 or "is busy" not in self.log_text():
                raise AssertionError(f"cluster up exited {self.proc.returncode}: "
                                     f"{self.log_text()}")
        raise AssertionError("ports kept being taken")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def state(self) -> dict[str, Any]:
        return json.loads((self.data_dir / "cluster.json").read_text())

    def ports(self) -> list[int]:
        return [self.base + i for i in range(self.nodes)]

    def all_listening(self) -> bool:
        try:
            state = self.state()
        except (OSError, ValueError):
            return False
        if not all(n["alive"] for n in state["nodes"]):
            return False
        for port in self.ports():
            try:
                socket.create_connection((HOST, port), timeout=1).close()
            except OSError:
                return False
        return True

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # its nodes get SIGTERM from the kernel (PR_SET_PDEATHSIG)
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cluster3") / "c", 3).start()
    yield c
    c.stop()


def status_json(data_dir: Path) -> dict[str, Any]:
    res = cli("cluster", "status", "--data-dir", str(data_dir), "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_up_runs_nodes_that_answer_and_status_lists_them(cluster3: Cluster) -> None:
    for port in cluster3.ports():
        handshake(port)
    status = status_json(cluster3.data_dir)
    state = cluster3.state()
    assert set(status) == {"nodes", "streams"} and status["streams"] == []
    assert [set(n) for n in status["nodes"]] == [
        {"index", "pid", "port", "alive", "metrics_port", "http_port", "log"}] * 3
    assert [(n["metrics_port"], n["http_port"], n["log"]) for n in status["nodes"]] == [
        (None, None, str(cluster3.data_dir / f"node-{i}" / "broker.log")) for i in range(3)]
    assert [(n["index"], n["port"], n["alive"]) for n in status["nodes"]] == [
        (i, cluster3.base + i, True) for i in range(3)]
    assert [n["pid"] for n in status["nodes"]] == [n["pid"] for n in state["nodes"]]
    assert cluster3.proc is not None and state["supervisor_pid"] == cluster3.proc.pid
    for n in status["nodes"]:  # the pids are the brokers themselves
        cmdline = Path(f"/proc/{n['pid']}/cmdline").read_bytes().split(b"\0")
        assert b"serve" in cmdline and str(n["port"]).encode() in cmdline
        assert (cluster3.data_dir / f"node-{n['index']}" / "broker.log").exists()
    config = (cluster3.data_dir / "node-0" / "broker.toml").read_text()
    assert f'directory_file = "{cluster3.data_dir / "directory.json"}"' in config
    table = cli("cluster", "status", "--data-dir", str(cluster3.data_dir))
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0] == f"supervisor pid {state['supervisor_pid']}, nodes on {HOST}"
    assert [line.split()[:6] for line in lines[2:]] == [
        [str(i), str(n["pid"]), str(cluster3.base + i), "-", "-", "up"]
        for i, n in enumerate(status["nodes"])]


def test_each_node_has_its_own_metrics_api_and_log(tmp_path: Path) -> None:
    """--metrics-port M --http-port H: node i's on M+i and H+i (the CLI's lists find node i's
    from its stream port); --log-dir: the logs outside the data directory, status names them."""
    metrics, http = free_bases(2, 2)
    logs = tmp_path / "logs"
    c = Cluster(tmp_path / "c", 2, ["--metrics-port", str(metrics), "--http-port", str(http),
                                    "--log-dir", str(logs)]).start()
    try:
        nodes = status_json(c.data_dir)["nodes"]
        assert [(n["metrics_port"], n["http_port"], n["log"]) for n in nodes] == [
            (metrics + i, http + i, str(logs / f"node-{i}.log")) for i in range(2)]
        for i, port in enumerate(c.ports()):
            assert "listening for rabbitmq" in (logs / f"node-{i}.log").read_text()
            assert not (c.data_dir / f"node-{i}" / "broker.log").exists()
            with urllib.request.urlopen(f"http://{HOST}:{metrics + i}/metrics", timeout=30) as r:
                assert b"# TYPE" in r.read()
            overview = urllib.request.Request(f"http://{HOST}:{http + i}/api/overview",
                                              headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
            with urllib.request.urlopen(overview, timeout=30) as r:
                assert {"protocol": "stream", "port": port} in [
                    {k: lst[k] for k in ("protocol", "port")} for lst in json.load(r)["listeners"]]
        made = cli("--port", str(c.ports()[1]), "streams", "create", "on-node-1")
        assert made.returncode == 0, made.stderr
        listed = cli("--port", str(c.ports()[1]), "streams", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [json.loads(line)["name"] for line in listed.stdout.splitlines()] == ["on-node-1"]
        table = cli("cluster", "status", "--data-dir", str(c.data_dir)).stdout.splitlines()
        assert table[1].split() == ["node", "pid", "port", "metrics", "http", "state",
                                    "restarts", "up", "for", "log"]
        assert [row.split()[3:5] + row.split()[-1:] for row in table[2:4]] == [
            [str(metrics + i), str(http + i), str(logs / f"node-{i}.log")] for i in range(2)]
    finally:
        assert c.stop() == 0, c.log_text()


def test_a_killed_node_is_restarted(cluster3: Cluster) -> None:
    before = cluster3.state()["nodes"][1]
    os.kill(before["pid"], signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        node = cluster3.state()["nodes"][1]
        return node if node["pid"] != before["pid"] and node["alive"] else None

    node = wait_until(restarted, START_S, "node 1 restarted")
    assert node["restarts"] == before["restarts"] + 1
    wait_until(lambda: status_json(cluster3.data_dir)["nodes"][1]["alive"], START_S,
               "node 1 alive in status")
    status = status_json(cluster3.data_dir)["nodes"][1]
    assert status["pid"] == node["pid"] and status["pid"] != before["pid"]
    handshake(cluster3.base + 1)
    others = [n["pid"] for n in cluster3.state()["nodes"]]
    assert all(pid_alive(p) for p in others)
    assert (f"node 1: pid {before['pid']} exited with signal SIGKILL" in cluster3.log_text()
            and "; restarting in 0.5 s" in cluster3.log_text())


def test_second_up_on_the_same_data_dir_is_refused(cluster3: Cluster) -> None:
    res = cli("cluster", "up", "--nodes", "1", "--port", str(free_base(1)),
              "--data-dir", str(cluster3.data_dir))
    assert res.returncode == 2
    assert (f"a cluster is already running in {cluster3.data_dir} "
            f"(supervisor pid {cluster3.state()['supervisor_pid']})") in res.stderr
    assert cluster3.proc is not None and cluster3.proc.poll() is None


def test_sigterm_stops_every_node_and_frees_the_ports(tmp_path: Path) -> None:
    """With a --config given to every broker: its user logs in on each node."""
    config = tmp_path / "users.toml"
    config.write_text('[[users]]\nname = "app"\npassword = "s3cret"\n')
    c = Cluster(tmp_path / "c", 2, ["--config", str(config)]).start()
    try:
        for port in c.ports():
            with RawPeer(HOST, port) as peer:
                peer.handshake("app", "s3cret")
        pids = [n["pid"] for n in c.state()["nodes"]]
    finally:
        code = c.stop()
    assert code == 0, c.log_text()
    assert not any(pid_alive(p) for p in pids)
    assert [bind_error(HOST, p) for p in c.ports()] == [None, None]
    assert not (c.data_dir / "cluster.json").exists()
    res = cli("cluster", "status", "--data-dir", str(c.data_dir))
    assert res.returncode == 1 and f"no cluster running in {c.data_dir}" in res.stderr
    assert "cluster stopped" in c.log_text()


def test_down_stops_the_cluster(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "c", 1).start()
    try:
        pid = c.state()["nodes"][0]["pid"]
        res = cli("cluster", "down", "--data-dir", str(c.data_dir), timeout=STOP_S + 10)
        assert res.returncode == 0, res.stderr
        assert c.proc is not None and c.proc.wait(STOP_S) == 0
        assert not pid_alive(pid)
        assert f"stopped the cluster in {c.data_dir}" in res.stdout
    finally:
        c.stop()


def test_a_busy_port_is_refused_by_its_number(tmp_path: Path) -> None:
    base = free_base(3)
    with socket.socket() as held:
        held.bind((HOST, base + 1))
        held.listen(1)
        res = cli("cluster", "up", "--nodes", "3", "--port", str(base),
                  "--data-dir", str(tmp_path / "c"))
    assert res.returncode == 2
    assert f"port {base + 1} is busy" in res.stderr
    assert not (tmp_path / "c" / "cluster.json").exists()
    assert not (tmp_path / "c" / "node-0").exists()  # nothing was started


def test_status_and_down_without_a_cluster(tmp_path: Path) -> None:
    for action in ("status", "down"):
        res = cli("cluster", action, "--data-dir", str(tmp_path))
        assert res.returncode == 1
        assert res.stderr == f"streamlet: no cluster running in {tmp_path}\n"
    # a supervisor that died without cleaning up (kill -9): its pid is gone
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    (tmp_path / "cluster.json").write_text(json.dumps(
        {"supervisor_pid": dead.pid, "host": HOST, "nodes": []}))
    res = cli("cluster", "status", "--data-dir", str(tmp_path), "--json")
    assert res.returncode == 1 and f"no cluster running in {tmp_path}" in res.stderr
    # ... or whose pid now names another process: not signalled
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "cluster.json").write_text(json.dumps(
            {"supervisor_pid": other.pid, "host": HOST, "nodes": []}))
        for action in ("status", "down"):
            res = cli("cluster", action, "--data-dir", str(tmp_path))
            assert res.returncode == 1 and f"no cluster running in {tmp_path}" in res.stderr
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize(("args", "message"), [
    (["--nodes", "0"], "--nodes must be in 1..9, got 0"),
    (["--nodes", "10"], "--nodes must be in 1..9, got 10"),
    (["--port", "65535", "--nodes", "2"], "ports 65535..65536 are not all in 1..65535"),
    (["--config", "/nonexistent/x.toml"], "cannot read config file /nonexistent/x.toml"),
    (["--port", "6000", "--nodes", "3", "--http-port", "6002"],
     "port 6002 would be both node 0's management API port and node 2's stream port"),
    (["--http-port", "65535", "--nodes", "2"],
     "--http-port: ports 65535..65536 are not all in 1..65535"),
    (["--metrics-port", "x"], "argument --metrics-port: must be an integer, not 'x'"),
    (["--replace-after", "-1"], "--replace-after must be 0 (never) or more seconds, got -1"),
])
def test_up_refuses_bad_arguments(tmp_path: Path, args: list[str], message: str) -> None:
    res = cli("cluster", "up", "--data-dir", str(tmp_path / "c"), *args)
    assert res.returncode == 2 and message in res.stderr, res.stderr


def test_up_refuses_a_config_every_node_cannot_share(tmp_path: Path) -> None:
    tls = tmp_path / "tls.toml"
    tls.write_text('[tls]\ncertfile = "c.pem"\nkeyfile = "k.pem"\n')
    res = cli("cluster", "up", "--data-dir", str(tmp_path / "c"), "--port", str(free_base(3)),
              "--config", str(tls))
    assert res.returncode == 2 and "cannot have [tls]" in res.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nheartbeat = 'often'\n")
    res = cli("cluster", "up", "--data-dir", str(tmp_path / "c"), "--port", str(free_base(3)),
              "--config", str(bad))
    assert res.returncode == 2 and "server.heartbeat must be an integer" in res.stderr
    assert not (tmp_path / "c" / "cluster.json").exists()


def test_cluster_help_at_every_level() -> None:
    top = cli("cluster", "--help").stdout
    assert all(action in top for action in ("up", "status", "down"))
    up = cli("cluster", "up", "--help").stdout
    for flag in ("--nodes", "--port", "--host", "--data-dir", "--config", "--log-level",
                 "--metrics-port", "--http-port", "--log-dir"):
        assert flag in up
    assert "--user" not in up
    assert "--json" in cli("cluster", "status", "--help").stdout
    assert "--timeout" in cli("cluster", "down", "--help").stdout
    refused = cli("--user", "x", "cluster", "status", "--data-dir", ".")
    assert refused.returncode == 2 and "--user: not an option of cluster status" in refused.stderr


async def test_a_driver_runs_beside_the_nodes_and_is_cancelled_at_stop(tmp_path: Path) -> None:
    """The plug-in point of a placement driver: it sees every change of the state, and is
    cancelled when the supervisor stops (here, at its own request, once node 0 answers)."""
    specs = plan_nodes(1, HOST, free_base(1), tmp_path, metrics_port=0, http_port=0)
    specs[0].data_dir.mkdir()
    specs[0].config_file.write_text("")

    class Recorder:
        def __init__(self) -> None:
            self.seen: list[tuple[int | None, bool]] = []
            self.cancelled = False

        async def run(self, supervisor: Supervisor) -> None:
            try:
                while True:
                    node = supervisor.state.nodes[0]
                    self.seen.append((node.pid, node.alive))
                    if node.alive and await port_accepts(HOST, node.port):
                        supervisor.stop()
                        await asyncio.sleep(STOP_S)  # cancelled before this ends
                    with contextlib.suppress(TimeoutError):  # a change, or a look at the port
                        await asyncio.wait_for(supervisor.changed(), 0.2)
            except asyncio.CancelledError:
                self.cancelled = True
                raise

    driver = Recorder()
    supervisor = Supervisor(specs, tmp_path, HOST, drivers=[driver])
    assert await asyncio.wait_for(supervisor.run(), START_S) == 0
    assert driver.cancelled
    pid = supervisor.state.nodes[0].pid
    assert pid is not None and (pid, True) in driver.seen and not pid_alive(pid)
    assert not (tmp_path / "cluster.json").exists()


async def test_a_default_port_taken_meanwhile_is_left_off_at_the_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A node whose default management API port something took while it was down restarts
    without it (said in the supervisor's log) instead of failing on it for ever."""
    http = free_base(1)
    specs = plan_nodes(1, HOST, free_base(1), tmp_path, metrics_port=0, http_port=http)
    specs[0].data_dir.mkdir()
    specs[0].config_file.write_text("")
    supervisor = Supervisor(specs, tmp_path, HOST, optional_ports={"http_port"})
    running = asyncio.create_task(supervisor.run())
    node = supervisor.state.nodes[0]
    held = socket.socket()
    try:
        await asyncio.wait_for(_until(lambda: node.alive and port_accepts(HOST, http)), START_S)
        first = node.pid
        assert first is not None and node.http_port == http
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:  # the port is free once the process is gone: take it before the restart
            try:
                held.bind((HOST, http))
                break
            except OSError:
                assert time.monotonic() < deadline, "the killed node's port never came free"
                await asyncio.sleep(0.01)
        held.listen(1)
        await asyncio.wait_for(_until(lambda: node.alive and node.pid != first
                                      and port_accepts(HOST, node.port)), START_S)
        assert node.http_port == 0
        assert (f"node 0: port {http} is taken: no management API on node 0"
                in caplog.text), caplog.text
    finally:
        held.close()
        supervisor.stop()
        assert await asyncio.wait_for(running, START_S) == 0


async def _until(check: Callable[[], Any]) -> None:
    """Poll ``check`` (its result awaited when it is a coroutine) until it is truthy."""
    while True:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return
        await asyncio.sleep(0.05)
