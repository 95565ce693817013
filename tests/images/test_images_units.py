"""tests/support/images.py's pure parts: why a machine cannot build, which base a Dockerfile
names and how podman stores that name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.images import RECIPE, ROOT, base_of, qualified, stale, unavailable

EVERY_TOOL = {"podman": "/usr/bin/podman", "runc": "/usr/sbin/runc",
              "debootstrap": "/usr/sbin/debootstrap"}


@pytest.mark.parametrize(("euid", "tools", "reason"), [
    (0, EVERY_TOOL, None),
    (0, {"podman": "/usr/bin/podman"},
     "needs runc, debootstrap: run .ci/install-system-deps (installs them as root)"),
    (1000, EVERY_TOOL, "needs root (debootstrap makes the base; podman's bridge networking)"),
    (1000, {}, "needs root (debootstrap makes the base; podman's bridge networking) and podman, "
               "runc, debootstrap (.ci/install-system-deps)"),
])
def test_unavailable(euid: int, tools: dict[str, str], reason: str | None) -> None:
    assert unavailable(euid, tools.get) == reason


@pytest.mark.parametrize(("name", "stored"), [
    ("python:3.11.11-slim-bookworm", "docker.io/library/python:3.11.11-slim-bookworm"),
    ("bitnami/kubectl:1.30", "docker.io/bitnami/kubectl:1.30"),
    ("ghcr.io/streamlet/broker:0.1.0", "ghcr.io/streamlet/broker:0.1.0"),
    ("localhost/debian:bookworm", "localhost/debian:bookworm"),
    ("registry:5000/python:3.11", "registry:5000/python:3.11"),
])
def test_qualified(name: str, stored: str) -> None:
    assert qualified(name) == stored


@pytest.mark.parametrize("dockerfile", ["broker_image/Dockerfile", "operator/Dockerfile",
                                        "spark-on-k8s/Dockerfile"])
def test_every_image_builds_from_the_base_the_stand_in_replaces(dockerfile: str) -> None:
    assert base_of(ROOT / dockerfile) == "python:3.11.11-slim-bookworm"


def test_base_of_a_file_without_from(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("# nothing\n")
    with pytest.raises(ValueError, match="no FROM"):
        base_of(tmp_path / "Dockerfile")


BASE = "docker.io/library/python:3.11.11-slim-bookworm"


@pytest.mark.parametrize(("label", "made_again"), [
    ("", False),  # the real image, pulled: kept
    ("\n", False),
    (f"{BASE} {RECIPE}\n", False),  # made by this recipe
    (f"{BASE} 0123456789ab\n", True),  # by an older one
    (f"docker.io/library/python:3.12 {RECIPE}", False),  # not a label we wrote for this base
    ("something else entirely", False),
])
def test_a_stand_in_of_another_recipe_is_made_again(label: str, made_again: bool) -> None:
    assert stale(label, BASE) is made_again
