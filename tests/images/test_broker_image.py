"""broker_image/Dockerfile, built as written and run: a client on the host publishes and consumes
through the container's published port, and the broker in it runs every C extension.

Runs as root with podman, runc and debootstrap (.ci/install-system-deps installs them); skips
elsewhere, saying why. No Docker Hub: the base the Dockerfile names is made here once
(tests/support/images.py) and reused by later runs. The container uses podman's bridge
networking, which turns on net.ipv4.ip_forward and adds podman's iptables chains on the host.
The container and the image tag are removed at the end. Times: docs/development.md#the-images.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from streamlet.client import ConnectionClosed, connect
from streamlet.native import MODULES
from tests.support import images
from tests.support.brokers import free_port
from tests.support.scrape import scrape
from tests.support.waiting import eventually

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(2400)]

DOCKERFILE = "broker_image/Dockerfile"
USER, PASSWORD = "app", "image-test"
# guest is loopback only, and a client through a published port is not on the container's
# loopback: the operator's way, a config file (here a user of its own)
CONFIG = f'[[users]]\nname = "{USER}"\npassword = "{PASSWORD}"\n'


async def test_the_broker_image_builds_runs_and_serves_with_its_c_extensions(
        podman: images.Podman, image: str, tmp_path: Path) -> None:
    times: dict[str, float] = {}
    with images.timed(times, "base"):
        images.python_base(podman, images.ROOT / DOCKERFILE)
    with images.timed(times, "build"):
        images.build(podman, DOCKERFILE, image)
    config = tmp_path / "streamlet.toml"
    config.write_text(CONFIG)
    config.chmod(0o644)  # the image runs as uid 10001
    port, metrics = free_port(), free_port()
    with images.Container(podman, image, {5552: port, 15692: metrics},
                   options=("--volume", f"{config}:/etc/streamlet/streamlet.toml:ro"),
                   args=("serve", "--config", "/etc/streamlet/streamlet.toml",
                         "--host", "0.0.0.0", "--data-dir", "/var/lib/streamlet")) as box:
        with images.timed(times, "answers"):
            client = await eventually(lambda: _connected(port), timeout=120,
                                      what=f"the broker in the container on port {port}")
        async with client:
            await client.create_stream("image-check")
            producer = await client.producer("image-check", reference="image")
            await producer.send_many(b"message %d" % i for i in range(1000))
            await producer.flush()
            consumer = await client.consumer("image-check", offset="first")
            bodies = []
            async with asyncio.timeout(60):
                async for message in consumer:
                    bodies.append(message.body)
                    if len(bodies) == 1000:
                        break
        assert bodies == [b"message %d" % i for i in range(1000)]

        samples = await scrape(metrics)
        loaded = {dict(labels)["module"]: value for (name, labels), value in samples.items()
                  if name == "streamlet_native_extensions"}
        assert loaded == dict.fromkeys(MODULES, 1.0), box.logs()
        assert "C extensions" not in box.logs()  # neither missing nor turned off
        assert box.exec("id", "-u").strip() == "10001"
    assert not box.exists()
    print(f"image test seconds: {times}")  # shown with -s: the figures docs/development.md gives


async def _connected(port: int) -> object:
    try:
        return await connect("127.0.0.1", port, user=USER, password=PASSWORD, timeout=10)
    except (OSError, TimeoutError, ConnectionClosed):  # not listening yet
        return None
