"""The `streamlet-operator` entry point."""

from __future__ import annotations

import subprocess
import sys

import pytest

import streamlet_operator.__main__ as entry


@pytest.mark.process
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
    assert seen["standalone"] is True and "peering_name" not in seen
    assert seen["clusterwide"] is False and seen["namespaces"] == ["a", "b"]
    assert seen["liveness_endpoint"] is None
    # named namespaces: kopf lists neither all namespaces nor the CRDs (namespaced RBAC)
    settings = seen["settings"]
    assert isinstance(settings, entry.kopf.OperatorSettings) and settings.scanning.disabled
    assert "streamlet_operator.handlers.stream" in sys.modules


def test_peering_makes_replicas_wait_for_the_first() -> None:
    options = entry.run_options(entry.parse(["--peering", "streamlet"]))
    assert options["standalone"] is False and options["peering_name"] == "streamlet"
    assert options["clusterwide"] is True and not options["settings"].scanning.disabled
    # the earlier start ranks higher, whatever the random tie-breaker
    assert entry.start_priority(1_000) > entry.start_priority(1_001)
    assert entry.run_options(entry.parse(["--peering", "p", "--priority", "7"]))["priority"] == 7
