"""The images ship compiled bytecode: they run as a user who cannot write their Python trees
(and the broker's and operator's with PYTHONDONTWRITEBYTECODE), so a module without its .pyc is
compiled from source at every start (a client command in the broker image took 2 s). The
broker's and operator's build compiles the whole venv with unchecked-hash .pyc files (used
without comparing the sources' timestamps, which COPY --from need not keep); the Spark image
keeps what pip compiles. Nothing removes __pycache__ afterwards."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
