"""Virtual hosts and their super streams, in memory: names, the refusals of a create, the
order of partitions and record, repairs at start, routing. No socket, no broker process."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from streamlet.core.names import valid_stream_name
from streamlet.core.registry import LimitReached, Limits
from streamlet.core.settings import StreamSettings
from streamlet.core.streams import Stream
from streamlet.core.superstreams import (
    Denial,
    SuperStream,
    SuperStreamRefused,
    SuperStreams,
    SuperStreamsUnreadable,
)
from streamlet.core.vhosts import VirtualHost
from tests.support.fakes import ManualClock


@pytest.mark.parametrize("name, valid", [
    ("orders", True),
    ("with/slash and spaces", True),
    ("", False),
    ("amq.x", False),
    ("x" * 256, False),
    ("é" * 128, False),  # 256 bytes
    ("a\0b", False),
    ("a\nb", False),
])
def test_stream_names(name: str, valid: bool) -> None:
    assert (valid_stream_name(name) is None) == valid


# --- a virtual host's super streams -------------------------------------------------------------


def _vhost(root: Path, max_streams: int = 0, max_partitions: int = 0) -> VirtualHost:
    return VirtualHost("/", root, "never", Limits(max_streams, max_partitions), ManualClock())


@pytest.fixture
def vhost(tmp_path: Path) -> Iterator[VirtualHost]:
    v = _vhost(tmp_path)
    v.streams.create("plain", StreamSettings())
    v.create_super_stream("ss", ["ss-0", "ss-1"], ["0", "1"], {"max-age": "1h"}, StreamSettings())
    yield v
    v.close()


def test_a_super_stream_is_its_partitions_and_a_record_that_survives_a_restart(
        tmp_path: Path, vhost: VirtualHost) -> None:
    assert vhost.streams.get("ss-0") is not None and vhost.streams.get("ss-1") is not None
    vhost.close()
    again = _vhost(tmp_path)
    assert again.superstreams.get("ss") == SuperStream("ss", ("ss-0", "ss-1"), ("0", "1"),
                                                      (("max-age", "1h"),))
    again.close()


@pytest.mark.parametrize("name, partitions, keys, reason", [
    ("amq.ss", ["a-0"], ["0"], Denial.INVALID),
    ("new", [], [], Denial.INVALID),
    ("new", ["a-0", "a-1"], ["0"], Denial.INVALID),
    ("new", ["a-0", "a-0"], ["0", "1"], Denial.INVALID),
    ("new", ["a-0", "a-1"], ["0", "0"], Denial.INVALID),
    ("new", ["a-0", ""], ["0", "1"], Denial.INVALID),
    ("ss", ["a-0"], ["0"], Denial.EXISTS),               # the super stream
    ("new", ["a-0", "plain"], ["0", "1"], Denial.EXISTS),  # a stream named as a partition
    ("new", ["a-0", "a-1", "a-2"], ["0", "1", "2"], Denial.LIMIT),  # max_partitions 2
    ("new", ["a-0", "a-1"], ["0", "1"], Denial.LIMIT),   # max_streams 4: 3 exist
])
def test_a_refused_create_says_why_and_leaves_nothing(
        tmp_path: Path, name: str, partitions: list[str], keys: list[str], reason: Denial) -> None:
    v = _vhost(tmp_path, max_streams=4, max_partitions=2)
    v.streams.create("plain", StreamSettings())
    v.create_super_stream("ss", ["ss-0", "ss-1"], ["0", "1"], {}, StreamSettings())
    before = (dict(v.superstreams.items), set(v.streams.streams), (tmp_path / "superstreams.json").read_text())
    with pytest.raises(SuperStreamRefused) as e:
        v.create_super_stream(name, partitions, keys, {}, StreamSettings())
    assert e.value.reason is reason and e.value.why and str(e.value) == e.value.why
    assert (dict(v.superstreams.items), set(v.streams.streams),
            (tmp_path / "superstreams.json").read_text()) == before
    v.close()


def _in_the_way(v: VirtualHost, monkeypatch: pytest.MonkeyPatch) -> None:
    (v.streams.root / "new-1").write_text("a file where the partition's directory goes")


def _record_unwritable(v: VirtualHost, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(ss: SuperStream) -> None:
        v.superstreams.items[ss.name] = ss  # as add does, before its write fails
        raise OSError("disk full")
    monkeypatch.setattr(v.superstreams, "add", fail)


def _limit_midway(v: VirtualHost, monkeypatch: pytest.MonkeyPatch) -> None:
    create = v.streams.create

    def second_fails(name: str, settings: StreamSettings) -> Stream:
        if name == "new-1":  # another vhost took the last room since the check
            raise LimitReached("limits.max_streams")
        return create(name, settings)
    monkeypatch.setattr(v.streams, "create", second_fails)


@pytest.mark.parametrize("fault, reason", [
    (_in_the_way, Denial.FAILED), (_record_unwritable, Denial.FAILED), (_limit_midway, Denial.LIMIT),
])
def test_a_create_that_fails_midway_deletes_the_partitions_it_made_and_records_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vhost: VirtualHost,
        fault: Callable[[VirtualHost, pytest.MonkeyPatch], None], reason: Denial) -> None:
    fault(vhost, monkeypatch)
    with pytest.raises(SuperStreamRefused) as e:
        vhost.create_super_stream("new", ["new-0", "new-1"], ["0", "1"], {}, StreamSettings())
    assert e.value.reason is reason
    assert vhost.streams.get("new-0") is None and not (vhost.streams.root / "new-0").exists()
    assert vhost.superstreams.get("new") is None
    assert "new" not in (tmp_path / "superstreams.json").read_text()


def test_the_record_is_written_after_the_partitions_exist(
        monkeypatch: pytest.MonkeyPatch, vhost: VirtualHost) -> None:
    seen: list[bool] = []
    add = vhost.superstreams.add

    def look(ss: SuperStream) -> None:
        seen.append(all(vhost.streams.get(p) is not None for p in ss.partitions))
        add(ss)
    monkeypatch.setattr(vhost.superstreams, "add", look)
    vhost.create_super_stream("new", ["new-0", "new-1"], ["0", "1"], {}, StreamSettings())
    assert seen == [True]


def test_a_missing_partition_is_made_again_at_start_and_an_impossible_one_is_left_out(
        tmp_path: Path, vhost: VirtualHost, caplog: pytest.LogCaptureFixture) -> None:
    vhost.close()
    shutil.rmtree(tmp_path / "streams" / "ss-0")  # removed by hand
    doc = json.loads((tmp_path / "superstreams.json").read_text())
    doc["broken"] = {"partitions": ["broken-0"], "binding_keys": ["0"]}  # an older record
    (tmp_path / "superstreams.json").write_text(json.dumps(doc))
    (tmp_path / "streams" / "broken-0").write_text("in the way")
    again = _vhost(tmp_path)
    assert again.streams.get("ss-0") is not None and again.streams.get("broken-0") is None
    assert "cannot create partition 'broken-0'" in caplog.text
    assert again.superstreams.get("broken") is not None, "the record is kept"
    again.close()


def _hour_or_refuse(arguments: Mapping[str, str]) -> StreamSettings:
    """A stand-in for the adapter's argument parser: "1h" is one hour, anything else refused."""
    if arguments.get("max-age", "1h") != "1h":
        raise ValueError(f"max-age {arguments['max-age']!r}")
    return StreamSettings(max_age_ms=3_600_000 if "max-age" in arguments else None)


@pytest.mark.parametrize("arguments, max_age_ms", [
    ({"max-age": "1h"}, 3_600_000),  # the record's arguments, parsed as at its create
    ({}, None),
    ({"max-age": "1y"}, None),  # refused now: the defaults, and a warning
])
def test_a_missing_partition_is_made_again_with_its_super_streams_arguments(
        tmp_path: Path, arguments: dict[str, str], max_age_ms: int | None,
        caplog: pytest.LogCaptureFixture) -> None:
    v = VirtualHost("/", tmp_path, "never", Limits(0, 0), ManualClock(), _hour_or_refuse)
    v.create_super_stream("ss", ["ss-0"], ["0"], arguments, StreamSettings())
    v.close()
    shutil.rmtree(tmp_path / "streams" / "ss-0")
    again = VirtualHost("/", tmp_path, "never", Limits(0, 0), ManualClock(), _hour_or_refuse)
    stream = again.streams.get("ss-0")
    assert stream is not None and stream.settings.max_age_ms == max_age_ms
    assert ("no longer accepted" in caplog.text) == (arguments == {"max-age": "1y"})
    again.close()


def test_deleting_a_super_stream_deletes_its_partitions(tmp_path: Path, vhost: VirtualHost) -> None:
    assert vhost.delete_super_stream("nope") is None
    deleted = vhost.delete_super_stream("ss")
    assert deleted is not None and [s.name for s in deleted] == ["ss-0", "ss-1"]
    assert all(s.deleted for s in deleted)
    assert vhost.streams.get("ss-0") is None and vhost.superstreams.get("ss") is None
    assert SuperStreams(tmp_path / "superstreams.json").items == {}


def test_a_partition_deleted_on_its_own_is_unbound_and_the_rest_stays(
        tmp_path: Path, vhost: VirtualHost) -> None:
    vhost.superstreams.forget_partition("plain")  # not a partition: nothing changes
    vhost.superstreams.forget_partition("ss-0")
    kept = SuperStream("ss", ("ss-1",), ("1",), (("max-age", "1h"),))
    assert vhost.superstreams.get("ss") == kept
    assert SuperStreams(tmp_path / "superstreams.json").get("ss") == kept


@pytest.mark.parametrize("key, partitions", [
    ("eu", ["inv-eu"]), ("us", ["inv-us"]), ("EU", []), ("", []), ("e", []),
])
def test_route_is_an_exact_binding_key_match(key: str, partitions: list[str]) -> None:
    assert SuperStream("inv", ("inv-eu", "inv-us"), ("eu", "us")).route(key) == partitions


@pytest.mark.parametrize("content", [
    "{not json", "\xff", "[]", '{"ss": []}', '{"ss": {"partitions": ["a"]}}',
    '{"ss": {"partitions": ["a"], "binding_keys": ["0", "1"]}}',
    '{"ss": {"partitions": [1], "binding_keys": ["0"]}}',
    '{"ss": {"partitions": ["a"], "binding_keys": ["0"], "arguments": ["x"]}}',
])
def test_an_unreadable_record_stops_the_virtual_host_with_one_line(tmp_path: Path, content: str) -> None:
    (tmp_path / "superstreams.json").write_bytes(content.encode("latin-1"))
    with pytest.raises(SuperStreamsUnreadable) as e:
        SuperStreams(tmp_path / "superstreams.json")
    assert "superstreams.json" in str(e.value) and "\n" not in str(e.value)
