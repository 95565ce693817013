"""The images ship compiled bytecode and their C extensions, checked in their Dockerfiles.

The broker's and operator's build compiles the whole venv with unchecked-hash .pyc files (they
run as a user who cannot write their Python trees, and a module without its .pyc is compiled at
every start); nothing removes __pycache__ afterwards. Each image builds the C extensions
(streamlet.native.MODULES) with gcc in a build stage only, and imports every C module after the
pip step, so a build where one did not compile fails. Why: docs/development.md#the-c-extensions.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamlet.native import MODULES

ROOT = Path(__file__).resolve().parents[2]


def _runs(dockerfile: Path) -> list[str]:
    """The RUN instructions, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    return [line[4:] for line in text.splitlines() if line.startswith("RUN ")]


@pytest.mark.parametrize("dockerfile", ["broker_image/Dockerfile", "operator/Dockerfile"])
def test_broker_and_operator_compile_their_venv(dockerfile: str) -> None:
    runs = " && ".join(_runs(ROOT / dockerfile))
    install = runs.index("pip install")
    compiled = re.search(r"python -m compileall .*--invalidation-mode unchecked-hash\s+"
                         r"/opt/streamlet/lib", runs)
    assert compiled is not None and compiled.start() > install, runs
    assert "__pycache__" not in runs[install:], runs


def test_spark_keeps_what_pip_compiles() -> None:
    text = (ROOT / "spark-on-k8s/Dockerfile").read_text()
    runs = " && ".join(_runs(ROOT / "spark-on-k8s/Dockerfile"))
    assert "pip install" in runs and "--no-compile" not in runs
    assert "__pycache__" not in runs and "PYTHONDONTWRITEBYTECODE" not in text


def _stages(dockerfile: Path) -> list[list[str]]:
    """Each stage's RUN instructions, in order (a stage starts at each FROM)."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    stages: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("FROM "):
            stages.append([])
        elif line.startswith("RUN ") and stages:
            stages[-1].append(line[4:])
    return stages


COMPILER = re.compile(r"apt-get install [^&]*\bgcc\b[^&]*\blibc6-dev\b[^&]*\bpython3-dev\b")
IMAGES = ["broker_image/Dockerfile", "operator/Dockerfile", "spark-on-k8s/Dockerfile"]


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_a_build_stage_has_the_compiler_and_the_runtime_stage_does_not(dockerfile: str) -> None:
    *builds, runtime = _stages(ROOT / dockerfile)
    assert builds, f"{dockerfile}: no build stage"
    build = " && ".join(builds[0])
    found = COMPILER.search(build)
    assert found is not None, build
    assert found.start() < build.index("pip "), "the compiler comes before the build of streamlet"
    assert "gcc" not in " ".join(runtime) and "python3-dev" not in " ".join(runtime)


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_the_build_fails_when_a_c_extension_did_not_compile(dockerfile: str) -> None:
    runs = " && ".join(_runs(ROOT / dockerfile))
    installed = runs.rindex("pip install")
    check = re.search(r'python -c "import ([^"]+)"', runs[installed:])
    assert check is not None, f"{dockerfile}: no import check after the last pip install"
    imported = {name.strip() for name in check.group(1).split(",")}
    assert imported == set(MODULES), imported
    # joined by && (a failed import fails the RUN), never swallowed
    assert "|| true" not in runs and "; " not in runs[installed:installed + check.end()]
