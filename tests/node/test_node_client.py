"""RabbitMQ's Node.js client (rabbitmq-stream-js-client from npm) against a real broker: connect
(it always sends ExchangeCommandVersions), publish, consume, stream stats, a super stream.

The package is installed with ``npm ci`` from package-lock.json into tests/node/node_modules,
with npm's cache in tests/node/.npm-cache (both git-ignored)."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.process

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def node_client() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed (make test installs them via .ci/install-system-deps)")
    installed = HERE / "node_modules" / "rabbitmq-stream-js-client" / "package.json"
    lock = HERE / "package-lock.json"
    stamp = HERE / "node_modules" / ".streamlet-installed"
    cache = HERE / ".npm-cache"
    cache.mkdir(exist_ok=True)
    # one npm ci at a time: xdist's workers may ask together (test modules sharing node_modules)
    with open(cache / "install.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not installed.exists() or not stamp.exists() or stamp.read_text() != lock.read_text():
            res = subprocess.run(["npm", "ci", "--cache", str(cache), "--no-audit",
                                  "--no-fund", "--prefer-offline"],
                                 cwd=HERE, capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, f"npm ci failed:\n{res.stdout}\n{res.stderr}"
            stamp.write_text(lock.read_text())
    return HERE / "run.js"


def test_node_client(node_client: Path, broker: BrokerProcess) -> None:
    res = subprocess.run(["node", str(node_client), broker.host, str(broker.port), "nodetest"],
                         capture_output=True, text=True, timeout=120)
    lines = res.stdout.strip().splitlines()
    assert lines, f"no report from node (rc {res.returncode}):\n{res.stderr}"
    report = json.loads(lines[-1])
    assert res.returncode == 0 and "error" not in report, f"{report}\n{res.stderr}"
    assert report == {
        "connected": True, "consumed": 500, "inOrder": True, "lastChunkId": report["lastChunkId"],
        "superStreamConsumed": 60, "superStreamAll": True,
    }
    assert report["lastChunkId"] >= 0
