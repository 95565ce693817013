"""The image tests' fixtures: podman as tests/support/images.py runs it (the test skips, saying
why, where it cannot), and a fresh image tag removed after the test with all its build made."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support import images


@pytest.fixture(scope="module")
def podman() -> images.Podman:
    reason = images.unavailable()
    if reason is not None:
        pytest.skip(reason)
    podman = images.Podman(images.cache_dir())
    probe = podman.run("info", check=False, timeout=120)
    if probe.returncode != 0:  # e.g. in a container without the privileges it needs
        pytest.skip(f"podman cannot run here: podman info failed: {probe.stderr[-500:]}")
    return podman


@pytest.fixture
def image(podman: images.Podman) -> Iterator[str]:
    tag = f"localhost/streamlet-test:{uuid.uuid4().hex[:10]}"
    yield tag
    podman.remove_image(tag)
    assert not podman.exists(tag)
