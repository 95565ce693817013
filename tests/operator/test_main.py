"""The `streamlet-operator` entry point."""

from __future__ import annotations

import subprocess
import sys

import pytest

import streamlet_operator.__main__ as entry


def test_help_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "streamlet_operator", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "--namespace" in out.stdout and "--liveness" in out.stdout


def test_main_runs_kopf_with_the_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    monkeypatch.setattr(entry.kopf, "run", lambda **kw: seen.update(kw))
    monkeypatch.setattr(entry.metrics, "serve", lambda port: seen.update(metrics=port))
    entry.main(["-n", "a", "-n", "b", "--liveness", ""])
    assert seen["standalone"] is True
    assert seen["clusterwide"] is False and seen["namespaces"] == ["a", "b"]
    assert seen["liveness_endpoint"] is None
    assert "streamlet_operator.handlers.stream" in sys.modules
