"""operator/Dockerfile, built as written and started: `streamlet-operator --help` runs (kopf and
the operator's modules import) and the streamlet package in it runs every C extension.

Runs where tests/images/test_broker_image.py does (root, podman, runc, debootstrap) and skips
elsewhere; the same bases, made once. The image tag is removed at the end.
"""

from __future__ import annotations

import json

import pytest

from streamlet.native import MODULES
from tests.support import images

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(2400)]

DOCKERFILE = "operator/Dockerfile"
SURVEY = ("import json, streamlet_operator.handlers; from streamlet.native import survey; "
          "print(json.dumps(survey()))")


def test_the_operator_image_builds_and_starts(podman: images.Podman, image: str) -> None:
    images.python_base(podman, images.ROOT / DOCKERFILE)
    images.build(podman, DOCKERFILE, image)
    usage = podman.run("run", "--rm", image, "--help", timeout=120).stdout
    assert "run the kopf operator with streamlet's handlers" in usage, usage
    survey = podman.run("run", "--rm", "--entrypoint", "python", image, "-c", SURVEY,
                        timeout=120).stdout
    assert json.loads(survey) == dict.fromkeys(MODULES, True)
    assert podman.run("run", "--rm", "--entrypoint", "id", image, "-u").stdout.strip() == "10001"
