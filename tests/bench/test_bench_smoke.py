"""The load generator in --quick mode against a real streamlet broker: exact counts only.

Timing is never asserted here (benchmarks are not tests); what must hold on any machine is that
every message the generator published was confirmed and every one was consumed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.timeout(120), pytest.mark.process]


def test_quick_run_counts_are_exact(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "streamlet", "--no-physical",
         "--workloads", "small,large,fan,latency,many,stalled",
         "--workdir", str(tmp_path), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    rows = {r["workload"]: r for r in data["rows"]}
    assert set(rows) == {
        "publish-100", "consume-100", "publish-1000", "consume-1000", "fan-publish",
        "fan-consume", "latency", "many-streams", "stalled",
    }
    assert all(r["server"] == "streamlet" for r in rows.values())
    sizes = data["meta"]["sizes"]

    for size, count in ((100, sizes["pub_small"]), (1000, sizes["pub_large"])):
        pub, con = rows[f"publish-{size}"], rows[f"consume-{size}"]
        assert (pub["sent"], pub["confirmed"], pub["errors"]) == (count, count, 0)
        assert con["consumed"] == count  # read back from first, counted from chunk headers
        assert 0 < con["chunks"] <= count

    fan_total = sizes["fan_streams"] * sizes["fan_count"]
    assert rows["fan-publish"]["confirmed"] == rows["fan-publish"]["sent"] == fan_total
    assert rows["fan-consume"]["consumed"] == fan_total

    lat = rows["latency"]
    expected = int(sizes["lat_rate"] * sizes["lat_seconds"])
    assert lat["sent"] == lat["confirmed"] == lat["consumed"] == expected
    assert lat["p50_ms"] is not None and lat["p99_ms"] >= lat["p50_ms"] >= 0

    many = rows["many-streams"]
    assert many["sent"] == many["confirmed"] == sizes["many_total"]
    assert many["rss_end_mb"] > 0

    stalled = rows["stalled"]
    assert stalled["sent"] == stalled["confirmed"] == sizes["stall_count"]
    assert stalled["extra"]["rss_series_mb"], "broker RSS was never sampled"
    # it subscribed to the empty stream and paused reading before publishing began
    assert stalled["extra"]["stalled_records"] == 0

    assert all(r["exact"] for r in rows.values())


def test_quick_replicated_run_counts_are_exact(tmp_path: Path) -> None:
    """A 3-node streamlet cluster: publish, read from a follower, latency, a stopped member's
    catch-up, and a leader killed while publishing: the publisher found the new leader and
    every message it sent there was confirmed."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "streamlet", "--no-physical",
         "--workloads", "replicated", "--workdir", str(tmp_path), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    rows = {r["workload"]: r for r in data["rows"]}
    assert set(rows) == {"r3-publish-100", "r3-consume-100", "r3-publish-1000",
                         "r3-consume-1000", "r3-latency", "r3-catchup", "r3-failover"}
    sizes = data["meta"]["sizes"]
    for size, count in ((100, sizes["pub_small"]), (1000, sizes["pub_large"])):
        pub, con = rows[f"r3-publish-{size}"], rows[f"r3-consume-{size}"]
        assert (pub["sent"], pub["confirmed"], pub["errors"]) == (count, count, 0)
        assert con["consumed"] == count
        assert con["extra"]["read_from"] != con["extra"]["leader"]
    catch = rows["r3-catchup"]
    assert catch["confirmed"] == catch["consumed"] == sizes["catchup_bytes"] // catch["size"]
    assert catch["extra"]["catchup_s"] is not None and catch["extra"]["lagging"] != catch[
        "extra"]["leader"]
    fail = rows["r3-failover"]
    assert fail["extra"]["failover_ms"] is not None and fail["extra"]["failover_ms"] > 0
    assert fail["sent"] == fail["confirmed"] > 0
    assert all(r["exact"] for r in rows.values())


def test_quick_add_member_run_is_exact(tmp_path: Path) -> None:
    """A 3-node streamlet cluster: a stream of 2 members filled (every message confirmed), the
    third node added with ``cluster members --add``; the status named it in sync and a consumer
    on it read the last message."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "streamlet", "--no-physical",
         "--workloads", "add-member", "--add-member-mb", "5", "--workdir", str(tmp_path),
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    [row] = data["rows"]
    assert row["workload"] == "r3-add-member" and row["exact"]
    assert row["confirmed"] == row["consumed"] == 5_000
    extra = row["extra"]
    assert extra["added"] not in extra["members_before"] and extra["read_last"]
    assert extra["in_sync_by"] == "status" and extra["add_s"] >= extra["command_s"] > 0
    assert data["meta"]["sizes"]["add_bytes"] == 5_000_000
