"""Client commands import what they use, never the broker: `streams info` once took 0.6 s
(1.2 s without bytecode) importing the broker through the create-refusal helper, and every
--protocol imported every protocol's client (SBP's pulls in flatbuffers and numpy). Each
command is run to its end against a real broker and the modules it imported are listed; a
--help imports only the parser's side of the command modules (no client, no asyncio)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from .support import every_protocol_broker

pytestmark = pytest.mark.process

#: runs the CLI, then lists the streamlet modules imported, on stderr's last line
WRAPPED = ("import atexit, sys\n"
           "atexit.register(lambda: print('MODULES', *sorted(m for m in sys.modules "
           "if m.startswith('streamlet.')), file=sys.stderr))\n"
           "from streamlet.cli.main import main\n"
           "sys.exit(main(sys.argv[1:]))\n")


def imported(*argv: str, stdin: bytes | None = None) -> set[str]:
    res = subprocess.run([sys.executable, "-c", WRAPPED, *argv], input=stdin,
                         capture_output=True, timeout=120, check=False)
    last = res.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("MODULES"), res.stderr
    return set(last.split()[1:])


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("lazy")
    b, ports = every_protocol_broker(root / "data")
    yield {p: ["--protocol", p, "--port", str(n)] if p != "rabbitmq" else ["--port", str(n)]
           for p, n in ports.items()}
    b.stop()


def _broker(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m == "streamlet.broker" or m.startswith("streamlet.broker."))


def _protocols(modules: set[str], *names: str) -> list[str]:
    """The modules of protocols ``names``: codec, client, the CLI's hooks."""
    return sorted(m for m in modules for n in names
                  if m in (f"streamlet.{n}", f"streamlet.client.{n}", f"streamlet.cli.protocols.{n}")
                  or m.startswith(f"streamlet.{n}."))


@pytest.mark.parametrize("argv", [
    ["ping"], ["streams", "create", "lazy"], ["streams", "info", "lazy"],
    ["produce", "lazy", "--count", "1"], ["consume", "lazy", "--count", "1"],
    ["streams", "delete", "lazy-nosuch"],
])
def test_rabbitmq_commands(node: dict[str, list[str]], argv: list[str]) -> None:
    got = imported(*argv[:1], *node["rabbitmq"], *argv[1:])
    assert "streamlet.client.client" in got or argv == ["ping"]
    assert _broker(got) == []
    assert _protocols(got, "mega", "rsio", "sbp") == []
    assert "streamlet.cli.protocols.commands" not in got


@pytest.mark.parametrize("protocol, others", [
    ("mega", ("rsio", "sbp")), ("rsio", ("sbp",)), ("sbp", ("rsio",))])
def test_other_protocols_import_their_own_client(node: dict[str, list[str]], protocol: str,
                                                 others: tuple[str, ...]) -> None:
    stream = f"lazy-{protocol}"
    got = imported("produce", *node[protocol], stream, "--create", stdin=b"x\n")
    got |= imported("consume", *node[protocol], stream, "--count", "1")
    assert {f"streamlet.client.{protocol}", f"streamlet.cli.protocols.{protocol}"} <= got
    assert _broker(got) == []
    assert _protocols(got, *others) == []
    assert not any(m.startswith("streamlet.cli.rabbitmq") for m in got), sorted(got)


@pytest.mark.parametrize("argv", [
    ["--help"], ["consume", "--help"], ["serve", "--help"], ["streams", "info", "--help"],
    ["perf", "--help"], ["cluster", "up", "--help"], ["connections", "list", "--help"]])
def test_help_imports_no_client(argv: list[str]) -> None:
    got = imported(*argv)
    assert not any(m.startswith("streamlet.client") for m in got), sorted(got)
    assert _broker(got) == []
    work = ("streamlet.cli.rabbitmq", "streamlet.cli.protocols.", "streamlet.cli.mgmt",
            "streamlet.perf", "streamlet.cluster.control", "asyncio")
    assert [m for m in got if m.startswith(work)] == []
