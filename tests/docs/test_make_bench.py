"""`make bench` as docs/performance.md describes it: results in bench/results/ unless
UPDATE_DOCS=1, and without root or RabbitMQ a one-line note and streamlet alone. The recipe
is run for real with PY=echo (so nothing is installed or measured) and the prerequisite taken
as made."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
NOTE = "make bench: RabbitMQ is not installed and installing it"


def make_bench(*args: str, as_nobody: bool = False) -> str:
    cmd = ["make", "-s", "-C", str(ROOT), "-o", ".venv/.installed-core", "bench", "PY=echo",
           *args]
    if as_nobody and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot run the recipe as another user")
        cmd = [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout + out.stderr


def bench_run_line(output: str) -> str:
    [line] = [x for x in output.splitlines() if x.startswith("-m bench.run")]
    return line


def test_default_writes_bench_results_only() -> None:
    line = bench_run_line(make_bench())
    assert "--json bench/results/latest.json" in line
    assert "--plot bench/results/performance.png" in line
    assert "docs/" not in line and "--update-doc" not in line


def test_update_docs_rewrites_the_performance_page() -> None:
    line = bench_run_line(make_bench("UPDATE_DOCS=1", "BENCH_ARGS=--quick"))
    assert "--plot docs/performance.png --update-doc docs/performance.md" in line
    assert line.endswith("--quick")


def test_without_rabbitmq_or_root_streamlet_runs_alone_with_a_note() -> None:
    out = make_bench("RABBITMQ_SERVER=/nonexistent/rabbitmq-server", as_nobody=True)
    assert [x for x in out.splitlines() if x.startswith(NOTE)], out
    assert "--only streamlet" in bench_run_line(out)


def test_with_rabbitmq_installed_both_servers_run() -> None:
    installed = shutil.which("sh")  # an executable standing for rabbitmq-server
    out = make_bench(f"RABBITMQ_SERVER={installed}", as_nobody=True)
    assert NOTE not in out and "--only" not in bench_run_line(out)
